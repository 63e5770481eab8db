use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard::app;
use switchboard_testkit::{Reply, ScriptedLlm};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::util::{self, Harness, WsClient};

const TOKEN: &str = "e2e-token-0123456789abcdef";

async fn start_with_token(llm: &ScriptedLlm, dir: &std::path::Path) -> app::Running {
    let text = util::config_text(&llm.base_url(), dir, "").replace(
        "auth = \"none\"",
        &format!("auth = \"token\"\ntoken = \"{TOKEN}\""),
    );
    app::start(util::config(&text, dir), util::test_tools())
        .await
        .expect("daemon")
}

#[tokio::test]
async fn unauthenticated_websockets_are_refused_and_tokens_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = start_with_token(&llm, dir.path()).await;
    let url = format!("ws://{}/ws", daemon.addr());

    let refused = WsClient::connect_request(url.as_str().into_client_request().expect("req")).await;
    let status = match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status(),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("connected without a token"),
    };
    assert_eq!(status, 401);

    let wrong = format!("{url}?token=not-the-token");
    assert!(
        WsClient::connect_request(wrong.into_client_request().expect("req"))
            .await
            .is_err()
    );

    let mut header = url.as_str().into_client_request().expect("req");
    let bearer = HeaderValue::from_str(&format!("Bearer {TOKEN}")).expect("header");
    header.headers_mut().insert("authorization", bearer);
    let mut client = WsClient::connect_request(header)
        .await
        .expect("bearer header accepted");
    assert_eq!(client.say("c", "hi").await.reply(), "echo: hi");

    let query = format!("{url}?token={TOKEN}");
    WsClient::connect_request(query.into_client_request().expect("req"))
        .await
        .expect("query token");

    let mut protocol = url.as_str().into_client_request().expect("req");
    let offered = HeaderValue::from_str(&format!("bearer, {TOKEN}")).expect("header");
    protocol
        .headers_mut()
        .insert("sec-websocket-protocol", offered);
    WsClient::connect_request(protocol)
        .await
        .expect("subprotocol token");
    daemon.shutdown().await;
}

/// A page can learn why its socket was refused: a plain GET of `/ws` answers 401 for a
/// missing or wrong token and something else (not an upgrade: no socket) for the right one.
#[tokio::test]
async fn a_plain_get_of_ws_tells_a_wrong_token_from_a_right_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = start_with_token(&llm, dir.path()).await;
    let get = |authorization: Option<&str>| {
        let addr = daemon.addr();
        let header = authorization
            .map(|value| format!("Authorization: {value}\r\n"))
            .unwrap_or_default();
        async move {
            util::raw_http(
                addr,
                &format!("GET /ws HTTP/1.1\r\nHost: {addr}\r\n{header}Connection: close\r\n\r\n"),
                util::PATIENCE,
            )
            .await
        }
    };
    assert!(get(None).await.starts_with("HTTP/1.1 401"));
    assert!(
        get(Some("Bearer wrong-token-0123456789"))
            .await
            .starts_with("HTTP/1.1 401")
    );
    let right = get(Some(&format!("Bearer {TOKEN}"))).await;
    assert!(
        !right.starts_with("HTTP/1.1 401") && !right.starts_with("HTTP/1.1 101"),
        "{right}"
    );
    daemon.shutdown().await;
}

/// `history` answers with the chat's conversation as its people saw it — what was said, the
/// tool calls with the start of their results, and the replies — so a page shows it again
/// after a reload; another chat's is its own.
#[tokio::test]
async fn history_shows_a_chat_again_after_a_reconnect() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tool("echo", json!({"text": "x"})));
    h.llm.push(Reply::text("used the tool"));
    h.client.say("c", "first").await;
    h.client.say("c", "second").await;

    let mut again = WsClient::connect(h.daemon.addr()).await;
    again
        .send_json(json!({"type": "history", "chat_id": "c"}))
        .await;
    let history = again.wait_for("history").await;
    assert_eq!(
        history["messages"],
        json!([
            {"role": "user", "content": "first"},
            {"role": "tool", "content": "", "tool": {
                "id": history["messages"][1]["tool"]["id"], "name": "echo",
                "arguments": r#"{"text":"x"}"#, "result": "x", "ok": true}},
            {"role": "assistant", "content": "used the tool"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "echo: second"},
        ])
    );
    again
        .send_json(json!({"type": "history", "chat_id": "other"}))
        .await;
    assert_eq!(again.wait_for("history").await["messages"], json!([]));
    h.daemon.shutdown().await;
}

/// A message with an id is confirmed with a `handled` frame once it is answered; sent again
/// (a page that lost its socket before it saw the confirmation), it is confirmed again and
/// not answered twice.
#[tokio::test]
async fn a_message_with_an_id_is_confirmed_and_a_resend_is_not_answered_again() {
    let mut h = Harness::start("").await;
    let frame = json!({"type": "message", "chat_id": "c", "id": "m-1", "content": "once"});
    h.client.send_json(frame.clone()).await;
    assert_eq!(h.client.turn("c").await.reply(), "echo: once");
    let handled = h.client.wait_for("handled").await;
    assert_eq!(
        handled,
        json!({"type": "handled", "chat_id": "c", "id": "m-1", "fate": "handled"})
    );

    let mut again = WsClient::connect(h.daemon.addr()).await;
    again.send_json(frame).await;
    let handled = again.wait_for("handled").await;
    assert_eq!(handled["fate"], "handled");
    again.send("c", "next").await;
    let turn = again.turn("c").await;
    assert_eq!(
        turn.reply(),
        "echo: next",
        "the resend was not answered again"
    );
    assert_eq!(h.llm.requests().len(), 2);
    h.daemon.shutdown().await;
}

/// The page's list of conversations is kept by the server: what one socket adds, renames or
/// deletes reaches every socket watching the list and is still there after a restart; a
/// deleted conversation's session starts anew.
#[tokio::test]
async fn conversations_are_listed_renamed_and_deleted_for_every_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let daemon = util::start(&llm, dir.path(), "").await;
    let mut phone = WsClient::connect(daemon.addr()).await;
    let mut laptop = WsClient::connect(daemon.addr()).await;
    for client in [&mut phone, &mut laptop] {
        client.send_json(json!({"type": "conversations"})).await;
        assert_eq!(
            client.wait_for("conversations").await["conversations"],
            json!([])
        );
    }

    phone
        .send_json(json!({"type": "conversation", "chat_id": "web-1", "title": "Taxes"}))
        .await;
    phone.say("web-1", "hello").await;
    phone
        .send_json(json!({"type": "conversation", "chat_id": "web-2"}))
        .await;
    let titles = |frame: &Value| -> Vec<(String, String)> {
        frame["conversations"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|c| {
                (
                    c["chat_id"].as_str().unwrap_or_default().to_owned(),
                    c["title"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let mut seen = laptop.wait_for("conversations").await;
    while titles(&seen).len() < 2 {
        seen = laptop.wait_for("conversations").await;
    }
    assert_eq!(
        titles(&seen),
        [
            ("web-2".to_owned(), "New chat".to_owned()),
            ("web-1".to_owned(), "Taxes".to_owned())
        ]
    );

    laptop
        .send_json(json!({"type": "conversation", "chat_id": "web-2", "title": "Trip"}))
        .await;
    laptop
        .send_json(json!({"type": "delete_conversation", "chat_id": "web-1"}))
        .await;
    loop {
        let frame = phone.wait_for("conversations").await;
        if titles(&frame) == [("web-2".to_owned(), "Trip".to_owned())] {
            break;
        }
    }
    // The deleted conversation's history is gone.
    let mut check = WsClient::connect(daemon.addr()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        check
            .send_json(json!({"type": "history", "chat_id": "web-1"}))
            .await;
        if check.wait_for("history").await["messages"] == json!([]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session was not started anew"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.shutdown().await;

    let daemon = util::start(&llm, dir.path(), "").await;
    let mut again = WsClient::connect(daemon.addr()).await;
    again.send_json(json!({"type": "conversations"})).await;
    assert_eq!(
        titles(&again.wait_for("conversations").await),
        [("web-2".to_owned(), "Trip".to_owned())]
    );
    daemon.shutdown().await;
}

/// A file uploaded (`POST /upload`) and named in a message reaches the agent as an
/// attachment in the workspace; one over the cap is refused with the cap named; a message
/// naming a file that is not this chat's upload gets an error and is not answered.
#[tokio::test]
async fn uploads_are_capped_and_reach_the_agent_as_attachments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text(&llm.base_url(), dir.path(), "").replace(
        "[channels.websocket]",
        "[channels.websocket]
max_attachment_bytes = 1000",
    );
    let daemon = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("daemon");
    let addr = daemon.addr();
    let mut client = WsClient::connect(addr).await;
    let ready = client.ready.clone();
    assert_eq!(ready["max_attachment_bytes"], 1000);
    assert_eq!(ready["max_frame_bytes"], 65536);

    let post = |body: &str, name: &str| {
        format!(
            "POST /upload?chat_id=c&name={name} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let big = util::raw_http(
        addr,
        &post(&"x".repeat(1001), "big.txt"),
        Duration::from_secs(10),
    )
    .await;
    assert!(big.starts_with("HTTP/1.1 413"), "{big}");
    assert!(
        big.contains("channels.websocket.max_attachment_bytes"),
        "{big}"
    );

    let answer = util::raw_http(
        addr,
        &post("shopping: milk", "list.txt"),
        Duration::from_secs(10),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body: Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).expect("body")).expect("json");
    let file = body["file"].as_str().expect("file").to_owned();
    assert_eq!(body["bytes"], 14);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("workspace/media/websocket").join(&file))
            .expect("saved in the workspace"),
        "shopping: milk"
    );

    client
        .send_json(
            json!({"type": "message", "chat_id": "c", "content": "read this",
            "attachments": [{"file": file, "name": "list.txt"}]}),
        )
        .await;
    client.turn("c").await;
    let request = llm.requests().pop().expect("request");
    let said = util::conversation(&request)
        .into_iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("the message");
    let said = said["content"].to_string();
    assert!(
        said.contains("list.txt") && said.contains("media/websocket/"),
        "{said}"
    );

    // An image is known by its bytes, whatever its name, and shown to the model.
    let answer = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let png: &[u8] = b"\x89PNG\r\n\x1a\n0000";
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST /upload?chat_id=c&name=not-a-picture.txt HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            png.len()
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        stream.write_all(png).await.expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        answer
    };
    let body: Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).expect("body")).expect("json");
    client
        .send_json(
            json!({"type": "message", "chat_id": "c", "content": "what is this?",
            "attachments": [{"file": body["file"], "name": "not-a-picture.txt"}]}),
        )
        .await;
    client.turn("c").await;
    let request = llm.requests().pop().expect("request");
    let last = util::conversation(&request).pop().expect("the message");
    assert!(
        last["content"].to_string().contains("image_url"),
        "the image is shown as one: {last}"
    );

    for bad in [
        "../../etc/passwd",
        "other-1-list.txt",
        &file.replacen('c', "d", 1),
    ] {
        client
            .send_json(json!({"type": "message", "chat_id": "c", "content": "x",
                "attachments": [{"file": bad}]}))
            .await;
        let error = client.wait_for("error").await;
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("attach the file again")),
            "{bad}: {error}"
        );
    }
    daemon.shutdown().await;
}

#[tokio::test]
async fn malformed_frames_get_an_error_frame_and_the_connection_stays_up() {
    let mut h = Harness::start("").await;

    let cases = [
        ("{not json".to_owned(), "invalid frame"),
        (
            json!({"type": "message", "content": "no chat"}).to_string(),
            "chat_id",
        ),
        (
            json!({"type": "launch", "chat_id": "c"}).to_string(),
            "unknown variant `launch`",
        ),
        (
            json!({"type": "message", "chat_id": "c", "content": " "}).to_string(),
            "`content` is empty",
        ),
    ];
    for (frame, expected) in cases {
        h.client.send_text(&frame).await;
        let error = h.client.next_frame().await;
        assert_eq!(error["type"], "error", "{error}");
        assert!(
            error.get("chat_id").is_none(),
            "a frame error has no chat_id: {error}"
        );
        let message = error["message"].as_str().expect("message");
        assert!(
            message.contains(expected),
            "{message} should mention {expected}"
        );
    }
    assert_eq!(
        h.client.say("c", "still here").await.reply(),
        "echo: still here"
    );
    assert!(
        h.llm.requests().len() == 1,
        "malformed frames never reach the model"
    );
    h.daemon.shutdown().await;
}

/// A turn that failed leaves its request answered by a line saying so: the next request
/// never carries two user messages in a row, and `/status` counts them right.
#[tokio::test]
async fn a_failed_turn_leaves_no_dangling_user_message() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::Error {
        status: 400,
        retry_after: None,
    });
    assert!(h.client.say("c", "first").await.error().is_some());
    let status = h.client.say("c", "/status").await;
    assert!(
        status.reply().contains("2 messages in history"),
        "{}",
        status.reply()
    );
    assert_eq!(h.client.say("c", "second").await.reply(), "echo: second");
    let roles: Vec<Value> = util::conversation(&h.llm.requests()[1])
        .iter()
        .map(|m| m["role"].clone())
        .collect();
    assert_eq!(roles, [json!("user"), json!("assistant"), json!("user")]);
    // The session's usage is summed over its turns (the scripted server: 10 in, 5 out).
    let status = h.client.say("c", "/status").await;
    assert!(
        status.reply().contains("4 messages in history")
            && status.reply().contains("10 tokens in, 5 out"),
        "{}",
        status.reply()
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_429_then_200_still_yields_a_reply() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::Error {
        status: 429,
        retry_after: Some(1),
    });
    h.llm.push(Reply::text("patience pays"));
    let started = Instant::now();
    let turn = h.client.say("c", "hello?").await;
    assert_eq!(turn.reply(), "patience pays");
    assert!(turn.error().is_none());
    assert_eq!(h.llm.requests().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_missing_api_key_gets_an_error_naming_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text(&llm.base_url(), dir.path(), "").replace(
        "model = \"scripted\"",
        "model = \"scripted\"\napi_key = \"${SWITCHBOARD_E2E_SURELY_UNSET_KEY}\"",
    );
    let daemon = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("daemon");
    let mut client = WsClient::connect(daemon.addr()).await;
    let turn = client.say("c", "hi").await;
    let error = turn.error().expect("an error frame");
    assert!(
        error.contains("SWITCHBOARD_E2E_SURELY_UNSET_KEY"),
        "{error}"
    );
    assert!(llm.requests().is_empty());
    daemon.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_llm_gets_an_error_naming_the_base_url_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base_url = format!("http://{}/v1", closed.local_addr().expect("addr"));
    drop(closed);
    let text =
        util::config_text(&base_url, dir.path(), "").replace("max_retries = 3", "max_retries = 2");
    let daemon = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("daemon");
    let mut client = WsClient::connect(daemon.addr()).await;
    let turn = client.say("c", "anyone there?").await;
    let error = turn.error().expect("an error frame");
    assert!(error.contains("llm.base_url"), "{error}");
    // Why, in plain words, not the HTTP client's layers.
    assert!(error.contains("the connection was refused"), "{error}");
    assert!(!error.contains("client error"), "{error}");
    assert!(
        error.contains("gave up after 3 attempts"),
        "one attempt and two retries: {error}"
    );
    daemon.shutdown().await;
}

/// A message with an id sent while the daemon stops (its grace, a turn still running) is
/// told `unprocessed` — the page keeps it and sends it again — and gets no error frame.
#[tokio::test]
async fn a_message_sent_during_the_shutdown_grace_is_unprocessed_not_an_error() {
    let Harness {
        dir: _dir,
        llm,
        daemon,
        mut client,
    } = Harness::start("").await;
    llm.push(Reply::text("finished in the grace").delayed(Duration::from_millis(1500)));
    client.send("c", "slow").await;
    llm.wait_for_requests(1, util::PATIENCE).await;
    let addr = daemon.addr();
    let stopping = tokio::spawn(daemon.shutdown());
    let deadline = tokio::time::Instant::now() + util::PATIENCE;
    while util::health(addr).await["status"] != "stopping" {
        assert!(tokio::time::Instant::now() < deadline, "not stopping");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .send_json(json!({"type": "message", "chat_id": "d", "id": "m-9", "content": "late"}))
        .await;
    let mut seen = Vec::new();
    let handled = loop {
        let frame = client.next_frame().await;
        seen.push(frame.clone());
        if frame["type"] == "handled" && frame["id"] == "m-9" {
            break frame;
        }
    };
    assert_eq!(handled["fate"], "unprocessed", "{seen:?}");
    // Until the running turn ends in the grace: no error for the kept message.
    while !(seen
        .last()
        .is_some_and(|f| f["type"] == "done" && f["chat_id"] == "c"))
    {
        seen.push(client.next_frame().await);
    }
    assert!(
        seen.iter()
            .all(|frame| !(frame["type"] == "error" && frame["chat_id"] == "d")),
        "{seen:?}"
    );
    assert!(stopping.await.expect("stops"), "a clean stop");
}

/// A socket that comes back to a chat gets the frames it missed while none was connected
/// (a page reloaded mid-answer), in order, before anything newer.
#[tokio::test]
async fn frames_sent_while_no_socket_is_on_a_chat_reach_the_next_one() {
    let mut h = Harness::start("stream = false").await;
    h.llm
        .push(Reply::text("answered while you were away").delayed(Duration::from_millis(300)));
    let mut away = WsClient::connect(h.daemon.addr()).await;
    away.send("c", "are you there?").await;
    drop(away);
    // The answer is written (and sent to nobody) while no socket is on the chat.
    let file = util::session_file(h.dir.path(), "c");
    let deadline = Instant::now() + util::PATIENCE;
    while !std::fs::read_to_string(&file)
        .unwrap_or_default()
        .contains("answered while you were away")
    {
        assert!(Instant::now() < deadline, "the turn never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut back = WsClient::connect(h.daemon.addr()).await;
    back.send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;
    let turn = back.turn("c").await;
    assert_eq!(turn.reply(), "answered while you were away");
    assert_eq!(turn.of_type("done").len(), 1);
    // The main client's chat is unaffected.
    assert_eq!(h.client.say("d", "hi").await.reply(), "echo: hi");
    h.daemon.shutdown().await;
}
