//! The web chat page served at `GET /`, embedded in the binary.

use axum::http::header;
use axum::response::IntoResponse;

const CHAT_HTML: &str = include_str!("chat.html");

pub(crate) async fn chat_page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self' ws: wss:",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CHAT_HTML,
    )
}
