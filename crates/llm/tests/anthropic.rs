//! The Anthropic client against the scripted server's Messages endpoint, over real
//! sockets, and the failover chain between the two providers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use switchboard_core::{ChatMessage, ImagePart, ToolCall, ToolDefinition};
use switchboard_llm::{
    AnthropicProvider, ApiKey, ChatRequest, ChatResponse, Failover, ImageData, LlmError,
    LlmProvider, OpenAiProvider, ProviderConfig, RetryPolicy, Retrying, StopReason, StreamEvent,
};
use switchboard_testkit::{Reply, ScriptedLlm};

fn anthropic(base_url: String) -> AnthropicProvider {
    AnthropicProvider::new(ProviderConfig {
        base_url,
        api_key: ApiKey::Key("test-key".into()),
        model: "claude-scripted".into(),
        ..ProviderConfig::default()
    })
    .expect("provider")
}

fn retrying(inner: Arc<dyn LlmProvider>, max_retries: u32) -> Arc<dyn LlmProvider> {
    Arc::new(Retrying::new(
        inner,
        RetryPolicy {
            max_retries,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        },
        Duration::from_secs(60),
    ))
}

fn request(messages: Vec<ChatMessage>, stream: bool) -> ChatRequest {
    ChatRequest {
        system: "system prompt".into(),
        messages: messages.into_iter().map(Arc::new).collect(),
        tools: vec![ToolDefinition {
            name: "echo".into(),
            description: "echo".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        stream,
        images: Vec::new(),
    }
}

async fn chat(
    provider: &dyn LlmProvider,
    request: &ChatRequest,
) -> (Result<ChatResponse, LlmError>, String) {
    let shown = Mutex::new(String::new());
    let result = provider
        .chat(request, &|event| match event {
            StreamEvent::Text(text) => shown.lock().expect("lock").push_str(&text),
            StreamEvent::Reset => shown.lock().expect("lock").clear(),
            StreamEvent::Status(_) => {}
        })
        .await;
    (result, shown.into_inner().expect("lock"))
}

#[tokio::test]
async fn a_tool_calling_conversation_works_whole_and_streamed() {
    for stream in [false, true] {
        let llm = ScriptedLlm::start().await.expect("llm");
        llm.strict();
        llm.push(Reply::tool("echo", json!({"text": "hi"})));
        llm.push(Reply::text("it said hi"));
        let client = anthropic(llm.base_url());

        let mut messages = vec![ChatMessage::user("say hi")];
        let (first, _) = chat(&client, &request(messages.clone(), stream)).await;
        let first = first.expect("tool call");
        assert_eq!(first.stop, Some(StopReason::ToolUse));
        assert_eq!(first.tool_calls.len(), 1, "{first:?}");
        let call = first.tool_calls[0].clone();
        assert_eq!(
            (call.name.as_str(), call.arguments.as_str()),
            ("echo", r#"{"text":"hi"}"#)
        );

        messages.push(first.to_message());
        messages.push(ChatMessage::tool_result(&call, "hi", false));
        let (second, shown) = chat(&client, &request(messages, stream)).await;
        let second = second.expect("answer");
        assert_eq!(second.content, "it said hi");
        assert_eq!(second.stop, Some(StopReason::EndTurn));
        assert_eq!(second.usage.input_tokens, 10);
        if stream {
            assert_eq!(shown, "it said hi");
        }

        assert!(llm.violations().is_empty(), "{:?}", llm.violations());
        let sent = llm.requests();
        assert_eq!(sent[1]["system"], "system prompt");
        assert_eq!(sent[1]["stream"], stream);
        assert_eq!(
            sent[1]["tools"][0]["input_schema"],
            json!({"type": "object"})
        );
        assert_eq!(
            sent[1]["messages"][2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": call.id, "content": "hi"})
        );
    }
}

#[tokio::test]
async fn an_image_of_the_new_message_is_sent_as_an_image_block() {
    let llm = ScriptedLlm::start().await.expect("llm");
    let client = anthropic(llm.base_url());
    let mut request = request(
        vec![ChatMessage::User {
            content: "what is this?".into(),
            images: vec![ImagePart {
                path: "media/p.png".into(),
                mime: "image/png".into(),
            }],
            origin: switchboard_core::Origin::Person,
        }],
        false,
    );
    request.images.push(ImageData {
        path: "media/p.png".into(),
        mime: "image/png".into(),
        base64: Arc::from("aGVsbG8="),
    });
    let (response, _) = chat(&client, &request).await;
    assert_eq!(response.expect("answer").content, "echo: what is this?");
    let block = &llm.requests()[0]["messages"][0]["content"][1];
    assert_eq!(block["source"]["data"], "aGVsbG8=");
    assert_eq!(block["source"]["media_type"], "image/png");
}

#[tokio::test]
async fn overloaded_is_retried_and_a_refused_key_is_not() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::Error {
        status: 529,
        retry_after: None,
    });
    let client = retrying(Arc::new(anthropic(llm.base_url())), 2);
    let (response, _) = chat(&*client, &request(vec![ChatMessage::user("hi")], true)).await;
    assert_eq!(response.expect("second attempt").content, "echo: hi");
    assert_eq!(llm.requests().len(), 2);

    llm.push(Reply::Error {
        status: 401,
        retry_after: None,
    });
    let (err, _) = chat(&*client, &request(vec![ChatMessage::user("hi")], true)).await;
    let err = err.expect_err("refused");
    assert!(
        matches!(err.root(), LlmError::Unauthorized { status: 401, .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("anthropic claude-scripted: "),
        "{err}"
    );
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn a_stream_cut_mid_answer_is_retried_and_shown_anew() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::BreakAfter("half of it".into()));
    llm.push(Reply::text("the whole answer"));
    let client = retrying(Arc::new(anthropic(llm.base_url())), 2);
    let (response, shown) = chat(&*client, &request(vec![ChatMessage::user("hi")], true)).await;
    assert_eq!(response.expect("retried").content, "the whole answer");
    assert_eq!(shown, "the whole answer");
}

/// One session's history goes to OpenAI, then on to Anthropic: the second provider reads
/// the first one's tool calls and results without loss (and the strict server finds
/// nothing to refuse).
#[tokio::test]
async fn a_conversation_moves_between_providers_without_loss() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    let openai = OpenAiProvider::new(ProviderConfig {
        base_url: llm.base_url(),
        model: "gpt-scripted".into(),
        ..ProviderConfig::default()
    })
    .expect("openai");
    llm.push(Reply::tool("echo", json!({"text": "one"})));
    let mut messages = vec![ChatMessage::user("first")];
    let (call, _) = chat(&openai, &request(messages.clone(), true)).await;
    let call = call.expect("call");
    messages.push(call.to_message());
    let ToolCall { id, .. } = call.tool_calls[0].clone();
    messages.push(ChatMessage::tool_result(&call.tool_calls[0], "one", false));
    messages.push(ChatMessage::assistant("done with one"));
    messages.push(ChatMessage::user("second"));

    let (answer, _) = chat(&anthropic(llm.base_url()), &request(messages, true)).await;
    assert_eq!(answer.expect("answer").content, "echo: second");
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    let sent = &llm.requests()[1]["messages"];
    assert_eq!(sent[1]["content"][0]["id"], id.as_str());
    assert_eq!(sent[1]["content"][0]["input"], json!({"text": "one"}));
    assert_eq!(sent[2]["content"][0]["tool_use_id"], id.as_str());
}

/// The primary answers 503 every time: exactly its configured attempts are made, then the
/// fallback answers; the error of a chain whose every entry is down names each of them.
#[tokio::test]
async fn the_fallback_answers_after_the_primarys_attempts() {
    let primary = ScriptedLlm::start().await.expect("primary");
    primary.respond_with(|_| Reply::Error {
        status: 503,
        retry_after: None,
    });
    let fallback = ScriptedLlm::start().await.expect("fallback");
    let chain = Failover::new(
        retrying(Arc::new(anthropic(primary.base_url())), 2),
        vec![retrying(
            Arc::new(
                OpenAiProvider::new(ProviderConfig {
                    base_url: fallback.base_url(),
                    model: "gpt-scripted".into(),
                    ..ProviderConfig::default()
                })
                .expect("openai"),
            ),
            2,
        )],
        Duration::from_secs(60),
    );
    let (response, _) = chat(&chain, &request(vec![ChatMessage::user("hi")], true)).await;
    assert_eq!(response.expect("fallback").content, "echo: hi");
    assert_eq!(primary.requests().len(), 3, "1 attempt + 2 retries");
    assert_eq!(chain.answered()[1], ("openai gpt-scripted".to_owned(), 1));

    fallback.respond_with(|_| Reply::Error {
        status: 500,
        retry_after: None,
    });
    let (err, _) = chat(&chain, &request(vec![ChatMessage::user("hi")], true)).await;
    let err = err.expect_err("all down").to_string();
    assert!(err.contains("anthropic claude-scripted: "), "{err}");
    assert!(err.contains("openai gpt-scripted: "), "{err}");
}
