//! Telegram, end to end: a person writes where a Telegram user would (the fake Bot API's
//! updates), and the answer is read where they would see it (what the bot sent the fake).

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::telegram::{BOT_USERNAME, TEST_TOKEN};
use switchboard_testkit::{FakeTelegram, Reply, ScriptedLlm};

use crate::util::{self, Extra, PATIENCE, WsClient};

/// A private chat's user (on the allow list) and another.
pub(crate) const ADA: u64 = 42;
pub(crate) const BOB: u64 = 43;

/// `[channels.telegram]` for the fake, with `extra` lines.
pub(crate) fn table(fake: &FakeTelegram, extra: &str) -> String {
    format!(
        r#"[channels.telegram]
enabled = true
token = "{TEST_TOKEN}"
api_url = "{api}"
allow_from = ["{ADA}", "@user{BOB}"]
poll_timeout_secs = 1
watchdog_secs = 10
edit_interval_secs = 0.3
{extra}
"#,
        api = fake.api_url()
    )
}

/// A daemon with Telegram (and the WebSocket channel) against the fakes.
struct Telegram {
    dir: tempfile::TempDir,
    llm: ScriptedLlm,
    fake: FakeTelegram,
    daemon: switchboard::app::Running,
}

impl Telegram {
    async fn start(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let fake = FakeTelegram::start().await.expect("fake Telegram");
        let tables = table(&fake, extra);
        let config = Extra {
            tables: &tables,
            ..Extra::default()
        };
        let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
        Self {
            dir,
            llm,
            fake,
            daemon,
        }
    }

    /// The replies (new messages) in `chat` that answer message `id`.
    fn replies_to(&self, chat: i64, id: i64) -> Vec<String> {
        self.fake
            .messages_to(chat)
            .into_iter()
            .filter(|m| m.reply_to == Some(id))
            .map(|m| m.visible)
            .collect()
    }

    async fn wait_for_reply(&self, chat: i64, id: i64) -> String {
        self.fake
            .wait_until(PATIENCE, "a reply", |f| {
                f.messages_to(chat).iter().any(|m| m.reply_to == Some(id))
            })
            .await;
        self.replies_to(chat, id).remove(0)
    }
}

pub(crate) fn chat(user: u64) -> i64 {
    i64::try_from(user).expect("small")
}

#[tokio::test]
async fn the_offset_moves_past_an_update_once_it_was_handled() {
    let t = Telegram::start("stream = false").await;
    let id = t.fake.private_text(ADA, "hello bot");
    assert_eq!(t.wait_for_reply(chat(ADA), id).await, "echo: hello bot");
    t.fake
        .wait_until(PATIENCE, "the update confirmed", |f| f.unconfirmed() == 0)
        .await;
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn the_bots_command_menu_is_every_chat_command() {
    let t = Telegram::start("stream = false").await;
    let id = t.fake.private_text(ADA, "/help");
    let help = t.wait_for_reply(chat(ADA), id).await;
    let menu: Vec<(String, String)> = t
        .fake
        .commands()
        .iter()
        .map(|c| {
            let field = |name: &str| c[name].as_str().unwrap_or_default().to_owned();
            (field("command"), field("description"))
        })
        .collect();
    let table: Vec<(String, String)> = switchboard_core::COMMANDS
        .iter()
        .map(|c| (c.name.to_owned(), c.summary.to_owned()))
        .collect();
    assert_eq!(menu, table, "set at start");
    for (command, _) in &menu {
        assert!(
            help.contains(&format!("/{command} ")),
            "{command} in /help: {help}"
        );
    }
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_long_reply_with_a_code_block_arrives_in_parts_that_fit_and_lose_nothing() {
    let t = Telegram::start("stream = false").await;
    let code: String = (0..260)
        .map(|i| format!("    total = total + values[{i}]  # step {i}\n"))
        .collect();
    let reply = format!(
        "Here is the program you asked for, explained after the code.\n\n```python\n{code}```\n\n{}",
        "It adds the values one by one and prints the total. ".repeat(20)
    );
    assert!(reply.chars().count() >= 10_000, "{}", reply.chars().count());
    t.llm.push(Reply::text(reply.clone()));
    let id = t.fake.private_text(ADA, "write me a program");

    let content = |text: &str| -> String {
        text.lines()
            .filter(|line| !line.trim_start().starts_with("```"))
            .flat_map(|line| line.chars().filter(|c| !c.is_whitespace()))
            .collect()
    };
    let expected = content(&reply);
    t.fake
        .wait_until(PATIENCE, "the whole reply", |f| {
            let got: String = f
                .messages_to(chat(ADA))
                .iter()
                .map(|m| content(&m.visible))
                .collect();
            got == expected
        })
        .await;
    let parts = t.fake.messages_to(chat(ADA));
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert_eq!(
        parts[0].reply_to,
        Some(id),
        "the first part answers the message"
    );
    for part in &parts {
        assert!(
            part.visible.encode_utf16().count() <= 4096,
            "{}",
            part.visible.len()
        );
        // Telegram (the fake) accepted it as HTML: tags, <pre> included, balanced.
        assert!(part.html, "{}", part.text);
    }
    let with_code: Vec<_> = parts
        .iter()
        .filter(|p| p.text.contains("values["))
        .collect();
    assert!(with_code.len() >= 2, "the code block spans parts");
    for part in with_code {
        assert!(
            part.text.contains("<pre>") || part.text.contains("<pre><code"),
            "{}",
            part.text
        );
    }
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn an_unknown_sender_gets_a_pairing_code_and_is_answered_once_approved() {
    let t = Telegram::start("stream = false").await;
    let stranger = 77;
    let first = t.fake.private_text(stranger, "hello?");
    let text = t.wait_for_reply(chat(stranger), first).await;
    assert!(text.contains("switchboard pairing approve"), "{text}");
    let code = text.lines().nth(2).expect("the code").trim().to_owned();
    assert!(
        t.llm.requests().is_empty(),
        "a stranger never reaches the model"
    );

    // The operator approves it with the CLI while the daemon runs.
    let config = t.dir.path().join("config.toml");
    let tables = table(&t.fake, "stream = false");
    let text = util::config_text_with(
        &t.llm.base_url(),
        t.dir.path(),
        Extra {
            tables: &tables,
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");
    util::cli(&["pairing", "approve", &code], &config).await;
    let listed = util::cli(&["pairing", "list"], &config).await;
    assert!(listed.contains(&format!("telegram:{stranger}")), "{listed}");

    let second = t.fake.private_text(stranger, "may I talk now?");
    assert_eq!(
        t.wait_for_reply(chat(stranger), second).await,
        "echo: may I talk now?"
    );

    // Revoked, they are no longer written to, even by the agent on its own.
    util::cli(&["pairing", "revoke", &stranger.to_string()], &config).await;
    t.llm.push(Reply::tools([(
        "message",
        json!({"channel": "telegram", "chat_id": stranger.to_string(), "text": "still there?"}),
    )]));
    t.llm.push(Reply::text("could not"));
    let mut client = WsClient::connect(t.daemon.addr()).await;
    assert_eq!(client.say("ops", "ping them").await.reply(), "could not");
    let last = t.llm.requests().pop().expect("request");
    let result = util::conversation(&last).pop().expect("the tool result");
    assert!(
        result["content"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed"),
        "{result}"
    );
    assert!(
        !t.fake
            .messages_to(chat(stranger))
            .iter()
            .any(|m| m.visible == "still there?")
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_get_me_that_answers_garbage_degrades_the_channel_until_it_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake");
    fake.set_get_me_garbage(true);
    let tables = table(&fake, "stream = false");
    let extra = Extra {
        tables: &tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let state = |health: &serde_json::Value| health["channels"]["telegram"]["state"].clone();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let health = util::health(daemon.addr()).await;
        if state(&health) == "failed" {
            assert_eq!(health["status"], "degraded", "{health}");
            let raw = crate::chat::http_get(daemon.addr(), "/healthz").await;
            assert!(
                raw.starts_with("HTTP/1.1 503"),
                "503 while Telegram is down: {raw}"
            );
            assert_eq!(
                health["channels"]["websocket"]["state"], "running",
                "others go on"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{health}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    fake.set_get_me_garbage(false);
    let id = fake.private_text(ADA, "are you back?");
    fake.wait_until(PATIENCE, "a reply after recovery", |f| {
        f.messages_to(chat(ADA))
            .iter()
            .any(|m| m.reply_to == Some(id))
    })
    .await;
    assert_eq!(util::health(daemon.addr()).await["status"], "ok");
    let raw = crate::chat::http_get(daemon.addr(), "/healthz").await;
    assert!(
        raw.starts_with("HTTP/1.1 200"),
        "200 once it is back: {raw}"
    );
    daemon.shutdown().await;
}

/// Polls that fail after a good start (a web server's 404 page, not the Bot API) turn the channel degraded at
/// the first failure — not when the watchdog (10 s here) ends the poller — with the error
/// naming `channels.telegram.api_url`; it is running again once a poll succeeds.
#[tokio::test]
async fn failing_polls_degrade_the_channel_at_once_and_name_the_api_url() {
    let t = Telegram::start("stream = false").await;
    let id = t.fake.private_text(ADA, "hello");
    t.wait_for_reply(chat(ADA), id).await;
    let telegram = |health: &serde_json::Value| health["channels"]["telegram"].clone();
    assert_eq!(
        telegram(&util::health(t.daemon.addr()).await)["state"],
        "running"
    );

    t.fake.set_polls_failing(true);
    let started = tokio::time::Instant::now();
    let health = loop {
        let health = util::health(t.daemon.addr()).await;
        if telegram(&health)["state"] != "running" {
            break health;
        }
        assert!(started.elapsed() < PATIENCE, "{health}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(telegram(&health)["state"], "reconnecting", "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    let error = telegram(&health)["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains(&format!("channels.telegram.api_url = {}", t.fake.api_url())),
        "{error}"
    );

    t.fake.set_polls_failing(false);
    let id = t.fake.private_text(ADA, "are you back?");
    t.wait_for_reply(chat(ADA), id).await;
    let health = util::health(t.daemon.addr()).await;
    assert_eq!(telegram(&health)["state"], "running", "{health}");
    assert_eq!(health["status"], "ok", "{health}");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_group_message_without_a_mention_is_ignored() {
    let t = Telegram::start("stream = false").await;
    let group = -100_555;
    let plain = t.fake.group_text(group, ADA, "hello everyone");
    let mention = t
        .fake
        .group_text(group, ADA, &format!("@{BOT_USERNAME} what is up?"));
    assert_eq!(t.wait_for_reply(group, mention).await, "echo: what is up?");
    assert!(t.replies_to(group, plain).is_empty());
    assert_eq!(
        t.llm.requests().len(),
        1,
        "only the mention reached the model"
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn html_telegram_refuses_is_sent_again_as_plain_text() {
    let t = Telegram::start("stream = false").await;
    t.fake.set_refuse_html(true);
    t.llm.push(Reply::text("**bold** and `code` & more"));
    let id = t.fake.private_text(ADA, "format something");
    assert_eq!(
        t.wait_for_reply(chat(ADA), id).await,
        "**bold** and `code` & more"
    );
    assert!(
        t.fake.sent().iter().all(|s| !s.html),
        "no broken HTML was shown"
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_photo_is_saved_in_the_workspace_and_handed_to_the_agent() {
    let t = Telegram::start("stream = false").await;
    let bytes = b"\xff\xd8\xff not really a jpeg".to_vec();
    let id = t.fake.private_photo(ADA, "what is this?", bytes.clone());
    t.wait_for_reply(chat(ADA), id).await;
    let conversation = util::conversation(&t.llm.requests()[0]);
    // The photo reaches the model twice: named in the text, and as an image part.
    let parts = conversation.last().expect("message")["content"]
        .as_array()
        .expect("text and image parts")
        .clone();
    let text = parts[0]["text"].as_str().expect("text").to_owned();
    let image = parts[1]["image_url"]["url"]
        .as_str()
        .expect("an image part");
    use base64::Engine as _;
    let expected = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(image, format!("data:image/jpeg;base64,{expected}"));
    assert!(
        text.starts_with("what is this?\n[attachment: photo-"),
        "{text}"
    );
    let path = text
        .split("saved in the workspace at ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(']'))
        .expect("a path");
    assert!(path.starts_with("media/telegram/42-"), "{path}");
    let saved = std::fs::read(t.dir.path().join("workspace").join(path)).expect("saved");
    assert_eq!(saved, bytes);
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_webhook_update_with_the_secret_is_answered_and_one_without_is_refused() {
    let t = Telegram::start(
        "stream = false\nmode = \"webhook\"\nwebhook_url = \"https://bot.example.invalid/telegram/webhook\"\nwebhook_secret = \"s3cret_token\"",
    )
    .await;
    t.fake
        .wait_until(PATIENCE, "the webhook set", |f| f.webhook().is_some())
        .await;
    assert_eq!(
        t.fake.webhook(),
        Some((
            "https://bot.example.invalid/telegram/webhook".into(),
            Some("s3cret_token".into())
        ))
    );
    let update = json!({"update_id": 9001, "message": {
        "message_id": 5, "date": 1_700_000_000, "text": "via webhook",
        "chat": {"id": ADA, "type": "private", "first_name": "Ada"},
        "from": {"id": ADA, "is_bot": false, "first_name": "Ada"}}})
    .to_string();
    let post = |secret: &str| {
        format!(
            "POST /telegram/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: {secret}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{update}",
            update.len()
        )
    };
    let refused = util::raw_http(t.daemon.addr(), &post("wrong"), PATIENCE).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let accepted = util::raw_http(t.daemon.addr(), &post("s3cret_token"), PATIENCE).await;
    assert!(accepted.starts_with("HTTP/1.1 200"), "{accepted}");
    assert_eq!(t.wait_for_reply(chat(ADA), 5).await, "echo: via webhook");
    assert_eq!(
        t.llm.requests().len(),
        1,
        "the refused one never reached the model"
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn the_agent_writes_to_an_allowed_chat_that_talked_to_it_and_to_no_other() {
    let t = Telegram::start("stream = false").await;
    let id = t.fake.private_text(ADA, "hello bot");
    assert_eq!(t.wait_for_reply(chat(ADA), id).await, "echo: hello bot");
    // Bob is on the list by username: known once he wrote.
    let id = t.fake.private_text(BOB, "hi from bob");
    assert_eq!(t.wait_for_reply(chat(BOB), id).await, "echo: hi from bob");

    t.llm.push(Reply::tools([
        (
            "message",
            json!({"channel": "telegram", "chat_id": ADA.to_string(), "text": "Your **tea** is ready."}),
        ),
        (
            "message",
            json!({"channel": "telegram", "chat_id": BOB.to_string(), "text": "hi Bob"}),
        ),
        (
            "message",
            json!({"channel": "telegram", "chat_id": "99", "text": "hi"}),
        ),
        (
            "message",
            json!({"channel": "discord", "chat_id": "1", "text": "hi"}),
        ),
    ]));
    t.llm.push(Reply::text("notified"));
    let mut client = WsClient::connect(t.daemon.addr()).await;
    assert_eq!(
        client.say("ops", "tell Ada her tea is ready").await.reply(),
        "notified"
    );

    let post = t
        .fake
        .messages_to(chat(ADA))
        .into_iter()
        .find(|m| m.visible == "Your tea is ready.")
        .expect("the message arrived");
    assert!(post.html && post.text.contains("<b>tea</b>"), "{post:?}");
    assert_eq!(post.reply_to, None);
    let results: Vec<String> = util::conversation(&t.llm.requests()[3])
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    // Told sent, with the message id Telegram gave it.
    assert_eq!(
        results[0],
        format!("sent to telegram chat {ADA} (message {})", post.message_id)
    );
    assert!(
        results[1].starts_with(&format!("sent to telegram chat {BOB} (message ")),
        "{}",
        results[1]
    );
    assert!(
        t.fake
            .messages_to(chat(BOB))
            .iter()
            .any(|m| m.visible == "hi Bob")
    );
    assert!(
        results[2].contains("has never talked to the agent"),
        "{}",
        results[2]
    );
    assert!(
        results[3].contains("no channel `discord` runs"),
        "{}",
        results[3]
    );
    assert!(t.fake.messages_to(99).is_empty());
    t.daemon.shutdown().await;
}
