//! The agent loop through the daemon: Anthropic and OpenAI alike, a provider switched in
//! config mid-conversation, failover, the token budget, verification, and responses that
//! are cut, malformed or empty.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Extra, Harness, WsClient};

/// The messages of a request in either dialect, tool calls and results as
/// `(role, kind)` pairs: `("assistant", "tool_use")`, `("user", "tool_result")`, …
fn shape(request: &Value) -> Vec<(String, String)> {
    let mut shape = Vec::new();
    for message in util::conversation(request) {
        let role = message["role"].as_str().unwrap_or_default().to_owned();
        match &message["content"] {
            Value::Array(blocks) => {
                for block in blocks {
                    shape.push((role.clone(), block["type"].as_str().unwrap_or("?").into()));
                }
            }
            _ if message["tool_calls"].is_array() => shape.push((role, "tool_use".into())),
            _ if role == "tool" => shape.push(("user".into(), "tool_result".into())),
            _ => shape.push((role, "text".into())),
        }
    }
    shape
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// A daemon whose `[llm]` speaks `provider`'s API (to the same scripted server).
async fn with_provider(provider: &str) -> Harness {
    let llm_line = format!("provider = \"{provider}\"");
    Harness::with_config(Extra {
        llm: &llm_line,
        ..Extra::default()
    })
    .await
}

/// 1. The same tool-calling conversation works through both providers, streamed.
#[tokio::test]
async fn a_tool_calling_turn_works_through_anthropic_and_openai() {
    for provider in ["anthropic", "openai"] {
        let mut h = with_provider(provider).await;
        h.llm.strict();
        h.llm.push(Reply::tool("echo", json!({"text": "ping"})));
        h.llm
            .push(Reply::paced("the tool said ping", Duration::ZERO));
        let turn = h.client.say("c", "use the tool").await;
        assert_eq!(turn.reply(), "the tool said ping", "{provider}");
        assert_eq!(turn.streamed(), "the tool said ping", "{provider}");
        assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());
        let requests = h.llm.requests();
        assert_eq!(
            requests[0].get("system").is_some(),
            provider == "anthropic",
            "{provider} requests go to its own API"
        );
        assert_eq!(
            shape(&requests[1]),
            pairs(&[
                ("user", "text"),
                ("assistant", "tool_use"),
                ("user", "tool_result")
            ]),
            "{provider}"
        );
        h.daemon.shutdown().await;
    }
}

/// 1. A session continues after the provider is switched in config: the history written
/// through OpenAI (a tool call and its result) is read by Anthropic without loss.
#[tokio::test]
async fn a_session_continues_after_switching_provider() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    let daemon = util::start_configured(&llm, dir.path(), Extra::default(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    llm.push(Reply::tool("echo", json!({"text": "first"})));
    llm.push(Reply::text("done with the first"));
    assert_eq!(client.say("c", "one").await.reply(), "done with the first");
    daemon.shutdown().await;

    let extra = Extra {
        llm: "provider = \"anthropic\"",
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    assert_eq!(client.say("c", "two").await.reply(), "echo: two");
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    let request = llm.requests().pop().expect("request");
    assert!(request["system"].is_string(), "went to Anthropic");
    let messages = &request["messages"];
    assert_eq!(messages[1]["content"][0]["input"], json!({"text": "first"}));
    assert_eq!(
        messages[2]["content"][0]["tool_use_id"],
        messages[1]["content"][0]["id"]
    );
    assert_eq!(messages[2]["content"][0]["content"], "first");
    assert_eq!(messages[3]["content"][0]["text"], "done with the first");
    daemon.shutdown().await;
}

/// 2. The primary answers 503 every time: it gets exactly its configured attempts, then
/// the fallback answers; with both down the person gets a clear error in time.
#[tokio::test]
async fn the_fallback_answers_when_the_primary_keeps_failing() {
    let primary = ScriptedLlm::start().await.expect("primary");
    primary.respond_with(|_| Reply::Error {
        status: 503,
        retry_after: None,
    });
    let fallback = ScriptedLlm::start().await.expect("fallback");
    let llm_lines = format!(
        "max_retries = 1\nrequest_timeout_secs = 10\nfallbacks = [{{ provider = \"anthropic\", \
         base_url = \"{}\", model = \"claude-scripted\" }}]",
        fallback.base_url()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = Extra {
        llm: &llm_lines,
        ..Extra::default()
    };
    let daemon = util::start_configured(&primary, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;

    let turn = client.say("c", "hello").await;
    assert_eq!(turn.reply(), "echo: hello");
    assert_eq!(primary.requests().len(), 2, "1 attempt + max_retries = 1");
    assert_eq!(fallback.requests().len(), 1);
    let statuses = turn.statuses();
    assert!(
        statuses
            .iter()
            .any(|s| s.contains("asking anthropic claude-scripted")),
        "{statuses:?}"
    );

    fallback.respond_with(|_| Reply::Error {
        status: 500,
        retry_after: None,
    });
    let started = Instant::now();
    let turn = client.say("c", "anyone?").await;
    let error = turn.error().expect("an error");
    assert!(error.contains("every configured model failed"), "{error}");
    assert!(error.contains("openai scripted: "), "{error}");
    assert!(error.contains("anthropic claude-scripted: "), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "within 2 × request_timeout_secs"
    );
    daemon.shutdown().await;
}

/// 3. A model that calls tools for ever is stopped by the token budget, which the reply
/// names.
#[tokio::test]
async fn a_token_budget_ends_a_looping_turn_with_the_reason() {
    let mut h = Harness::start("max_turn_tokens = 40").await;
    h.llm
        .respond_with(|_| Reply::tool("echo", json!({"text": "again"})));
    let turn = h.client.say("c", "loop").await;
    let reply = turn.reply();
    assert!(reply.contains("agent.max_turn_tokens"), "{reply}");
    assert!(reply.contains("45 tokens"), "three calls of 15: {reply}");
    assert_eq!(turn.of_type("done")[0]["end"], "token_limit");
    assert_eq!(h.llm.requests().len(), 3);
    h.daemon.shutdown().await;
}

/// A turn past its time budget stops as `/stop` would — the running tool gets its result,
/// the session stays valid — and says why.
#[tokio::test]
async fn a_turn_past_its_time_budget_stops_and_says_why() {
    let mut h = Harness::start("turn_timeout_secs = 0.5").await;
    h.llm.strict();
    h.llm.push(Reply::tool("sleep", json!({"ms": 30_000})));
    let started = Instant::now();
    let turn = h.client.say("c", "take your time").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped in time"
    );
    let reply = turn.reply();
    assert!(reply.contains("agent.turn_timeout_secs"), "{reply}");
    assert_eq!(turn.of_type("done")[0]["end"], "time_limit");
    // The next turn's history is valid: the cut call has its result.
    assert_eq!(
        h.client.say("c", "and now?").await.reply(),
        "echo: and now?"
    );
    assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());
    h.daemon.shutdown().await;
}

const LEAKED: &str =
    "<tool_call>{\"name\": \"echo\", \"arguments\": {\"text\": \"x\"}}</tool_call>";

/// 4. A reply with leaked tool-call markup fails the rules and the retry passes; the
/// rejected attempt is never the reply, and history keeps one coherent turn.
#[tokio::test]
async fn verification_rejects_leaked_markup_and_the_retry_passes() {
    let mut h = Harness::with_config(Extra {
        tables: "[agent.verify]\nenabled = true\nmax_chars = 200",
        ..Extra::default()
    })
    .await;
    h.llm.push(Reply::text(LEAKED));
    h.llm.push(Reply::text("A proper answer."));
    let turn = h.client.say("c", "answer me").await;
    assert_eq!(turn.reply(), "A proper answer.");
    assert_eq!(turn.of_type("message").len(), 1);
    assert!(
        !turn.of_type("reset").is_empty(),
        "the rejected draft is reset"
    );
    let statuses = turn.statuses();
    assert!(
        statuses.iter().any(|s| s.contains("did not pass a check")),
        "{statuses:?}"
    );
    // The model read why.
    let retry = util::conversation(&h.llm.requests()[1]);
    let feedback = retry.last().expect("feedback")["content"]
        .as_str()
        .expect("text")
        .to_owned();
    assert!(feedback.contains("tool-call markup"), "{feedback}");
    // History: the question and the passing answer only.
    let records = util::read_session_file(&util::session_file(h.dir.path(), "c"));
    let texts: Vec<&str> = records
        .iter()
        .filter_map(|r| r["content"].as_str())
        .collect();
    assert_eq!(texts, ["answer me", "A proper answer."]);
    h.daemon.shutdown().await;
}

/// 4. Three failures give the graceful message; a judge's FAIL counts like a rule's.
#[tokio::test]
async fn three_rejections_give_the_graceful_failure() {
    let judge = ScriptedLlm::start().await.expect("judge");
    judge.respond_with(|_| Reply::text("FAIL: it does not answer the question"));
    let tables = format!(
        "[agent.verify]\nenabled = true\n[agent.verify.judge]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"judge\"",
        judge.base_url()
    );
    let mut h = Harness::with_config(Extra {
        tables: &tables,
        ..Extra::default()
    })
    .await;
    h.llm.push(Reply::text(LEAKED));
    h.llm.push(Reply::text(""));
    h.llm.push(Reply::text("Plausible but judged wrong."));
    let turn = h.client.say("c", "question").await;
    let reply = turn.reply();
    assert!(reply.contains("could not produce an answer"), "{reply}");
    assert_eq!(turn.of_type("done")[0]["end"], "unverified");
    for rejected in ["<tool_call>", "Plausible"] {
        assert!(
            turn.of_type("message")
                .iter()
                .all(|m| !m["content"].as_str().unwrap_or_default().contains(rejected)),
            "{rejected} was never a reply"
        );
    }
    // Only the third attempt got as far as the judge (the first two failed the rules).
    let judged = judge.requests();
    assert_eq!(judged.len(), 1);
    let text = judged[0]["messages"][1]["content"].as_str().expect("text");
    assert!(text.contains("Plausible but judged wrong."), "{text}");
    h.daemon.shutdown().await;
}

/// 7. A stream cut inside a tool call is not run: the call is tried again.
#[tokio::test]
async fn a_stream_cut_mid_tool_call_is_tried_again_not_run() {
    for provider in ["openai", "anthropic"] {
        let mut h = with_provider(provider).await;
        h.llm.push(Reply::CutToolCall("echo".into()));
        h.llm.push(Reply::text("recovered"));
        let turn = h.client.say("c", "go").await;
        assert_eq!(turn.reply(), "recovered", "{provider}");
        assert!(turn.of_type("tool").is_empty(), "{provider}: no tool ran");
        assert_eq!(h.llm.requests().len(), 2);
        h.daemon.shutdown().await;
    }
}

/// 7. A response that is not JSON, and one with no choices, are asked again; three in a
/// row end the turn with a clear error. Broken tool arguments become an error result.
#[tokio::test]
async fn malformed_and_empty_responses_are_handled_without_a_panic() {
    let mut h = Harness::start("stream = false").await;
    h.llm.push(Reply::Raw("{\"choices\": [".into()));
    h.llm.push(Reply::Raw("{\"choices\": []}".into()));
    h.llm.push(Reply::text("third time lucky"));
    assert_eq!(h.client.say("c", "hi").await.reply(), "third time lucky");

    for _ in 0..3 {
        h.llm.push(Reply::Raw("not json at all".into()));
    }
    let turn = h.client.say("c", "again").await;
    let error = turn.error().expect("an error");
    assert!(error.contains("failed 3 times in a row"), "{error}");

    h.llm.push(Reply::Raw(
        json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "b1", "type": "function", "function": {"name": "echo", "arguments": "{broken"}}
        ]}, "finish_reason": "tool_calls"}]})
        .to_string(),
    ));
    h.llm.push(Reply::text("noted"));
    assert_eq!(h.client.say("c", "tool").await.reply(), "noted");
    let request = h.llm.requests().pop().expect("request");
    let result = util::conversation(&request)
        .into_iter()
        .find(|m| m["tool_call_id"] == "b1")
        .expect("a result");
    let content = result["content"].as_str().expect("text");
    assert!(content.contains("not valid JSON"), "{content}");
    util::assert_no_orphans(&util::conversation(&request));
    h.daemon.shutdown().await;
}
