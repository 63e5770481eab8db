//! Reloading the config (SIGHUP) as an operator does: what can change live changes for the
//! turns that start next — a channel's allow list, the tools, a model's key, an agent's model,
//! prices and caps — and nothing is named as needing a restart.

use serde_json::json;
use switchboard_testkit::Reply;

use crate::util::Extra;

/// Writes the test config with `tables` to `dir/config.toml`, where a reload reads it.
fn write_config(
    llm: &switchboard_testkit::ScriptedLlm,
    dir: &std::path::Path,
    tables: &str,
) -> (std::path::PathBuf, String) {
    write_config_with(
        llm,
        dir,
        Extra {
            tables,
            ..Extra::default()
        },
    )
}

/// Writes the test config with `extra` to `dir/config.toml`.
fn write_config_with(
    llm: &switchboard_testkit::ScriptedLlm,
    dir: &std::path::Path,
    extra: Extra<'_>,
) -> (std::path::PathBuf, String) {
    let text = crate::util::config_text_with(&llm.base_url(), dir, extra);
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).expect("config");
    (path, text)
}

/// A daemon (with the test tools) from config text.
async fn start_from(text: &str, dir: &std::path::Path) -> switchboard::app::Running {
    switchboard::app::start(crate::util::config(text, dir), crate::util::test_tools())
        .await
        .expect("daemon")
}

/// 5. A reload restarts a platform channel whose section changed: someone added to
/// Telegram's allow list is answered at once, without restarting the daemon (the WebSocket
/// chat goes on meanwhile), and the reload names nothing as needing a restart.
#[tokio::test]
async fn a_reload_applies_a_new_telegram_allow_list_live() {
    use switchboard::reload::Reloaded;
    use switchboard_testkit::telegram::TEST_TOKEN;
    use switchboard_testkit::{FakeTelegram, ScriptedLlm};
    const ADA: u64 = 42;
    const BOB: u64 = 43;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake Telegram");
    let table = |allow: &str| {
        format!(
            "[channels.telegram]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\n\
             allow_from = [{allow}]\npoll_timeout_secs = 1\nstream = false\n",
            fake.api_url()
        )
    };
    let write = |allow: &str| write_config(&llm, dir.path(), &table(allow));
    let (path, text) = write(&format!("\"{ADA}\""));
    let mut daemon = start_from(&text, dir.path()).await;
    let mut client = crate::util::WsClient::connect(daemon.addr()).await;

    // Bob is not on the list: he gets a pairing code, the model never sees him.
    fake.private_text(BOB, "hello?");
    fake.wait_until(crate::util::PATIENCE, "a pairing code for Bob", |f| {
        !f.messages_to(BOB as i64).is_empty()
    })
    .await;
    assert!(llm.requests().is_empty());

    let (path_again, _) = write(&format!("\"{ADA}\", \"{BOB}\""));
    assert_eq!(path_again, path);
    let reloaded = daemon.reload(&path).await;
    assert_eq!(
        reloaded,
        Reloaded::Applied {
            need_restart: Vec::new()
        }
    );

    let id = fake.private_text(BOB, "and now?");
    fake.wait_until(crate::util::PATIENCE, "an answer to Bob", |f| {
        f.messages_to(BOB as i64)
            .iter()
            .any(|m| m.reply_to == Some(id))
    })
    .await;
    assert!(
        fake.messages_to(BOB as i64)
            .iter()
            .any(|m| m.visible == "echo: and now?"),
        "{:?}",
        fake.messages_to(BOB as i64)
    );
    assert_eq!(
        client.say("c", "still here").await.reply(),
        "echo: still here"
    );
    assert_eq!(crate::util::health(daemon.addr()).await["status"], "ok");
    daemon.shutdown().await;
}

/// 5. A reload applies `[tools]` to the turns that start next: a tool turned off is no
/// longer offered to the model, without a restart; a turn running through the reload keeps
/// the tools it started with to its end.
#[tokio::test]
async fn a_reload_applies_tool_settings_to_the_next_turn() {
    use switchboard::reload::Reloaded;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let write = |tables: &str| write_config(&llm, dir.path(), tables);
    let offered = |request: &serde_json::Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    let (path, text) = write("[tools.web_fetch]\nenabled = true\n");
    let mut daemon = start_from(&text, dir.path()).await;
    let mut client = crate::util::WsClient::connect(daemon.addr()).await;
    // The turn asks the person something, and the reload comes while it waits.
    llm.push(Reply::tool("ask_user", json!({"question": "Which page?"})));
    client.send("c", "one").await;
    loop {
        let frame = client.next_frame().await;
        if frame["waiting_for"] == "answer" {
            break;
        }
        assert_ne!(frame["type"], "done", "the turn ended without asking");
    }
    assert!(offered(&llm.requests()[0]).contains(&"web_fetch".to_owned()));

    write("[tools.web_fetch]\nenabled = false\n");
    assert_eq!(
        daemon.reload(&path).await,
        Reloaded::Applied {
            need_restart: Vec::new()
        }
    );
    llm.push(Reply::text("That one, then."));
    client.send("c", "the first").await;
    assert_eq!(client.turn("c").await.reply(), "That one, then.");
    assert!(
        offered(&llm.requests()[1]).contains(&"web_fetch".to_owned()),
        "the running turn keeps the tools it started with"
    );
    client.say("c", "two").await;
    let tools = offered(&llm.requests()[2]);
    assert!(!tools.contains(&"web_fetch".to_owned()), "{tools:?}");
    assert!(
        tools.contains(&"echo".to_owned()),
        "the other tools stay: {tools:?}"
    );
    daemon.shutdown().await;
}

/// 6. A key that cannot be resolved makes the daemon degraded from its start, before anyone
/// writes — naming the variable; a reload that gives the model a key it can resolve makes
/// it healthy again (what was known of the old models is forgotten).
#[tokio::test]
async fn a_missing_key_is_degraded_from_the_start_until_a_reload_fixes_it() {
    use switchboard::reload::Reloaded;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let with_key = |key: &str| {
        let extra = Extra {
            llm: key,
            ..Extra::default()
        };
        write_config_with(&llm, dir.path(), extra)
    };
    let (path, text) = with_key("api_key = \"${SURELY_UNSET_KEY_4711}\"");
    let mut daemon = start_from(&text, dir.path()).await;
    let health = crate::util::health(daemon.addr()).await;
    assert_eq!(health["status"], "degraded", "{health}");
    let problem = health["checks"]["llm"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        problem.starts_with("openai scripted:") && problem.contains("SURELY_UNSET_KEY_4711"),
        "{health}"
    );

    with_key("api_key = \"${HOME}\"");
    assert!(matches!(
        daemon.reload(&path).await,
        Reloaded::Applied { .. }
    ));
    let health = crate::util::health(daemon.addr()).await;
    assert_eq!(health["status"], "ok", "{health}");
    daemon.shutdown().await;
}

/// A reload applies an agent's `model`, the price table and the caps to the turns that start
/// next, naming nothing as needing a restart.
#[tokio::test]
async fn a_reload_applies_an_agents_model_and_the_cost_caps_live() {
    use switchboard::reload::Reloaded;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let home = dir.path().join("home");
    let tables = |model: &str, priced: &str| {
        format!(
            "[agents.home]\nworkspace = \"{}\"\nmodel = \"{model}\"\n\n[[bindings]]\n\
             agent = \"home\"\nchannel = \"websocket\"\nchat = \"h\"\n{priced}",
            home.display()
        )
    };
    let write = |tables: &str| {
        let extra = Extra {
            llm: "models = [\"big\"]",
            tables,
            ..Extra::default()
        };
        write_config_with(&llm, dir.path(), extra)
    };
    let (path, text) = write(&tables("scripted", ""));
    let mut daemon = start_from(&text, dir.path()).await;
    let mut client = crate::util::WsClient::connect(daemon.addr()).await;
    let model = |n: usize| {
        llm.requests()[n]["model"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    client.say("h", "one").await;
    assert_eq!(model(0), "scripted");

    write(&tables("big", ""));
    let applied = Reloaded::Applied {
        need_restart: Vec::new(),
    };
    assert_eq!(daemon.reload(&path).await, applied);
    client.say("h", "two").await;
    assert_eq!(model(1), "big", "the agent's new model");

    // $1 per thousand input tokens, a cap of a cent: the next turn (10 tokens) reaches it.
    let priced = "[llm.prices.big]\ninput_per_mtok = 1000\noutput_per_mtok = 0\n\
                  [limits]\ndaily_usd_per_chat = 0.01\n";
    write(&tables("big", priced));
    assert_eq!(daemon.reload(&path).await, applied);
    client.say("h", "three").await;
    let refused = client.say("h", "four").await;
    assert_eq!(
        refused.of_type("done")[0]["end"],
        "cost_limit",
        "{:?}",
        refused.frames
    );
    assert_eq!(llm.requests().len(), 3, "the refused turn called no model");
    daemon.shutdown().await;
}

/// A reload is applied whole or not at all: one whose tools cannot be set (a new built-in
/// tool with the name of an embedder's) is refused, saying why, and what else it changed — the
/// agent's model, the tools — stays as it ran; the same reload without the clash applies.
#[tokio::test]
async fn a_reload_refused_in_one_part_changes_nothing_else() {
    use switchboard::reload::Reloaded;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let write = |model: &str, fetch: bool| {
        let tables = format!("[tools.web_fetch]\nenabled = {fetch}\n");
        let extra = Extra {
            agent: &format!("model = \"{model}\""),
            llm: "models = [\"big\"]",
            tables: &tables,
            ..Extra::default()
        };
        write_config_with(&llm, dir.path(), extra)
    };
    let (path, text) = write("scripted", false);
    let tools = crate::util::test_tools().with(std::sync::Arc::new(
        switchboard_testkit::NamedTool("web_fetch"),
    ));
    let mut daemon = switchboard::app::start(crate::util::config(&text, dir.path()), tools)
        .await
        .expect("daemon");
    let mut client = crate::util::WsClient::connect(daemon.addr()).await;
    let model = |n: usize| llm.requests()[n]["model"].as_str().map(str::to_owned);
    client.say("c", "one").await;
    assert_eq!(model(0).as_deref(), Some("scripted"));

    write("big", true);
    let Reloaded::Refused(why) = daemon.reload(&path).await else {
        panic!("a reload with two tools named web_fetch was applied");
    };
    assert!(why.contains("web_fetch"), "{why}");
    client.say("c", "two").await;
    assert_eq!(
        model(1).as_deref(),
        Some("scripted"),
        "the model stays as it ran"
    );

    write("big", false);
    assert_eq!(
        daemon.reload(&path).await,
        Reloaded::Applied {
            need_restart: Vec::new()
        }
    );
    client.say("c", "three").await;
    assert_eq!(
        model(2).as_deref(),
        Some("big"),
        "applied without the clash"
    );
    daemon.shutdown().await;
}
