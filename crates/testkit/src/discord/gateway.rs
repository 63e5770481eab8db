//! The fake's gateway: `GET /api/v10/gateway` names it; a connection says HELLO, takes
//! IDENTIFY (close 4004 for a wrong token) or RESUME (replaying what the session missed,
//! then RESUMED), answers heartbeats, and carries the dispatches tests make.

use std::sync::{Arc, PoisonError};

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{BOT_ID, Push, SESSION, Shared, TEST_TOKEN};

pub(super) async fn gateway_url(State(shared): State<Arc<Shared>>) -> Response {
    let addr = *shared.addr.lock().unwrap_or_else(PoisonError::into_inner);
    let url = addr
        .map(|a| format!("ws://{a}/gateway"))
        .unwrap_or_default();
    axum::Json(json!({"url": url})).into_response()
}

pub(super) async fn gateway(
    State(shared): State<Arc<Shared>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    upgrade.on_upgrade(move |socket| session(shared, socket))
}

/// One gateway connection.
async fn session(shared: Arc<Shared>, mut socket: WebSocket) {
    let interval = shared.lock().heartbeat_ms;
    let hello = json!({"op": 10, "d": {"heartbeat_interval": interval}});
    if socket.send(text(&hello)).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    loop {
        tokio::select! {
            () = shared.stop.cancelled() => return,
            push = rx.recv() => {
                let code = match push {
                    Some(Push::Frame(frame)) => {
                        if socket.send(text(&frame)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Some(Push::Close(code)) => code,
                    None => 1000,
                };
                let _ = socket.send(WsMessage::Close(Some(CloseFrame { code, reason: "".into() }))).await;
                return;
            }
            frame = socket.recv() => {
                if let Some(Ok(WsMessage::Close(Some(close)))) = &frame {
                    shared.lock().closes.push(close.code);
                }
                let Some(Ok(WsMessage::Text(body))) = frame else {
                    if matches!(frame, None | Some(Err(_)) | Some(Ok(WsMessage::Close(_)))) {
                        forget(&shared, &tx);
                        return;
                    }
                    continue;
                };
                let Ok(frame) = serde_json::from_str::<Value>(body.as_str()) else {
                    let _ = socket.send(WsMessage::Close(Some(CloseFrame { code: 4002, reason: "decode error".into() }))).await;
                    return;
                };
                let answer = take(&shared, &frame, &tx);
                for out in answer {
                    match out {
                        Push::Frame(frame) => {
                            if socket.send(text(&frame)).await.is_err() {
                                return;
                            }
                        }
                        Push::Close(code) => {
                            let _ = socket.send(WsMessage::Close(Some(CloseFrame { code, reason: "".into() }))).await;
                            return;
                        }
                    }
                }
                shared.changed.notify_waiters();
            }
        }
    }
}

/// The socket went away: it no longer takes dispatches.
fn forget(shared: &Shared, tx: &mpsc::UnboundedSender<Push>) {
    let mut inner = shared.lock();
    if inner.socket.as_ref().is_some_and(|s| s.same_channel(tx)) {
        inner.socket = None;
    }
    drop(inner);
    shared.changed.notify_waiters();
}

/// What the fake answers a client's frame with.
fn take(shared: &Shared, frame: &Value, tx: &mpsc::UnboundedSender<Push>) -> Vec<Push> {
    let mut inner = shared.lock();
    match frame["op"].as_u64() {
        Some(1) => {
            inner.heartbeats += 1;
            vec![Push::Frame(json!({"op": 11}))]
        }
        Some(2) => {
            if !is_token(&frame["d"]["token"]) {
                inner.refused_identifies += 1;
                return vec![Push::Close(4004)];
            }
            inner.identifies += 1;
            // A new session: what the last one had is gone.
            inner.dispatched.clear();
            inner.seq += 1;
            let addr = *shared.addr.lock().unwrap_or_else(PoisonError::into_inner);
            let resume = addr
                .map(|a| format!("ws://{a}/gateway"))
                .unwrap_or_default();
            let ready = json!({"op": 0, "s": inner.seq, "t": "READY", "d": {
                "v": 10, "session_id": SESSION, "resume_gateway_url": resume,
                "user": {"id": BOT_ID.to_string(), "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true},
                "guilds": [], "application": {"id": BOT_ID.to_string(), "flags": 0},
            }});
            inner.socket = Some(tx.clone());
            vec![Push::Frame(ready)]
        }
        Some(6) => {
            let d = &frame["d"];
            if !is_token(&d["token"]) || d["session_id"].as_str() != Some(SESSION) {
                return vec![Push::Frame(json!({"op": 9, "d": false}))];
            }
            inner.resumes += 1;
            let after = d["seq"].as_u64().unwrap_or_default();
            let mut out: Vec<Push> = inner
                .dispatched
                .iter()
                .filter(|f| f["s"].as_u64().is_some_and(|s| s > after))
                .cloned()
                .map(Push::Frame)
                .collect();
            inner.seq += 1;
            out.push(Push::Frame(
                json!({"op": 0, "s": inner.seq, "t": "RESUMED", "d": {}}),
            ));
            inner.socket = Some(tx.clone());
            out
        }
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> WsMessage {
    WsMessage::Text(value.to_string().into())
}

/// Whether an IDENTIFY's or RESUME's token is the test token (Discord takes it with or
/// without the `Bot ` prefix REST needs; serenity sends the prefix).
fn is_token(token: &Value) -> bool {
    token
        .as_str()
        .is_some_and(|token| token.strip_prefix("Bot ").unwrap_or(token) == TEST_TOKEN)
}
