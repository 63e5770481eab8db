//! Files and voice on the WebSocket channel and in the daemon: a file the agent sends
//! arrives as a `file` frame whose link serves its bytes (and nothing but it, and not after
//! it expired), a file that cannot be shown safely is offered as a download that runs nothing.

use serde_json::json;
use switchboard_testkit::Reply;

use crate::util::{self, Harness};

/// A PNG: its signature, then bytes no other file of the test has.
fn png() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bytes.extend((0..1500u32).map(|n| (n * 11 % 241) as u8));
    bytes
}

/// What `GET path` answered: its status, headers (lowercase names) and body bytes.
pub(crate) struct Fetched {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Fetched {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// `GET path` over a plain socket, the body read whole (binary safe).
pub(crate) async fn fetch(addr: std::net::SocketAddr, path: &str) -> Fetched {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    tokio::time::timeout(util::PATIENCE, stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut body = response[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    if headers
        .iter()
        .any(|(key, value)| key == "transfer-encoding" && value == "chunked")
    {
        body = dechunk(&body);
    }
    Fetched {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&body[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[end + 2 + size + 2..];
    }
}

#[tokio::test]
async fn a_file_the_agent_sends_arrives_as_a_frame_whose_link_serves_its_bytes() {
    let mut t = Harness::start("").await;
    let workspace = t.dir.path().join("workspace");
    std::fs::write(workspace.join("chart.png"), png()).expect("write");
    std::fs::write(
        workspace.join("page.html"),
        "<script>alert(document.cookie)</script>",
    )
    .expect("write");
    t.llm.push(Reply::tools([
        (
            "send_file",
            json!({"path": "chart.png", "caption": "**the** chart"}),
        ),
        ("send_file", json!({"path": "page.html"})),
    ]));
    t.llm.push(Reply::text("Here they are."));
    let turn = t.client.say("c1", "show me").await;
    let files = turn.of_type("file");
    assert_eq!(files.len(), 2, "{:?}", turn.frames);
    let chart = files
        .iter()
        .find(|f| f["name"] == "chart.png")
        .expect("the chart's frame");
    assert_eq!(chart["kind"], "image");
    assert_eq!(chart["mime"], "image/png");
    assert_eq!(chart["bytes"], png().len());
    assert_eq!(chart["caption"], "**the** chart");
    let url = chart["url"].as_str().expect("a url");
    let served = fetch(t.daemon.addr(), url).await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, png(), "the same bytes");
    assert_eq!(served.header("content-type"), Some("image/png"));
    assert_eq!(served.header("content-disposition"), Some("inline"));

    // A page offered as a download, under a policy that runs nothing.
    let page = files
        .iter()
        .find(|f| f["name"] == "page.html")
        .expect("the page's frame");
    assert_eq!(page["kind"], "document");
    let served = fetch(t.daemon.addr(), page["url"].as_str().expect("url")).await;
    assert_eq!(served.status, 200);
    assert!(
        served
            .header("content-disposition")
            .is_some_and(|d| d.starts_with("attachment")),
        "{:?}",
        served.headers
    );
    assert!(
        served
            .header("content-security-policy")
            .is_some_and(|csp| csp.contains("sandbox")),
        "{:?}",
        served.headers
    );

    // A link changed by hand serves nothing.
    let forged = url.replace("type=image%2Fpng", "type=text%2Fhtml");
    assert_ne!(forged, url);
    assert_eq!(fetch(t.daemon.addr(), &forged).await.status, 403);
    let other = url.replacen("chart.png", "chart2.png", 1);
    assert_eq!(fetch(t.daemon.addr(), &other).await.status, 403);
    // The tool told the model it was sent.
    let results = util::tool_results(&t.llm.requests()[1]);
    assert!(
        results[0].starts_with("chart.png (image, 1.5 KB): sent to this chat"),
        "{results:?}"
    );
    t.daemon.shutdown().await;
}

/// `POST /upload` of `bytes` as `name` for `chat`: the saved file's name.
async fn upload(addr: std::net::SocketAddr, chat: &str, name: &str, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /upload?chat_id={chat}&name={name} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: audio/ogg\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(bytes).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let body = response.split("\r\n\r\n").nth(1).expect("a body");
    let answer: serde_json::Value = serde_json::from_str(body).expect("JSON");
    answer["file"].as_str().expect("a file").to_owned()
}

#[tokio::test]
async fn a_voice_note_sent_over_the_socket_is_heard_and_a_failing_server_shows_in_health() {
    let audio = switchboard_testkit::FakeAudio::start()
        .await
        .expect("fake audio");
    audio.push_transcript("call the plumber tomorrow");
    let tables = format!(
        "[transcription]\nenabled = true\nbase_url = \"{}\"\nmax_retries = 2\n",
        audio.base_url()
    );
    let mut t = Harness::with_config(crate::util::Extra {
        tables: &tables,
        ..crate::util::Extra::default()
    })
    .await;
    let addr = t.daemon.addr();
    let note = switchboard_testkit::audio::voice_note(3.0);
    let file = upload(addr, "c1", "voice.ogg", &note).await;
    t.llm.push(Reply::text("Noted."));
    let voice = json!({"file": file, "name": "voice.ogg", "voice": true, "duration_ms": 3000});
    t.client
        .send_json(
            json!({"type": "message", "chat_id": "c1", "id": "m-1", "content": "",
            "attachments": [voice.clone()]}),
        )
        .await;
    let turn = t.client.turn("c1").await;
    let heard = turn.of_type("transcript");
    assert_eq!(heard.len(), 1, "{:?}", turn.frames);
    assert_eq!(heard[0]["text"], "call the plumber tomorrow");
    assert_eq!(heard[0]["reply_to"], "m-1", "under the voice note it heard");
    assert_eq!(audio.heard()[0].bytes, note);
    let asked = switchboard_testkit::last_user_text(&t.llm.requests()[0]);
    assert!(
        asked.contains("voice note voice.ogg (audio/ogg, 0:03)")
            && asked.contains("transcribed: \"call the plumber tomorrow\""),
        "{asked}"
    );
    assert_eq!(
        crate::util::health(addr).await["status"],
        "ok",
        "a server that answers is healthy"
    );

    // The server fails: the turn runs with the file, the chat is told, and the daemon's
    // health and metrics show it (three failed attempts in a row: degraded). The metrics are
    // the test process's (other tests' daemons count too): what moves is compared.
    let counted = |metrics: &str, series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let errors =
        r#"switchboard_audio_errors_total{what="transcription",model="whisper-1",kind="status"}"#;
    let failed = r#"switchboard_transcriptions_total{outcome="failed"}"#;
    let before = crate::chat::http_get(addr, "/metrics").await;
    audio.fail(503, 100);
    let file = upload(addr, "c1", "again.ogg", &note).await;
    t.llm.push(Reply::text("I have the recording."));
    let voice = json!({"file": file, "name": "again.ogg", "voice": true, "duration_ms": 3000});
    t.client
        .send_json(
            json!({"type": "message", "chat_id": "c1", "id": "m-2", "content": "",
            "attachments": [voice]}),
        )
        .await;
    let turn = t.client.turn("c1").await;
    assert_eq!(turn.reply(), "I have the recording.");
    let told = turn.of_type("notice");
    assert!(
        told.iter()
            .any(|n| n["text"]
                .as_str()
                .is_some_and(|text| text.starts_with("Couldn't transcribe again.ogg")
                    && text.contains("503"))),
        "{:?}",
        turn.frames
    );
    let health = crate::util::health(addr).await;
    assert_eq!(health["status"], "degraded", "{health}");
    let problem = health["checks"]["audio"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        problem.starts_with("transcription whisper-1: 3 failed attempts in a row")
            && problem.contains("503"),
        "{health}"
    );
    let after = crate::chat::http_get(addr, "/metrics").await;
    assert!(
        counted(&after, errors) - counted(&before, errors) >= 3.0,
        "{after}"
    );
    assert!(
        counted(&after, failed) - counted(&before, failed) >= 1.0,
        "{after}"
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn doctor_asks_the_audio_servers_whether_they_answer_and_take_their_keys() {
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let up = switchboard_testkit::FakeAudio::start()
        .await
        .expect("fake audio");
    let refusing = switchboard_testkit::FakeAudio::start()
        .await
        .expect("fake audio");
    refusing.fail(401, 100);
    let dir = tempfile::tempdir().expect("tempdir");
    let tables = format!(
        "[transcription]\nenabled = true\nbase_url = \"{}\"\napi_key = \"sk-good\"\n\
         [speech]\nenabled = true\nbase_url = \"{}\"\napi_key = \"sk-wrong\"\n",
        up.base_url(),
        refusing.base_url()
    );
    let text = crate::util::config_text_with(
        &llm.base_url(),
        dir.path(),
        crate::util::Extra {
            tables: &tables,
            ..crate::util::Extra::default()
        },
    );
    let config = crate::util::config(&text, dir.path());
    let lines = switchboard::doctor::report(&config, &[]).await;
    let shown: Vec<String> = lines.iter().map(ToString::to_string).collect();
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("✓ transcription (whisper-1 at http://")
                && l.ends_with("the server answers, and lists the model")),
        "{shown:#?}"
    );
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("✗ speech (gpt-4o-mini-tts at http://")
                && l.contains("refused the API key")
                && l.contains("speech.api_key")),
        "{shown:#?}"
    );
    // No audio was sent to check them.
    assert!(up.heard().is_empty() && up.said().is_empty());
}

#[tokio::test]
async fn an_answer_the_speech_server_cannot_speak_stays_text_with_a_line_saying_why() {
    let audio = switchboard_testkit::FakeAudio::start()
        .await
        .expect("fake audio");
    audio.fail(503, 100);
    let tables = format!(
        "[speech]\nenabled = true\nbase_url = \"{}\"\nreply = \"always\"\nmax_retries = 0\nmax_chars = 40\n",
        audio.base_url()
    );
    let mut t = Harness::with_config(crate::util::Extra {
        tables: &tables,
        ..crate::util::Extra::default()
    })
    .await;
    t.llm.push(Reply::text("Short and sweet."));
    let turn = t.client.say("c1", "hi").await;
    assert_eq!(turn.reply(), "Short and sweet.");
    assert!(turn.of_type("file").is_empty(), "{:?}", turn.frames);
    let notice = turn.of_type("notice");
    assert!(
        notice
            .iter()
            .any(|n| n["text"].as_str().is_some_and(|text| {
                text.starts_with("The spoken answer could not be made") && text.contains("503")
            })),
        "{:?}",
        turn.frames
    );
    // The text comes first, the line after it, then the turn's end.
    let kinds: Vec<&str> = turn
        .frames
        .iter()
        .filter_map(|f| f["type"].as_str())
        .filter(|kind| ["message", "notice", "done"].contains(kind))
        .collect();
    assert_eq!(kinds, ["message", "notice", "done"]);

    // Too long to read aloud: the text only, the cap named, no call.
    let calls = audio.said().len();
    t.llm.push(Reply::text(
        "This answer is much longer than forty characters, so it stays text.",
    ));
    let turn = t.client.say("c1", "tell me more").await;
    assert!(
        turn.of_type("notice").iter().any(|n| n["text"]
            .as_str()
            .is_some_and(|text| text.contains("speech.max_chars"))),
        "{:?}",
        turn.frames
    );
    assert_eq!(audio.said().len(), calls, "no call for a long answer");
    t.daemon.shutdown().await;
}
