//! The web chat page, served at `GET /` with its assets under `GET /assets/…`, all embedded
//! in the binary (nothing is fetched at run time; see `assets/vendor/README.md` for the
//! vendored renderer and sanitiser). The page's Content-Security-Policy allows scripts and
//! styles from this server only — no inline script, no inline event handler, no remote
//! image (a reply cannot leak the conversation through an image address) — so HTML that got
//! past the sanitiser still could not run (the policy and the serving are
//! `switchboard-http`'s, which the control panel's page shares).

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

switchboard_http::embedded!(INDEX, "../assets/index.html");
switchboard_http::embedded!(APP_JS, "../assets/app.js");
switchboard_http::embedded!(APP_CSS, "../assets/app.css");
switchboard_http::embedded!(MARKED, "../assets/vendor/marked.umd.js");
switchboard_http::embedded!(PURIFY, "../assets/vendor/purify.min.js");

/// The page's assets: path under `/assets/`, content type, bytes.
static ASSETS: [(&str, &str, &[u8]); 4] = [
    ("app.js", "text/javascript; charset=utf-8", &APP_JS),
    ("app.css", "text/css; charset=utf-8", &APP_CSS),
    (
        "vendor/marked.umd.js",
        "text/javascript; charset=utf-8",
        &MARKED,
    ),
    (
        "vendor/purify.min.js",
        "text/javascript; charset=utf-8",
        &PURIFY,
    ),
];

pub(crate) async fn chat_page() -> Response {
    switchboard_http::serve_embedded(&INDEX, "text/html; charset=utf-8", None)
}

/// The vendored Markdown renderer and sanitiser (`marked.umd.js`, `purify.min.js`), for
/// another page of the daemon's (the control panel's transcripts): content type and bytes.
pub fn vendored(name: &str) -> Option<(&'static str, &'static [u8])> {
    let path = format!("vendor/{name}");
    ASSETS
        .iter()
        .find(|(asset, _, _)| *asset == path)
        .map(|(_, content_type, body)| (*content_type, *body))
}

pub(crate) async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == path) {
        Some((_, content_type, body)) => {
            switchboard_http::serve_embedded(body, content_type, Some(&headers))
        }
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
