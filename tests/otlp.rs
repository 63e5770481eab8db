//! With the `otlp` feature: the binary sends the agent loop's spans to an OTLP/HTTP
//! receiver — turn → context, llm, tool, verify, nested in one trace, with their sizes.
//! (`cargo test --features otlp --test otlp`; `.ci/run` runs it.)

use std::process::Stdio;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchboard_testkit::otlp::Span;
use switchboard_testkit::{OtlpReceiver, Reply, ScriptedLlm};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

const PATIENCE: Duration = Duration::from_secs(20);

fn parent<'a>(spans: &'a [Span], child: &Span) -> &'a Span {
    spans
        .iter()
        .find(|s| s.span_id == child.parent_span_id)
        .unwrap_or_else(|| panic!("no parent for {child:?}"))
}

#[tokio::test]
async fn spans_of_a_turn_reach_an_otlp_receiver() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::tool("list_dir", json!({"path": "."})));
    llm.push(Reply::text("There is nothing much here."));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[agent]
workspace = "{workspace}"
state_dir = "{state}"
[llm]
base_url = "{llm}"
model = "scripted"
[http]
bind = "127.0.0.1:0"
[channels.websocket]
auth = "none"
[telemetry]
otlp_endpoint = "{traces}"
"#,
            workspace = dir.path().join("workspace").display(),
            state = dir.path().join("state").display(),
            llm = llm.base_url(),
            traces = receiver.traces_url(),
        ),
    )
    .expect("config");

    let mut daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["--log-format", "json", "run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("binary starts");
    let mut log = BufReader::new(daemon.stderr.take().expect("stderr")).lines();
    let addr = tokio::time::timeout(PATIENCE, async {
        while let Ok(Some(line)) = log.next_line().await {
            let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if entry["message"] == "switchboard is serving" {
                return entry["addr"].as_str().unwrap_or_default().to_owned();
            }
        }
        panic!("the daemon exited before serving");
    })
    .await
    .expect("serving in time");
    tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });

    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .expect("connect");
    let message = json!({"type": "message", "chat_id": "c", "content": "what is here?"});
    socket
        .send(Message::text(message.to_string()))
        .await
        .expect("send");
    let reply = tokio::time::timeout(PATIENCE, async {
        while let Some(Ok(frame)) = socket.next().await {
            let Message::Text(text) = frame else { continue };
            let frame: Value = serde_json::from_str(text.as_str()).expect("JSON");
            if frame["type"] == "message" {
                return frame["content"].as_str().unwrap_or_default().to_owned();
            }
        }
        panic!("socket closed");
    })
    .await
    .expect("a reply");
    assert_eq!(reply, "There is nothing much here.");

    // SIGTERM: the exporter flushes on the way out.
    let pid = daemon.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(PATIENCE, daemon.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(exit.success(), "{exit:?}");

    let spans = receiver
        .wait_for(&["turn", "context", "llm", "tool", "verify"], PATIENCE)
        .await;
    let one = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span"))
    };
    let turn = one("turn");
    let tool = one("tool");
    let verify = one("verify");
    assert_eq!(parent(&spans, tool).name, "turn");
    assert_eq!(parent(&spans, one("context")).name, "turn");
    assert_eq!(
        one("context")
            .attributes
            .get("messages")
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(parent(&spans, verify).name, "turn");
    let calls: Vec<&Span> = spans.iter().filter(|s| s.name == "llm").collect();
    assert_eq!(calls.len(), 2, "two LLM calls");
    for call in &calls {
        assert_eq!(parent(&spans, call).span_id, turn.span_id);
        assert_eq!(call.trace_id, turn.trace_id);
    }
    assert_eq!(
        tool.attributes.get("tool").map(String::as_str),
        Some("list_dir")
    );
    assert!(tool.attributes.contains_key("output_bytes"), "{tool:?}");
    assert_eq!(
        verify.attributes.get("attempt").map(String::as_str),
        Some("1")
    );
    assert!(
        calls
            .iter()
            .any(|c| c.attributes.get("iteration").map(String::as_str) == Some("2")),
        "{calls:?}"
    );
}
