//! Several agents on one daemon: chats bound to an agent get its persona, its workspace and
//! its sessions; nothing one agent's tools write reaches another's.

use serde_json::{Value, json};
use switchboard_testkit::{Reply, ScriptedLlm};

use switchboard::app::Running;

use crate::util::{self, Extra, WsClient};

/// A daemon whose chat `h` (and only it) is bound to the agent `home`, beside the default.
const HOME: &str = r#"
[agents.home]
workspace = "{home}"
system_prompt = "You are the family assistant."

[[bindings]]
agent = "home"
channel = "websocket"
chat = "h"
"#;

/// A daemon in `dir` with `tables` after the test config, and a client connected to it.
async fn start(llm: &ScriptedLlm, dir: &std::path::Path, tables: &str) -> (Running, WsClient) {
    let extra = Extra {
        tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(llm, dir, extra, Vec::new()).await;
    let client = WsClient::connect(daemon.addr()).await;
    (daemon, client)
}

/// The system prompt of a request.
fn system(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn two_agents_have_their_own_persona_workspace_memory_and_sessions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (main, home) = (dir.path().join("workspace"), dir.path().join("home"));
    for (workspace, soul, memory) in [
        (&main, "I am the work agent.", "Deadline is Friday."),
        (&home, "I am the home agent.", "Milk is out."),
    ] {
        std::fs::create_dir_all(workspace).expect("mkdir");
        std::fs::write(workspace.join("SOUL.md"), soul).expect("soul");
        std::fs::write(workspace.join("MEMORY.md"), memory).expect("memory");
    }
    let llm = ScriptedLlm::start().await.expect("llm");
    let tables = HOME.replace("{home}", &home.display().to_string());
    let (daemon, mut client) = start(&llm, dir.path(), &tables).await;

    // The home agent writes a note into its workspace.
    llm.push(Reply::tools([(
        "write_file",
        json!({"path": "note.txt", "content": "the spare key is under the mat"}),
    )]));
    llm.push(Reply::text("Noted."));
    assert_eq!(
        client.say("h", "remember where the key is").await.reply(),
        "Noted."
    );
    // The default agent looks for it: in its own workspace, and next door.
    llm.push(Reply::tools([
        ("read_file", json!({"path": "note.txt"})),
        ("read_file", json!({"path": "../home/note.txt"})),
        (
            "read_file",
            json!({"path": home.join("note.txt").display().to_string()}),
        ),
    ]));
    llm.push(Reply::text("I cannot see it."));
    assert_eq!(
        client.say("m", "where is the key?").await.reply(),
        "I cannot see it."
    );

    let requests = llm.requests();
    let (home_system, main_system) = (system(&requests[0]), system(&requests[2]));
    assert!(
        home_system.starts_with("You are the family assistant."),
        "{home_system}"
    );
    assert!(home_system.contains("I am the home agent.") && home_system.contains("Milk is out."));
    assert!(!home_system.contains("work agent") && !home_system.contains("Friday"));
    assert!(main_system.contains("I am the work agent.") && main_system.contains("Friday"));
    assert!(!main_system.contains("home agent") && !main_system.contains("Milk"));

    assert_eq!(
        std::fs::read_to_string(home.join("note.txt")).expect("written in home's workspace"),
        "the spare key is under the mat"
    );
    assert!(!main.join("note.txt").exists());
    let results = util::tool_results(&requests[3]);
    assert_eq!(results.len(), 3, "{results:?}");
    for result in &results {
        assert!(result.starts_with("error"), "{result}");
        assert!(!result.contains("spare key"), "{result}");
    }

    // Each agent's sessions in its own place.
    let state = dir.path().join("state");
    assert!(
        state
            .join("agents/home/sessions/websocket_h.jsonl")
            .exists()
    );
    assert!(!state.join("sessions/websocket_h.jsonl").exists());
    assert!(state.join("sessions/websocket_m.jsonl").exists());
    assert!(
        !state
            .join("agents/home/sessions/websocket_m.jsonl")
            .exists()
    );
    // `/status` says which agent answers.
    let status = client.say("h", "/status").await;
    assert!(
        status.reply().starts_with("Agent home."),
        "{}",
        status.reply()
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn an_agent_offers_only_the_tools_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let tables = format!(
        "{}\n",
        HOME.replace("{home}", &dir.path().join("home").display().to_string())
            .replace(
                "system_prompt = \"You are the family assistant.\"",
                "tools = [\"read_*\", \"echo\"]\nexclude_tools = [\"read_file\"]"
            )
    );
    let (daemon, mut client) = start(&llm, dir.path(), &tables).await;
    llm.push(Reply::text("hi"));
    llm.push(Reply::text("hi"));
    client.say("h", "hello").await;
    client.say("m", "hello").await;
    let names = |request: &Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    let requests = llm.requests();
    assert_eq!(names(&requests[0]), ["echo"]);
    let all = names(&requests[1]);
    assert!(
        all.contains(&"read_file".to_owned()) && all.contains(&"exec".to_owned()),
        "{all:?}"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_job_an_agent_schedules_runs_as_that_agents_turn_even_in_a_session_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let tables = HOME.replace("{home}", &dir.path().join("home").display().to_string());
    let (daemon, mut client) = start(&llm, dir.path(), &tables).await;
    llm.push(Reply::tools([(
        "cron",
        json!({"action": "add", "in": "1s", "name": "bins", "session": "isolated",
               "message": "Say that the bins go out tonight."}),
    )]));
    llm.push(Reply::text("I will tell you."));
    llm.push(Reply::text("The bins go out tonight."));
    assert_eq!(
        client.say("h", "remind me about the bins").await.reply(),
        "I will tell you."
    );
    // Posted into the chat, as the home agent wrote it in a session of the job's own.
    let post = client.wait_for("post").await;
    assert_eq!(post["content"], "The bins go out tonight.");
    let run = llm.requests().pop().expect("the run's request");
    assert!(
        system(&run).starts_with("You are the family assistant."),
        "{}",
        system(&run)
    );
    let state = dir.path().join("state");
    assert!(state.join("agents/home/sessions/cron_j1.jsonl").exists());
    assert!(!state.join("sessions/cron_j1.jsonl").exists());
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_chat_switches_its_model_with_slash_model_and_keeps_it_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let extra = Extra {
        llm: "models = [\"big\", \"small\"]",
        ..Extra::default()
    };
    let model_of = |request: &Value| request["model"].as_str().unwrap_or_default().to_owned();
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    let listed = client.say("c", "/model").await;
    assert_eq!(
        listed.reply(),
        "This chat uses scripted. Models: scripted, big, small (scripted is the default). \
         /model NAME switches; /model default goes back."
    );
    let refused = client.say("c", "/model huge").await;
    assert_eq!(
        refused.reply(),
        "There is no model `huge` here. The models are: scripted, big, small."
    );
    assert_eq!(
        client.say("c", "/model big").await.reply(),
        "This chat now uses big."
    );
    llm.push(Reply::text("from big"));
    llm.push(Reply::text("from the default"));
    client.say("c", "hello").await;
    client.say("d", "hello").await;
    let requests = llm.requests();
    assert_eq!(model_of(&requests[0]), "big");
    assert_eq!(
        model_of(&requests[1]),
        "scripted",
        "another chat keeps the default"
    );
    assert!(
        client
            .say("c", "/status")
            .await
            .reply()
            .ends_with("model big.")
    );
    daemon.shutdown().await;

    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    llm.push(Reply::text("still big"));
    client.say("c", "hello again").await;
    assert_eq!(
        model_of(&llm.requests()[2]),
        "big",
        "kept across the restart"
    );
    assert_eq!(
        client.say("c", "/model default").await.reply(),
        "This chat now uses scripted."
    );
    llm.push(Reply::text("back"));
    client.say("c", "and now?").await;
    assert_eq!(model_of(&llm.requests()[3]), "scripted");
    daemon.shutdown().await;
}
