//! The web chat page, served at `GET /` with its assets under `GET /assets/…`, all embedded
//! in the binary (nothing is fetched at run time; see `assets/vendor/README.md` for the
//! vendored renderer and sanitiser). The page's Content-Security-Policy allows scripts and
//! styles from this server only — no inline script, no inline event handler, no remote
//! image (a reply cannot leak the conversation through an image address) — so HTML that got
//! past the sanitiser still could not run.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An embedded file, kept in a section of its own (`switchboard_assets`, placed by the
/// linker after the read-only data the daemon uses): were its bytes among that data, the
/// pages around what the daemon reads at start would map them too (the kernel maps a fault's
/// neighbours), and an idle daemon would hold ~140 KiB of page it never serves. The
/// attribute only names the section; nothing reads the bytes but whoever serves them (here
/// [`asset`], and the control panel's page).
#[macro_export]
macro_rules! embedded {
    ($name:ident, $path:literal) => {
        #[allow(unsafe_code)]
        #[unsafe(link_section = "switchboard_assets")]
        static $name: [u8; include_bytes!($path).len()] = *include_bytes!($path);
    };
}
embedded!(INDEX, "../assets/index.html");
embedded!(APP_JS, "../assets/app.js");
embedded!(APP_CSS, "../assets/app.css");
embedded!(MARKED, "../assets/vendor/marked.umd.js");
embedded!(PURIFY, "../assets/vendor/purify.min.js");

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

/// The policy of every page and asset.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The assets change only with the binary: the version tags them.
const ETAG: &str = concat!("\"", env!("CARGO_PKG_VERSION"), "\"");

pub(crate) async fn chat_page() -> Response {
    serve(&INDEX, "text/html; charset=utf-8", None)
}

pub(crate) async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == path) {
        Some((_, content_type, body)) => serve(body, content_type, Some(&headers)),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// An embedded file as a response, with the page's Content-Security-Policy and an ETag of
/// the version (304 when `request` already has it). The control panel serves its files so.
pub fn serve(body: &'static [u8], content_type: &str, request: Option<&HeaderMap>) -> Response {
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
