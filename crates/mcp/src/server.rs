//! One MCP server's life: started (a child process in a process group of its own, with only
//! the environment its entry gives it, plus PATH and HOME — as the unprivileged
//! `[tools.exec] user` when the daemon is root), asked for its tools, which become
//! the tool source `mcp:NAME`; watched, and when it exits or breaks its tools are withdrawn and
//! it is started again after a backoff (1 s, doubling to a minute). A server that lets a call
//! time out (or be stopped) is pinged: one that does not answer within [`PING_TIMEOUT`] is
//! hung, and is stopped and started again the same way — a hung server never stays "up" with
//! every later call waiting out its timeout.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::SubscriptionFilter;
use rmcp::service::{NotificationContext, Peer, RoleClient, Subscription};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use switchboard_tools::{ToolRegistry, ToolSources};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::ServerSpec;
use crate::tool::{Checked, McpTool};

/// How long starting a server (its `initialize`) and listing its tools may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most tools taken from one server.
pub const MAX_TOOLS: usize = 128;

/// The most bytes of tool definitions (names, descriptions, schemas) taken from one server:
/// they go with every request to the model.
pub const MAX_DEFINITIONS: usize = 256 * 1024;

/// How long a server may take to answer a ping after a call of it was given up.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest backoff between two starts of a server.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A server up this long has its backoff start again from a second.
const STABLE: Duration = Duration::from_secs(60);

/// The longest stderr line logged (the rest is cut).
const MAX_STDERR_LINE: usize = 1024;

/// Stderr lines logged per minute at most; the rest are counted.
const STDERR_LINES_PER_MINUTE: u32 = 120;

/// What is known of a server now (for health and status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Being started.
    Starting,
    /// Up, offering this many tools.
    Up {
        /// Its tools, as the model sees them.
        tools: Vec<String>,
    },
    /// Down: why, and when it is started again.
    Down {
        /// What went wrong.
        why: String,
    },
}

/// The daemon's MCP servers: started from the config, changed by a reload — a server whose
/// entry changed is stopped (its tools withdrawn) before it starts again, one whose entry
/// did not is not touched. Cloning shares them.
#[derive(Clone)]
pub struct Servers {
    sources: Arc<ToolSources>,
    /// Stops them all (the daemon's stop).
    stop: CancellationToken,
    running: Arc<tokio::sync::Mutex<Vec<Running>>>,
    /// What each is doing, for health (read without waiting on a reload).
    states: Arc<Mutex<Vec<Server>>>,
}

/// A server with the means to stop it.
struct Running {
    server: Server,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Servers {
    /// No servers yet; theirs tools go to `sources`; all stop with `stop`.
    pub fn new(sources: Arc<ToolSources>, stop: CancellationToken) -> Self {
        Self {
            sources,
            stop,
            running: Arc::default(),
            states: Arc::default(),
        }
    }

    /// Makes the running servers those of `specs`: starts the new, stops the gone, restarts
    /// the changed; returns the names of those it started or stopped.
    pub async fn apply(&self, specs: Vec<ServerSpec>) -> Vec<String> {
        let mut running = self.running.lock().await;
        let mut touched = Vec::new();
        let mut kept = Vec::new();
        for old in running.drain(..) {
            if specs.iter().any(|spec| *spec == *old.server.spec) {
                kept.push(old);
            } else {
                // Stopped and its tools withdrawn before anything of the same name starts.
                old.stop.cancel();
                let _ = old.task.await;
                touched.push(old.server.name().to_owned());
            }
        }
        for spec in specs {
            if kept.iter().any(|old| *old.server.spec == spec) {
                continue;
            }
            let stop = self.stop.child_token();
            let name = spec.name.clone();
            let (server, task) = Server::spawn(spec, self.sources.clone(), stop.clone());
            kept.push(Running { server, stop, task });
            if !touched.contains(&name) {
                touched.push(name);
            }
        }
        *running = kept;
        *self.states.lock().unwrap_or_else(PoisonError::into_inner) =
            running.iter().map(|r| r.server.clone()).collect();
        touched.sort();
        touched
    }

    /// Each server's name and state, by name.
    pub fn states(&self) -> Vec<(String, ServerState)> {
        let mut states: Vec<(String, ServerState)> = self
            .states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|server| (server.name().to_owned(), server.state()))
            .collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        states
    }
}

/// One server's supervisor (see the module doc).
#[derive(Clone)]
pub struct Server {
    spec: Arc<ServerSpec>,
    state: Arc<Mutex<ServerState>>,
    /// Told by its tools when a call was given up before it returned.
    abandoned: Arc<Notify>,
}

impl Server {
    /// Supervises `spec`'s server until `stop`, its tools in `sources` while it is up; the
    /// task ends once they are withdrawn.
    pub fn spawn(
        spec: ServerSpec,
        sources: Arc<ToolSources>,
        stop: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let server = Self {
            spec: Arc::new(spec),
            state: Arc::new(Mutex::new(ServerState::Starting)),
            abandoned: Arc::new(Notify::new()),
        };
        let running = server.clone();
        let task = tokio::spawn(async move { running.supervise(&sources, &stop).await });
        (server, task)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// What is known of it now.
    pub fn state(&self) -> ServerState {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_state(&self, state: ServerState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// The tool source this server's tools are in.
    pub fn source(&self) -> String {
        format!("mcp:{}", self.spec.name)
    }

    async fn supervise(&self, sources: &ToolSources, stop: &CancellationToken) {
        let mut backoff = Duration::from_secs(1);
        loop {
            self.set_state(ServerState::Starting);
            let started = Instant::now();
            let why = tokio::select! {
                () = stop.cancelled() => break,
                why = self.run_once(sources) => why,
            };
            sources.remove(&self.source());
            tracing::warn!(server = %self.spec.name, %why, retry_in = ?backoff,
                "an MCP server is down; its tools are withdrawn");
            self.set_state(ServerState::Down { why });
            if started.elapsed() >= STABLE {
                backoff = Duration::from_secs(1);
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        sources.remove(&self.source());
    }

    /// Starts the server and serves its tools until it ends; returns why it ended.
    async fn run_once(&self, sources: &ToolSources) -> String {
        let spec = &self.spec;
        let (client, listed) = match connect(spec).await {
            Ok(connected) => connected,
            Err(why) => return why,
        };
        let peer = client.peer().clone();
        if let Err(why) = self.offer(sources, &listed, &peer) {
            return why;
        }
        tracing::info!(server = %spec.name, "an MCP server is up");
        let changed = client.service().0.clone();
        let mut listening = listen_for_changes(&peer).await;
        let waiting = client.waiting();
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                ended = &mut waiting => {
                    return match ended {
                        Ok(reason) => format!("its connection ended ({reason:?})"),
                        Err(err) => format!("its connection's task ended: {err}"),
                    };
                }
                () = self.abandoned.notified() => {
                    match answers_ping(&peer).await {
                        Ok(()) => continue,
                        Err(why) => return why,
                    }
                }
                () = changed.notified() => {}
                next = next_change(&mut listening) => {
                    if !next {
                        listening = None;
                        continue;
                    }
                }
            }
            // Its tools changed: offered anew from the next turn on.
            match tokio::time::timeout(CONNECT_TIMEOUT, peer.list_all_tools()).await {
                Ok(Ok(listed)) => {
                    if let Err(why) = self.offer(sources, &listed, &peer) {
                        return why;
                    }
                    tracing::info!(server = %spec.name, "an MCP server's tools changed");
                }
                Ok(Err(err)) => return format!("it did not list its changed tools: {err}"),
                Err(_) => return "it did not list its changed tools in time".to_owned(),
            }
        }
    }

    /// Makes `listed` the server's tool source; why not (a name another source has).
    fn offer(
        &self,
        sources: &ToolSources,
        listed: &[rmcp::model::Tool],
        peer: &Peer<RoleClient>,
    ) -> Result<(), String> {
        let registry = registry(&self.spec, listed, peer.clone(), &self.abandoned);
        let names: Vec<String> = registry.names().map(str::to_owned).collect();
        sources
            .set(&self.source(), registry)
            .map_err(|collision| collision.to_string())?;
        self.set_state(ServerState::Up { tools: names });
        Ok(())
    }
}

/// Whether the server at `peer` answers a ping in time; why not, as a sentence.
async fn answers_ping(peer: &Peer<RoleClient>) -> Result<(), String> {
    let ping = rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest::default());
    match tokio::time::timeout(PING_TIMEOUT, peer.send_request(ping)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!(
            "a call of it was given up and a ping then failed: {err}"
        )),
        Err(_) => Err(format!(
            "a call of it was given up and it did not answer a ping within {} s (hung); it \
             is started again",
            PING_TIMEOUT.as_secs()
        )),
    }
}

/// The client side of a connection: told when the server's tools change (a server on a
/// protocol before 2026-07-28 says so unasked).
#[derive(Clone, Default)]
struct Changes(Arc<Notify>);

impl ClientHandler for Changes {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.0.notify_one();
        std::future::ready(())
    }
}

/// On 2026-07-28 and later, a server says its tools changed only on a stream that asked:
/// one is opened when the server says it will tell (none otherwise, or when it refuses).
async fn listen_for_changes(peer: &Peer<RoleClient>) -> Option<Subscription> {
    let tells = peer.peer_info().is_some_and(|info| {
        info.capabilities
            .tools
            .as_ref()
            .and_then(|tools| tools.list_changed)
            == Some(true)
    });
    if !tells {
        return None;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    match tokio::time::timeout(CONNECT_TIMEOUT, peer.listen(filter)).await {
        Ok(Ok(subscription)) => Some(subscription),
        // An earlier protocol: its notifications come to [`Changes`].
        Ok(Err(_)) | Err(_) => None,
    }
}

/// Whether the next notification came on `listening` (false: the stream ended); never
/// when there is none.
async fn next_change(listening: &mut Option<Subscription>) -> bool {
    match listening {
        Some(subscription) => matches!(subscription.next().await, Ok(Some(_))),
        None => std::future::pending().await,
    }
}

/// Starts `spec`'s server once, lists its tools as the daemon would offer them (name and
/// description), and stops it: for `switchboard mcp list` and `doctor`.
pub async fn probe(spec: &ServerSpec) -> Result<Vec<(String, String)>, String> {
    let (client, listed) = connect(spec).await?;
    let registry = registry(spec, &listed, client.peer().clone(), &Arc::default());
    let tools = registry
        .definitions()
        .iter()
        .map(|tool| (tool.name.clone(), tool.description.clone()))
        .collect();
    drop(registry);
    let _ = client.cancel().await;
    Ok(tools)
}

/// A started server and its tools as it lists them.
type Connected = (
    rmcp::service::RunningService<RoleClient, Changes>,
    Vec<rmcp::model::Tool>,
);

/// Starts `spec`'s server and lists its tools; why not, as a sentence.
async fn connect(spec: &ServerSpec) -> Result<Connected, String> {
    let serving = match &spec.url {
        Some(url) => {
            let transport = http_transport(url, &spec.headers)?;
            tokio::time::timeout(CONNECT_TIMEOUT, Changes::default().serve(transport)).await
        }
        None => {
            let transport = start(spec)?;
            tokio::time::timeout(CONNECT_TIMEOUT, Changes::default().serve(transport)).await
        }
    };
    let client = match serving {
        Ok(Ok(client)) => client,
        Ok(Err(err)) if spec.url.is_some() => {
            return Err(format!(
                "it did not answer MCP at {}: {err}",
                spec.url.as_deref().unwrap_or_default()
            ));
        }
        Ok(Err(err)) => {
            return Err(format!(
                "it did not start MCP: {err} (does it speak MCP on stdio? its stderr is in \
                 the log)"
            ));
        }
        Err(_) => {
            return Err(format!(
                "it did not answer `initialize` within {} s",
                CONNECT_TIMEOUT.as_secs()
            ));
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, client.list_all_tools()).await {
        Ok(Ok(tools)) => Ok((client, tools)),
        Ok(Err(err)) => Err(format!("it did not list its tools: {err}")),
        Err(_) => Err(format!(
            "it did not list its tools within {} s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

/// Starts a stdio server: its program in a process group of its own, with only the
/// environment its entry gives it, its stderr logged.
fn start(spec: &ServerSpec) -> Result<TokioChildProcess, String> {
    if !spec.cwd.is_dir() {
        return Err(format!(
            "its working directory {} is not there (`cwd`, else the workspace)",
            spec.cwd.display()
        ));
    }
    let mut command = tokio::process::Command::new(&spec.command);
    command
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd);
    // A root daemon's server runs as the unprivileged user: it cannot read the daemon's
    // memory or environment (`/proc/<pid>/mem`, `environ`), nor gain privileges back.
    if let Some(run_as) = &spec.run_as {
        run_as.apply_without_privileges(command.as_std_mut());
    }
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let (transport, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            format!(
                "`{}` could not be started: {err} (is it installed, and on the PATH the \
                 daemon has?{})",
                spec.command,
                spec.run_as.map_or_else(String::new, |run_as| format!(
                    " It runs as uid {}, gid {} ([tools.exec] user): it and its cwd {} must \
                     be open to them",
                    run_as.uid,
                    run_as.gid,
                    spec.cwd.display()
                ))
            )
        })?;
    if let Some(stderr) = stderr {
        tokio::spawn(log_stderr(spec.name.clone(), stderr));
    }
    Ok(transport)
}

/// The transport to an HTTP server at `url`, sending `headers` with every request.
fn http_transport(
    url: &str,
    headers: &[(String, String)],
) -> Result<impl rmcp::transport::Transport<RoleClient> + 'static, String> {
    // rmcp's HTTP client brings no TLS crypto of its own here: it uses the process's, ring,
    // as the daemon's other clients do (a second install is refused, harmlessly).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|err| format!("the header `{name}`: {err}"))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|err| format!("the header `{name}`'s value: {err}"))?;
        custom.insert(name, value);
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(custom);
    Ok(StreamableHttpClientTransport::from_config(config))
}

/// The server's tools that are offered: those its entry lets through, each checked, within
/// [`MAX_TOOLS`] and [`MAX_DEFINITIONS`] bytes of definitions.
fn registry(
    spec: &ServerSpec,
    listed: &[rmcp::model::Tool],
    peer: Peer<RoleClient>,
    abandoned: &Arc<Notify>,
) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let wanted = listed.iter().filter(|tool| {
        spec.tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|name| name == tool.name.as_ref()))
            && !spec
                .exclude_tools
                .iter()
                .any(|name| name == tool.name.as_ref())
    });
    let (mut taken, mut bytes) = (0, 0);
    for tool in wanted {
        let mut checked = match Checked::new(&spec.name, tool) {
            Ok(checked) => checked,
            Err(why) => {
                tracing::warn!(server = %spec.name, tool = %tool.name, %why,
                    "a tool of an MCP server is left out");
                continue;
            }
        };
        if taken == MAX_TOOLS || bytes + checked.size() > MAX_DEFINITIONS {
            tracing::warn!(server = %spec.name, offered = listed.len(), kept = taken,
                max_tools = MAX_TOOLS, max_bytes = MAX_DEFINITIONS,
                "an MCP server offers more tools than are taken from one server; the rest are cut (list the ones you want in `tools`)");
            break;
        }
        if spec.read_only_tools.contains(&checked.remote) {
            checked.read_only = true;
        }
        bytes += checked.size();
        taken += 1;
        registry.register(Arc::new(McpTool::new(
            checked,
            spec.timeout,
            peer.clone(),
            abandoned.clone(),
        )));
    }
    registry
}

/// Logs what a server writes to stderr, a line at a time, cut and rate limited.
async fn log_stderr(server: String, stderr: ChildStderr) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut window = Instant::now();
    let (mut logged, mut dropped) = (0u32, 0u64);
    loop {
        line.clear();
        // At most one line's worth is read before it is logged, however long the line.
        match (&mut lines)
            .take(MAX_STDERR_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if window.elapsed() >= Duration::from_secs(60) {
            if dropped > 0 {
                tracing::warn!(server = %server, dropped, "an MCP server wrote more to stderr than is logged; lines were left out");
            }
            window = Instant::now();
            (logged, dropped) = (0, 0);
        }
        if logged >= STDERR_LINES_PER_MINUTE {
            dropped += 1;
            continue;
        }
        logged += 1;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if !text.is_empty() {
            tracing::info!(server = %server, stderr = %text, "MCP server");
        }
    }
}
