//! The operator's control panel: `GET /admin` (a page, embedded like the chat's) and
//! `/admin/api/…` (JSON), behind `[http] admin_token` — never the chat's token; no panel
//! without one. Every API request carries the token as `Authorization: Bearer` (a header,
//! not a cookie: another site cannot make the browser send it) and, from a browser, an
//! Origin equal to its Host, the check the chat's socket makes.
//!
//! The panel shows and changes nothing of its own: each action is the code the CLI runs —
//! [`Pairing`] for `switchboard pairing`, [`Jobs`] (as the operator) for `switchboard cron`,
//! [`Report`] for `switchboard usage`, the store's transcript for history, `/new` through the
//! chat's worker for a reset, and the daemon's reload (what SIGHUP runs) for "reload".

mod api;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use switchboard_adapter::Pairing;
use switchboard_agent::Agents;
use switchboard_agent::scheduler::Jobs;
use switchboard_core::Bus;
use switchboard_http::Auth;
use tokio::sync::{mpsc, oneshot};

use crate::health::Health;
use crate::reload::Reloaded;

/// A reload the panel asks the daemon's main loop for; the answer is what it did.
pub type ReloadRequest = oneshot::Sender<Reloaded>;

/// What the panel reads and acts on.
pub(crate) struct Admin {
    pub auth: Auth,
    pub health: Health,
    pub agents: Agents,
    pub hub: Arc<dyn Bus>,
    pub pairing: Arc<Pairing>,
    /// What the models cost.
    pub usage: Arc<dyn switchboard_agent::usage::UsageStore>,
    /// `None` when the scheduler is off.
    pub jobs: Option<Jobs>,
    /// The config file.
    pub path: PathBuf,
    /// The text of the config in use (replaced when a reload is applied).
    pub config_text: Arc<Mutex<String>>,
    /// Where reloads are asked for; served by `switchboard run`'s loop.
    pub reloads: mpsc::Sender<ReloadRequest>,
}

// The page and its script and style, embedded away from the data that runs at start.
switchboard_http::embedded!(PAGE, "admin.html");
switchboard_http::embedded!(SCRIPT, "admin.js");
switchboard_http::embedded!(STYLE, "admin.css");

impl Admin {
    /// The panel's routes.
    pub(crate) fn router(self) -> Router {
        let admin = Arc::new(self);
        let api = Router::new()
            .route("/admin/api/{*path}", axum::routing::any(api::handle))
            .layer(axum::middleware::from_fn_with_state(
                admin.clone(),
                require_token,
            ));
        Router::new()
            .route(
                "/admin",
                axum::routing::get(|headers: HeaderMap| async move {
                    page(&PAGE, "text/html; charset=utf-8", &headers)
                }),
            )
            .route(
                "/admin/admin.js",
                axum::routing::get(|headers: HeaderMap| async move {
                    page(&SCRIPT, "text/javascript; charset=utf-8", &headers)
                }),
            )
            .route(
                "/admin/admin.css",
                axum::routing::get(|headers: HeaderMap| async move {
                    page(&STYLE, "text/css; charset=utf-8", &headers)
                }),
            )
            .merge(api)
            .with_state(admin)
    }
}

/// Refuses an API request without the panel's token (or from another site's page).
async fn require_token(State(admin): State<Arc<Admin>>, request: Request, next: Next) -> Response {
    // Only the header: a token in a query string or a subprotocol ends up in logs.
    if let Err(reason) = admin.auth.check_header(request.headers()) {
        tracing::info!(reason, path = %request.uri().path(), "refused a control panel request");
        return (StatusCode::UNAUTHORIZED, reason).into_response();
    }
    next.run(request).await
}

fn page(body: &'static [u8], content_type: &str, request: &HeaderMap) -> Response {
    switchboard_http::serve_embedded(body, content_type, Some(request))
}
