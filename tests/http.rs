//! The HTTP listener under abuse: DNS rebinding against a token-less loopback daemon,
//! half-sent headers (slowloris) that would exhaust descriptors, and WebSocket frames larger
//! than the limit, which must be refused while they arrive.

use std::time::{Duration, Instant};

use switchboard_testkit::ScriptedLlm;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::util::{self, Extra, Harness, WsClient};

#[tokio::test]
async fn dns_rebinding_hosts_are_refused_without_auth() {
    let h = Harness::start("").await;
    let addr = h.daemon.addr();
    let port = addr.port();
    let get = |host: String| async move {
        util::raw_http(
            addr,
            &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            util::PATIENCE,
        )
        .await
    };
    let evil = get(format!("evil.example:{port}")).await;
    assert!(evil.starts_with("HTTP/1.1 403"), "{evil}");
    assert!(
        !evil.contains("WebSocket"),
        "the page is not served: {evil}"
    );
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let page = get(host).await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    }

    // A WebSocket from a rebound name, with the Origin a browser there would send.
    let mut request = format!("ws://{addr}/ws")
        .into_client_request()
        .expect("req");
    let headers = request.headers_mut();
    let evil_host = format!("evil.example:{port}");
    headers.insert("host", HeaderValue::from_str(&evil_host).expect("host"));
    let origin = format!("http://{evil_host}");
    headers.insert("origin", HeaderValue::from_str(&origin).expect("origin"));
    match WsClient::connect_request(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403);
        }
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("a rebound host got a WebSocket"),
    }
    assert!(h.llm.requests().is_empty(), "no turn ran");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn half_sent_headers_are_timed_out_and_capped() {
    let mut h = Harness::with_config(Extra {
        http: "header_timeout_secs = 1\nmax_pending_connections = 8",
        ..Extra::default()
    })
    .await;
    let addr = h.daemon.addr();
    // 20 connections that never finish their headers.
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .expect("write");
        slow.push(stream);
    }
    // The connected client goes on: LLM connections and session files still open.
    assert_eq!(
        h.client.say("c", "still here?").await.reply(),
        "echo: still here?"
    );

    // Every one is closed by the server: those over the limit at once (with a 503), the
    // rest when their header time runs out.
    let started = Instant::now();
    let mut refused = 0;
    for stream in &mut slow {
        let mut answer = Vec::new();
        tokio::time::timeout(util::PATIENCE, stream.read_to_end(&mut answer))
            .await
            .expect("the server closes the connection in time")
            .ok();
        if answer.starts_with(b"HTTP/1.1 503") {
            refused += 1;
        }
    }
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(refused >= 12, "{refused} refused with 503");
    let health = util::health(addr).await;
    assert!(
        health["http_refused_connections"].as_u64() >= Some(12),
        "{health}"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn slowloris_cannot_exhaust_descriptors_the_daemon_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let config = dir.path().join("config.toml");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            http: "header_timeout_secs = 30",
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");
    // 256 descriptors in all, as on a box with a low limit; the flood asks for far more.
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], "ulimit -n 256").await;
    let mut client = WsClient::connect(addr).await;

    let mut flood = Vec::new();
    for _ in 0..400 {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            continue;
        };
        let _ = stream
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await;
        flood.push(stream);
    }
    // New chats need a session file and an LLM connection each: the reserve holds them.
    for chat in ["a", "b", "c"] {
        let turn = client.say(chat, "hello under siege").await;
        assert!(turn.error().is_none(), "{:?}", turn.frames);
        assert_eq!(turn.reply(), "echo: hello under siege");
    }
    drop(flood);
    // Once the flood is gone, new clients are served again.
    let deadline = Instant::now() + util::PATIENCE;
    loop {
        let response = util::raw_http(
            addr,
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            util::PATIENCE,
        )
        .await;
        if response.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "healthz never recovered: {response}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    util::signal(&child, "-TERM");
    let status = tokio::time::timeout(util::PATIENCE, child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert!(status.success());
}

/// A WebSocket opened by hand, so a test can send a frame header without its payload.
async fn raw_websocket(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let handshake = format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(handshake.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.expect("handshake");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// Reads one server frame: (opcode, payload).
async fn read_frame(stream: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await.expect("frame head");
    let len = match head[1] & 0x7f {
        126 => {
            let mut ext = [0u8; 2];
            stream.read_exact(&mut ext).await.expect("len");
            u64::from(u16::from_be_bytes(ext))
        }
        127 => {
            let mut ext = [0u8; 8];
            stream.read_exact(&mut ext).await.expect("len");
            u64::from_be_bytes(ext)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).expect("small frame")];
    stream.read_exact(&mut payload).await.expect("payload");
    (head[0] & 0x0f, payload)
}

#[tokio::test]
async fn an_oversized_frame_is_refused_while_it_arrives() {
    let h = Harness::start("").await;
    let mut stream = raw_websocket(h.daemon.addr()).await;
    let (opcode, ready) = read_frame(&mut stream).await;
    assert_eq!(opcode, 1);
    assert!(String::from_utf8_lossy(&ready).contains("ready"));

    // A text frame announcing 16 MiB, of which only the first KiB is ever sent.
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(16u64 * 1024 * 1024).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend(std::iter::repeat_n(b'x' ^ 1, 1024));
    stream.write_all(&frame).await.expect("write");

    let read = async {
        let (opcode, error) = read_frame(&mut stream).await;
        assert_eq!(opcode, 1, "a text frame first");
        let error: serde_json::Value = serde_json::from_slice(&error).expect("JSON");
        assert_eq!(error["type"], "error");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("frame too large") && m.contains("65536")),
            "{error}"
        );
        let (opcode, close) = read_frame(&mut stream).await;
        assert_eq!(opcode, 8, "then a close frame");
        assert_eq!(u16::from_be_bytes([close[0], close[1]]), 1009);
    };
    tokio::time::timeout(util::PATIENCE, read)
        .await
        .expect("refused without waiting for the rest of the frame");
    assert!(h.llm.requests().is_empty());
    h.daemon.shutdown().await;
}

/// A connection from `source` (another loopback address: the whole of 127/8 is this
/// machine) that sends a request line and a Host header, then nothing.
async fn idle_half_request(source: &str, addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{source}:0").parse().expect("address"))
        .expect("bind");
    let mut stream = socket.connect(addr).await.expect("connect");
    let _ = stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await;
    stream
}

/// A daemon whose token-checked socket and listener limits are small enough to fill.
async fn small_listener(llm: &ScriptedLlm, dir: &std::path::Path) -> switchboard::app::Running {
    token_listener(
        llm,
        dir,
        "header_timeout_secs = 30\nmax_pending_connections = 16\n\
         max_pending_per_client = 4\nreserved_connections = 4",
    )
    .await
}

/// A daemon with a token-checked socket and `http` lines in `[http]`.
async fn token_listener(
    llm: &ScriptedLlm,
    dir: &std::path::Path,
    http: &str,
) -> switchboard::app::Running {
    let text = util::config_text_with(
        &llm.base_url(),
        dir,
        Extra {
            http,
            ..Extra::default()
        },
    )
    .replace(
        "auth = \"none\"",
        &format!("auth = \"token\"\ntoken = \"{SMALL_TOKEN}\""),
    );
    switchboard::app::start(util::config(&text, dir), util::test_tools())
        .await
        .expect("daemon")
}

const SMALL_TOKEN: &str = "listener-token-0123456789";

/// A WebSocket client with the token, from 127.0.0.1.
async fn client_with_token(addr: std::net::SocketAddr) -> WsClient {
    let mut request = format!("ws://{addr}/ws")
        .into_client_request()
        .expect("request");
    request.headers_mut().insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {SMALL_TOKEN}")).expect("header"),
    );
    WsClient::connect_request(request)
        .await
        .expect("the client with a token connects")
}

#[tokio::test]
async fn one_address_holding_its_share_leaves_new_clients_and_health_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = small_listener(&llm, dir.path()).await;
    let addr = daemon.addr();
    // One address opens far more half-requests than there are pending slots and holds
    // every one it gets.
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(idle_half_request("127.0.0.2", addr).await);
    }
    let response = crate::chat::http_get(addr, "/healthz").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let page = crate::chat::http_get(addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let mut client = client_with_token(addr).await;
    assert_eq!(client.say("c", "anyone?").await.reply(), "echo: anyone?");
    let health = util::health(addr).await;
    assert!(
        health["http_refused_connections"].as_u64() >= Some(36),
        "all but its share of 4 refused: {health}"
    );
    drop(held);
    daemon.shutdown().await;
}

#[tokio::test]
async fn with_every_pending_slot_taken_health_and_authenticated_clients_still_get_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = small_listener(&llm, dir.path()).await;
    let addr = daemon.addr();
    // Sixteen addresses hold one each: every one of the 16 pending slots, evenly (none holds
    // more than a newcomer would, so none is taken from them).
    let mut held = Vec::new();
    for source in 2..18 {
        held.push(idle_half_request(&format!("127.0.0.{source}"), addr).await);
    }
    // Another gets a reserved slot, but holds it only a second.
    let mut late = idle_half_request("127.0.0.30", addr).await;
    let since = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(util::PATIENCE, late.read_to_end(&mut answer))
        .await
        .expect("a half-request on a reserved slot is closed within its second")
        .ok();
    assert!(
        since.elapsed() >= Duration::from_millis(900) && !answer.starts_with(b"HTTP/1.1 503"),
        "held a reserved slot until its header time ran out, not refused: {:?}",
        String::from_utf8_lossy(&answer)
    );
    // The reserve: health checks and a client with credentials pass, the rest is told to
    // come back.
    for path in ["/healthz", "/readyz"] {
        let response = crate::chat::http_get(addr, path).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
    }
    let page = crate::chat::http_get(addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 503"), "{page}");
    assert!(
        page.contains("Retry-After: 2") || page.contains("retry-after: 2"),
        "{page}"
    );
    let mut client = client_with_token(addr).await;
    assert_eq!(client.say("c", "still?").await.reply(), "echo: still?");
    drop(held);
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_few_addresses_holding_every_slot_cannot_keep_a_new_visitor_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = small_listener(&llm, dir.path()).await;
    let addr = daemon.addr();
    // Four addresses hold their whole share each: all 16 pending slots.
    let mut held = Vec::new();
    for source in 2..6 {
        for _ in 0..4 {
            held.push(idle_half_request(&format!("127.0.0.{source}"), addr).await);
        }
    }
    // A visitor gets the page: a slot is taken from one of them, whose connection closes.
    let page = crate::chat::http_get(addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    // Looked at until one closed (its task runs when the machine lets it), then once more.
    let mut closed = std::collections::BTreeSet::new();
    let deadline = Instant::now() + util::PATIENCE;
    for pass in 0.. {
        for (at, stream) in held.iter_mut().enumerate() {
            let mut byte = [0u8; 1];
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_millis(20), stream.read(&mut byte)).await
            {
                closed.insert(at);
            }
        }
        if (!closed.is_empty() && pass > 0) || Instant::now() > deadline {
            break;
        }
    }
    assert_eq!(closed.len(), 1, "one held connection gave its slot");
    drop(held);
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_thousand_addresses_holding_a_slot_each_leave_health_and_token_clients_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = token_listener(&llm, dir.path(), "header_timeout_secs = 30").await;
    let addr = daemon.addr();
    // 1,000 addresses, one half-sent request each (the defaults: 256 pending slots, 32
    // reserved).
    let mut held = Vec::new();
    for n in 0..1000u32 {
        let source = format!("127.1.{}.{}", n / 250, n % 250 + 1);
        held.push(idle_half_request(&source, addr).await);
    }
    let since = Instant::now();
    // What they cannot stop: health checks and a client with the token — once the 32 that
    // got a reserved slot lost it (a second each, at most; one each).
    let deadline = Instant::now() + util::PATIENCE;
    let healthy = loop {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let _ = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        if answer.starts_with(b"HTTP/1.1 200") {
            break since.elapsed();
        }
        assert!(Instant::now() < deadline, "health never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let response = crate::chat::http_get(addr, "/readyz").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let mut client = client_with_token(addr).await;
    assert_eq!(client.say("c", "still?").await.reply(), "echo: still?");
    // What they can: every pending slot is held evenly, so a new visitor is told to come
    // back (until their header time runs out).
    let page = crate::chat::http_get(addr, "/").await;
    eprintln!(
        "1,000 addresses: health answered after {healthy:?}, a token client within {:?}; a \
         new visitor got {}",
        since.elapsed(),
        page.lines().next().unwrap_or_default()
    );
    assert!(page.starts_with("HTTP/1.1 503"), "{page}");
    let health = util::health(addr).await;
    eprintln!("refused so far: {}", health["http_refused_connections"]);
    drop(held);
    daemon.shutdown().await;
}
