//! The scripted server's answers in Anthropic's Messages format: a whole `message`, or
//! the SSE events a real stream sends (`message_start`, content blocks with text and
//! `input_json_delta` fragments, `message_delta` with the stop reason and usage,
//! `message_stop`).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

use axum::body::Body;

use super::{Reply, paced, sse_body, usage};

/// An error the way Anthropic sends one.
pub(super) fn error(status: u16, retry_after: Option<u64>, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let mut response = (
        code,
        Json(json!({"type": "error", "error": {"type": kind, "message": message}})),
    )
        .into_response();
    if let Some(secs) = retry_after
        && let Ok(value) = secs.to_string().parse()
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

fn whole(content: Vec<Value>, stop_reason: &str) -> Response {
    Json(json!({
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": "scripted",
        "content": content, "stop_reason": stop_reason,
        "usage": {"input_tokens": usage().input - usage().cached,
            "cache_read_input_tokens": usage().cached, "output_tokens": usage().output}
    }))
    .into_response()
}

fn event(value: Value) -> Bytes {
    let kind = value["type"].as_str().unwrap_or("unknown").to_owned();
    Bytes::from(format!("event: {kind}\ndata: {value}\n\n"))
}

fn start() -> Bytes {
    event(
        json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message",
        "role": "assistant", "content": [], "model": "scripted", "stop_reason": null,
        "usage": {"input_tokens": usage().input - usage().cached,
            "cache_read_input_tokens": usage().cached, "output_tokens": 1}}}),
    )
}

fn text_block(index: usize, text: &str) -> Vec<Bytes> {
    let mut events = vec![event(json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "text", "text": ""}}))];
    events.extend(text.split_inclusive(' ').map(|word| {
        event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": word}}))
    }));
    events
}

fn end(stop_reason: &str) -> Vec<Bytes> {
    vec![
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": usage().output}}),
        ),
        event(json!({"type": "message_stop"})),
    ]
}

/// A final text answer, whole or streamed one word every `gap`.
pub(super) fn text(text: &str, gap: Duration, stream: bool) -> Response {
    if !stream {
        return whole(vec![json!({"type": "text", "text": text})], "end_turn");
    }
    let mut events = vec![start()];
    events.extend(text_block(0, text));
    events.push(event(json!({"type": "content_block_stop", "index": 0})));
    events.extend(end("end_turn"));
    sse_body(paced(futures::stream::iter(events), gap))
}

/// Tool calls `(id, name, arguments)`; streamed, each call's input arrives in two halves.
pub(super) fn calls(calls: &[(String, String, Value)], stream: bool) -> Response {
    if !stream {
        let content = calls
            .iter()
            .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            .collect();
        return whole(content, "tool_use");
    }
    let mut events = vec![start()];
    for (index, (id, name, input)) in calls.iter().enumerate() {
        events.push(event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        let json = input.to_string();
        let split = json
            .char_indices()
            .nth(json.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        for half in [&json[..split], &json[split..]] {
            events.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": half}})));
        }
        events.push(event(json!({"type": "content_block_stop", "index": index})));
    }
    events.extend(end("tool_use"));
    sse_body(paced(futures::stream::iter(events), Duration::ZERO))
}

/// The start of a streamed text answer, without its end.
pub(super) fn opening(text: &str) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    let mut events = vec![start()];
    events.extend(text_block(0, text));
    futures::stream::iter(events)
}

/// Text streamed for ever.
pub(super) fn endless() -> Response {
    let piece = event(json!({"type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": "and on "}}));
    let head = futures::stream::iter(vec![start()]);
    let events = head.chain(futures::stream::repeat_with(move || piece.clone()));
    sse_body(events.map(Ok::<_, Infallible>))
}

/// A tool call cut inside its input: the stream ends there without `message_stop`.
pub(super) fn cut_call(id: &str, name: &str) -> Response {
    let events = vec![
        start(),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{\"text\": \"cu"}})),
    ];
    sse_body(paced(futures::stream::iter(events), Duration::ZERO))
}

/// The answer to a request, for a reply that is neither delayed nor raw.
pub(super) fn respond(reply: Reply, number: usize, stream: bool) -> Response {
    match reply {
        Reply::CutToolCall(name) => cut_call(&format!("toolu_{number}_0"), &name),
        Reply::Error {
            status,
            retry_after,
        } => error(status, retry_after, "scripted error"),
        Reply::ErrorWithMessage(status, message) => error(status, None, &message),
        Reply::Text(text) => self::text(&text, Duration::ZERO, stream),
        Reply::Paced(text, gap) => self::text(&text, gap, stream),
        Reply::ToolCalls(calls) => {
            let calls: Vec<_> = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| (format!("toolu_{number}_{i}"), name, args))
                .collect();
            self::calls(&calls, stream)
        }
        Reply::ToolCallsWithIds(calls) => self::calls(&calls, stream),
        Reply::Blocked(_) => {
            if !stream {
                return whole(Vec::new(), "refusal");
            }
            let mut events = vec![start()];
            events.extend(end("refusal"));
            sse_body(paced(futures::stream::iter(events), Duration::ZERO))
        }
        Reply::Endless => endless(),
        Reply::StallAfter(text) => sse_body(paced(
            opening(&text).chain(futures::stream::pending()),
            Duration::ZERO,
        )),
        Reply::BreakAfter(text) => {
            let events = paced(opening(&text), Duration::from_millis(20))
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
        Reply::Delayed(_, inner) => respond(*inner, number, stream),
        Reply::Raw(_) => unreachable!("answered above"),
    }
}
