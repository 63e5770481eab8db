//! The scripted server's answers in the Gemini API's format: a whole
//! `GenerateContentResponse`, or the server-sent events `streamGenerateContent?alt=sse`
//! sends — one response per event (`data: {…}` and CRLFs, as Google writes them), text a
//! word at a time, calls whole, usage so far on each, `finishReason` on the last, and the
//! thought signature alone on an empty text part at the end of a streamed text.
//!
//! Calls come signed as Gemini 3 signs them: the first call of a response carries
//! `thoughtSignature` `sig_<request>`, the calls after it none; a text's signature is
//! `tsig_<request>`. Ids are `call_<request>_<position>` (Gemini may send none; the client
//! must cope either way).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

use super::{Reply, paced, sse_body, usage};

/// An error the way Google sends one: `{"error": {"code", "message", "status"}}`.
pub(super) fn error(status: u16, retry_after: Option<u64>, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = match status {
        400 => "INVALID_ARGUMENT",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    let mut response = (
        code,
        Json(json!({"error": {"code": status, "message": message, "status": kind}})),
    )
        .into_response();
    if let Some(secs) = retry_after
        && let Ok(value) = secs.to_string().parse()
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

fn usage_json() -> Value {
    let usage = usage();
    json!({"promptTokenCount": usage.input,
        "candidatesTokenCount": usage.output - usage.thinking.min(usage.output),
        "thoughtsTokenCount": usage.thinking,
        "cachedContentTokenCount": usage.cached,
        "totalTokenCount": usage.input + usage.output})
}

/// One response of `parts`, finished with `finish` when given.
fn response(parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    json!({"candidates": [candidate], "usageMetadata": usage_json(),
        "modelVersion": "scripted", "responseId": "scripted"})
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\r\n\r\n"))
}

fn events(
    responses: Vec<Value>,
    gap: Duration,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    paced(
        futures::stream::iter(responses.iter().map(event).collect::<Vec<_>>()),
        gap,
    )
}

/// A text a word per event, then the signature alone with the finish reason.
fn text_events(text: &str, number: usize, finish: bool) -> Vec<Value> {
    let mut responses: Vec<Value> = text
        .split_inclusive(' ')
        .map(|word| response(vec![json!({"text": word})], None))
        .collect();
    if finish {
        responses.push(response(
            vec![json!({"text": "", "thoughtSignature": format!("tsig_{number}")})],
            Some("STOP"),
        ));
    }
    responses
}

fn text(text: &str, number: usize, gap: Duration, stream: bool) -> Response {
    if stream {
        return sse_body(events(text_events(text, number, true), gap));
    }
    Json(response(
        vec![json!({"text": text, "thoughtSignature": format!("tsig_{number}")})],
        Some("STOP"),
    ))
    .into_response()
}

/// Calls `(id, name, args)`, the first signed; Gemini ends such a response with STOP.
fn calls(calls: &[(String, String, Value)], number: usize, stream: bool) -> Response {
    let parts: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(position, (id, name, args))| {
            let mut part = json!({"functionCall": {"id": id, "name": name, "args": args}});
            if position == 0 {
                part["thoughtSignature"] = json!(format!("sig_{number}"));
            }
            part
        })
        .collect();
    let whole = response(parts, Some("STOP"));
    if stream {
        sse_body(events(vec![whole], Duration::ZERO))
    } else {
        Json(whole).into_response()
    }
}

fn blocked(category: &str, stream: bool) -> Response {
    let whole = json!({"candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [
            {"category": category, "probability": "HIGH", "blocked": true},
            {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}]}],
        "usageMetadata": usage_json()});
    if stream {
        sse_body(events(vec![whole], Duration::ZERO))
    } else {
        Json(whole).into_response()
    }
}

/// The answer to a request, for a reply that is neither delayed nor raw.
pub(super) fn respond(reply: Reply, number: usize, stream: bool) -> Response {
    match reply {
        Reply::Error {
            status,
            retry_after,
        } => error(status, retry_after, "scripted error"),
        Reply::ErrorWithMessage(status, message) => error(status, None, &message),
        Reply::Text(body) => text(&body, number, Duration::ZERO, stream),
        Reply::Paced(body, gap) => text(&body, number, gap, stream),
        Reply::ToolCalls(list) => {
            let list: Vec<_> = list
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| (format!("call_{number}_{i}"), name, args))
                .collect();
            calls(&list, number, stream)
        }
        Reply::ToolCallsWithIds(list) => calls(&list, number, stream),
        Reply::Blocked(category) => blocked(&category, stream),
        // Gemini sends calls whole: a cut one is a stream that ends without its finish.
        Reply::CutToolCall(_) => sse_body(events(
            text_events("Let me ", number, false),
            Duration::ZERO,
        )),
        Reply::Endless => {
            let piece = event(&response(vec![json!({"text": "and on "})], None));
            sse_body(futures::stream::repeat_with(move || {
                Ok::<_, Infallible>(piece.clone())
            }))
        }
        Reply::StallAfter(body) => sse_body(
            events(text_events(&body, number, false), Duration::ZERO)
                .chain(futures::stream::pending()),
        ),
        Reply::BreakAfter(body) => {
            let events = events(text_events(&body, number, false), Duration::from_millis(20))
                .map(|item| item.map_err(|never| match never {}))
                .chain(futures::stream::once(async {
                    Err(std::io::Error::other("scripted connection break"))
                }));
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(events))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        Reply::Delayed(_, inner) => respond(*inner, number, stream),
        Reply::Raw(_) => unreachable!("answered above"),
    }
}
