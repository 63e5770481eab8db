//! A client that stops reading is cut off so that it cannot hold the chat up — and it is
//! told why: after what was already on its way, a close frame (1008) saying it was too slow.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use switchboard_core::{Channel, ChannelName, ChatHub, ChatId, OutboundKind, OutboundMessage};
use switchboard_websocket::{WebSocketChannel, WsConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_client_too_slow_to_read_gets_a_close_frame_saying_so() {
    let channel = WebSocketChannel::new(
        WsConfig {
            send_queue: 8,
            ..WsConfig::default()
        },
        Arc::new(ChatHub::new(16, CancellationToken::new())),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = channel.router();
    tokio::spawn(async move { axum::serve(listener, router).await });

    // A client with a small receive buffer, so the kernel holds little for it.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let stream = socket.connect(addr).await.expect("connect");
    let (mut client, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream)
        .await
        .expect("handshake");
    client
        .send(Message::text(r#"{"type":"subscribe","chat_id":"c"}"#))
        .await
        .expect("subscribe");
    // A ping's pong comes after the subscription was handled.
    client
        .send(Message::text(r#"{"type":"ping"}"#))
        .await
        .expect("ping");
    loop {
        let frame = client.next().await.expect("open").expect("frame");
        if frame.to_text().is_ok_and(|text| text.contains("\"pong\"")) {
            break;
        }
    }

    // Far more than the socket, the kernel and the queue hold, while the client reads
    // nothing.
    let big = "x".repeat(64 * 1024);
    for _ in 0..400 {
        let post = OutboundMessage {
            channel: ChannelName::from("websocket"),
            chat_id: ChatId::from("c"),
            reply_to: None,
            kind: OutboundKind::Post(big.clone()),
            cursor: None,
            turn: None,
        };
        channel.send(post).await.expect("send never fails");
    }

    // It reads again: what was on its way, then the close frame.
    let read = async {
        let mut posts = 0;
        while let Some(frame) = client.next().await {
            match frame {
                Ok(Message::Close(Some(close))) => return (posts, Some(close)),
                Ok(Message::Text(_)) => posts += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        (posts, None)
    };
    let (posts, close) = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the server closes the socket");
    assert!(posts < 400, "some posts were dropped: {posts}");
    let close = close.expect("a close frame, not a dropped connection");
    assert_eq!(close.code, CloseCode::Policy);
    assert!(close.reason.contains("too slow"), "{}", close.reason);
}
