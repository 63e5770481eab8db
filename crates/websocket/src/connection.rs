//! One WebSocket connection: a send half draining the socket's queue and a receive half
//! reading client frames, raced in one task. When either ends, the other is dropped and
//! the socket leaves every chat it was subscribed to. Only the send half writes: when the
//! receive half must close the socket (a frame over the limit), it queues an error frame
//! and asks the send half, which sends it and then the close frame.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use futures::SinkExt;
use futures::stream::{SplitSink, SplitStream, StreamExt};
use switchboard_core::{
    Ack, ChannelName, ChatId, CoreError, Fate, InboundMessage, MessageId, SenderId,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::config::CHANNEL_NAME;
use crate::history::said_of;
use crate::protocol::{AttachmentRef, ClientFrame, MAX_SEARCH_HITS, SearchHit, ServerFrame};
use crate::subscribers::{Frame, Shared, Subscriber};
use crate::upload;

pub(crate) async fn serve(socket: WebSocket, shared: Arc<Shared>) {
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    shared.open.fetch_add(1, Ordering::Relaxed);
    let (sink, stream) = socket.split();
    let (tx, rx) = mpsc::channel::<Frame>(shared.config.send_queue.max(8));
    let kill = CancellationToken::new();
    let subscriber = Subscriber {
        conn,
        tx: tx.clone(),
        kill: kill.clone(),
    };
    let chats = Arc::new(Mutex::new(HashSet::new()));
    let ready = ServerFrame::Ready {
        version: env!("CARGO_PKG_VERSION"),
        max_frame_bytes: shared.config.max_frame_bytes,
        max_attachment_bytes: if shared.config.workspace.is_some() {
            shared.config.max_attachment_bytes
        } else {
            0
        },
    };
    let _ = tx.try_send(Box::new(ready.to_json().into()));
    tracing::debug!(conn, "WebSocket connected");

    let (close_tx, close_rx) = oneshot::channel();
    let send = std::pin::pin!(send(sink, rx, kill, shared.closing.clone(), close_rx));
    let receive = std::pin::pin!(receive(
        stream,
        shared.clone(),
        subscriber,
        chats.clone(),
        close_tx
    ));
    // The two halves run side by side in this one task (a spawned task per half would
    // cost memory on every idle socket); when one ends, the other is dropped.
    tokio::select! {
        () = send => {}
        () = receive => {}
    }

    let chats = std::mem::take(&mut *chats.lock().unwrap_or_else(PoisonError::into_inner));
    for chat in &chats {
        shared.unsubscribe(conn, chat);
    }
    shared.conversations.unwatch(conn);
    shared.open.fetch_sub(1, Ordering::Relaxed);
    tracing::debug!(conn, "WebSocket disconnected");
}

/// Writes queued frames to the socket until the queue closes, the socket is killed for
/// being too slow, the receive half asks to close it, or the daemon stops; the last two
/// send what is queued first, then a close frame. A socket killed for being too slow gets
/// a close frame (1008, saying why) after what was already written, with what was still
/// queued dropped.
async fn send(
    mut sink: SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<Frame>,
    kill: CancellationToken,
    closing: CancellationToken,
    mut close_request: oneshot::Receiver<CloseFrame>,
) {
    let mut close = CloseFrame {
        code: close_code::AWAY,
        reason: "switchboard is stopping".into(),
    };
    let mut goodbye_within = GOODBYE;
    loop {
        tokio::select! {
            biased;
            // Too slow: drop what is queued, and say why (if it ever reads again).
            () = kill.cancelled() => {
                close = too_slow();
                goodbye_within = SLOW_GOODBYE;
                break;
            }
            frame = rx.recv() => {
                let Some(frame) = frame else { break };
                // Everything already queued goes out in one write.
                let batch = Box::pin(async {
                    sink.feed(Message::Text(*frame)).await?;
                    while let Ok(more) = rx.try_recv() {
                        sink.feed(Message::Text(*more)).await?;
                    }
                    sink.flush().await
                });
                tokio::select! {
                    biased;
                    // A frame may be half written: the close frame goes after it.
                    () = kill.cancelled() => {
                        close = too_slow();
                        goodbye_within = SLOW_GOODBYE;
                        break;
                    }
                    sent = batch => if sent.is_err() { return },
                }
            }
            // The receive half ends the connection (after what is queued, as above).
            request = &mut close_request => match request {
                Ok(frame) => {
                    close = frame;
                    while let Ok(frame) = rx.try_recv() {
                        if sink.feed(Message::Text(*frame)).await.is_err() {
                            return;
                        }
                    }
                    break;
                }
                // The receive half ended without asking: the select in `serve` ends too.
                Err(_) => std::future::pending::<()>().await,
            },
            // The daemon is stopping and everything queued was sent: say goodbye.
            () = closing.cancelled() => break,
        }
    }
    let goodbye = sink.send(Message::Close(Some(close)));
    let _ = tokio::time::timeout(goodbye_within, goodbye).await;
}

/// How long the close frame may take to write.
const GOODBYE: std::time::Duration = std::time::Duration::from_secs(1);
/// ... to a client that fell behind: what is already on its way must drain first.
const SLOW_GOODBYE: std::time::Duration = std::time::Duration::from_secs(5);

/// The close frame of a client that did not read its frames (1008, policy violation).
fn too_slow() -> CloseFrame {
    CloseFrame {
        code: close_code::POLICY,
        reason: "too slow: frames for this client were not read in time and were dropped".into(),
    }
}

/// Reads client frames and acts on them until the socket closes.
async fn receive(
    mut stream: SplitStream<WebSocket>,
    shared: Arc<Shared>,
    subscriber: Subscriber,
    chats: Arc<Mutex<HashSet<ChatId>>>,
    close: oneshot::Sender<CloseFrame>,
) {
    while let Some(message) = stream.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Binary(_)) => {
                let problem = "binary frames are not supported; send JSON text frames";
                reply(&subscriber, ServerFrame::frame_error(problem)).await;
                continue;
            }
            Ok(Message::Close(_)) => break,
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Err(err) if is_too_large(&err) => {
                // Refused from its header on, before its payload was read.
                let limit = shared.config.max_frame_bytes;
                tracing::info!(
                    conn = subscriber.conn,
                    limit,
                    "closing a WebSocket that sent a frame over the limit"
                );
                let problem = format!(
                    "frame too large: the limit is {limit} bytes (channels.websocket.max_frame_bytes); closing the connection"
                );
                reply(&subscriber, ServerFrame::frame_error(problem)).await;
                let frame = CloseFrame {
                    code: close_code::SIZE,
                    reason: "frame too large".into(),
                };
                if close.send(frame).is_ok() {
                    // The send half closes the socket, which ends this task.
                    std::future::pending::<()>().await;
                }
                break;
            }
            Err(err) => {
                tracing::debug!(conn = subscriber.conn, error = %err, "WebSocket read failed");
                break;
            }
        };
        // Boxed: the state of handling a frame exists only while one is handled, so an
        // idle socket's task stays small.
        Box::pin(handle(text.as_str(), &shared, &subscriber, &chats)).await;
    }
}

/// Whether a read failed because a frame or message passed the configured size.
fn is_too_large(err: &axum::Error) -> bool {
    use std::error::Error;
    matches!(
        err.source()
            .and_then(|source| source.downcast_ref::<tungstenite::Error>()),
        Some(tungstenite::Error::Capacity(_))
    )
}

/// Acts on one client text frame.
async fn handle(
    text: &str,
    shared: &Shared,
    subscriber: &Subscriber,
    chats: &Mutex<HashSet<ChatId>>,
) {
    let frame = match ClientFrame::parse(text, shared.config.max_frame_bytes) {
        Ok(frame) => frame,
        Err(problem) => return reply(subscriber, ServerFrame::frame_error(problem)).await,
    };
    match frame {
        ClientFrame::Message {
            chat_id,
            content,
            id,
            attachments,
        } => {
            let said = Said {
                chat_id,
                content,
                id,
                attachments,
            };
            message(said, shared, subscriber, chats).await;
        }
        ClientFrame::Subscribe { chat_id, after } => {
            shared.subscribe(chats, subscriber, ChatId::from(chat_id), after);
        }
        ClientFrame::Unsubscribe { chat_id } => {
            let chat = ChatId::from(chat_id);
            chats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&chat);
            shared.unsubscribe(subscriber.conn, &chat);
        }
        ClientFrame::Ping => reply(subscriber, ServerFrame::Pong).await,
        ClientFrame::History { chat_id } => reply(subscriber, history(shared, chat_id).await).await,
        ClientFrame::Search { query } => reply(subscriber, search(shared, query).await).await,
        ClientFrame::Conversations => {
            let conversations = shared.conversations.watch(subscriber).await;
            reply(subscriber, ServerFrame::Conversations { conversations }).await;
        }
        ClientFrame::Conversation { chat_id, title } => {
            if let Err(problem) = shared.conversations.touch(&chat_id, title.as_deref()).await {
                reply(subscriber, ServerFrame::frame_error(problem)).await;
            }
        }
        ClientFrame::DeleteConversation { chat_id } => {
            if let Err(problem) = shared.conversations.remove(&chat_id).await {
                return reply(subscriber, ServerFrame::frame_error(problem)).await;
            }
            // The conversation's session starts anew, as `/new` does: what it said is
            // archived, not shown again.
            let new = InboundMessage::text(
                CHANNEL_NAME.into(),
                ChatId::from(chat_id),
                SenderId::from(format!("ws:{}", subscriber.conn)),
                "/new",
            );
            let _ = shared.hub.publish_inbound(new).await;
        }
    }
}

/// A person's message, as the client sent it.
struct Said {
    chat_id: String,
    content: String,
    id: Option<String>,
    attachments: Vec<AttachmentRef>,
}

/// A person's message: its chat subscribed to, its files found among the uploads, and it
/// taken in (its `handled` frame sent once the bus has it).
async fn message(
    said: Said,
    shared: &Shared,
    subscriber: &Subscriber,
    chats: &Mutex<HashSet<ChatId>>,
) {
    let Said {
        chat_id,
        content,
        id,
        attachments,
    } = said;
    let chat = ChatId::from(chat_id.as_str());
    shared.subscribe(chats, subscriber, chat.clone(), None);
    let mut files = Vec::with_capacity(attachments.len());
    for reference in &attachments {
        match upload::resolve(shared.config.workspace.as_deref(), &chat_id, reference).await {
            Ok(file) => files.push(file),
            Err(problem) => {
                let frame = ServerFrame::Error {
                    chat_id: Some(chat_id),
                    message: problem,
                };
                return reply(subscriber, frame).await;
            }
        }
    }
    let mut inbound = InboundMessage::text(
        CHANNEL_NAME.into(),
        chat,
        SenderId::from(format!("ws:{}", subscriber.conn)),
        content,
    );
    inbound.attachments = files;
    if let Some(id) = id {
        inbound.ack = Some(handled_frame(subscriber, &chat_id, &id));
        inbound.id = Some(MessageId::from(id));
    }
    let acked = inbound.ack.is_some();
    if let Err(err @ CoreError::ShuttingDown) = shared.hub.publish_inbound(inbound).await
        && !acked
    {
        // (A message with an id is told `unprocessed` by its dropped ack: the page keeps it
        // and sends it again, so no error.)
        let frame = ServerFrame::Error {
            chat_id: Some(chat_id),
            message: err.to_string(),
        };
        reply(subscriber, frame).await;
    }
}

/// A chat's conversation so far and what its running turn is doing, for a page shown again.
async fn history(shared: &Shared, chat_id: String) -> ServerFrame {
    let chat = ChatId::from(chat_id.as_str());
    let messages = match &shared.history {
        Some(source) => {
            let channel = ChannelName::from(CHANNEL_NAME);
            match source.transcript(&channel, &chat).await {
                Ok(messages) => said_of(messages),
                Err(err) => {
                    tracing::warn!(%chat, error = %err, "could not read a chat's history");
                    Vec::new()
                }
            }
        }
        None => Vec::new(),
    };
    let live = shared.live.get(&chat);
    ServerFrame::History {
        chat_id,
        messages,
        running: live.is_some(),
        seq: live.as_ref().map(|live| live.seq),
        text: live
            .as_ref()
            .map(|live| live.text.clone())
            .filter(|text| !text.is_empty()),
        waiting: live.and_then(|live| live.waiting),
    }
}

/// The answer to a `search`: its hits, or an error frame saying why there are none to give.
async fn search(shared: &Shared, query: String) -> ServerFrame {
    let Some(source) = &shared.history else {
        return ServerFrame::frame_error("search is not available here");
    };
    let channel = ChannelName::from(CHANNEL_NAME);
    match source.search(&channel, &query, MAX_SEARCH_HITS).await {
        Ok(found) => ServerFrame::Search {
            query,
            hits: found
                .into_iter()
                .map(|(chat, hit)| SearchHit {
                    chat_id: chat.to_string(),
                    at_ms: hit.at,
                    who: hit.who,
                    snippet: hit.snippet,
                    archived: hit.archived,
                })
                .collect(),
        },
        Err(why) => ServerFrame::frame_error(why),
    }
}

/// Tells this socket what became of its message `id` (a `handled` frame), so a page keeps
/// what it typed until it was taken — and sends it again after a reconnect when it was not.
fn handled_frame(subscriber: &Subscriber, chat_id: &str, id: &str) -> Ack {
    let tx = subscriber.tx.clone();
    let (chat_id, id) = (chat_id.to_owned(), id.to_owned());
    Ack::new(move |fate| {
        let fate = match fate {
            Fate::Handled => "handled",
            Fate::Dropped => "dropped",
            Fate::Unprocessed => "unprocessed",
        };
        let frame = ServerFrame::Handled { chat_id, id, fate };
        let _ = tx.try_send(Box::new(frame.to_json().into()));
    })
}

/// Queues a frame for this socket only.
async fn reply(subscriber: &Subscriber, frame: ServerFrame) {
    let _ = subscriber.tx.send(Box::new(frame.to_json().into())).await;
}
