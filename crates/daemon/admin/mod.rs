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
use switchboard_core::Bus;
use switchboard_http::Auth;
use switchboard_scheduler::Jobs;
use tokio::sync::mpsc;

use crate::component::{Assembly, Change, Component, ReloadRequest};
use crate::config::Config;
use crate::health::Health;

/// What the panel reads and acts on.
pub(crate) struct Admin {
    pub auth: Auth,
    pub health: Health,
    pub agents: Agents,
    pub hub: Arc<dyn Bus>,
    pub pairing: Arc<Pairing>,
    /// What the models cost.
    pub usage: Arc<dyn switchboard_usage::UsageStore>,
    /// `None` when the scheduler is off.
    pub jobs: Option<Jobs>,
    /// The config file.
    pub path: PathBuf,
    /// The state directory (where the web page keeps its conversations' titles).
    pub state_dir: PathBuf,
    /// The text of the config in use (replaced when a reload is applied).
    pub config_text: Arc<Mutex<String>>,
    /// Where reloads are asked for; served by `switchboard run`'s loop.
    pub reloads: mpsc::Sender<ReloadRequest>,
}

/// The panel as a component: its routes, when `[http] admin_token` is set (else nothing of
/// it is made). Its token needs a restart to change; the config text it shows follows every
/// reload.
pub(crate) struct Panel {
    shown: Arc<Mutex<String>>,
}

impl Component for Panel {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        let config = daemon.config;
        let Some(token) = config.admin_access()? else {
            return Ok(None);
        };
        let (reloads, requests) = mpsc::channel(4);
        let shown = Arc::new(Mutex::new(config.source.text.clone()));
        let core = daemon.core;
        let admin = Admin {
            auth: Auth::Token(token),
            health: daemon.health.clone(),
            agents: core.agents.clone(),
            hub: core.hub.clone(),
            pairing: core.pairing.clone(),
            usage: core.spending.store().clone(),
            jobs: core
                .scheduler
                .as_ref()
                .map(|scheduler| scheduler.jobs().clone()),
            path: config.source.path.clone(),
            state_dir: config.path(&config.agent.state_dir),
            config_text: shown.clone(),
            reloads,
        };
        daemon.serve(admin.router());
        daemon.reloads = Some(requests);
        Ok(Some(Self { shown }))
    }

    /// No key of it changes live, but the text it shows is the new config's.
    fn prepare(&self, config: &Arc<Config>, _changed: &[String]) -> Result<Option<Change>, String> {
        let (shown, text) = (self.shown.clone(), config.source.text.clone());
        Ok(Some(Change {
            live: Vec::new(),
            apply: Box::pin(async move {
                *shown
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = text;
                Ok(())
            }),
        }))
    }
}

// The page and its script and style, embedded away from the data that runs at start.
switchboard_http::embedded!(PAGE, "admin.html");
switchboard_http::embedded!(SCRIPT, "admin.js");
switchboard_http::embedded!(STYLE, "admin.css");

impl Admin {
    /// The panel's routes.
    pub(crate) fn router(self) -> Router {
        let admin = Arc::new(self);
        let api = api::routes().layer(axum::middleware::from_fn_with_state(
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
            // The chat page's Markdown renderer and sanitiser: transcripts read as the chat.
            .route(
                "/admin/vendor/{name}",
                axum::routing::get(
                    |axum::extract::Path(name): axum::extract::Path<String>,
                     headers: HeaderMap| async move {
                        match switchboard_websocket::vendored(&name) {
                            Some((content_type, body)) => page(body, content_type, &headers),
                            None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
                        }
                    },
                ),
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
