//! The scripted server's answers in OpenAI's chat-completions format: a whole
//! `chat.completion`, or `chat.completion.chunk` events (text word by word, tool-call
//! arguments in fragments, usage last, `[DONE]`).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

use super::{Reply, json_body, paced, sse_body, usage};

/// The `usage` object of an answer.
fn usage_json() -> Value {
    let usage = usage();
    json!({"prompt_tokens": usage.input, "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cached},
        "completion_tokens_details": {"reasoning_tokens": usage.thinking}})
}

/// The answer to a request, for a reply that is neither delayed nor raw.
pub(super) fn respond(reply: Reply, number: usize, stream: bool) -> Response {
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
        Reply::Blocked(_) if stream => sse(
            vec![
                chunk(json!({"role": "assistant", "content": ""}), None),
                chunk(json!({}), Some("content_filter")),
            ],
            Duration::ZERO,
        ),
        Reply::Blocked(_) => whole(
            json!({"role": "assistant", "content": ""}),
            "content_filter",
        ),
        Reply::Delayed(..) | Reply::Raw(_) => unreachable!("answered above"),
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
        "usage": usage_json()
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
        "usage": usage_json()});
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

fn sse(chunks: Vec<Value>, gap: Duration) -> Response {
    sse_body(paced(events_of(chunks, Some(())), gap))
}
