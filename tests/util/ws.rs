//! A WebSocket client of the daemon for the tests: it connects as a user's client does,
//! reads frames with a deadline, and gathers a chat's turn up to its `done` while keeping
//! other chats' frames for later.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::PATIENCE;

/// A WebSocket client of the daemon.
pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Frames read while waiting for another chat's turn, kept for later readers.
    pending: std::collections::VecDeque<Value>,
    /// The connection's `ready` frame.
    pub ready: Value,
}

/// What [`WsClient::read`] read.
#[derive(Debug)]
pub enum Read {
    /// A text frame.
    Frame(Value),
    /// Nothing within the wait.
    Nothing,
    /// The socket closed.
    Closed,
}

/// The frames of one turn, up to and including its `done`.
#[derive(Debug)]
pub struct TurnFrames {
    pub frames: Vec<Value>,
}

impl TurnFrames {
    /// The `content` of the turn's `message` frame.
    pub fn reply(&self) -> &str {
        self.of_type("message")
            .last()
            .and_then(|f| f["content"].as_str())
            .unwrap_or_else(|| panic!("no message frame in {:?}", self.frames))
    }

    /// The streamed text, concatenated.
    pub fn streamed(&self) -> String {
        self.of_type("delta")
            .iter()
            .filter_map(|f| f["text"].as_str())
            .collect()
    }

    /// The `message` of the turn's `error` frame, if any.
    pub fn error(&self) -> Option<&str> {
        self.of_type("error")
            .first()
            .and_then(|f| f["message"].as_str())
    }

    /// The texts of the turn's `status` frames.
    pub fn statuses(&self) -> Vec<String> {
        self.of_type("status")
            .iter()
            .filter_map(|f| f["text"].as_str().map(str::to_owned))
            .collect()
    }

    /// The frames of one type.
    pub fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.frames.iter().filter(|f| f["type"] == kind).collect()
    }
}

impl WsClient {
    /// Connects to `/ws` without credentials and waits for `ready`.
    pub async fn connect(addr: std::net::SocketAddr) -> Self {
        let request = format!("ws://{addr}/ws")
            .into_client_request()
            .expect("request");
        Self::connect_request(request)
            .await
            .expect("WebSocket connects")
    }

    /// Connects with a prepared request; the error is the handshake's.
    pub async fn connect_request(
        request: tokio_tungstenite::tungstenite::handshake::client::Request,
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        let mut client = Self {
            socket,
            pending: Default::default(),
            ready: Value::Null,
        };
        let ready = client.next_frame().await;
        assert_eq!(ready["type"], "ready", "first frame must be ready: {ready}");
        client.ready = ready;
        Ok(client)
    }

    /// Connects to `/ws` without credentials, `None` when the server does not answer with
    /// `ready` (it went away meanwhile) — for clients that expect servers to die.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub async fn try_connect(addr: std::net::SocketAddr) -> Option<Self> {
        let request = format!("ws://{addr}/ws").into_client_request().ok()?;
        let (socket, _) = tokio_tungstenite::connect_async(request).await.ok()?;
        let mut client = Self {
            socket,
            pending: Default::default(),
            ready: Value::Null,
        };
        match client.read(PATIENCE).await {
            Read::Frame(ready) if ready["type"] == "ready" => {
                client.ready = ready;
                Some(client)
            }
            _ => None,
        }
    }

    /// Sends a raw text frame, `false` when the socket is gone.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub async fn try_send_json(&mut self, value: &Value) -> bool {
        self.socket
            .send(Message::text(value.to_string()))
            .await
            .is_ok()
    }

    /// Sends a raw text frame.
    pub async fn send_text(&mut self, text: &str) {
        self.socket.send(Message::text(text)).await.expect("send");
    }

    /// Sends a JSON frame.
    pub async fn send_json(&mut self, value: Value) {
        self.send_text(&value.to_string()).await;
    }

    /// Sends a chat message.
    pub async fn send(&mut self, chat_id: &str, content: &str) {
        self.send_json(json!({"type": "message", "chat_id": chat_id, "content": content}))
            .await;
    }

    /// The next text frame as JSON; fails the test after [`PATIENCE`] or on close.
    pub async fn next_frame(&mut self) -> Value {
        self.try_next_frame(PATIENCE)
            .await
            .unwrap_or_else(|| panic!("no frame within {PATIENCE:?}"))
    }

    /// The next text frame, or `None` if the socket closed or nothing came in `wait`.
    pub async fn try_next_frame(&mut self, wait: Duration) -> Option<Value> {
        match self.read(wait).await {
            Read::Frame(frame) => Some(frame),
            Read::Nothing | Read::Closed => None,
        }
    }

    /// The next text frame within `wait`, telling a quiet socket from a closed one.
    pub async fn read(&mut self, wait: Duration) -> Read {
        if let Some(frame) = self.pending.pop_front() {
            return Read::Frame(frame);
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let Ok(message) = tokio::time::timeout_at(deadline, self.socket.next()).await else {
                return Read::Nothing;
            };
            match message {
                Some(Ok(Message::Text(text))) => {
                    return Read::Frame(
                        serde_json::from_str(text.as_str()).expect("frames are JSON"),
                    );
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => return Read::Closed,
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Reads frames of `chat_id` until its `done`; other chats' frames are kept for later.
    pub async fn turn(&mut self, chat_id: &str) -> TurnFrames {
        let mut frames = Vec::new();
        let mut queued: Vec<Value> = self.pending.drain(..).collect();
        queued.reverse();
        let mut others = std::collections::VecDeque::new();
        loop {
            let frame = match queued.pop() {
                Some(frame) => frame,
                None => {
                    let frame = self.try_next_frame(PATIENCE).await;
                    frame.unwrap_or_else(|| panic!("no frame within {PATIENCE:?}"))
                }
            };
            if frame["chat_id"] != chat_id {
                others.push_back(frame);
                continue;
            }
            let done = frame["type"] == "done";
            frames.push(frame);
            if done {
                queued.reverse();
                others.extend(queued);
                self.pending = others;
                return TurnFrames { frames };
            }
        }
    }

    /// Sends `/stop` to a chat whose turn runs, and reads the turn it stopped, then the
    /// `/stop`'s own answer (what it dropped, if anything, and its `done`).
    pub async fn stop(&mut self, chat_id: &str) -> (TurnFrames, TurnFrames) {
        self.send(chat_id, "/stop").await;
        let stopped = self.turn(chat_id).await;
        let answer = self.turn(chat_id).await;
        assert_eq!(
            answer.of_type("done")[0]["end"],
            "not_a_turn",
            "the /stop's own done: {:?}",
            answer.frames
        );
        (stopped, answer)
    }

    /// Sends a message and reads its turn.
    pub async fn say(&mut self, chat_id: &str, content: &str) -> TurnFrames {
        self.send(chat_id, content).await;
        self.turn(chat_id).await
    }

    /// Reads frames until one of `kind` arrives.
    pub async fn wait_for(&mut self, kind: &str) -> Value {
        loop {
            let frame = self.next_frame().await;
            if frame["type"] == kind {
                return frame;
            }
        }
    }
}
