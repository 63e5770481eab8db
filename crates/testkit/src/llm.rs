//! [`ScriptedLlm`]: a server that answers from a script, speaking OpenAI's chat
//! completions (`/v1/chat/completions`), Anthropic's Messages API (`/v1/messages`) and
//! Google's Gemini API (`/v1beta/models/{model}:generateContent`, and
//! `:streamGenerateContent?alt=sse`; see [`ScriptedLlm::gemini_base_url`]).
//!
//! Replies are written once and rendered in the dialect of the endpoint asked.
//! Each request takes the next [`Reply`] of the script; when the script is empty it asks
//! the responder set with [`ScriptedLlm::respond_with`], or echoes the last user message
//! (`echo: <text>`). A request with `"stream": true` gets server-sent events (text word by
//! word, tool-call arguments in fragments, usage last); otherwise one JSON body. Every
//! request body is recorded. In strict mode ([`ScriptedLlm::strict`]) a request that a real
//! provider would refuse (orphaned or duplicated tool-call ids) gets their HTTP 400.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

mod anthropic;
mod gemini;
mod openai;

/// The API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    OpenAi,
    Anthropic,
    Gemini,
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A final text answer.
    Text(String),
    /// Tool calls: `(name, arguments)`; ids are `call_<request>_<position>`.
    ToolCalls(Vec<(String, Value)>),
    /// An HTTP error, with an optional Retry-After in seconds.
    Error {
        /// The status code.
        status: u16,
        /// Retry-After, in seconds.
        retry_after: Option<u64>,
    },
    /// Waits, then answers with the inner reply.
    Delayed(Duration, Box<Reply>),
    /// A final text answer whose streamed chunks are sent `gap` apart, as a real model's
    /// tokens are (whole responses ignore the gap).
    Paced(String, Duration),
    /// Tool calls with the ids given: `(id, name, arguments)` (e.g. the duplicate ids some
    /// models emit).
    ToolCallsWithIds(Vec<(String, String, Value)>),
    /// Text streamed for ever (a whole response: a body that never ends).
    Endless,
    /// The words of the text, streamed, then silence with the connection held open.
    StallAfter(String),
    /// The words of the text, streamed, then the connection breaks.
    BreakAfter(String),
    /// This body, as it is, with status 200 and a JSON content type (a malformed or empty
    /// response).
    Raw(String),
    /// A streamed call of the tool named, cut inside its arguments: the stream ends
    /// cleanly there, without a finish reason (or `message_stop`).
    CutToolCall(String),
    /// The provider's filter blocked the answer: no text, OpenAI's `content_filter`,
    /// Anthropic's `refusal`, Gemini's `SAFETY` with this harm category blocked.
    Blocked(String),
    /// An HTTP error with a message in the body (strict mode's 400s).
    #[doc(hidden)]
    ErrorWithMessage(u16, String),
}

impl Reply {
    /// A final text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// One tool call.
    pub fn tool(name: &str, arguments: Value) -> Self {
        Self::ToolCalls(vec![(name.to_owned(), arguments)])
    }

    /// Several tool calls in one response.
    pub fn tools(calls: impl IntoIterator<Item = (&'static str, Value)>) -> Self {
        Self::ToolCalls(
            calls
                .into_iter()
                .map(|(name, args)| (name.to_owned(), args))
                .collect(),
        )
    }

    /// A text answer streamed one word every `gap`.
    pub fn paced(text: impl Into<String>, gap: Duration) -> Self {
        Self::Paced(text.into(), gap)
    }

    /// This reply after a delay.
    pub fn delayed(self, delay: Duration) -> Self {
        Self::Delayed(delay, Box::new(self))
    }

    fn with_message(self, message: String) -> Self {
        match self {
            Self::Error { status, .. } => Self::ErrorWithMessage(status, message),
            other => other,
        }
    }
}

/// The tokens a scripted answer reports it spent (10 in, 5 out, none cached unless set with
/// [`ScriptedLlm::set_usage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenUsage {
    /// Input tokens, cached ones included.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Of the input tokens, those read from the provider's prompt cache.
    pub cached: u64,
    /// Of the output tokens, those spent thinking (OpenAI's reasoning tokens, Gemini's
    /// thoughts; Anthropic does not count them apart).
    pub thinking: u64,
}

impl Default for TokenUsage {
    fn default() -> Self {
        Self {
            input: 10,
            output: 5,
            cached: 0,
            thinking: 0,
        }
    }
}

tokio::task_local! {
    /// The usage the answer being built reports (set around building it).
    static USAGE: TokenUsage;
}

/// The usage the answer being built reports.
pub(super) fn usage() -> TokenUsage {
    USAGE.try_with(|usage| *usage).unwrap_or_default()
}

/// Builds the reply to a request when the script is empty.
pub type Responder = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

struct Script {
    replies: Mutex<VecDeque<Reply>>,
    /// Answers requests when `replies` is empty; `None` echoes.
    responder: Mutex<Option<Responder>>,
    /// Whether requests providers would refuse get a 400.
    strict: std::sync::atomic::AtomicBool,
    /// Why strict mode refused requests, in order.
    violations: Mutex<Vec<String>>,
    /// Request bodies, while `record` is on.
    requests: Mutex<Vec<Value>>,
    /// Off for long runs (benchmarks, `fake-llm`), where keeping every body would grow
    /// without bound.
    record: std::sync::atomic::AtomicBool,
    /// Requests received, recorded or not.
    received: std::sync::atomic::AtomicUsize,
    /// Woken whenever a request is recorded; tests wait on it instead of sleeping.
    recorded: Notify,
    /// Requests being answered now (from their arrival to the end of their body).
    in_flight: std::sync::atomic::AtomicUsize,
    /// The most requests ever answered at once.
    most_in_flight: std::sync::atomic::AtomicUsize,
    /// When the last answer's body ended (the model done, as the daemon sees it).
    last_finished: Mutex<Option<std::time::Instant>>,
    /// What answers report they spent.
    usage: Mutex<TokenUsage>,
}

/// One request being answered: counted in `in_flight` until dropped with its response body.
struct InFlight(Arc<Script>);

impl InFlight {
    fn new(script: Arc<Script>) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        let now = script.in_flight.fetch_add(1, SeqCst) + 1;
        script.most_in_flight.fetch_max(now, SeqCst);
        Self(script)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *lock(&self.0.last_finished) = Some(std::time::Instant::now());
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running scripted server; it stops when dropped.
pub struct ScriptedLlm {
    addr: SocketAddr,
    script: Arc<Script>,
    /// Cancelled on drop; the server task selects on it.
    stop: CancellationToken,
}

impl ScriptedLlm {
    /// Starts a server on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().map_err(std::io::Error::other)?).await
    }

    /// Starts a server on the given address.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let script = Arc::new(Script {
            replies: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            strict: std::sync::atomic::AtomicBool::new(false),
            violations: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            record: std::sync::atomic::AtomicBool::new(true),
            received: std::sync::atomic::AtomicUsize::new(0),
            recorded: Notify::new(),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            most_in_flight: std::sync::atomic::AtomicUsize::new(0),
            last_finished: Mutex::new(None),
            usage: Mutex::new(TokenUsage::default()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/chat/completions", post(complete))
            .route("/v1/messages", post(messages))
            .route("/messages", post(messages))
            .route("/v1beta/models/{*call}", post(generate))
            .route("/v1/models/{*call}", post(generate))
            .with_state(script.clone());
        let (addr, stop) = crate::serve(app, addr).await?;
        Ok(Self { addr, script, stop })
    }

    /// The base URL to configure as `llm.base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL to configure as `llm.base_url` with `provider = "gemini"` as Google
    /// writes it (`…/v1beta`; [`base_url`](Self::base_url)'s `…/v1` answers Gemini's calls
    /// too, as Google's stable API does).
    pub fn gemini_base_url(&self) -> String {
        format!("http://{}/v1beta", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply for a later request.
    pub fn push(&self, reply: Reply) -> &Self {
        lock(&self.script.replies).push_back(reply);
        self
    }

    /// Answers as a real server does for a model it does not serve — 404, "The model `x`
    /// does not exist" — unless a request names `model`; those it echoes (as `fake-llm`
    /// does, so `doctor` and a mistyped `llm.model` fail against it as against a provider).
    pub fn serve_only(&self, model: &str) -> &Self {
        let model = model.to_owned();
        self.respond_with(move |request| match request["model"].as_str() {
            Some(asked) if asked == model => {
                Reply::Text(format!("echo: {}", last_user_text(request)))
            }
            asked => Reply::ErrorWithMessage(
                404,
                format!(
                    "The model `{}` does not exist or you do not have access to it.",
                    asked.unwrap_or_default()
                ),
            ),
        })
    }

    /// Answers requests the script has no reply for with `responder`.
    pub fn respond_with(
        &self,
        responder: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> &Self {
        *lock(&self.script.responder) = Some(Box::new(responder));
        self
    }

    /// Refuses, with a provider's HTTP 400, requests with orphaned, unanswered or
    /// duplicated tool-call ids (see [`crate::strict`]).
    pub fn strict(&self) -> &Self {
        self.script
            .strict
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Why strict mode refused requests so far.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.script.violations).clone()
    }

    /// Stops keeping request bodies (for long runs); `requests` returns what was kept.
    pub fn stop_recording(&self) -> &Self {
        self.script
            .record
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The most requests this server was answering at once (each from its arrival to the
    /// end of its response body): how many connections a client kept busy.
    pub fn most_in_flight(&self) -> usize {
        self.script
            .most_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many requests this server is answering now (a request whose client went away
    /// is over once its handler is dropped).
    pub fn in_flight(&self) -> usize {
        self.script
            .in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When the body of the last answer ended: the moment the model was done.
    pub fn last_finished(&self) -> Option<std::time::Instant> {
        *lock(&self.script.last_finished)
    }

    /// Starts counting [`most_in_flight`](Self::most_in_flight) afresh.
    pub fn reset_most_in_flight(&self) {
        self.script
            .most_in_flight
            .store(0, std::sync::atomic::Ordering::SeqCst);
    }

    /// Answers from now on report they spent `usage`.
    pub fn set_usage(&self, usage: TokenUsage) -> &Self {
        *lock(&self.script.usage) = usage;
        self
    }

    /// Every request body received so far (while recording).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.script.requests).clone()
    }

    /// Waits until at least `count` requests were received, or panics after `timeout`.
    pub async fn wait_for_requests(&self, count: usize, timeout: Duration) -> Vec<Value> {
        let wait = async {
            loop {
                let notified = self.script.recorded.notified();
                let requests = self.requests();
                if requests.len() >= count {
                    return requests;
                }
                notified.await;
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(requests) => requests,
            Err(_) => panic!(
                "expected {count} LLM requests within {timeout:?}, got {}",
                self.requests().len()
            ),
        }
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn complete(State(script): State<Arc<Script>>, body: String) -> Response {
    counted(script.clone(), answer(&script, body, Dialect::OpenAi)).await
}

async fn messages(State(script): State<Arc<Script>>, body: String) -> Response {
    counted(script.clone(), answer(&script, body, Dialect::Anthropic)).await
}

/// `POST /v1beta/models/{model}:{generateContent|streamGenerateContent}`: Gemini names
/// the model and whether to stream in the URL, not the body; both are put into the
/// recorded body (as `model` and `stream`) so that scripts and tests read every dialect
/// alike.
async fn generate(
    State(script): State<Arc<Script>>,
    axum::extract::Path(call): axum::extract::Path<String>,
    body: String,
) -> Response {
    let Some((model, method)) = call.rsplit_once(':') else {
        return gemini::error(404, None, &format!("no such method: {call}"));
    };
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        other => return gemini::error(404, None, &format!("no such method: {other}")),
    };
    let body = match serde_json::from_str::<Value>(&body) {
        Ok(Value::Object(mut fields)) => {
            fields.insert("model".into(), Value::String(model.to_owned()));
            fields.insert("stream".into(), Value::Bool(stream));
            Value::Object(fields).to_string()
        }
        _ => body,
    };
    counted(script.clone(), answer(&script, body, Dialect::Gemini)).await
}

/// The response of `answer`, counted in flight until its body has been sent.
async fn counted(script: Arc<Script>, answer: impl Future<Output = Response>) -> Response {
    let guard = InFlight::new(script);
    let (parts, body) = answer.await.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

async fn answer(script: &Script, body: String, dialect: Dialect) -> Response {
    let request: Value = match serde_json::from_str(&body) {
        Ok(value) => value,
        Err(err) => {
            return (StatusCode::BAD_REQUEST, format!("invalid JSON: {err}")).into_response();
        }
    };
    let stream = request["stream"].as_bool().unwrap_or(false);
    let violation = script
        .strict
        .load(std::sync::atomic::Ordering::Relaxed)
        .then(|| match dialect {
            Dialect::OpenAi => crate::strict::check_openai_request(&request).err(),
            Dialect::Anthropic => crate::strict::check_anthropic_request(&request).err(),
            Dialect::Gemini => crate::strict::check_gemini_request(&request).err(),
        })
        .flatten();
    let scripted = lock(&script.replies).pop_front();
    let reply = match (violation, scripted) {
        (Some(violation), _) => {
            lock(&script.violations).push(violation.clone());
            Reply::Error {
                status: 400,
                retry_after: None,
            }
            .with_message(violation)
        }
        (None, Some(reply)) => reply,
        (None, None) => match &*lock(&script.responder) {
            Some(responder) => responder(&request),
            None => Reply::Text(format!("echo: {}", last_user_text(&request))),
        },
    };
    let number = script
        .received
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        + 1;
    if script.record.load(std::sync::atomic::Ordering::Relaxed) {
        lock(&script.requests).push(request);
    }
    script.recorded.notify_waiters();
    let usage = *lock(&script.usage);
    USAGE
        .scope(usage, respond(reply, number, stream, dialect))
        .await
}

async fn respond(mut reply: Reply, number: usize, stream: bool, dialect: Dialect) -> Response {
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    if let Reply::Raw(body) = reply {
        return json_body(futures::stream::once(async move {
            Ok::<_, Infallible>(Bytes::from(body))
        }));
    }
    match dialect {
        Dialect::OpenAi => openai::respond(reply, number, stream),
        Dialect::Anthropic => anthropic::respond(reply, number, stream),
        Dialect::Gemini => gemini::respond(reply, number, stream),
    }
}

/// `events`, each `gap` after the one before.
pub(super) fn paced(
    events: impl futures::Stream<Item = Bytes> + Send + 'static,
    gap: Duration,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    events.then(move |event| async move {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Ok::<_, Infallible>(event)
    })
}

pub(super) fn sse_body(
    events: impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

pub(super) fn json_body(
    chunks: impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The text of the last user message, in any dialect (Anthropic's content blocks: its
/// last text block; Gemini's parts: its last text part; a message of only tool results is
/// not one the person wrote).
pub fn last_user_text(request: &Value) -> String {
    if let Some(contents) = request["contents"].as_array() {
        return contents
            .iter()
            .rev()
            .filter(|content| content["role"] == "user")
            .find_map(|content| {
                let parts = content["parts"].as_array()?;
                parts.iter().rev().find_map(|part| part["text"].as_str())
            })
            .unwrap_or_default()
            .to_owned();
    }
    let messages = request["messages"].as_array().into_iter().flatten().rev();
    for message in messages.filter(|m| m["role"] == "user") {
        match &message["content"] {
            Value::String(text) => return text.clone(),
            Value::Array(blocks) => {
                let text = blocks
                    .iter()
                    .rev()
                    .find(|b| b["type"] == "text")
                    .and_then(|b| b["text"].as_str());
                if let Some(text) = text {
                    return text.to_owned();
                }
            }
            _ => {}
        }
    }
    String::new()
}
