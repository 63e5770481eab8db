//! Disk trouble and odd chat ids: a state directory that cannot be written stops the daemon
//! at start; a save that fails later is told to the chat and shown in `/healthz`; a chat id
//! of any length gets a file of its own; no frame ever shows a server path.

use serde_json::json;
use switchboard_testkit::ScriptedLlm;

use crate::util::{self, BINARY, Harness};

#[tokio::test]
async fn an_unwritable_state_dir_stops_the_daemon_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // A test write in the sessions directory fails (there is a directory where it would
    // go), as it does on a read-only or full file system; permissions would not stop root.
    std::fs::create_dir_all(dir.path().join("state/sessions/.write-check")).expect("mkdir");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, util::config_text(&llm.base_url(), dir.path(), "")).expect("write");
    let output = tokio::process::Command::new(BINARY)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("agent.state_dir"), "{stderr}");
    assert!(stderr.contains("is not writable"), "{stderr}");
    assert!(!stderr.contains("serving"), "{stderr}");
}

/// Writes zeros to `path` until the file system is full.
fn fill(path: &std::path::Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    while file.write_all(&block).is_ok() {}
}

#[tokio::test]
async fn a_full_disk_is_told_to_the_chat_shown_in_healthz_and_loses_no_later_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("mkdir");
    let config = dir.path().join("config.toml");
    // `exec` off: root of this user namespace has no unprivileged user to run commands as.
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        util::Extra {
            tables: "[tools.exec]\nenabled = false",
            ..util::Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");
    // The daemon runs in a mount namespace of its own, its state directory on a tiny
    // tmpfs: a real file system that really fills up.
    let mount = format!(
        "mount -t tmpfs -o size=256k,mode=0700 switchboard-test \"{}\"",
        state.display()
    );
    let (mut child, addr) = util::spawn_daemon_with(&config, &["unshare", "-Urm"], &mount).await;
    // The daemon's view of its state directory.
    let pid = child.id().expect("running");
    let seen = std::path::PathBuf::from(format!("/proc/{pid}/root"))
        .join(state.strip_prefix("/").expect("absolute"));
    let file = seen.join("sessions/websocket_c.jsonl");

    let mut client = util::WsClient::connect(addr).await;
    assert_eq!(client.say("c", "first").await.reply(), "echo: first");

    fill(&seen.join("filler"));
    // Larger than a page: a small record could still fit in the file's last page, as on
    // any file system; this one is written in part, then fails.
    let long = format!("remember this {}", "x".repeat(8000));
    let turn = client.say("c", &long).await;
    assert_eq!(
        turn.reply(),
        format!("echo: {long}"),
        "the reply still comes"
    );
    let notices = turn.of_type("notice");
    assert_eq!(notices.len(), 1, "told once per turn: {:?}", turn.frames);
    let notice = notices[0]["text"].as_str().expect("text");
    assert!(
        notice.starts_with("This conversation could not be saved: No space left on device"),
        "{notice}"
    );
    for frame in &turn.frames {
        assert!(
            !frame.to_string().contains(&*dir.path().to_string_lossy()),
            "a frame shows a server path: {frame}"
        );
    }
    let response = crate::chat::http_get(addr, "/healthz").await;
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    let health = util::health(addr).await;
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["checks"]["store"]["state"], "degraded", "{health}");

    // Room again: saving resumes, health recovers, and the file holds whole records only
    // (nothing of the failed turn was left for the next record to be glued onto).
    std::fs::remove_file(seen.join("filler")).expect("remove filler");
    let turn = client.say("c", "and this").await;
    assert!(turn.of_type("notice").is_empty(), "{:?}", turn.frames);
    assert_eq!(util::health(addr).await["checks"]["store"]["state"], "ok");
    let records = util::read_session_file(&file);
    let contents: Vec<&str> = records
        .iter()
        .filter_map(|r| r["content"].as_str())
        .collect();
    assert_eq!(
        contents,
        ["first", "echo: first", "and this", "echo: and this"]
    );

    util::signal(&child, "-TERM");
    let status = tokio::time::timeout(util::PATIENCE, child.wait())
        .await
        .expect("exits in time")
        .expect("wait");
    assert!(status.success());
}

#[tokio::test]
async fn a_long_chat_id_of_multibyte_characters_works_and_is_read_back() {
    let mut h = Harness::start("").await;
    // 126 bytes: its percent-encoded file name alone would pass 255 bytes.
    let chat = "€".repeat(42);
    let turn = h.client.say(&chat, "the code word is heron").await;
    assert!(turn.error().is_none(), "{:?}", turn.frames);
    assert_eq!(turn.reply(), "echo: the code word is heron");

    let names: Vec<String> = std::fs::read_dir(h.dir.path().join("state/sessions"))
        .expect("dir")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".jsonl"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].len() <= 200, "{}", names[0]);

    drop(h.client);
    assert!(h.daemon.shutdown().await);
    let daemon = util::start(&h.llm, h.dir.path(), "").await;
    let mut client = util::WsClient::connect(daemon.addr()).await;
    client.say(&chat, "what was the code word?").await;
    let conversation = util::conversation(h.llm.requests().last().expect("request"));
    assert_eq!(conversation[0]["content"], "the code word is heron");
    daemon.shutdown().await;
}

#[tokio::test]
async fn chat_ids_past_the_protocol_bound_are_refused() {
    let mut h = Harness::start("").await;
    let long = "x".repeat(129);
    h.client
        .send_json(json!({"type": "message", "chat_id": long, "content": "hi"}))
        .await;
    let error = h.client.next_frame().await;
    assert_eq!(error["type"], "error", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 to 128 bytes")),
        "{error}"
    );
    assert!(h.llm.requests().is_empty());
    h.daemon.shutdown().await;
}
