//! Discord, end to end: a person writes where a Discord user would (the fake gateway's
//! dispatches), and the answer is read where they would see it (what the bot sent the fake's
//! REST API).

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::discord::TEST_TOKEN;
use switchboard_testkit::{FakeDiscord, Reply, ScriptedLlm};

use crate::util::{self, Extra, PATIENCE};

/// People on the allow list, and one who is not.
const ADA: u64 = 42;
const CAROL: u64 = 44;
const BOB: u64 = 43;
/// A server and one of its channels.
const GUILD: u64 = 7_000;
const GENERAL: u64 = 7_001;

/// A daemon with Discord (and the WebSocket channel) against the fakes.
struct Discord {
    dir: tempfile::TempDir,
    llm: ScriptedLlm,
    fake: FakeDiscord,
    daemon: switchboard::app::Running,
}

impl Discord {
    async fn start(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let fake = FakeDiscord::start().await.expect("fake Discord");
        let tables = format!(
            r#"[channels.discord]
enabled = true
token = "{TEST_TOKEN}"
api_url = "{api}"
allow_from = ["{ADA}", "{CAROL}"]
edit_interval_secs = 0.3
{extra}
"#,
            api = fake.api_url()
        );
        let config = Extra {
            tables: &tables,
            ..Extra::default()
        };
        let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
        fake.wait_until(PATIENCE, "the bot connected", FakeDiscord::connected)
            .await;
        Self {
            dir,
            llm,
            fake,
            daemon,
        }
    }

    /// The first new message in `channel` replying to `id`, once it arrived.
    async fn wait_for_reply(&self, channel: u64, id: u64) -> String {
        self.fake
            .wait_until(PATIENCE, "a reply", |f| {
                f.messages_to(channel)
                    .iter()
                    .any(|m| m.reply_to == Some(id))
            })
            .await;
        let reply = self
            .fake
            .messages_to(channel)
            .into_iter()
            .find(|m| m.reply_to == Some(id))
            .expect("a reply");
        reply.content
    }
}

fn dm(user: u64) -> u64 {
    FakeDiscord::dm_channel(user)
}

#[tokio::test]
async fn dms_and_mentions_are_answered_and_other_server_messages_and_bots_are_not() {
    let t = Discord::start("stream = false").await;
    let id = t.fake.dm(ADA, "hello bot");
    assert_eq!(t.wait_for_reply(dm(ADA), id).await, "echo: hello bot");
    assert!(t.fake.typing_in(dm(ADA)) >= 1, "typing… was shown");

    let mention = t
        .fake
        .guild_message(GUILD, GENERAL, ADA, true, "what is up?");
    assert_eq!(
        t.wait_for_reply(GENERAL, mention).await,
        "echo: what is up?",
        "the mention was taken out of the text"
    );

    // Neither of these reaches the model; intake takes events in order, so once the
    // last DM is answered both were seen.
    t.fake
        .guild_message(GUILD, GENERAL, ADA, false, "just chatting");
    t.fake.bot_message(dm(ADA), 555, "I am another bot");
    let last = t.fake.dm(ADA, "are you there?");
    assert_eq!(
        t.wait_for_reply(dm(ADA), last).await,
        "echo: are you there?"
    );
    let asked: Vec<String> = t
        .llm
        .requests()
        .iter()
        .map(|r| {
            util::conversation(r)
                .last()
                .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(asked, ["hello bot", "what is up?", "are you there?"]);

    // The slash commands were registered for the bot's application.
    let names: Vec<String> = t
        .fake
        .commands()
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        names,
        [
            "new", "stop", "status", "approve", "deny", "jobs", "model", "usage", "memory", "help"
        ],
        "every chat command, /jobs included"
    );
    t.daemon.shutdown().await;
    // The bot logged off: a normal close, not a dropped connection.
    t.fake
        .wait_until(PATIENCE, "a close", |f| !f.closes().is_empty())
        .await;
    assert_eq!(t.fake.closes(), [1000]);
}

#[tokio::test]
async fn a_long_reply_with_a_code_block_arrives_in_parts_that_fit_with_fences_balanced() {
    let t = Discord::start("stream = false").await;
    let code: String = (0..60)
        .map(|i| format!("    total = total + values[{i}]  # step {i}\n"))
        .collect();
    let reply = format!(
        "Here is the program.\n\n```python\n{code}```\n\n{}",
        "It adds the values one by one and prints the total. ".repeat(60)
    );
    assert!(reply.chars().count() >= 5_000, "{}", reply.chars().count());
    t.llm.push(Reply::text(reply.clone()));
    let id = t.fake.dm(ADA, "write me a program");

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
                .messages_to(dm(ADA))
                .iter()
                .map(|m| content(&m.content))
                .collect();
            got == expected
        })
        .await;
    let parts = t.fake.messages_to(dm(ADA));
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert_eq!(parts[0].reply_to, Some(id), "the first part replies");
    for part in &parts {
        assert!(part.content.chars().count() <= 2000);
        let fences = part
            .content
            .lines()
            .filter(|l| l.trim_start().starts_with("```"))
            .count();
        assert_eq!(fences % 2, 0, "fences balanced in {:?}", part.content);
    }
    assert!(t.fake.refused().is_empty(), "{:?}", t.fake.refused());
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn nothing_the_model_writes_pings_anyone_but_the_author() {
    let t = Discord::start("stream = true").await;
    let reply = "Hey @everyone and @here, <@&123456> meet <@77> and <@!78>; you too <@42>.";
    t.llm
        .push(Reply::paced(reply.to_owned(), Duration::from_millis(20)));
    let id = t
        .fake
        .guild_message(GUILD, GENERAL, ADA, true, "announce it");
    t.fake
        .wait_until(PATIENCE, "the whole reply", |f| {
            f.messages_to(GENERAL)
                .first()
                .and_then(|m| f.current_text(GENERAL, m.message_id))
                .is_some_and(|text| text == reply)
        })
        .await;
    let sent = t.fake.sent();
    assert!(!sent.is_empty());
    for message in &sent {
        for ping in &message.pinged {
            assert_eq!(ping, &format!("user:{ADA}"), "{message:?}");
        }
    }
    assert_eq!(t.fake.messages_to(GENERAL)[0].reply_to, Some(id));
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_dropped_gateway_is_resumed_and_what_was_said_meanwhile_is_answered() {
    let t = Discord::start("stream = false").await;
    let first = t.fake.dm(ADA, "before");
    assert_eq!(t.wait_for_reply(dm(ADA), first).await, "echo: before");

    t.fake.close_gateway(4000);
    // Said while the connection is down: Discord replays it on RESUME.
    let during = t.fake.dm(ADA, "while you were away");
    t.fake
        .wait_until(PATIENCE, "a resumed session", |f| {
            f.resumes() == 1 && f.connected()
        })
        .await;
    assert_eq!(
        t.wait_for_reply(dm(ADA), during).await,
        "echo: while you were away"
    );
    let after = t.fake.dm(ADA, "after");
    assert_eq!(t.wait_for_reply(dm(ADA), after).await, "echo: after");
    assert_eq!(t.fake.identifies(), 1, "resumed, not identified again");
    assert_eq!(t.llm.requests().len(), 3, "each message answered once");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_sender_not_allowed_gets_a_pairing_code_and_never_reaches_the_model() {
    let t = Discord::start("stream = false").await;
    let id = t.fake.dm(BOB, "let me in");
    let code = t.wait_for_reply(dm(BOB), id).await;
    assert!(code.contains("switchboard pairing approve"), "{code}");
    // In a server, a stranger gets silence, not a code.
    t.fake.guild_message(GUILD, GENERAL, BOB, true, "hello?");
    let marker = t.fake.dm(ADA, "marker");
    t.wait_for_reply(dm(ADA), marker).await;
    assert_eq!(
        t.llm.requests().len(),
        1,
        "only the marker reached the model"
    );
    assert!(t.fake.messages_to(GENERAL).is_empty());

    // Once approved, Bob is answered.
    let pairing = switchboard_adapter::Pairing::new(std::sync::Arc::new(
        switchboard_sessions::FileState::new(&t.dir.path().join("state")),
    ));
    let pending = pairing.list().await.expect("pairing file").pending;
    let pending = pending.first().expect("a code");
    pairing.approve(&pending.code).await.expect("approved");
    let again = t.fake.dm(BOB, "now?");
    assert_eq!(t.wait_for_reply(dm(BOB), again).await, "echo: now?");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_slash_command_is_answered_and_runs_as_the_typed_command() {
    let t = Discord::start("stream = false").await;
    let first = t.fake.dm(ADA, "remember me");
    t.wait_for_reply(dm(ADA), first).await;
    let interaction = t.fake.slash_command(dm(ADA), None, ADA, "status");
    t.fake
        .wait_until(PATIENCE, "the interaction answered", |f| {
            f.callbacks().iter().any(|(id, _)| *id == interaction)
        })
        .await;
    t.fake
        .wait_until(PATIENCE, "the status", |f| {
            f.messages_to(dm(ADA)).len() >= 2
        })
        .await;
    let status = &t.fake.messages_to(dm(ADA))[1].content;
    assert!(status.contains("message"), "{status}");
    assert_eq!(t.llm.requests().len(), 1, "/status is not a turn");
    // `/model` with its option runs as `/model NAME` typed.
    let model = t
        .fake
        .slash_command_with(dm(ADA), None, ADA, "model", vec![("name", "nonesuch")]);
    t.fake
        .wait_until(PATIENCE, "the model's answer", |f| {
            f.messages_to(dm(ADA)).len() >= 3
        })
        .await;
    let callback = t.fake.callbacks().into_iter().find(|(id, _)| *id == model);
    let echoed = callback.map(|(_, body)| body["data"]["content"].clone());
    assert_eq!(echoed, Some(serde_json::json!("/model nonesuch")));
    let answer = &t.fake.messages_to(dm(ADA))[2].content;
    assert!(answer.contains("the only model here"), "{answer}");
    // Every chat command is registered, with what it takes; `/jobs rm ID` runs as typed.
    let registered: Vec<String> = t
        .fake
        .commands()
        .iter()
        .filter_map(|command| command["name"].as_str().map(str::to_owned))
        .collect();
    let table: Vec<&str> = switchboard_core::COMMANDS.iter().map(|c| c.name).collect();
    assert_eq!(registered, table);
    let jobs = t
        .fake
        .slash_command_with(dm(ADA), None, ADA, "jobs", vec![("action", "rm nosuch")]);
    t.fake
        .wait_until(PATIENCE, "the jobs' answer", |f| {
            f.messages_to(dm(ADA)).len() >= 4
        })
        .await;
    let callback = t.fake.callbacks().into_iter().find(|(id, _)| *id == jobs);
    let echoed = callback.map(|(_, body)| body["data"]["content"].clone());
    assert_eq!(echoed, Some(serde_json::json!("/jobs rm nosuch")));
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_wrong_token_shows_in_healthz_naming_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeDiscord::start().await.expect("fake Discord");
    let tables = format!(
        "[channels.discord]\nenabled = true\ntoken = \"MTAwMDAwMDAwMDAwMDAwMDAw.wrong.token-for-test\"\napi_url = \"{}\"\n",
        fake.api_url()
    );
    let config = Extra {
        tables: &tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
    // Polling /healthz: the channel's failure has no event to wait on.
    let health_saying = |what: &'static str| {
        let addr = daemon.addr();
        async move {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            loop {
                let health = util::health(addr).await;
                if health.to_string().contains(what) {
                    return health;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "healthz never said {what:?}: {health}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let health = health_saying("close 4004").await;
    assert_eq!(health["status"], "degraded", "{health}");
    // The supervisor restarts the channel, which does not ask Discord again for a while
    // (a token that identifies too often is reset by Discord).
    health_saying("asking again in").await;
    assert_eq!(fake.refused_identifies(), 1);
    assert_eq!(fake.identifies(), 0);
    daemon.shutdown().await;
}

#[tokio::test]
async fn the_agent_writes_to_discord_chats_that_talked_to_it_and_pings_no_one() {
    let t = Discord::start("stream = false").await;
    let id = t.fake.dm(ADA, "hello bot");
    assert_eq!(t.wait_for_reply(dm(ADA), id).await, "echo: hello bot");
    let mention = t.fake.guild_message(GUILD, GENERAL, ADA, true, "hi all");
    assert_eq!(t.wait_for_reply(GENERAL, mention).await, "echo: hi all");

    t.llm.push(Reply::tools([
        (
            "message",
            json!({"channel": "discord", "chat_id": dm(ADA).to_string(), "text": "Your tea is ready, <@42>."}),
        ),
        (
            "message",
            json!({"channel": "discord", "chat_id": GENERAL.to_string(), "text": "@everyone the build is green"}),
        ),
        (
            "message",
            json!({"channel": "discord", "chat_id": "99", "text": "hi"}),
        ),
    ]));
    t.llm.push(Reply::text("notified"));
    let mut client = util::WsClient::connect(t.daemon.addr()).await;
    assert_eq!(
        client.say("ops", "tell Ada her tea is ready").await.reply(),
        "notified"
    );
    let results: Vec<String> = util::conversation(&t.llm.requests()[3])
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    // Told sent, with the message id Discord gave it.
    for (result, chat) in results.iter().zip([dm(ADA), GENERAL]) {
        let id = t
            .fake
            .messages_to(chat)
            .last()
            .map(|sent| sent.message_id)
            .expect("the message arrived");
        assert_eq!(
            *result,
            format!("sent to discord chat {chat} (message {id})")
        );
    }
    assert!(
        results[2].contains("has never talked to the agent"),
        "{}",
        results[2]
    );
    t.fake
        .wait_until(PATIENCE, "both posts", |f| {
            f.messages_to(dm(ADA)).len() == 2 && f.messages_to(GENERAL).len() == 2
        })
        .await;
    for post in [
        &t.fake.messages_to(dm(ADA))[1],
        &t.fake.messages_to(GENERAL)[1],
    ] {
        assert_eq!(post.reply_to, None, "{post:?}");
        assert!(
            post.pinged.is_empty(),
            "an unasked post pings no one: {post:?}"
        );
    }
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_reply_in_many_parts_keeps_within_the_bucket_its_headers_state_and_draws_no_429() {
    let t = Discord::start("stream = false").await;
    // Discord's own numbers for a channel's messages: 5 every 5 s (here, 3 every second).
    t.fake.set_bucket(3, Duration::from_secs(1));
    let reply: String = (0..8)
        .map(|part| format!("part {part}: {}\n\n", "word ".repeat(350)))
        .collect();
    t.llm.push(Reply::text(reply.clone()));
    t.fake.dm(ADA, "tell me everything");
    let words = |text: &str| text.split_whitespace().count();
    let expected = words(&reply);
    t.fake
        .wait_until(PATIENCE, "the whole reply", |f| {
            f.messages_to(dm(ADA))
                .iter()
                .map(|m| words(&m.content))
                .sum::<usize>()
                == expected
        })
        .await;
    let parts = t.fake.messages_to(dm(ADA));
    assert!(parts.len() >= 6, "{} parts", parts.len());
    assert!(
        t.fake.over_bucket().is_empty(),
        "a write came after the headers said the bucket was empty: {:?}",
        t.fake.over_bucket()
    );
    // The fourth part waited for the bucket's reset.
    let waited = parts[3].at.duration_since(parts[0].at);
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_global_429_holds_the_bots_writes_to_every_channel_until_it_is_over() {
    let t = Discord::start("stream = false").await;
    t.fake.global_limit(dm(ADA), Duration::from_millis(1500));
    t.fake.dm(ADA, "first");
    t.fake
        .wait_until(PATIENCE, "the global 429", |f| !f.global_at().is_empty())
        .await;
    let limited_at = t.fake.global_at()[0];
    let id = t.fake.dm(CAROL, "meanwhile");
    assert_eq!(t.wait_for_reply(dm(CAROL), id).await, "echo: meanwhile");
    let written = t
        .fake
        .messages_to(dm(CAROL))
        .first()
        .map(|m| m.at)
        .expect("written");
    assert!(
        written.duration_since(limited_at) >= Duration::from_millis(1400),
        "another chat's write waited for the global limit: {:?}",
        written.duration_since(limited_at)
    );
    // The limited one is sent after (its retry and the other chat's write both waited for
    // the same end of the hold: either may land first).
    t.fake
        .wait_until(PATIENCE, "the limited one sent after", |f| {
            f.messages_to(dm(ADA))
                .iter()
                .any(|m| m.content == "echo: first")
        })
        .await;
    t.daemon.shutdown().await;
}
