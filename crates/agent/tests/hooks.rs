//! Hooks see and shape a turn: the request before each LLM call, every tool call (denied,
//! skipped, its arguments or result changed) and the turn's end — and a denied or skipped
//! tool never runs. The model is a script of responses (the loop is the subject here; the
//! wire formats have their own tests against the testkit's servers).

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_agent::{
    Agent, AgentConfig, Approval, BeforeTool, Hook, ToolOutcome, TurnInfo, TurnInput, TurnSummary,
};
use switchboard_core::{ChatMessage, SessionKey, ToolCall, TurnEnd};
use switchboard_llm::{ChatRequest, ChatResponse, LlmError, LlmProvider, StreamSink};
use switchboard_sessions::JsonlStore;
use switchboard_tools::{
    Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSources, Workspace,
};
use tokio_util::sync::CancellationToken;

/// Answers with the scripted responses in turn, recording each request.
struct Script {
    responses: Mutex<Vec<ChatResponse>>,
    requests: Mutex<Vec<ChatRequest>>,
}

#[async_trait]
impl LlmProvider for Script {
    fn name(&self) -> &str {
        "script"
    }
    fn model(&self) -> &str {
        "script"
    }
    async fn chat(
        &self,
        request: &ChatRequest,
        _events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        self.requests.lock().expect("lock").push(request.clone());
        let mut responses = self.responses.lock().expect("lock");
        Ok(if responses.is_empty() {
            ChatResponse {
                content: "nothing scripted".into(),
                ..ChatResponse::default()
            }
        } else {
            responses.remove(0)
        })
    }
}

/// A tool that counts its calls and returns its `text` argument.
#[derive(Default)]
struct Counted {
    name: &'static str,
    calls: AtomicUsize,
}

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "Returns its text."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(args["text"].as_str().unwrap_or_default().into())
    }
}

/// The policy under test: marks the prompt, denies `danger`, skips `cached`, shouts `echo`'s
/// argument and tags its result, and notes what it saw.
#[derive(Default)]
struct Policy {
    responses_seen: AtomicUsize,
    ended: Mutex<Option<(Option<TurnEnd>, String)>>,
}

#[async_trait]
impl Hook for Policy {
    async fn before_llm(&self, _turn: TurnInfo<'_>, request: &mut Cow<'_, ChatRequest>) {
        request.to_mut().system.push_str("\n[policy: be brief]");
    }
    async fn after_llm(&self, _turn: TurnInfo<'_>, _response: &ChatResponse) {
        self.responses_seen.fetch_add(1, Ordering::SeqCst);
    }
    async fn approve_tool(&self, _turn: TurnInfo<'_>, call: &ToolCall, _args: &Value) -> Approval {
        if call.name == "danger" {
            Approval::Deny("the person did not consent".into())
        } else {
            Approval::Approve
        }
    }
    async fn before_tool(
        &self,
        _turn: TurnInfo<'_>,
        call: &ToolCall,
        args: &mut Value,
    ) -> BeforeTool {
        match call.name.as_str() {
            "cached" => BeforeTool::Skip("from the cache".into()),
            "echo" => {
                let loud = args["text"].as_str().unwrap_or_default().to_uppercase();
                args["text"] = json!(loud);
                BeforeTool::Run
            }
            _ => BeforeTool::Run,
        }
    }
    async fn after_tool(&self, _turn: TurnInfo<'_>, call: &ToolCall, outcome: &mut ToolOutcome) {
        if call.name == "echo" {
            outcome.content.push_str(" [checked]");
        }
    }
    async fn on_turn_end(&self, _turn: TurnInfo<'_>, summary: TurnSummary<'_>) {
        *self.ended.lock().expect("lock") = Some((summary.end, summary.text.to_owned()));
    }
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.to_string(),
        signature: None,
    }
}

#[tokio::test]
async fn hooks_shape_the_request_the_tool_calls_and_see_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = Arc::new(Workspace::new(&dir.path().join("ws"), &[], true).expect("workspace"));
    let store = Arc::new(JsonlStore::open(&dir.path().join("state")).expect("store"));
    let script = Arc::new(Script {
        responses: Mutex::new(vec![
            ChatResponse {
                tool_calls: vec![
                    call("1", "echo", json!({"text": "hi"})),
                    call("2", "danger", json!({"text": "rm"})),
                    call("3", "cached", json!({"text": "slow"})),
                ],
                ..ChatResponse::default()
            },
            ChatResponse {
                content: "done".into(),
                ..ChatResponse::default()
            },
        ]),
        requests: Mutex::new(Vec::new()),
    });
    let tools: Vec<Arc<Counted>> = ["echo", "danger", "cached"]
        .into_iter()
        .map(|name| {
            Arc::new(Counted {
                name,
                ..Counted::default()
            })
        })
        .collect();
    let mut registry = ToolRegistry::new();
    for tool in &tools {
        registry.register(tool.clone());
    }
    let policy = Arc::new(Policy::default());
    let sources = ToolSources::of([("test".to_owned(), registry)]).expect("one source");
    let agent = Agent::new(script.clone(), sources, store, AgentConfig::new(workspace))
        .with_hook(policy.clone());

    let key = SessionKey::of(&"test".into(), &"chat".into());
    let mut session = agent.load_session(&key).await.expect("session");
    let (events, _received) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    agent
        .run_turn(&mut session, TurnInput::text("go"), &cancel, &events)
        .await;

    let requests = script.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.system.ends_with("[policy: be brief]"))
    );
    let results: Vec<(String, bool)> = requests[1]
        .messages
        .iter()
        .filter_map(|m| match &**m {
            ChatMessage::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("HI [checked]".to_owned(), false),
            (
                "error: not run — the person did not consent".to_owned(),
                true
            ),
            ("from the cache".to_owned(), false),
        ]
    );
    let ran: Vec<usize> = tools
        .iter()
        .map(|t| t.calls.load(Ordering::SeqCst))
        .collect();
    assert_eq!(ran, [1, 0, 0], "the denied and the skipped call never ran");
    assert_eq!(policy.responses_seen.load(Ordering::SeqCst), 2);
    assert_eq!(
        *policy.ended.lock().expect("lock"),
        Some((Some(TurnEnd::Answered), "done".to_owned()))
    );
    // The session holds what the model saw: the changed results, in one coherent turn.
    let saved = session.messages();
    assert_eq!(
        saved.len(),
        6,
        "user, assistant with calls, three results, reply"
    );
}
