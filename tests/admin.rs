//! The control panel (`/admin`): refused without its own token (the chat's does not open
//! it), the config shown with its secrets masked, sessions listed, read and reset, a reload
//! asked from the panel, and — in Chromium — a Telegram stranger approved with the button and
//! then answered.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::app;
use switchboard_testkit::{FakeTelegram, ScriptedLlm};

use crate::browser::Browser;
use crate::telegram::{chat, table};
use crate::util::{self, Extra, PATIENCE, WsClient};

const ADMIN: &str = "admin-token-0123456789abcdef";
const CHAT: &str = "chat-token-0123456789abcdef";

/// A request to the daemon with `token` as bearer; the status code and the JSON body.
async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let auth = token.map_or(String::new(), |token| {
        format!("Authorization: Bearer {token}\r\n")
    });
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = util::raw_http(addr, &request, PATIENCE).await;
    let status = answer
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    (
        status,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())),
    )
}

/// A bodyless request with the panel's token.
async fn panel(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, Value) {
    call(addr, method, path, Some(ADMIN), "").await
}

#[tokio::test]
async fn the_panel_asks_for_its_own_token_and_masks_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            llm: "api_key = \"sk-written-in-the-file\"",
            http: &format!("admin_token = \"{ADMIN}\""),
            ..Extra::default()
        },
    )
    .replace(
        "auth = \"none\"",
        &format!("auth = \"token\"\ntoken = \"{CHAT}\""),
    );
    let daemon = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("daemon");
    let addr = daemon.addr();

    for path in [
        "/admin/api/overview",
        "/admin/api/sessions",
        "/admin/api/pairing",
        "/admin/api/config",
    ] {
        assert_eq!(
            call(addr, "GET", path, None, "").await.0,
            401,
            "{path} without a token"
        );
        assert_eq!(
            call(addr, "GET", path, Some(CHAT), "").await.0,
            401,
            "{path} with the chat's token"
        );
        assert_eq!(
            panel(addr, "GET", path).await.0,
            200,
            "{path} with the panel's"
        );
    }
    assert_eq!(
        call(
            addr,
            "POST",
            "/admin/api/pairing/NOPE-NOPE/approve",
            Some(CHAT),
            ""
        )
        .await
        .0,
        401
    );
    // The token only in the Authorization header: not as the WebSocket's `bearer`
    // subprotocol, not in the query.
    let by_subprotocol = util::raw_http(
        addr,
        &format!(
            "GET /admin/api/overview HTTP/1.1\r\nHost: {addr}\r\n\
             Sec-WebSocket-Protocol: bearer, {ADMIN}\r\nConnection: close\r\n\r\n"
        ),
        PATIENCE,
    )
    .await;
    assert!(
        by_subprotocol.starts_with("HTTP/1.1 401"),
        "{by_subprotocol}"
    );
    let by_query = format!("/admin/api/overview?token={ADMIN}");
    assert_eq!(call(addr, "GET", &by_query, None, "").await.0, 401);
    let (status, error) = panel(addr, "GET", "/admin/api/nothing-here").await;
    assert_eq!(status, 404);
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("/admin/api/nothing-here"))
    );
    // The page itself holds nothing and asks for the token.
    let page = util::raw_http(
        addr,
        &format!("GET /admin HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        PATIENCE,
    )
    .await;
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("admin_token"),
        "{page}"
    );

    let (_, config) = panel(addr, "GET", "/admin/api/config").await;
    let shown = config["text"].as_str().expect("text");
    for secret in ["sk-written-in-the-file", ADMIN, CHAT] {
        assert!(!shown.contains(secret), "a secret shows: {shown}");
    }
    assert!(shown.contains("model = \"scripted\""), "{shown}");
    let (_, overview) = panel(addr, "GET", "/admin/api/overview").await;
    assert_eq!(
        overview["health"]["channels"]["websocket"]["state"], "running",
        "{overview}"
    );
    assert!(
        overview["tools"]
            .as_array()
            .is_some_and(|tools| tools.contains(&json!("echo")))
    );
    assert_eq!(overview["agents"][0]["model"], "scripted", "{overview}");
    daemon.shutdown().await;

    // The panel's token may not be the chat's.
    let same = text.replace(ADMIN, CHAT);
    let err = switchboard::config::Config::parse(&same, &dir.path().join("config.toml"))
        .expect("parses")
        .admin_access()
        .expect_err("refused");
    assert_eq!(err.key, "http.admin_token");
    assert!(err.to_string().contains("must not be the chat's"), "{err}");
}

#[tokio::test]
async fn sessions_are_listed_read_and_reset_and_a_reload_is_asked_from_the_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            http: &format!("admin_token = \"{ADMIN}\""),
            ..Extra::default()
        },
    );
    let path = dir.path().join("config.toml");
    std::fs::write(&path, &text).expect("config file");
    let mut daemon = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("daemon");
    let addr = daemon.addr();
    let mut client = WsClient::connect(addr).await;
    client.say("c", "remember me").await;
    // The page names its conversation; the panel lists the chat by that name.
    client.send_json(json!({"type": "conversations"})).await;
    client.wait_for("conversations").await;
    client
        .send_json(json!({"type": "conversation", "chat_id": "c", "title": "Taxes"}))
        .await;
    client.wait_for("conversations").await;

    let (status, listed) = panel(addr, "GET", "/admin/api/sessions").await;
    assert_eq!(status, 200, "{listed}");
    let session = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["key"] == "websocket_c")
        .unwrap_or_else(|| panic!("the chat's session: {listed}"))
        .clone();
    assert_eq!(session["messages"], 2);
    assert_eq!(session["agent"], "default");
    assert_eq!(session["title"], "Taxes", "{session}");
    let (_, transcript) = panel(
        addr,
        "GET",
        "/admin/api/transcript?agent=default&key=websocket_c",
    )
    .await;
    assert_eq!(
        transcript["messages"][0]["content"], "remember me",
        "{transcript}"
    );

    let (status, _) = call(
        addr,
        "POST",
        "/admin/api/reset",
        Some(ADMIN),
        r#"{"agent":"default","key":"websocket_c"}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, error) = call(
        addr,
        "POST",
        "/admin/api/reset",
        Some(ADMIN),
        r#"{"agent":"default","key":"websocket_nobody"}"#,
    )
    .await;
    assert_eq!(status, 404, "a session nobody had: {error}");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (_, transcript) = panel(
            addr,
            "GET",
            "/admin/api/transcript?agent=default&key=websocket_c",
        )
        .await;
        if transcript["messages"] == json!([]) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not reset: {transcript}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // "Reload config": the daemon's loop serves it; a broken file is refused, named.
    std::fs::write(&path, format!("{text}\n[nonsense]\n")).expect("broken config");
    let mut requests = daemon.reload_requests().expect("the panel's reloads");
    let (answer, ()) = tokio::join!(panel(addr, "POST", "/admin/api/reload"), async {
        let reply = requests.recv().await.expect("a reload asked");
        let reloaded = daemon.reload(&path).await;
        let _ = reply.send(reloaded);
    });
    assert_eq!(answer.0, 200, "{:?}", answer.1);
    assert_eq!(answer.1["applied"], false, "{:?}", answer.1);
    assert!(
        answer.1["error"]
            .as_str()
            .is_some_and(|e| e.contains("nonsense")),
        "{:?}",
        answer.1
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn the_operator_approves_a_telegram_stranger_in_the_panel() {
    let Some(browser) = Browser::launch("admin::pairing").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake Telegram");
    let tables = table(&fake, "stream = false");
    let http = format!("admin_token = \"{ADMIN}\"");
    let daemon = util::start_configured(
        &llm,
        dir.path(),
        Extra {
            tables: &tables,
            http: &http,
            ..Extra::default()
        },
        Vec::new(),
    )
    .await;
    let stranger = 77;
    let first = fake.private_text(stranger, "hello?");
    fake.wait_until(PATIENCE, "the pairing code", |f| {
        f.messages_to(chat(stranger))
            .iter()
            .any(|m| m.reply_to == Some(first))
    })
    .await;

    let page = browser
        .open(&format!("http://{}/admin", daemon.addr()))
        .await;
    page.wait_until("!document.getElementById('auth').hidden", "the token form")
        .await;
    page.submit("#token", "not-the-admin-token-at-all").await;
    page.wait_until(
        "document.getElementById('auth-label').textContent.includes('refused')",
        "a wrong token refused",
    )
    .await;
    page.submit("#token", ADMIN).await;
    page.wait_until(
        "document.getElementById('auth').hidden && document.querySelector('#overview .card')",
        "the overview",
    )
    .await;
    page.screenshot("admin-overview").await;

    page.click("#tabs [data-tab=pairing]").await;
    page.wait_until(
        "document.querySelector('#pairing button.primary')",
        "the stranger's request",
    )
    .await;
    assert!(
        page.eval::<String>("document.getElementById('pairing').innerText")
            .await
            .contains("77")
    );
    page.screenshot("admin-pairing").await;
    page.click("#pairing button.primary").await;
    page.wait_until(
        "document.getElementById('pairing').innerText.includes('Approved telegram:77')",
        "approved",
    )
    .await;

    let second = fake.private_text(stranger, "may I talk now?");
    assert_eq!(
        answers(&fake, stranger, second).await,
        ["echo: may I talk now?"]
    );

    // Revoked from the panel (asked twice): their next message gets a code again.
    page.click("#tabs [data-tab=pairing]").await;
    page.wait_until(
        "[...document.querySelectorAll('#pairing button.danger')].some(b => b.textContent === 'Revoke')",
        "the approved sender's Revoke",
    )
    .await;
    // Both clicks on the one button (a refresh of the tab may draw new ones meanwhile).
    let revoke = "(() => { const b = [...document.querySelectorAll('#pairing button.danger')].find(b => b.textContent.startsWith('Revoke')); b.click(); b.click(); return true; })()";
    let _: bool = page.eval(revoke).await;
    page.wait_until(
        "document.getElementById('pairing').innerText.includes('Revoked telegram:77')",
        "revoked",
    )
    .await;
    let third = fake.private_text(stranger, "still there?");
    let answer = answers(&fake, stranger, third).await;
    assert!(
        answer.iter().all(|text| !text.starts_with("echo")),
        "a pairing code, not an answer: {answer:?}"
    );
    browser.close().await;
    daemon.shutdown().await;
}

/// What `user` was sent in reply to their message `id`, once something was.
async fn answers(fake: &FakeTelegram, user: u64, id: i64) -> Vec<String> {
    fake.wait_until(PATIENCE, "an answer", |f| {
        f.messages_to(chat(user))
            .iter()
            .any(|m| m.reply_to == Some(id))
    })
    .await;
    fake.messages_to(chat(user))
        .into_iter()
        .filter(|m| m.reply_to == Some(id))
        .map(|m| m.visible)
        .collect()
}

#[tokio::test]
async fn jobs_are_paused_resumed_and_run_from_the_panel_and_costs_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let http = format!("admin_token = \"{ADMIN}\"");
    let tables = "[[scheduler.jobs]]\nname = \"build\"\nchat = \"websocket:c\"\n\
                  message = \"Check the build.\"\nevery = \"1h\"\n\n\
                  [llm.prices.\"scripted\"]\ninput_per_mtok = 1000000\noutput_per_mtok = 0\n";
    let daemon = util::start_configured(
        &llm,
        dir.path(),
        Extra {
            http: &http,
            tables,
            ..Extra::default()
        },
        Vec::new(),
    )
    .await;
    let addr = daemon.addr();
    let mut client = WsClient::connect(addr).await;
    client
        .send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;

    let (status, listed) = panel(addr, "GET", "/admin/api/jobs").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["enabled"], true);
    let job = &listed["jobs"][0]["job"];
    assert_eq!(job["name"], "build", "{listed}");
    let id = job["id"].as_str().expect("id").to_owned();

    let (_, paused) = panel(addr, "POST", &format!("/admin/api/jobs/{id}/pause")).await;
    assert_eq!(paused["job"]["enabled"], false, "{paused}");
    let (_, resumed) = panel(addr, "POST", &format!("/admin/api/jobs/{id}/resume")).await;
    assert_eq!(resumed["job"]["enabled"], true, "{resumed}");
    let (status, _) = panel(addr, "POST", &format!("/admin/api/jobs/{id}/run")).await;
    assert_eq!(status, 200);
    // The run is a turn in its chat, seen where the chat's person would see it.
    let turn = client.turn("c").await;
    assert!(
        turn.reply().ends_with("Check the build."),
        "{}",
        turn.reply()
    );
    // Marked as the job's, not the person's: the page shows it as scheduled.
    assert_eq!(
        turn.of_type("started")[0]["scheduled"],
        true,
        "{:?}",
        turn.frames
    );
    let deadline = std::time::Instant::now() + PATIENCE;
    let run = loop {
        let (_, runs) = panel(addr, "GET", &format!("/admin/api/jobs/{id}/runs")).await;
        if runs["runs"][0]["outcome"] == "answered" {
            break runs["runs"][0].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no answered run: {runs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // As a person reads it: times in the jobs' zone to the second, and how long it took.
    let started = run["started"].as_str().unwrap_or_default();
    assert!(!started.is_empty() && !started.contains('.'), "{run}");
    assert!(
        run["took"]
            .as_str()
            .is_some_and(|took| took.ends_with(" s")),
        "{run}"
    );
    let (_, listed) = panel(addr, "GET", "/admin/api/jobs").await;
    let reading = &listed["jobs"][0]["reading"];
    assert_eq!(reading["schedule"], "every 1h", "{listed}");
    assert!(
        reading["next"]
            .as_str()
            .is_some_and(|next| next.starts_with("next ")),
        "{listed}"
    );
    assert_eq!(reading["last"], "answered", "{listed}");
    let (status, _) = panel(addr, "POST", "/admin/api/jobs/nope/run").await;
    assert_eq!(status, 404);

    // What it cost: the day's total and the chat's line, as `switchboard usage` has them.
    let (status, usage) = panel(addr, "GET", "/admin/api/usage?days=3").await;
    assert_eq!(status, 200, "{usage}");
    assert!(
        usage["days"][0]["spent"]["usd"]
            .as_f64()
            .is_some_and(|usd| usd > 0.0),
        "{usage}"
    );
    assert_eq!(
        usage["report"]["lines"][0]["session"], "websocket_c",
        "{usage}"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn what_was_said_is_searched_from_the_sessions_tab() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let http = format!("admin_token = \"{ADMIN}\"");
    let extra = Extra {
        http: &http,
        tables: "[memory]\nenabled = true\n",
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let addr = daemon.addr();
    let mut client = WsClient::connect(addr).await;
    client.say("c", "the locker code is 4711").await;

    // The API: the chat's message and its echo, with where, when and who; a bad query named.
    let deadline = std::time::Instant::now() + PATIENCE;
    let hits = loop {
        let (status, body) = panel(addr, "GET", "/admin/api/search?q=locker").await;
        assert_eq!(status, 200, "{body}");
        let hits = body["hits"].as_array().cloned().unwrap_or_default();
        if hits.len() == 2 || std::time::Instant::now() > deadline {
            break hits;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert!(
        hits.iter()
            .all(|h| h["agent"] == "default" && h["place"] == "websocket_c")
    );
    assert!(
        hits.iter()
            .any(|h| h["who"] == "user" && h["snippet"] == "the **locker** code is 4711")
    );
    assert!(
        hits[0]["at_ms"]
            .as_i64()
            .is_some_and(|at| at > 1_700_000_000_000)
    );
    let (status, _) = call(addr, "GET", "/admin/api/search?q=locker", Some(CHAT), "").await;
    assert_eq!(status, 401, "the chat's token does not search");

    // In Chromium: the Sessions tab's box, its table, and a hit opened.
    if let Some(browser) = Browser::launch("admin::search").await {
        let page = browser.open(&format!("http://{addr}/admin")).await;
        page.wait_until("!document.getElementById('auth').hidden", "the token form")
            .await;
        page.submit("#token", ADMIN).await;
        page.wait_until("document.getElementById('auth').hidden", "signed in")
            .await;
        page.click("#tabs [data-tab=sessions]").await;
        page.wait_until("document.getElementById('memory-query')", "the search box")
            .await;
        page.submit("#memory-query", "4711").await;
        page.wait_until(
            "document.querySelectorAll('#memory-found tr').length === 3",
            "a header and two hits",
        )
        .await;
        let marked: Vec<String> = page
            .eval("[...document.querySelectorAll('#memory-found mark')].map(m => m.textContent)")
            .await;
        assert_eq!(marked, ["4711", "4711"]);
        page.click("#memory-found tr:nth-child(2) button").await;
        page.wait_until(
            "document.getElementById('viewer').open && document.getElementById('viewer-body').textContent.includes('the locker code is 4711')",
            "the hit's conversation",
        )
        .await;
        browser.close().await;
    }
    daemon.shutdown().await;
}
