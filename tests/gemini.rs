//! Google's Gemini API, natively, through the daemon: the scripted server speaks it as Google
//! does (its URL per model and method, SSE with one response per event, calls whole and
//! signed, errors as `{"error": {"code", "message", "status"}}`), and in strict mode refuses
//! what Gemini refuses — a call of the current turn without its thought signature, a result
//! that answers no call, a schema outside Gemini's subset.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_testkit::{FakeTelegram, Reply, ScriptedLlm};

use crate::util::{self, Extra, Harness, PATIENCE, WsClient};

const GEMINI: &str = "provider = \"gemini\"";

/// The parts of each content of a Gemini request, as `(role, kind)`: `("model",
/// "functionCall")`, `("user", "functionResponse")`, …
fn shape(request: &Value) -> Vec<(String, String)> {
    let mut shape = Vec::new();
    for content in request["contents"].as_array().expect("contents") {
        let role = content["role"].as_str().unwrap_or_default();
        for part in content["parts"].as_array().expect("parts") {
            let kind = ["text", "functionCall", "functionResponse", "inlineData"]
                .into_iter()
                .find(|kind| part.get(*kind).is_some())
                .unwrap_or("?");
            shape.push((role.to_owned(), kind.to_owned()));
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

/// A multi-step tool loop: two calls at once (Gemini signs the first only), then one more,
/// then the answer, streamed. Every request passes Gemini's rules; each step's signature goes
/// back on its call, exactly as it came, with the results paired by id and name — in the
/// next turn too, and after a restart (the signature is kept in the session's history).
#[tokio::test]
async fn a_tool_loop_with_parallel_calls_sends_each_thought_signature_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    let extra = || Extra {
        llm: GEMINI,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    llm.push(Reply::tools([
        ("echo", json!({"text": "a"})),
        ("echo", json!({"text": "b"})),
    ]));
    llm.push(Reply::tool("echo", json!({"text": "c"})));
    llm.push(Reply::paced("all three echoed", Duration::ZERO));
    let turn = client.say("c", "echo three things").await;
    assert_eq!(turn.reply(), "all three echoed");
    assert_eq!(turn.streamed(), "all three echoed");
    assert_eq!(llm.violations(), Vec::<String>::new());

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests.iter().all(|r| r["stream"] == true),
        "streamGenerateContent"
    );
    let last = &requests[2];
    assert_eq!(
        shape(last),
        pairs(&[
            ("user", "text"),
            ("model", "functionCall"),
            ("model", "functionCall"),
            ("user", "functionResponse"),
            ("user", "functionResponse"),
            ("model", "functionCall"),
            ("user", "functionResponse"),
        ])
    );
    let contents = &last["contents"];
    let calls = &contents[1]["parts"];
    assert_eq!(calls[0]["thoughtSignature"], "sig_1", "the first step's");
    assert!(calls[1].get("thoughtSignature").is_none(), "{calls}");
    assert_eq!(contents[3]["parts"][0]["thoughtSignature"], "sig_2");
    let results = &contents[2]["parts"];
    for (at, text) in ["a", "b"].into_iter().enumerate() {
        let (call, result) = (&calls[at]["functionCall"], &results[at]["functionResponse"]);
        assert_eq!(result["id"], call["id"]);
        assert_eq!(result["name"], "echo");
        assert_eq!(result["response"], json!({"output": text}));
    }
    assert!(
        last["tools"][0]["functionDeclarations"]
            .as_array()
            .is_some_and(|declarations| declarations.iter().any(|d| d["name"] == "echo")),
        "{}",
        last["tools"]
    );

    // The next turn sends the history with its signatures; so does a restarted daemon,
    // which read them back from the session file.
    let turn = client.say("c", "and now?").await;
    assert_eq!(turn.reply(), "echo: and now?");
    daemon.shutdown().await;
    let daemon = util::start_configured(&llm, dir.path(), extra(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    let turn = client.say("c", "still there?").await;
    assert_eq!(turn.reply(), "echo: still there?");
    let requests = llm.requests();
    for request in &requests[3..] {
        assert_eq!(
            request["contents"][1]["parts"][0]["thoughtSignature"], "sig_1",
            "{request}"
        );
        assert_eq!(
            request["contents"][3]["parts"][0]["thoughtSignature"],
            "sig_2"
        );
    }
    assert_eq!(llm.violations(), Vec::<String>::new());
    daemon.shutdown().await;
}

/// An answer Gemini's safety filter blocked is told in one sentence naming what it blocked
/// — never an empty reply, never silence; a blocked prompt the same way; an answer cut at
/// the output limit says so after its text.
#[tokio::test]
async fn a_safety_block_is_told_in_one_sentence() {
    let mut h = Harness::with_config(Extra {
        llm: GEMINI,
        ..Extra::default()
    })
    .await;
    h.llm
        .push(Reply::Blocked("HARM_CATEGORY_DANGEROUS_CONTENT".into()));
    let turn = h.client.say("c", "something it will not say").await;
    assert_eq!(
        turn.reply(),
        "(The model's provider stopped this answer: its safety filter said SAFETY \
         (HARM_CATEGORY_DANGEROUS_CONTENT).)"
    );
    h.llm.push(Reply::Raw(
        json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": {"promptTokenCount": 12}})
        .to_string(),
    ));
    let turn = h.client.say("c", "something worse").await;
    assert_eq!(
        turn.reply(),
        "(The model's provider stopped this answer: its safety filter said PROHIBITED_CONTENT.)"
    );
    // An answer cut at the output limit keeps its text and says why it ends there.
    h.llm.push(Reply::Raw(
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "The first half"}]},
            "finishReason": "MAX_TOKENS"}]})
        .to_string(),
    ));
    let turn = h.client.say("c", "something long").await;
    assert_eq!(
        turn.reply(),
        "The first half\n\n(The answer was cut off: the model reached its output limit, \
         llm.max_tokens.)"
    );
    h.daemon.shutdown().await;
}

/// A key Google does not know (HTTP 400, not 401) is told as the key to fix, and not
/// retried.
#[tokio::test]
async fn a_key_google_refuses_is_named_as_the_key_to_fix() {
    let mut h = Harness::with_config(Extra {
        llm: "provider = \"gemini\"\napi_key = \"not-a-key\"",
        ..Extra::default()
    })
    .await;
    h.llm.respond_with(|_| {
        Reply::ErrorWithMessage(
            400,
            "API key not valid. Please pass a valid API key.".into(),
        )
    });
    let turn = h.client.say("c", "hello").await;
    let error = turn.error().expect("an error");
    assert!(
        error.contains("refused the API key") && error.contains("llm.api_key"),
        "{error}"
    );
    assert_eq!(h.llm.requests().len(), 1, "a refused key is not retried");
    h.daemon.shutdown().await;
}

/// Gemini answering 429 on every attempt: after its retries the next provider of the
/// chain (an OpenAI-compatible one) answers, and the person is told who.
#[tokio::test]
async fn a_rate_limited_gemini_fails_over_to_the_next_provider() {
    let gemini = ScriptedLlm::start().await.expect("gemini");
    gemini.respond_with(|_| Reply::Error {
        status: 429,
        retry_after: Some(0),
    });
    let fallback = ScriptedLlm::start().await.expect("fallback");
    let llm_lines = format!(
        "{GEMINI}\nmax_retries = 1\nrequest_timeout_secs = 10\nfallbacks = [{{ provider = \
         \"openai\", base_url = \"{}\", model = \"backup\" }}]",
        fallback.base_url()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = Extra {
        llm: &llm_lines,
        ..Extra::default()
    };
    let daemon = util::start_configured(&gemini, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    let turn = client.say("c", "hello").await;
    assert_eq!(turn.reply(), "echo: hello");
    assert_eq!(gemini.requests().len(), 2, "1 attempt + max_retries = 1");
    assert!(
        gemini.requests()[0]["contents"].is_array(),
        "went to Gemini"
    );
    assert_eq!(fallback.requests().len(), 1);
    let statuses = turn.statuses();
    assert!(
        statuses.iter().any(|s| s.contains("asking openai backup")),
        "{statuses:?}"
    );
    daemon.shutdown().await;
}

/// A Gemini answer streams into Telegram as one message edited in place, ending with the
/// whole reply.
#[tokio::test]
async fn a_gemini_answer_streams_into_telegram() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake Telegram");
    let tables = crate::telegram::table(&fake, "stream = true");
    let extra = Extra {
        llm: GEMINI,
        tables: &tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let reply: String = (1..=30).map(|n| format!("word{n} ")).collect();
    let reply = reply.trim_end().to_owned();
    llm.push(Reply::paced(reply.clone(), Duration::from_millis(40)));
    let asked = fake.private_text(crate::telegram::ADA, "stream something");
    let chat = crate::telegram::chat(crate::telegram::ADA);
    fake.wait_until(PATIENCE, "the draft ending with the whole reply", |f| {
        f.messages_to(chat)
            .first()
            .is_some_and(|sent| f.current_text(chat, sent.message_id).as_deref() == Some(&reply))
    })
    .await;
    let sent = fake.messages_to(chat);
    assert_eq!(sent.len(), 1, "one message, edited in place");
    assert_eq!(sent[0].reply_to, Some(asked));
    let writes = fake
        .sent()
        .into_iter()
        .filter(|s| s.chat == chat && s.message_id == sent[0].message_id)
        .count();
    assert!(writes >= 3, "it streamed: {writes} writes");
    assert_eq!(llm.requests()[0]["stream"], true);
    daemon.shutdown().await;
}

/// Gemini's usage lands in `/usage`: the prompt's tokens with the cached ones, the
/// answer's with the thoughts' (billed as output) told apart.
#[tokio::test]
async fn thoughts_and_cached_tokens_are_counted_in_usage() {
    let mut h = Harness::with_config(Extra {
        llm: GEMINI,
        ..Extra::default()
    })
    .await;
    h.llm.set_usage(switchboard_testkit::TokenUsage {
        input: 400,
        output: 90,
        cached: 100,
        thinking: 60,
    });
    assert_eq!(h.client.say("c", "think").await.reply(), "echo: think");
    let usage = h.client.say("c", "/usage").await;
    assert!(
        usage
            .reply()
            .starts_with("Today: 400 tokens in (100 cached), 90 out (60 thinking)"),
        "{}",
        usage.reply()
    );
    h.daemon.shutdown().await;
}
