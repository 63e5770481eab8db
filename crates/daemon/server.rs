//! The HTTP listener: the daemon's router served over HTTP/1.1 by hyper from an accept loop
//! of our own, because what must hold under abuse is not in `axum::serve`:
//!
//! - A request's headers must arrive within `header_timeout` of the connection becoming
//!   ready for them (on a kept-alive connection, of the previous response), or the
//!   connection is closed: half-sent headers (slowloris) cannot pile up.
//! - At most `max_connections` client sockets are open, WebSockets included: the slot is
//!   held by the socket itself, so it is freed when the socket closes, upgraded or not.
//! - At most `max_pending` of them are plain HTTP connections — page loads, health checks,
//!   WebSocket handshakes not yet accepted — so clients that never authenticate cannot take
//!   every slot; at most `max_pending_per_client` from one client (an IPv4 address, an IPv6
//!   /64), and once they are scarce a client holding fewer takes one from the biggest holder
//!   (`admission.rs`), so a few clients (a slowloris) cannot keep everyone else out.
//! - When the pending slots are all taken, `reserved` more are kept for what must still get
//!   through: `/healthz` and `/readyz`, and requests that carry credentials (a bearer token,
//!   the `bearer` subprotocol, `?token=`), which the router then checks. Anything else on a
//!   reserved slot gets a 503, and a reserved connection has [`RESERVED_HEADER_TIMEOUT`] to
//!   send its headers: a health check sends them at once, a slowloris loses the slot.
//! - Both limits are fitted under the process's descriptor limit with a reserve kept for
//!   the daemon's own work (session files, LLM connections), so a flood of clients never
//!   makes those fail with "too many open files".
//!
//! A connection over a limit gets a bare 503 and is closed at once; refusals are counted
//! (`/healthz`) and logged at most every ten seconds.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, Refused, Slots, Ticket};

/// How the listener protects itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest wait for a request's headers.
    pub header_timeout: Duration,
    /// Client sockets open at once, WebSockets included.
    pub max_connections: usize,
    /// Of those, plain HTTP connections (not, or not yet, an accepted WebSocket).
    pub max_pending: usize,
    /// Of those, from one source address.
    pub max_pending_per_client: usize,
    /// Plain HTTP connections beyond `max_pending`, for health checks and requests with
    /// credentials only.
    pub reserved: usize,
}

/// Descriptors kept for the daemon's own work: at least this many...
const MIN_RESERVE: u64 = 64;
/// ...and at most this many (a quarter of the limit in between).
const MAX_RESERVE: u64 = 1024;
/// The header time of a connection on a reserved slot.
pub const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(1);
/// Refusals are logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Raises the soft descriptor limit to the hard one, and lowers `limits` so that client
/// sockets leave a reserve of descriptors for sessions and LLM calls. Returns the limit on
/// open descriptors and the reserve.
pub fn fit_to_descriptors(limits: &mut Limits) -> (u64, u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let current = getrlimit(Resource::Nofile);
    let mut soft = current.current.unwrap_or(u64::MAX);
    if let Some(hard) = current.maximum.filter(|hard| *hard > soft) {
        let raised = Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            soft = hard;
        }
    } else if current.maximum.is_none() && current.current.is_some() {
        // An unlimited hard limit: raise to a generous finite value.
        let raised = Rlimit {
            current: Some(1 << 20),
            maximum: None,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            soft = 1 << 20;
        }
    }
    let reserve = (soft / 4).clamp(MIN_RESERVE, MAX_RESERVE);
    let room = usize::try_from(soft.saturating_sub(reserve))
        .unwrap_or(usize::MAX)
        .max(1);
    if limits.max_connections > room {
        tracing::warn!(
            configured = limits.max_connections,
            lowered_to = room,
            descriptor_limit = soft,
            reserve,
            "http.max_connections lowered to fit the open-files limit (raise LimitNOFILE= to allow more)"
        );
        limits.max_connections = room;
    }
    limits.max_pending = limits.max_pending.min(limits.max_connections);
    limits.max_pending_per_client = limits.max_pending_per_client.min(limits.max_pending);
    (soft, reserve)
}

/// A listener serving the daemon's router.
pub struct Server {
    addr: SocketAddr,
    limits: Limits,
    /// Free slots of `max_connections`; taken by each accepted socket.
    total: Arc<Semaphore>,
    refused: Arc<AtomicU64>,
    /// Cancelled by [`Server::shutdown`]: the accept loop stops and every HTTP connection
    /// finishes its request and closes.
    stop: CancellationToken,
    /// Every HTTP connection task.
    connections: TaskTracker,
    accept: JoinHandle<()>,
}

impl Server {
    /// Binds `addr` and serves `router` within `limits`.
    pub async fn bind(addr: SocketAddr, router: Router, limits: Limits) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let total = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let admission = Admission::new(Slots {
            pending: limits.max_pending.max(1),
            per_client: limits.max_pending_per_client,
            reserved: limits.reserved,
        });
        let reserved_router = router
            .clone()
            .layer(axum::middleware::from_fn(reserved_only));
        let refused = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let connections = TaskTracker::new();
        let accept = tokio::spawn(
            Acceptor {
                listener,
                router,
                reserved_router,
                limits,
                total: total.clone(),
                admission,
                refused: refused.clone(),
                stop: stop.clone(),
                connections: connections.clone(),
                last_warning: None,
            }
            .run(),
        );
        Ok(Self {
            addr,
            limits,
            total,
            refused,
            stop,
            connections,
            accept,
        })
    }

    /// The address the listener is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A reader of the client sockets open now, WebSockets included.
    pub fn open_connections(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let total = self.total.clone();
        let max = self.limits.max_connections.max(1);
        move || max - total.available_permits()
    }

    /// A reader of the connections refused so far for being over a limit.
    pub fn refused_connections(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let refused = self.refused.clone();
        move || usize::try_from(refused.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Stops accepting, lets every HTTP connection finish its request, and waits up to
    /// `deadline` for them. Returns whether all closed in time.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.stop.cancel();
        let _ = self.accept.await;
        self.connections.close();
        tokio::time::timeout(deadline, self.connections.wait())
            .await
            .is_ok()
    }
}

/// The accept loop's state.
struct Acceptor {
    listener: TcpListener,
    router: Router,
    /// The router behind [`reserved_only`], for connections on a reserved slot.
    reserved_router: Router,
    limits: Limits,
    total: Arc<Semaphore>,
    /// The slots of `max_pending` and the reserved ones; a connection task holds its ticket
    /// until its HTTP connection ends (closed, or upgraded to a WebSocket).
    admission: Admission,
    refused: Arc<AtomicU64>,
    stop: CancellationToken,
    connections: TaskTracker,
    last_warning: Option<Instant>,
}

impl Acceptor {
    async fn run(mut self) {
        loop {
            let accepted = tokio::select! {
                () = self.stop.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors (or another transient failure): wait a moment
                    // rather than spinning; connections that close free some.
                    self.warn(|| tracing::warn!(error = %err, "could not accept a connection"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = self.total.clone().try_acquire_owned() else {
                self.refuse(stream, "http.max_connections");
                continue;
            };
            let ticket = match self.admission.admit(peer.ip()) {
                Ok(ticket) => ticket,
                Err(Refused::Client) => {
                    self.refuse(stream, "http.max_pending_per_client");
                    continue;
                }
                Err(Refused::Full) => {
                    self.refuse(stream, "http.max_pending_connections");
                    continue;
                }
            };
            let (router, header_timeout) = if ticket.reserved {
                (
                    self.reserved_router.clone(),
                    self.limits.header_timeout.min(RESERVED_HEADER_TIMEOUT),
                )
            } else {
                (self.router.clone(), self.limits.header_timeout)
            };
            let _ = stream.set_nodelay(true);
            self.connections.spawn(serve_connection(
                Slotted {
                    stream,
                    _slot: slot,
                },
                ticket,
                router,
                header_timeout,
                self.stop.clone(),
            ));
        }
    }

    fn refuse(&mut self, stream: TcpStream, limit: &'static str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        // Best effort, never waiting: a fresh socket's send buffer takes this at once.
        let _ = stream.try_write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        let refused = self.refused.load(Ordering::Relaxed);
        self.warn(|| {
            tracing::warn!(
                limit,
                refused,
                "refusing connections: a connection limit is reached"
            )
        });
    }

    /// Runs `log` unless it ran less than [`WARN_EVERY`] ago.
    fn warn(&mut self, log: impl FnOnce()) {
        let now = Instant::now();
        if self
            .last_warning
            .is_none_or(|last| now.duration_since(last) >= WARN_EVERY)
        {
            self.last_warning = Some(now);
            log();
        }
    }
}

/// Serves one connection until it closes, upgrades, or the server stops (then the request
/// in progress is finished first).
async fn serve_connection(
    stream: Slotted,
    ticket: Ticket,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let connection = builder
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
        // Its slot went to a client that held fewer: closed at once.
        () = ticket.taken().cancelled() => {
            tracing::debug!("an HTTP connection gave its slot to another client's");
            return;
        }
    };
    if let Err(err) = result {
        tracing::debug!(error = %err, "HTTP connection ended with an error");
    }
    drop(ticket);
}

/// What a reserved slot serves: health checks, and requests that carry credentials (the
/// router checks them); anything else gets a 503 at once.
async fn reserved_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::header::{AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL};
    let path = request.uri().path();
    let headers = request.headers();
    let credentials = headers.contains_key(AUTHORIZATION)
        || headers
            .get(SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(',')
                    .any(|p| p.trim().eq_ignore_ascii_case("bearer"))
            })
        || request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|pair| pair.starts_with("token=")));
    if matches!(path, "/healthz" | "/readyz") || credentials {
        return next.run(request).await;
    }
    let mut response = axum::response::IntoResponse::into_response((
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "busy: every connection slot for unauthenticated requests is taken; try again shortly\n",
    ));
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("2"),
    );
    response
}

/// A client socket holding its slot of `max_connections`: wherever the socket goes (a
/// WebSocket task, after an upgrade), the slot goes with it and is freed when it closes.
struct Slotted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Slotted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Slotted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_limits_leave_a_reserve_of_descriptors() {
        let mut limits = Limits {
            header_timeout: Duration::from_secs(10),
            max_connections: usize::MAX,
            max_pending: usize::MAX,
            max_pending_per_client: usize::MAX,
            reserved: 16,
        };
        let (soft, reserve) = fit_to_descriptors(&mut limits);
        assert!((MIN_RESERVE..=MAX_RESERVE).contains(&reserve));
        assert!(limits.max_connections as u64 + reserve <= soft);
        assert!(limits.max_pending <= limits.max_connections);
        assert!(limits.max_pending_per_client <= limits.max_pending);
    }
}
