//! A turn that pauses on the person: approvals (`/approve`, `/deny`, silence) and the
//! `ask_user` tool. The answer resumes the same turn; other chats are served meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use switchboard_testkit::{Reply, ScriptedLlm};
use switchboard_tools::{Tool, ToolContext, ToolError};

use crate::util::{self, Extra, Harness, WsClient};

/// A tool that counts its calls: what must not happen before consent.
struct Launch(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Tool for Launch {
    fn name(&self) -> &str {
        "launch"
    }
    fn description(&self) -> &str {
        "Launches something irreversible."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"target": {"type": "string"}}})
    }
    async fn call(
        &self,
        _: Value,
        _: &ToolContext,
    ) -> Result<switchboard_tools::ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok("launched".into())
    }
}

async fn with_approvals(timeout_secs: u32) -> (Harness, Arc<AtomicUsize>) {
    let launches = Arc::new(AtomicUsize::new(0));
    let tables = format!("[agent.approvals]\ntools = [\"launch\"]\ntimeout_secs = {timeout_secs}");
    let h = Harness::with(
        Extra {
            tables: &tables,
            ..Extra::default()
        },
        vec![Arc::new(Launch(launches.clone()))],
    )
    .await;
    (h, launches)
}

/// Reads frames of `chat` until the turn asks something; returns the question frame.
async fn question(client: &mut WsClient, chat: &str) -> Value {
    loop {
        let frame = client.next_frame().await;
        if frame["chat_id"] == chat && frame["waiting_for"].is_string() {
            return frame;
        }
        assert_ne!(
            frame["type"], "done",
            "the turn ended without asking: {frame}"
        );
    }
}

/// The latest tool result the model read, from the last request.
fn result_of(llm: &ScriptedLlm) -> (String, bool) {
    let request = llm.requests().pop().expect("request");
    let result = util::conversation(&request)
        .into_iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("a tool result");
    let content = result["content"].as_str().expect("text").to_owned();
    (content.clone(), content.starts_with("error"))
}

/// 5. Nothing runs before `/approve`; other chats are served while the turn waits; the
/// answer resumes the same turn.
#[tokio::test]
async fn approve_runs_the_tool_and_resumes_the_turn() {
    let (mut h, launches) = with_approvals(60).await;
    h.llm.push(Reply::tool("launch", json!({"target": "moon"})));
    h.client.send("c", "launch it").await;
    let asked = question(&mut h.client, "c").await;
    assert_eq!(asked["waiting_for"], "approval");
    let text = asked["text"].as_str().expect("text");
    assert!(
        text.contains("Run `launch` with `{\"target\":\"moon\"}`?"),
        "{text}"
    );
    assert_eq!(launches.load(Ordering::SeqCst), 0, "not before consent");

    // Another chat is answered while this one waits.
    assert_eq!(h.client.say("other", "hello").await.reply(), "echo: hello");
    assert_eq!(launches.load(Ordering::SeqCst), 0);

    h.llm.push(Reply::text("Launched."));
    h.client.send("c", "/approve").await;
    let turn = h.client.turn("c").await;
    assert_eq!(turn.reply(), "Launched.");
    assert_eq!(turn.of_type("done").len(), 1, "one turn, not two");
    assert_eq!(launches.load(Ordering::SeqCst), 1);
    assert_eq!(result_of(&h.llm), ("launched".to_owned(), false));
    h.daemon.shutdown().await;
}

/// A page shown again while a turn waits for approval (a reload) learns of the question
/// from its `history` frame and can answer it; the tool is announced only once approved,
/// with its arguments, and its end with the start of its result and how long it ran.
#[tokio::test]
async fn a_page_shown_again_mid_approval_gets_the_question_and_the_tool_starts_after_it() {
    let (mut h, launches) = with_approvals(60).await;
    h.llm.push(Reply::tool("launch", json!({"target": "moon"})));
    h.client.send("c", "launch it").await;
    let mut before = Vec::new();
    loop {
        let frame = h.client.next_frame().await;
        if frame["waiting_for"] == "approval" {
            break;
        }
        before.push(frame);
    }
    assert!(
        before.iter().all(|frame| frame["type"] != "tool"),
        "no tool frame before the approval: {before:?}"
    );

    // The page reloads: a new socket asks for the chat's history.
    let mut page = WsClient::connect(h.daemon.addr()).await;
    page.send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;
    page.send_json(json!({"type": "history", "chat_id": "c"}))
        .await;
    let history = page.wait_for("history").await;
    assert_eq!(history["running"], true, "{history}");
    assert_eq!(history["waiting"]["waiting_for"], "approval", "{history}");
    assert!(
        history["waiting"]["text"]
            .as_str()
            .is_some_and(|text| text.contains("Run `launch`")),
        "{history}"
    );

    // It answers from there.
    h.llm.push(Reply::text("Launched."));
    page.send("c", "/approve").await;
    let turn = page.turn("c").await;
    assert_eq!(turn.reply(), "Launched.");
    assert_eq!(launches.load(Ordering::SeqCst), 1);
    let tools = turn.of_type("tool");
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!(tools[0]["status"], "started");
    assert_eq!(tools[0]["detail"], r#"{"target":"moon"}"#);
    assert_eq!(tools[1]["status"], "finished");
    assert_eq!(tools[1]["detail"], "launched");
    assert!(tools[1]["elapsed_ms"].is_u64(), "{:?}", tools[1]);

    page.send_json(json!({"type": "history", "chat_id": "c"}))
        .await;
    let history = page.wait_for("history").await;
    assert_eq!(history["running"], false, "{history}");
    assert!(history.get("waiting").is_none(), "{history}");
    h.daemon.shutdown().await;
}

/// A page that reconnects sends its unconfirmed messages again, with their ids: the one
/// whose turn waits for approval must not be taken as the (denying) answer.
#[tokio::test]
async fn a_message_sent_again_is_not_taken_as_the_answer_to_its_own_question() {
    let (mut h, launches) = with_approvals(60).await;
    h.llm.push(Reply::tool("launch", json!({"target": "moon"})));
    let message = json!({"type": "message", "chat_id": "c", "id": "m-1", "content": "launch it"});
    h.client.send_json(message.clone()).await;
    question(&mut h.client, "c").await;

    let mut again = WsClient::connect(h.daemon.addr()).await;
    again.send_json(message).await;
    // Still waiting: the history says so, and nothing was launched or denied.
    again
        .send_json(json!({"type": "history", "chat_id": "c"}))
        .await;
    let history = again.wait_for("history").await;
    assert_eq!(history["waiting"]["waiting_for"], "approval", "{history}");
    assert_eq!(h.llm.requests().len(), 1, "the turn went on");

    h.llm.push(Reply::text("Launched."));
    again.send("c", "/approve").await;
    assert_eq!(again.turn("c").await.reply(), "Launched.");
    assert_eq!(launches.load(Ordering::SeqCst), 1);
    assert_eq!(result_of(&h.llm), ("launched".to_owned(), false));
    // The repeat was recognised as handled, and not answered again.
    let handled = again.wait_for("handled").await;
    assert_eq!(handled["id"], "m-1");
    assert_eq!(h.llm.requests().len(), 2);
    h.daemon.shutdown().await;
}

/// 5. `/deny` gives a denied result the model reads; so does a new message the person
/// writes instead — which is then answered as a message of its own, not spent.
#[tokio::test]
async fn deny_gives_the_model_a_denied_result() {
    let (mut h, launches) = with_approvals(60).await;
    for answer in ["/deny", "not now, it's raining"] {
        h.llm.push(Reply::tool("launch", json!({"target": "moon"})));
        h.client.send("c", "launch it").await;
        question(&mut h.client, "c").await;
        h.llm.push(Reply::text("Understood, not launched."));
        let new_message = !answer.starts_with('/');
        if new_message {
            // Its own answer comes after the denied turn's (it waits behind it).
            h.llm.push(Reply::text("Then we wait for the sun."));
        }
        h.client.send("c", answer).await;
        assert_eq!(
            h.client.turn("c").await.reply(),
            "Understood, not launched."
        );
        if new_message {
            assert_eq!(
                h.client.turn("c").await.reply(),
                "Then we wait for the sun."
            );
            let requests = h.llm.requests();
            let denied = util::tool_results(&requests[requests.len() - 2]);
            assert!(
                denied.iter().any(|r| r.contains("the user denied it")),
                "{denied:?}"
            );
            let asked = util::conversation(&h.llm.requests().pop().expect("the new message's"));
            assert_eq!(
                asked.last().map(|m| m["content"].clone()),
                Some(json!(answer))
            );
        } else {
            let (content, is_error) = result_of(&h.llm);
            assert!(
                is_error && content.contains("the user denied it"),
                "{content}"
            );
        }
    }
    assert_eq!(launches.load(Ordering::SeqCst), 0);
    // Outside a wait, /approve has nothing to answer.
    let turn = h.client.say("c", "/approve").await;
    assert_eq!(turn.reply(), "Nothing is waiting for your approval.");
    h.daemon.shutdown().await;
}

/// 5. No answer within the timeout counts as denied.
#[tokio::test]
async fn no_answer_in_time_counts_as_denied() {
    let (mut h, launches) = with_approvals(1).await;
    h.llm.push(Reply::tool("launch", json!({})));
    h.llm
        .push(Reply::text("Nobody answered, so I did not launch."));
    let turn = h.client.say("c", "launch it").await;
    assert_eq!(turn.reply(), "Nobody answered, so I did not launch.");
    let (content, is_error) = result_of(&h.llm);
    assert!(is_error && content.contains("within 1 s"), "{content}");
    assert_eq!(launches.load(Ordering::SeqCst), 0);
    // A message after the wait is a turn of its own.
    assert_eq!(
        h.client.say("c", "/approve").await.reply(),
        "Nothing is waiting for your approval."
    );
    h.daemon.shutdown().await;
}

/// 6. `ask_user`: the question reaches the chat, the answer resumes the same turn, and
/// history holds one coherent turn.
#[tokio::test]
async fn ask_user_resumes_the_same_turn_with_the_answer() {
    let mut h = Harness::start("").await;
    h.llm.strict();
    h.llm
        .push(Reply::tool("ask_user", json!({"question": "Which city?"})));
    h.client.send("c", "what's the weather?").await;
    let asked = question(&mut h.client, "c").await;
    assert_eq!(asked["waiting_for"], "answer");
    assert_eq!(asked["text"], "Which city?");

    h.llm.push(Reply::text("Sunny in Paris."));
    h.client.send("c", "Paris").await;
    let turn = h.client.turn("c").await;
    assert_eq!(turn.reply(), "Sunny in Paris.");
    assert_eq!(turn.of_type("done").len(), 1);
    assert_eq!(result_of(&h.llm), ("Paris".to_owned(), false));
    assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());

    let records = util::read_session_file(&util::session_file(h.dir.path(), "c"));
    let roles: Vec<&str> = records.iter().filter_map(|r| r["role"].as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{records:?}"
    );
    // The next message is a new turn as usual.
    assert_eq!(h.client.say("c", "thanks").await.reply(), "echo: thanks");
    h.daemon.shutdown().await;
}

/// 6. A restart while the turn waits leaves a valid session: the next turn's request is
/// one a strict provider accepts.
#[tokio::test]
async fn a_restart_while_asking_leaves_a_valid_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    let daemon = util::start_configured(&llm, dir.path(), Extra::default(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    llm.push(Reply::tool("ask_user", json!({"question": "Which city?"})));
    client.send("c", "what's the weather?").await;
    question(&mut client, "c").await;
    daemon.shutdown().await;

    let daemon = util::start_configured(&llm, dir.path(), Extra::default(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    assert_eq!(
        client.say("c", "hello again").await.reply(),
        "echo: hello again"
    );
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    let request = llm.requests().pop().expect("request");
    util::assert_no_orphans(&util::conversation(&request));
    daemon.shutdown().await;
}

/// On Telegram as a person would use it: the question arrives as a message of its own, the
/// person's plain reply is its answer, and the turn's reply comes once — the answer is not
/// a turn of its own (nothing replies to it).
#[tokio::test]
async fn a_telegram_user_answers_the_question_in_the_chat() {
    use switchboard_testkit::FakeTelegram;
    use switchboard_testkit::telegram::TEST_TOKEN;
    const ADA: u64 = 42;
    let chat = 42i64;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake Telegram");
    let tables = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\n\
         allow_from = [\"{ADA}\"]\npoll_timeout_secs = 1\nstream = false",
        fake.api_url()
    );
    let extra = Extra {
        tables: &tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    llm.push(Reply::tool("ask_user", json!({"question": "Which city?"})));
    fake.private_text(ADA, "what's the weather?");
    fake.wait_until(util::PATIENCE, "the question", |f| {
        f.messages_to(chat)
            .iter()
            .any(|m| m.visible.contains("Which city?"))
    })
    .await;
    llm.push(Reply::text("Sunny in Paris."));
    let answer = fake.private_text(ADA, "Paris");
    fake.wait_until(util::PATIENCE, "the reply", |f| {
        f.messages_to(chat)
            .iter()
            .any(|m| m.visible == "Sunny in Paris.")
    })
    .await;
    let sent = fake.messages_to(chat);
    assert_eq!(sent.len(), 2, "the question and the reply: {sent:?}");
    assert!(sent.iter().all(|m| m.reply_to != Some(answer)), "{sent:?}");
    assert_eq!(result_of(&llm), ("Paris".to_owned(), false));
    assert_eq!(llm.requests().len(), 2);
    daemon.shutdown().await;
}
