//! [`ScriptedLlm`]: a server that answers from a script, speaking both OpenAI's chat
//! completions (`/v1/chat/completions`) and Anthropic's Messages API (`/v1/messages`).
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

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

mod anthropic;

/// The API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    OpenAi,
    Anthropic,
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
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/chat/completions", post(complete))
            .route("/v1/messages", post(messages))
            .route("/messages", post(messages))
            .with_state(script.clone());
        let (addr, stop) = crate::serve(app, addr).await?;
        Ok(Self { addr, script, stop })
    }

    /// The base URL to configure as `llm.base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
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
    answer(&script, body, Dialect::OpenAi).await
}

async fn messages(State(script): State<Arc<Script>>, body: String) -> Response {
    answer(&script, body, Dialect::Anthropic).await
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
    respond(reply, number, stream, dialect).await
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
    if dialect == Dialect::Anthropic {
        return respond_anthropic(reply, number, stream);
    }
    match reply {
        Reply::CutToolCall(name) => {
            let head = chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call_{number}_0"),
                    "type": "function", "function": {"name": name, "arguments": "{\"text\": \"cu"}}]}),
                None,
            );
            sse_body(paced(events_of(vec![head], None), Duration::ZERO))
        }
        Reply::Error {
            status,
            retry_after,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (
                status,
                Json(json!({"error": {"message": "scripted error", "type": "scripted"}})),
            )
                .into_response();
            if let Some(secs) = retry_after
                && let Ok(value) = secs.to_string().parse()
            {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Reply::ErrorWithMessage(status, message) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            (
                status,
                Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
            )
                .into_response()
        }
        Reply::Endless => {
            let piece = chunk(json!({"content": "and on "}), None);
            let event = Bytes::from(format!("data: {piece}\n\n"));
            let events = futures::stream::repeat_with(move || Ok::<_, Infallible>(event.clone()));
            if stream {
                sse_body(events)
            } else {
                // A JSON body that never ends.
                let head = futures::stream::once(async {
                    Ok::<_, Infallible>(Bytes::from_static(
                        b"{\"choices\":[{\"message\":{\"content\":\"",
                    ))
                });
                let filler = futures::stream::repeat_with(|| {
                    Ok::<_, Infallible>(Bytes::from_static(b"and on and on and on "))
                });
                json_body(head.chain(filler))
            }
        }
        Reply::StallAfter(text) => {
            let events = events_of(text_chunks(&text), None).chain(futures::stream::pending());
            sse_body(paced(events, Duration::ZERO))
        }
        Reply::BreakAfter(text) => {
            // Paced, so the text really reaches the client before the break.
            let events = paced(
                events_of(text_chunks(&text), None),
                Duration::from_millis(20),
            )
            .map(Ok::<_, std::io::Error>)
            .chain(futures::stream::once(async {
                Err(std::io::Error::other("scripted connection break"))
            }));
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(events.map(|item| {
                    item.and_then(|r| r.map_err(|never| match never {}))
                })))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        Reply::ToolCallsWithIds(calls) => tool_calls_reply(
            calls
                .iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect(),
            stream,
        ),
        Reply::Text(text) if stream => sse(text_chunks(&text), Duration::ZERO),
        Reply::Paced(text, gap) if stream => sse(text_chunks(&text), gap),
        Reply::Text(text) | Reply::Paced(text, _) => {
            whole(json!({"role": "assistant", "content": text}), "stop")
        }
        Reply::ToolCalls(calls) => tool_calls_reply(
            calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{number}_{i}"), "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect(),
            stream,
        ),
        Reply::Delayed(..) | Reply::Raw(_) => unreachable!("answered above"),
    }
}

fn respond_anthropic(reply: Reply, number: usize, stream: bool) -> Response {
    match reply {
        Reply::CutToolCall(name) => anthropic::cut_call(&format!("toolu_{number}_0"), &name),
        Reply::Error {
            status,
            retry_after,
        } => anthropic::error(status, retry_after, "scripted error"),
        Reply::ErrorWithMessage(status, message) => anthropic::error(status, None, &message),
        Reply::Text(text) => anthropic::text(&text, Duration::ZERO, stream),
        Reply::Paced(text, gap) => anthropic::text(&text, gap, stream),
        Reply::ToolCalls(calls) => {
            let calls: Vec<_> = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| (format!("toolu_{number}_{i}"), name, args))
                .collect();
            anthropic::calls(&calls, stream)
        }
        Reply::ToolCallsWithIds(calls) => anthropic::calls(&calls, stream),
        Reply::Endless => anthropic::endless(),
        Reply::StallAfter(text) => sse_body(paced(
            anthropic::opening(&text).chain(futures::stream::pending()),
            Duration::ZERO,
        )),
        Reply::BreakAfter(text) => {
            let events = paced(anthropic::opening(&text), Duration::from_millis(20))
                .map(|item| item.map_err(|never| match never {}))
                .chain(futures::stream::once(async {
                    Err(std::io::Error::other("scripted connection break"))
                }));
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(events))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        // Answered by `respond` already.
        Reply::Delayed(_, inner) => respond_anthropic(*inner, number, stream),
        Reply::Raw(_) => unreachable!("answered above"),
    }
}

fn tool_calls_reply(calls: Vec<Value>, stream: bool) -> Response {
    if stream {
        sse(tool_chunks(&calls), Duration::ZERO)
    } else {
        whole(
            json!({"role": "assistant", "content": null, "tool_calls": calls}),
            "tool_calls",
        )
    }
}

fn whole(message: Value, finish_reason: &str) -> Response {
    Json(json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    }))
    .into_response()
}

fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
}

fn text_chunks(text: &str) -> Vec<Value> {
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    chunks.extend(
        text.split_inclusive(' ')
            .map(|word| chunk(json!({"content": word}), None)),
    );
    chunks.push(chunk(json!({}), Some("stop")));
    chunks
}

/// Each call as a head (id, name, start of arguments) and a tail (rest of arguments), so
/// clients must reassemble by index.
fn tool_chunks(calls: &[Value]) -> Vec<Value> {
    let mut chunks = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let args = call["function"]["arguments"].as_str().unwrap_or("{}");
        let split = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        let (head, tail) = args.split_at(split);
        chunks.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": head}}]}),
            None,
        ));
        chunks.push(chunk(
            json!({"tool_calls": [{"index": index, "function": {"arguments": tail}}]}),
            None,
        ));
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    chunks
}

/// The SSE events of `chunks`; with `end`, a usage event and `[DONE]` follow.
fn events_of(
    chunks: Vec<Value>,
    end: Option<()>,
) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    let usage = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
    let mut events: Vec<Bytes> = chunks
        .into_iter()
        .map(|chunk| Bytes::from(format!("data: {chunk}\n\n")))
        .collect();
    if end.is_some() {
        events.push(Bytes::from(format!("data: {usage}\n\n")));
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    }
    futures::stream::iter(events)
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

fn sse(chunks: Vec<Value>, gap: Duration) -> Response {
    sse_body(paced(events_of(chunks, Some(())), gap))
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

fn json_body(
    chunks: impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The text of the last user message, in either dialect (Anthropic's content blocks: its
/// last text block; a message of only tool results is not one the person wrote).
fn last_user_text(request: &Value) -> String {
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
