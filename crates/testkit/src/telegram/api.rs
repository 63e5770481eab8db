//! The fake's Bot API methods: `getMe`, `getUpdates` (long polls, updates delivered again
//! until confirmed), `sendMessage` and `editMessageText` with Telegram's refusals, files sent
//! and fetched, and a chat's calls answered 429 while it is told to be rate limited.

use super::*;

fn ok(result: Value) -> Response {
    axum::Json(json!({"ok": true, "result": result})).into_response()
}

fn fail(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        axum::Json(json!({"ok": false, "error_code": code, "description": description})),
    )
        .into_response()
}

pub(super) async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    {
        let mut inner = shared.lock();
        if inner.calls.len() == 32 {
            inner.calls.pop_front();
        }
        inner.calls.push_back(method.clone());
    }
    if bot != format!("bot{TEST_TOKEN}") {
        return fail(401, "Unauthorized");
    }
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let mut files = Vec::new();
    let params: Value = if body.is_empty() {
        json!({})
    } else if let Some(boundary) = crate::multipart::boundary(content_type) {
        let mut fields = serde_json::Map::new();
        for part in crate::multipart::parts(&body, &boundary) {
            if part.filename.is_some() {
                files.push(part);
            } else {
                fields.insert(part.name.clone(), json!(part.text()));
            }
        }
        Value::Object(fields)
    } else {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(_) => return fail(400, "Bad Request: the body is not JSON"),
        }
    };
    match method.to_ascii_lowercase().as_str() {
        "getme" => get_me(&shared),
        "getwebhookinfo" => {
            ok(json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0}))
        }
        "deletewebhook" => {
            shared.lock().webhook = None;
            ok(json!(true))
        }
        "setwebhook" => {
            let url = params["url"].as_str().unwrap_or_default().to_owned();
            let secret = params["secret_token"].as_str().map(str::to_owned);
            shared.lock().webhook = Some((url, secret));
            shared.changed.notify_waiters();
            ok(json!(true))
        }
        "getupdates" => get_updates(&shared, &params).await,
        "setmycommands" => {
            let commands = params["commands"].as_array().cloned().unwrap_or_default();
            shared.lock().commands = commands;
            shared.changed.notify_waiters();
            ok(json!(true))
        }
        "sendmessage" => send_message(&shared, &params),
        "sendphoto" | "senddocument" | "sendvoice" | "sendaudio" => {
            upload(&shared, &method, &params, files).await
        }
        "editmessagetext" => edit_message(&shared, &params),
        "sendchataction" => {
            let chat = params["chat_id"].as_i64().unwrap_or_default();
            let action = params["action"].as_str().unwrap_or_default().to_owned();
            shared.lock().actions.push((chat, action));
            shared.changed.notify_waiters();
            ok(json!(true))
        }
        "getfile" => {
            let id = params["file_id"].as_str().unwrap_or_default();
            match shared.lock().files.get(id) {
                Some((path, bytes)) => ok(json!({"file_id": id, "file_unique_id": id,
                    "file_size": bytes.len(), "file_path": path})),
                None => fail(400, "Bad Request: invalid file_id"),
            }
        }
        _ => fail(404, "Not Found: method not found"),
    }
}

fn get_me(shared: &Shared) -> Response {
    if shared.lock().get_me_garbage {
        return ok(json!({"id": "not a number", "is_bot": "maybe"}));
    }
    ok(json!({
        "id": BOT_ID, "is_bot": true, "first_name": "Switchboard Test", "username": BOT_USERNAME,
        "can_join_groups": true, "can_read_all_group_messages": false,
        "supports_inline_queries": false, "can_connect_to_business": false, "has_main_web_app": false
    }))
}

async fn get_updates(shared: &Shared, params: &Value) -> Response {
    let offset = params["offset"].as_i64();
    let limit = params["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
    let hold = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0).min(60));
    let deadline = Instant::now() + hold;
    {
        let mut inner = shared.lock();
        inner.polls += 1;
        inner.offsets.push(offset);
    }
    shared.changed.notify_waiters();
    loop {
        let changed = shared.changed.notified();
        {
            let mut inner = shared.lock();
            if inner.polls_failing {
                // (A 404, not a 5xx: teloxide holds a 5xx answer 10 s before returning it.)
                return (
                    axum::http::StatusCode::NOT_FOUND,
                    [("content-type", "text/html")],
                    "<html><body><h1>404 Not Found</h1></body></html>",
                )
                    .into_response();
            }
            if let Some(offset) = offset {
                // An offset confirms every update below it.
                let below: Vec<u32> = inner
                    .updates
                    .keys()
                    .copied()
                    .filter(|id| i64::from(*id) < offset)
                    .collect();
                for id in below {
                    inner.updates.remove(&id);
                }
            }
            let batch: Vec<Value> = inner.updates.values().take(limit).cloned().collect();
            if !batch.is_empty() || Instant::now() >= deadline {
                inner.delivered += batch.len() as u64;
                drop(inner);
                shared.changed.notify_waiters();
                return ok(Value::Array(batch));
            }
        }
        let _ = tokio::time::timeout_at(deadline, changed).await;
    }
}

fn rate_limited(inner: &mut Inner, chat: i64) -> Option<Response> {
    let (secs, left) = inner.limited.get_mut(&chat)?;
    if *left == 0 {
        return None;
    }
    *left -= 1;
    let secs = *secs;
    inner.limited_at.push((chat, Instant::now()));
    Some(
        (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({"ok": false, "error_code": 429,
                "description": format!("Too Many Requests: retry after {secs}"),
                "parameters": {"retry_after": secs}})),
        )
            .into_response(),
    )
}

fn message_json(chat: i64, message_id: i64, text: &str) -> Value {
    let chat_json = if chat > 0 {
        json!({"id": chat, "type": "private", "first_name": "Tester"})
    } else {
        json!({"id": chat, "type": "supergroup", "title": "Test group"})
    };
    json!({"message_id": message_id, "date": 1_700_000_000, "chat": chat_json, "text": text,
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Switchboard Test", "username": BOT_USERNAME}})
}

/// What Telegram checks of a text before sending or editing: the chat's rate limit, the
/// HTML it can parse, the length. The text as users would see it, or the refusal.
fn accept_text(
    inner: &mut Inner,
    chat: i64,
    text: &str,
    html: bool,
) -> Result<String, Box<Response>> {
    if let Some(limited) = rate_limited(inner, chat) {
        return Err(Box::new(limited));
    }
    if html && inner.refuse_html {
        return Err(Box::new(fail(
            400,
            "Bad Request: can't parse entities: Unsupported start tag \"b\" at byte offset 0",
        )));
    }
    check_text(text, html).map_err(|refused| Box::new(fail(400, &refused)))
}

fn send_message(shared: &Shared, params: &Value) -> Response {
    let chat = params["chat_id"].as_i64().unwrap_or_default();
    let text = params["text"].as_str().unwrap_or_default();
    let html = params["parse_mode"].as_str() == Some("HTML");
    let mut inner = shared.lock();
    let visible = match accept_text(&mut inner, chat, text, html) {
        Ok(visible) => visible,
        Err(refused) => return *refused,
    };
    let message_id = next_message(&mut inner, chat);
    inner.sent.push(Sent {
        chat,
        topic: params["message_thread_id"].as_i64(),
        message_id,
        text: text.to_owned(),
        visible: visible.clone(),
        html,
        reply_to: params["reply_parameters"]["message_id"].as_i64(),
        edit: false,
        at: Instant::now(),
    });
    inner.texts.insert((chat, message_id), visible.clone());
    drop(inner);
    shared.changed.notify_waiters();
    ok(message_json(chat, message_id, &visible))
}

fn edit_message(shared: &Shared, params: &Value) -> Response {
    let chat = params["chat_id"].as_i64().unwrap_or_default();
    let message_id = params["message_id"].as_i64().unwrap_or_default();
    let text = params["text"].as_str().unwrap_or_default();
    let html = params["parse_mode"].as_str() == Some("HTML");
    let mut inner = shared.lock();
    let visible = match accept_text(&mut inner, chat, text, html) {
        Ok(visible) => visible,
        Err(refused) => return *refused,
    };
    match inner.texts.get(&(chat, message_id)) {
        None => return fail(400, "Bad Request: message to edit not found"),
        Some(current) if *current == visible => {
            return fail(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
            );
        }
        Some(_) => {}
    }
    inner.sent.push(Sent {
        chat,
        topic: None,
        message_id,
        text: text.to_owned(),
        visible: visible.clone(),
        html,
        reply_to: None,
        edit: true,
        at: Instant::now(),
    });
    inner.texts.insert((chat, message_id), visible.clone());
    drop(inner);
    shared.changed.notify_waiters();
    ok(message_json(chat, message_id, &visible))
}

/// A number of a request, whether JSON sent it as one or a form as text.
fn number(params: &Value, key: &str) -> Option<i64> {
    params[key]
        .as_i64()
        .or_else(|| params[key].as_str().and_then(|text| text.parse().ok()))
}

/// `sendPhoto`, `sendDocument`, `sendVoice`, `sendAudio`: the file recorded with its bytes
/// (once an upload held meanwhile is let go), answered with the message Telegram makes of it.
async fn upload(
    shared: &Shared,
    method: &str,
    params: &Value,
    files: Vec<crate::multipart::Part>,
) -> Response {
    let chat = number(params, "chat_id").unwrap_or_default();
    let field = match method.to_ascii_lowercase().as_str() {
        "sendphoto" => "photo",
        "senddocument" => "document",
        "sendvoice" => "voice",
        _ => "audio",
    };
    // The file is its own part, or (as teloxide sends it) named by `attach://<part>`.
    let part = params[field]
        .as_str()
        .and_then(|value| value.strip_prefix("attach://"))
        .unwrap_or(field)
        .to_owned();
    let Some(file) = files.into_iter().find(|file| file.name == part) else {
        return fail(
            400,
            &format!("Bad Request: there is no {field} in the request"),
        );
    };
    if let Some(limited) = rate_limited(&mut shared.lock(), chat) {
        shared.changed.notify_waiters();
        return limited;
    }
    let kept =
        crate::multipart::arrive(&shared.changed, |read| read(&mut shared.lock().holding)).await;
    if !kept {
        return fail(500, "Internal Server Error: the upload broke off");
    }
    let caption = params["caption"].as_str().map(str::to_owned);
    let reply_to = params["reply_parameters"]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|reply| reply["message_id"].as_i64());
    let mut inner = shared.lock();
    let message_id = next_message(&mut inner, chat);
    let size = file.bytes.len();
    let file_id = format!("sent-{}", fastrand_id());
    let name = file.filename.clone().unwrap_or_default();
    inner.uploads.push(crate::multipart::Uploaded {
        chat: chat.to_string(),
        id: message_id.to_string(),
        method: method.to_owned(),
        name: name.clone(),
        mime: file.content_type.clone(),
        bytes: file.bytes,
        caption: caption.clone(),
        reply_to: reply_to.map(|id| id.to_string()),
        at: Instant::now(),
    });
    drop(inner);
    shared.changed.notify_waiters();
    let mut message = message_json(chat, message_id, "");
    if let Some(object) = message.as_object_mut() {
        object.remove("text");
    }
    let mime = json!(file.content_type);
    message[field] = match field {
        "photo" => json!([{"file_id": file_id, "file_unique_id": file_id, "width": 640,
            "height": 480, "file_size": size}]),
        "document" => json!({"file_id": file_id, "file_unique_id": file_id, "file_name": name,
            "mime_type": mime, "file_size": size}),
        _ => json!({"file_id": file_id, "file_unique_id": file_id, "duration": 1,
            "mime_type": mime, "file_size": size}),
    };
    if let Some(caption) = caption {
        message["caption"] = json!(caption);
    }
    ok(message)
}

pub(super) async fn file(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{TEST_TOKEN}") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let (bytes, delay) = {
        let inner = shared.lock();
        let bytes = inner
            .files
            .values()
            .find(|(p, _)| *p == path)
            .map(|(_, bytes)| bytes.clone());
        (bytes, inner.file_delay)
    };
    tokio::time::sleep(delay).await;
    shared.lock().files_served.push(Instant::now());
    shared.changed.notify_waiters();
    match bytes {
        Some(bytes) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
