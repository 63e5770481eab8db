//! The fake's REST API: messages (Discord's 400 over 2000 characters), edits, typing, who the
//! bot is, slash commands, interaction answers and attachments — each recorded, a channel's
//! calls answered 429 while it is told to be rate limited.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bot {TEST_TOKEN}"))
}

fn error(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// The bucket's state for a write to `channel` now, as headers; or a 429 when it has
/// nothing left (Discord's `user` scope).
fn bucket(inner: &mut Inner, channel: u64) -> Result<Vec<(&'static str, String)>, Box<Response>> {
    let Some((limit, window)) = inner.bucket else {
        return Ok(Vec::new());
    };
    let now = Instant::now();
    let (remaining, reset_at) = inner
        .buckets
        .entry(channel)
        .or_insert((limit, now + window));
    if *reset_at <= now {
        *remaining = limit;
        *reset_at = now + window;
    }
    let reset_after = reset_at.duration_since(now).as_secs_f64();
    if *remaining == 0 {
        inner.over_bucket.push((channel, now));
        let body = json!({"message": "You are being rate limited.", "retry_after": reset_after, "global": false});
        let mut response = error(StatusCode::TOO_MANY_REQUESTS, body);
        for (name, value) in [
            ("x-ratelimit-scope", "user".to_owned()),
            ("x-ratelimit-bucket", "messages".to_owned()),
            ("x-ratelimit-remaining", "0".to_owned()),
            ("x-ratelimit-reset-after", format!("{reset_after:.3}")),
            ("retry-after", format!("{}", reset_after.ceil())),
        ] {
            if let Ok(value) = value.parse() {
                response.headers_mut().insert(name, value);
            }
        }
        return Err(Box::new(response));
    }
    *remaining -= 1;
    Ok(vec![
        ("x-ratelimit-bucket", "messages".to_owned()),
        ("x-ratelimit-limit", limit.to_string()),
        ("x-ratelimit-remaining", remaining.to_string()),
        ("x-ratelimit-reset-after", format!("{reset_after:.3}")),
    ])
}

/// A global 429 for `channel`'s write, if one is due.
fn globally_limited(inner: &mut Inner, channel: u64) -> Option<Response> {
    let retry_after = inner.global_limited.remove(&channel)?;
    inner.global_at.push(Instant::now());
    let body = json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": true});
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, body);
    for (name, value) in [
        ("x-ratelimit-global", "true".to_owned()),
        ("x-ratelimit-scope", "global".to_owned()),
        ("retry-after", format!("{}", retry_after.ceil())),
    ] {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(name, value);
        }
    }
    Some(response)
}

/// A 429 for `channel` if it is limited.
fn limited(inner: &mut Inner, channel: u64) -> Option<Response> {
    let (retry_after, left) = inner.limited.get_mut(&channel)?;
    if *left == 0 {
        return None;
    }
    *left -= 1;
    let retry_after = *retry_after;
    inner.limited_at.push((channel, Instant::now()));
    let body = json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": false});
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, body);
    if let Ok(value) = format!("{retry_after}").parse() {
        response.headers_mut().insert("retry-after", value);
    }
    Some(response)
}

/// A new message: JSON, or a form of `payload_json` and files (`files[N]`), each file
/// recorded with its bytes.
pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<u64>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(boundary) = crate::multipart::boundary(content_type) else {
        return match serde_json::from_slice::<Value>(&body) {
            Ok(body) => write(&shared, channel, None, &headers, &body, Vec::new()),
            Err(_) => error(
                StatusCode::BAD_REQUEST,
                json!({"message": "400: Bad Request", "code": 50109}),
            ),
        };
    };
    let parts = crate::multipart::parts(&body, &boundary);
    let payload = parts
        .iter()
        .find(|part| part.name == "payload_json")
        .and_then(|part| serde_json::from_slice::<Value>(&part.bytes).ok())
        .unwrap_or_else(|| json!({}));
    let files: Vec<_> = parts
        .into_iter()
        .filter(|part| part.name.starts_with("files["))
        .collect();
    if !files.is_empty()
        && !crate::multipart::arrive(&shared.changed, |read| read(&mut shared.lock().holding)).await
    {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"message": "500: the upload broke off", "code": 0}),
        );
    }
    write(&shared, channel, None, &headers, &payload, files)
}

pub(super) async fn edit(
    State(shared): State<Arc<Shared>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    write(&shared, channel, Some(message), &headers, &body, Vec::new())
}

/// A new message (`message` is `None`) or an edit, as Discord takes it, with `files`
/// attached.
fn write(
    shared: &Shared,
    channel: u64,
    message: Option<u64>,
    headers: &HeaderMap,
    body: &Value,
    files: Vec<crate::multipart::Part>,
) -> Response {
    if !authorized(headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            json!({"message": "401: Unauthorized", "code": 0}),
        );
    }
    let mut inner = shared.lock();
    if let Some(response) =
        globally_limited(&mut inner, channel).or_else(|| limited(&mut inner, channel))
    {
        drop(inner);
        shared.changed.notify_waiters();
        return response;
    }
    let stated = match bucket(&mut inner, channel) {
        Ok(stated) => stated,
        Err(response) => {
            drop(inner);
            shared.changed.notify_waiters();
            return *response;
        }
    };
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    if content.chars().count() > 2000
        || (content.is_empty() && message.is_none() && files.is_empty())
    {
        let why = if content.is_empty() {
            "Cannot send an empty message"
        } else {
            "Invalid Form Body: content: Must be 2000 or fewer in length."
        };
        inner.refused.push((channel, why.to_owned()));
        drop(inner);
        shared.changed.notify_waiters();
        return error(
            StatusCode::BAD_REQUEST,
            json!({"message": why, "code": 50035}),
        );
    }
    if let Some(id) = message
        && !inner.texts.contains_key(&(channel, id))
    {
        return error(
            StatusCode::NOT_FOUND,
            json!({"message": "Unknown Message", "code": 10008}),
        );
    }
    let reply_to = body["message_reference"]["message_id"]
        .as_str()
        .and_then(|id| id.parse().ok());
    let replied_author = reply_to.and_then(|id| inner.authors.get(&id).copied());
    let pinged = pings(&content, body.get("allowed_mentions"), replied_author);
    let id = match message {
        Some(id) => id,
        None => {
            inner.next_id += 1;
            inner.next_id
        }
    };
    inner.texts.insert((channel, id), content.clone());
    let mut attachments = Vec::new();
    for file in files {
        attachments.push(json!({"id": id.to_string(), "filename": file.filename,
            "size": file.bytes.len(), "content_type": file.content_type}));
        inner.uploads.push(crate::multipart::Uploaded {
            chat: channel.to_string(),
            id: id.to_string(),
            method: "attachment".into(),
            name: file.filename.unwrap_or_default(),
            mime: file.content_type,
            bytes: file.bytes,
            caption: (!content.is_empty()).then(|| content.clone()),
            reply_to: reply_to.map(|id: u64| id.to_string()),
            at: Instant::now(),
        });
    }
    inner.sent.push(Sent {
        channel,
        message_id: id,
        content: content.clone(),
        reply_to,
        edit: message.is_some(),
        pinged,
        at: Instant::now(),
    });
    drop(inner);
    shared.changed.notify_waiters();
    let mut response = axum::Json(
        json!({"id": id.to_string(), "channel_id": channel.to_string(),
        "content": content, "attachments": attachments}),
    )
    .into_response();
    for (name, value) in stated {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// `GET /users/@me`: the bot, for the right token.
pub(super) async fn whoami(headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            json!({"message": "401: Unauthorized", "code": 0}),
        );
    }
    axum::Json(json!({"id": BOT_ID.to_string(), "username": "switchboard", "bot": true}))
        .into_response()
}

pub(super) async fn typing(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<u64>,
    headers: HeaderMap,
) -> StatusCode {
    if !authorized(&headers) {
        return StatusCode::UNAUTHORIZED;
    }
    shared.lock().typing.push(channel);
    shared.changed.notify_waiters();
    StatusCode::NO_CONTENT
}

pub(super) async fn commands(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let list = body.as_array().cloned().unwrap_or_default();
    shared.lock().commands = list.clone();
    shared.changed.notify_waiters();
    axum::Json(Value::Array(list)).into_response()
}

pub(super) async fn callback(
    State(shared): State<Arc<Shared>>,
    Path((id, _token)): Path<(String, String)>,
    axum::Json(body): axum::Json<Value>,
) -> StatusCode {
    shared.lock().callbacks.push((id, body));
    shared.changed.notify_waiters();
    StatusCode::NO_CONTENT
}

pub(super) async fn file(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    let (bytes, delay) = {
        let inner = shared.lock();
        (inner.files.get(&name).cloned(), inner.file_delay)
    };
    tokio::time::sleep(delay).await;
    shared.lock().files_served.push(Instant::now());
    shared.changed.notify_waiters();
    match bytes {
        Some(bytes) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
