//! Files embedded in the binary, served with a strict Content-Security-Policy: the web chat
//! page's and the control panel's.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An embedded file, kept in a section of its own (`switchboard_assets`, placed by the
/// linker after the read-only data the daemon uses): were its bytes among that data, the
/// pages around what the daemon reads at start would map them too (the kernel maps a fault's
/// neighbours), and an idle daemon would hold ~140 KiB of page it never serves. The
/// attribute only names the section; nothing reads the bytes but whoever serves them (here
/// the chat page's assets and the control panel's page).
#[macro_export]
macro_rules! embedded {
    ($name:ident, $path:literal) => {
        #[allow(unsafe_code)]
        #[unsafe(link_section = "switchboard_assets")]
        static $name: [u8; include_bytes!($path).len()] = *include_bytes!($path);
    };
}
/// The policy of every page and asset.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; \
     frame-ancestors 'none'";

/// The assets change only with the binary: the version tags them.
const ETAG: &str = concat!("\"", env!("CARGO_PKG_VERSION"), "\"");

/// An embedded file as a response, with the page's Content-Security-Policy and an ETag of
/// the version (304 when `request` already has it). The control panel serves its files so.
pub fn serve_embedded(
    body: &'static [u8],
    content_type: &str,
    request: Option<&HeaderMap>,
) -> Response {
    let fresh = request
        .and_then(|headers| headers.get(header::IF_NONE_MATCH))
        .is_some_and(|tag| tag.as_bytes() == ETAG.as_bytes());
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body.into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::CACHE_CONTROL, "no-cache"),
        (header::ETAG, ETAG),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    response
}
