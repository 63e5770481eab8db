//! [`FakeWeb`]: web pages, redirects and the search APIs `web_search` speaks (Brave's and
//! SearXNG's), on 127.0.0.1, recording every request it gets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What a path answers.
#[derive(Clone, Debug)]
enum Page {
    /// 200 with this content type and body.
    Body(&'static str, String),
    /// 302 to this location.
    Redirect(String),
}

#[derive(Default)]
struct Shared {
    pages: Mutex<HashMap<String, Page>>,
    /// Every request's path and query, in order.
    requests: Mutex<Vec<String>>,
}

/// A fake web server. Dropping it stops it.
pub struct FakeWeb {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// A search result the fake search APIs return for any query.
pub const SEARCH_RESULTS: [(&str, &str, &str); 2] = [
    (
        "Switchboard — a chat gateway",
        "https://example.org/switchboard",
        "Talk to your agent from Telegram.",
    ),
    (
        "Tea brewing guide",
        "https://example.org/tea",
        "Green tea at 80 °C for two minutes.",
    ),
];

/// The key the fake Brave API accepts.
pub const BRAVE_KEY: &str = "brave-test-key";

impl FakeWeb {
    /// Starts on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/res/v1/web/search", axum::routing::get(brave))
            .route("/search", axum::routing::get(searxng))
            .fallback(page)
            .with_state(shared.clone());
        let (addr, stop) = crate::serve(app, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        Ok(Self { addr, shared, stop })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Serves `html` at `path` as `text/html`.
    pub fn html(&self, path: &str, html: &str) {
        self.set(
            path,
            Page::Body("text/html; charset=utf-8", html.to_owned()),
        );
    }

    /// Serves `body` at `path` with `content_type`.
    pub fn body(&self, path: &str, content_type: &'static str, body: &str) {
        self.set(path, Page::Body(content_type, body.to_owned()));
    }

    /// Answers `path` with a 302 to `location`.
    pub fn redirect(&self, path: &str, location: &str) {
        self.set(path, Page::Redirect(location.to_owned()));
    }

    /// The paths (with queries) requested so far.
    pub fn requests(&self) -> Vec<String> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, path: &str, page: Page) {
        self.shared
            .pages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned(), page);
    }
}

impl Drop for FakeWeb {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn record(shared: &Shared, uri: &Uri) {
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(uri.to_string());
}

async fn page(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    record(&shared, &uri);
    let page = shared
        .pages
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(uri.path())
        .cloned();
    match page {
        Some(Page::Body(content_type, body)) => {
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Some(Page::Redirect(location)) => {
            (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such page").into_response(),
    }
}

async fn brave(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    record(&shared, &uri);
    if headers
        .get("x-subscription-token")
        .is_none_or(|key| key != BRAVE_KEY)
    {
        return (StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    let count: usize = query
        .get("count")
        .and_then(|c| c.parse().ok())
        .unwrap_or(20);
    let results: Vec<_> = SEARCH_RESULTS
        .iter()
        .take(count)
        .map(|(title, url, snippet)| json!({"title": title, "url": url, "description": snippet}))
        .collect();
    axum::Json(json!({"type": "search", "web": {"type": "search", "results": results}}))
        .into_response()
}

async fn searxng(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    record(&shared, &uri);
    if query.get("format").map(String::as_str) != Some("json") {
        return (StatusCode::FORBIDDEN, "format not allowed").into_response();
    }
    let results: Vec<_> = SEARCH_RESULTS
        .iter()
        .map(|(title, url, snippet)| json!({"title": title, "url": url, "content": snippet, "engine": "fake"}))
        .collect();
    axum::Json(json!({"query": query.get("q"), "results": results})).into_response()
}
