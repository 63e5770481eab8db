//! The OpenAI-compatible client against the scripted server, over real sockets.

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_core::{ChatMessage, ToolDefinition};
use switchboard_llm::{
    ApiKey, ChatRequest, LlmError, LlmProvider, OpenAiConfig, OpenAiProvider, RetryPolicy,
};
use switchboard_testkit::{Reply, ScriptedLlm};
use tokio::sync::mpsc;

fn provider(base_url: String) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url,
        api_key: ApiKey::Key("test-key".into()),
        model: "scripted".into(),
        retry: RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        },
        ..OpenAiConfig::default()
    })
    .expect("provider")
}

/// A provider that gives up after its first attempt.
fn without_retries(config: OpenAiConfig) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        retry: RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        },
        ..config
    })
    .expect("provider")
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        system: "system prompt".into(),
        messages: vec![ChatMessage::user(text).into()],
        tools: vec![ToolDefinition {
            name: "echo".into(),
            description: "echo".into(),
            parameters: json!({"type": "object"}),
        }],
    }
}

#[tokio::test]
async fn whole_response_carries_text_and_usage() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("hello there"));
    let response = provider(llm.base_url())
        .chat(&request("hi"), None)
        .await
        .expect("chat");
    assert_eq!(response.content, "hello there");
    assert_eq!(response.usage.input_tokens, 10);
    let sent = &llm.requests()[0];
    assert_eq!(sent["stream"], false);
    assert_eq!(sent["messages"][0]["role"], "system");
    assert_eq!(sent["messages"][1]["content"], "hi");
    assert_eq!(sent["tools"][0]["function"]["name"], "echo");
}

#[tokio::test]
async fn streamed_deltas_concatenate_to_the_response() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("one two three four"));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sink = move |text: String| {
        let _ = tx.send(text);
    };
    let response = provider(llm.base_url())
        .chat(&request("hi"), Some(&sink))
        .await
        .expect("chat");
    drop(sink);
    let mut deltas = Vec::new();
    while let Some(delta) = rx.recv().await {
        deltas.push(delta);
    }
    assert!(
        deltas.len() >= 4,
        "expected word-by-word deltas, got {deltas:?}"
    );
    assert_eq!(deltas.concat(), "one two three four");
    assert_eq!(response.content, "one two three four");
    assert_eq!(response.usage.output_tokens, 5);
}

#[tokio::test]
async fn streamed_tool_calls_are_reassembled() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::tools([
        ("echo", json!({"text": "first call"})),
        ("fail", json!({"reason": "second"})),
    ]));
    let sink = |_: String| {};
    let response = provider(llm.base_url())
        .chat(&request("hi"), Some(&sink))
        .await
        .expect("chat");
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].name, "echo");
    let args: serde_json::Value =
        serde_json::from_str(&response.tool_calls[0].arguments).expect("valid JSON arguments");
    assert_eq!(args, json!({"text": "first call"}));
    assert_eq!(response.tool_calls[1].name, "fail");
    assert_ne!(response.tool_calls[0].id, response.tool_calls[1].id);
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_wait() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::Error {
        status: 429,
        retry_after: Some(1),
    });
    llm.push(Reply::Error {
        status: 503,
        retry_after: None,
    });
    llm.push(Reply::text("finally"));
    let started = Instant::now();
    let response = provider(llm.base_url())
        .chat(&request("hi"), None)
        .await
        .expect("chat");
    assert_eq!(response.content, "finally");
    assert_eq!(llm.requests().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::Error {
        status: 401,
        retry_after: None,
    });
    let err = provider(llm.base_url())
        .chat(&request("hi"), None)
        .await
        .expect_err("401");
    assert!(
        matches!(err, LlmError::Unauthorized { status: 401, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("llm.api_key"));
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn retries_run_out_with_the_last_error() {
    let llm = ScriptedLlm::start().await.expect("llm");
    for _ in 0..4 {
        llm.push(Reply::Error {
            status: 500,
            retry_after: None,
        });
    }
    let err = provider(llm.base_url())
        .chat(&request("hi"), None)
        .await
        .expect_err("500s");
    assert!(matches!(err, LlmError::Status { status: 500, .. }), "{err}");
    assert_eq!(llm.requests().len(), 4, "one attempt and three retries");
}

#[tokio::test]
async fn a_missing_key_names_the_variable_without_calling() {
    let llm = ScriptedLlm::start().await.expect("llm");
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: llm.base_url(),
        api_key: ApiKey::Missing {
            variable: "OPENAI_API_KEY".into(),
        },
        ..OpenAiConfig::default()
    })
    .expect("provider");
    let err = provider
        .chat(&request("hi"), None)
        .await
        .expect_err("no key");
    assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error_naming_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let provider = without_retries(OpenAiConfig {
        base_url: format!("http://{addr}/v1"),
        ..OpenAiConfig::default()
    });
    let err = provider
        .chat(&request("hi"), None)
        .await
        .expect_err("refused");
    assert!(matches!(err, LlmError::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

#[tokio::test]
async fn a_slow_server_hits_the_first_byte_timeout() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("late").delayed(Duration::from_secs(30)));
    let provider = without_retries(OpenAiConfig {
        base_url: llm.base_url(),
        first_byte_timeout: Duration::from_millis(200),
        ..OpenAiConfig::default()
    });
    let err = provider
        .chat(&request("hi"), None)
        .await
        .expect_err("timeout");
    assert!(matches!(err, LlmError::Timeout { .. }), "{err}");
}

#[test]
fn an_invalid_base_url_is_refused_at_construction() {
    for bad in ["not a url", "ftp://example.com/v1", ""] {
        let err = OpenAiProvider::new(OpenAiConfig {
            base_url: bad.into(),
            ..OpenAiConfig::default()
        })
        .expect_err(bad);
        assert!(err.to_string().contains("llm.base_url"), "{err}");
    }
}
