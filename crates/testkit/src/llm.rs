//! [`ScriptedLlm`]: an OpenAI-compatible server that answers from a script.
//!
//! Each request takes the next [`Reply`] of the script; when the script is empty it
//! echoes the last user message (`echo: <text>`). A request with `"stream": true` gets
//! server-sent events (text word by word, tool-call arguments in fragments, usage last);
//! otherwise one JSON body. Every request body is recorded.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
}

struct Script {
    replies: Mutex<VecDeque<Reply>>,
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
            requests: Mutex::new(Vec::new()),
            record: std::sync::atomic::AtomicBool::new(true),
            received: std::sync::atomic::AtomicUsize::new(0),
            recorded: Notify::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/chat/completions", post(complete))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let serve =
                axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned());
            let _ = serve.await;
        });
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
    let request: Value = match serde_json::from_str(&body) {
        Ok(value) => value,
        Err(err) => {
            return (StatusCode::BAD_REQUEST, format!("invalid JSON: {err}")).into_response();
        }
    };
    let stream = request["stream"].as_bool().unwrap_or(false);
    let reply = lock(&script.replies)
        .pop_front()
        .unwrap_or_else(|| Reply::Text(format!("echo: {}", last_user_text(&request))));
    let number = script
        .received
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        + 1;
    if script.record.load(std::sync::atomic::Ordering::Relaxed) {
        lock(&script.requests).push(request);
    }
    script.recorded.notify_waiters();
    respond(reply, number, stream).await
}

async fn respond(mut reply: Reply, number: usize, stream: bool) -> Response {
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    match reply {
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
        Reply::Text(text) if stream => sse(text_chunks(&text), Duration::ZERO),
        Reply::Paced(text, gap) if stream => sse(text_chunks(&text), gap),
        Reply::Text(text) | Reply::Paced(text, _) => {
            whole(json!({"role": "assistant", "content": text}), "stop")
        }
        Reply::ToolCalls(calls) => {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{number}_{i}"), "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            if stream {
                sse(tool_chunks(&calls), Duration::ZERO)
            } else {
                whole(
                    json!({"role": "assistant", "content": null, "tool_calls": calls}),
                    "tool_calls",
                )
            }
        }
        Reply::Delayed(..) => unreachable!("unwrapped above"),
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

fn sse(chunks: Vec<Value>, gap: Duration) -> Response {
    let usage = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
    let events: Vec<String> = chunks
        .into_iter()
        .chain(std::iter::once(usage))
        .map(|chunk| format!("data: {chunk}\n\n"))
        .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
        .collect();
    let events = futures::stream::iter(events).then(move |event| async move {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Ok::<_, Infallible>(event)
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}
