use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Harness, WsClient};

#[tokio::test]
async fn a_message_is_answered_and_deltas_concatenate_to_the_reply() {
    let mut h = Harness::start("").await;
    // Words 20 ms apart, as a real model streams them.
    h.llm.push(Reply::paced(
        "Hello from the scripted model, streamed word by word.",
        std::time::Duration::from_millis(20),
    ));
    let turn = h.client.say("c1", "hi there").await;

    assert_eq!(
        turn.reply(),
        "Hello from the scripted model, streamed word by word."
    );
    assert!(
        turn.of_type("delta").len() > 3,
        "the reply should stream: {:?}",
        turn.frames
    );
    assert_eq!(turn.streamed(), turn.reply());
    let request = &h.llm.requests()[0];
    assert_eq!(request["stream"], true);
    let last = util::conversation(request).pop().expect("a message");
    assert_eq!(last["content"], "hi there");
    assert!(h.daemon.shutdown().await);
}

#[tokio::test]
async fn one_socket_carries_many_chats_and_each_gets_its_own_reply() {
    let mut h = Harness::start("").await;

    h.client.send("alpha", "first chat").await;
    h.client.send("beta", "second chat").await;
    let (mut alpha, mut beta) = (None, None);
    while alpha.is_none() || beta.is_none() {
        let frame = h.client.next_frame().await;
        if frame["type"] == "message" {
            let content = frame["content"].as_str().expect("content").to_owned();
            match frame["chat_id"].as_str() {
                Some("alpha") => alpha = Some(content),
                Some("beta") => beta = Some(content),
                other => panic!("unexpected chat {other:?}"),
            }
        }
    }
    assert_eq!(alpha.as_deref(), Some("echo: first chat"));
    assert_eq!(beta.as_deref(), Some("echo: second chat"));
    assert!(util::session_file(h.dir.path(), "alpha").exists());
    assert!(util::session_file(h.dir.path(), "beta").exists());
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn every_socket_on_a_chat_receives_its_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = util::start(&llm, dir.path(), "").await;
    let mut writer = WsClient::connect(daemon.addr()).await;
    let mut watcher = WsClient::connect(daemon.addr()).await;
    watcher
        .send_json(serde_json::json!({"type": "subscribe", "chat_id": "shared"}))
        .await;
    // A ping round trip proves the subscription was processed before we send.
    watcher.send_json(serde_json::json!({"type": "ping"})).await;
    watcher.wait_for("pong").await;

    let turn = writer.say("shared", "hello both").await;
    assert_eq!(turn.reply(), "echo: hello both");
    let seen = watcher.turn("shared").await;
    assert_eq!(seen.reply(), "echo: hello both");
    daemon.shutdown().await;
}

#[tokio::test]
async fn help_and_new_are_commands_not_prompts() {
    let mut h = Harness::start("").await;

    assert!(h.client.say("c", "/help").await.reply().contains("/stop"));
    h.client.say("c", "remember this").await;
    assert_eq!(
        h.client.say("c", "/new").await.reply(),
        "Started a new session."
    );
    h.client.say("c", "fresh start").await;

    let requests = h.llm.requests();
    assert_eq!(requests.len(), 2, "commands never reach the model");
    let after_new = util::conversation(&requests[1]);
    assert_eq!(
        after_new.len(),
        1,
        "history is empty after /new: {after_new:?}"
    );
    assert!(
        h.dir
            .path()
            .join("state/sessions/archive")
            .read_dir()
            .expect("archive")
            .count()
            == 1
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn the_web_chat_page_and_health_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = util::start(&llm, dir.path(), "").await;
    let page = http_get(daemon.addr(), "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "no inline script may run: {page}"
    );
    let script = http_get(daemon.addr(), "/assets/app.js").await;
    assert!(script.starts_with("HTTP/1.1 200"), "{script}");
    assert!(
        script.contains("new WebSocket"),
        "the page speaks the protocol"
    );
    for asset in [
        "/assets/app.css",
        "/assets/vendor/marked.umd.js",
        "/assets/vendor/purify.min.js",
    ] {
        assert!(
            http_get(daemon.addr(), asset)
                .await
                .starts_with("HTTP/1.1 200"),
            "{asset}"
        );
    }
    assert!(
        http_get(daemon.addr(), "/assets/../Cargo.toml")
            .await
            .starts_with("HTTP/1.1 404")
    );
    let health = http_get(daemon.addr(), "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let body: serde_json::Value =
        serde_json::from_str(health.split("\r\n\r\n").nth(1).expect("body")).expect("JSON");
    assert_eq!(body["status"], "ok");
    assert_eq!(body["channels"]["websocket"]["state"], "running", "{body}");
    daemon.shutdown().await;
}

/// A plain HTTP/1.1 GET over a socket; returns the whole response as text.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    tokio::time::timeout(util::PATIENCE, stream.read_to_string(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    response
}
