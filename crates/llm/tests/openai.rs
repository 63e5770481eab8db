//! The OpenAI-compatible client against the scripted server, over real sockets.

use std::time::{Duration, Instant};

use serde_json::json;
use std::sync::{Arc, Mutex};
use switchboard_core::{ChatMessage, ToolDefinition};

use switchboard_llm::{
    ApiKey, ChatRequest, LlmError, LlmProvider, OpenAiProvider, ProviderConfig, ResponseLimits,
    RetryPolicy, Retrying, StreamEvent,
};
use switchboard_testkit::{Reply, ScriptedLlm};
use tokio::sync::mpsc;

fn config(base_url: String) -> ProviderConfig {
    ProviderConfig {
        base_url,
        api_key: ApiKey::Key("test-key".into()),
        model: "scripted".into(),
        ..ProviderConfig::default()
    }
}

/// The client behind the retry layer, as the daemon builds it (short waits for tests).
fn provider(base_url: String) -> Retrying {
    retrying(config(base_url))
}

fn retrying(config: ProviderConfig) -> Retrying {
    let client = OpenAiProvider::new(config).expect("provider");
    Retrying::new(
        Arc::new(client),
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        },
        Duration::from_secs(60),
    )
}

/// A bare client: one attempt per call.
fn without_retries(config: ProviderConfig) -> OpenAiProvider {
    OpenAiProvider::new(config).expect("provider")
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        system: "system prompt".into(),
        messages: vec![ChatMessage::user(text).into()],
        tools: vec![ToolDefinition {
            name: "echo".into(),
            description: "echo".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        stream: false,
        images: Vec::new(),
    }
}

fn streamed(text: &str) -> ChatRequest {
    ChatRequest {
        stream: true,
        ..request(text)
    }
}

fn ignore(_: StreamEvent) {}

/// A sink that keeps every event.
#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<StreamEvent>>>);

impl Recorder {
    fn sink(&self) -> impl Fn(StreamEvent) + Send + Sync + '_ {
        |event| self.0.lock().expect("lock").push(event)
    }
    fn events(&self) -> Vec<StreamEvent> {
        self.0.lock().expect("lock").clone()
    }
    /// The text a client shows: what streamed since the last reset.
    fn shown(&self) -> String {
        let mut shown = String::new();
        for event in self.events() {
            match event {
                StreamEvent::Text(text) => shown.push_str(&text),
                StreamEvent::Reset => shown.clear(),
                StreamEvent::Status(_) => {}
            }
        }
        shown
    }
}

#[tokio::test]
async fn whole_response_carries_text_and_usage() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("hello there"));
    let response = provider(llm.base_url())
        .chat(&request("hi"), &ignore)
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
    let sink = move |event: StreamEvent| {
        if let StreamEvent::Text(text) = event {
            let _ = tx.send(text);
        }
    };
    let response = provider(llm.base_url())
        .chat(&streamed("hi"), &sink)
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
    let response = provider(llm.base_url())
        .chat(&streamed("hi"), &ignore)
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
        .chat(&request("hi"), &ignore)
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
        .chat(&request("hi"), &ignore)
        .await
        .expect_err("401");
    assert!(
        matches!(err.root(), LlmError::Unauthorized { status: 401, .. }),
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
        .chat(&request("hi"), &ignore)
        .await
        .expect_err("500s");
    assert!(
        matches!(err.root(), LlmError::Exhausted { attempts: 4, last } if matches!(**last, LlmError::Status { status: 500, .. })),
        "{err}"
    );
    assert_eq!(llm.requests().len(), 4, "one attempt and three retries");
}

#[tokio::test]
async fn a_missing_key_names_the_variable_without_calling() {
    let llm = ScriptedLlm::start().await.expect("llm");
    let provider = retrying(ProviderConfig {
        api_key: ApiKey::Missing {
            reason: "the environment variable OPENAI_API_KEY is not set".into(),
        },
        ..config(llm.base_url())
    });
    let err = provider
        .chat(&request("hi"), &ignore)
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
    let provider = without_retries(ProviderConfig {
        base_url: format!("http://{addr}/v1"),
        ..ProviderConfig::default()
    });
    let err = provider
        .chat(&request("hi"), &ignore)
        .await
        .expect_err("refused");
    assert!(matches!(err.root(), LlmError::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

#[tokio::test]
async fn a_slow_server_hits_the_first_byte_timeout() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("late").delayed(Duration::from_secs(30)));
    let provider = without_retries(ProviderConfig {
        base_url: llm.base_url(),
        first_byte_timeout: Duration::from_millis(200),
        ..ProviderConfig::default()
    });
    let err = provider
        .chat(&request("hi"), &ignore)
        .await
        .expect_err("timeout");
    assert!(matches!(err.root(), LlmError::Timeout { .. }), "{err}");
}

#[test]
fn an_invalid_base_url_is_refused_at_construction() {
    for bad in ["not a url", "ftp://example.com/v1", ""] {
        let err = OpenAiProvider::new(ProviderConfig {
            base_url: bad.into(),
            ..ProviderConfig::default()
        })
        .expect_err(bad);
        assert!(err.to_string().contains("llm.base_url"), "{err}");
    }
}

#[tokio::test]
async fn a_stream_that_stalls_times_out_between_chunks() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::StallAfter("the first words".into()));
    let provider = without_retries(ProviderConfig {
        idle_timeout: Duration::from_millis(300),
        ..config(llm.base_url())
    });
    let recorder = Recorder::default();
    let started = Instant::now();
    let err = provider
        .chat(&streamed("hi"), &recorder.sink())
        .await
        .expect_err("stalled");
    assert!(matches!(err.root(), LlmError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("llm.idle_timeout_secs"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(recorder.shown(), "the first words");
}

#[tokio::test]
async fn an_endless_stream_is_cut_at_the_reply_limit() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::Endless);
    let provider = without_retries(ProviderConfig {
        limits: ResponseLimits {
            max_reply_bytes: 64 * 1024,
            ..ResponseLimits::default()
        },
        ..config(llm.base_url())
    });
    let recorder = Recorder::default();
    let err = provider
        .chat(&streamed("talk forever"), &recorder.sink())
        .await
        .expect_err("cut");
    assert!(
        matches!(
            err,
            LlmError::TooLarge {
                key: "max_reply_bytes",
                ..
            }
        ),
        "{err}"
    );
    let shown = recorder.shown().len();
    assert!(shown <= 64 * 1024, "{shown} bytes were passed on");
}

#[tokio::test]
async fn an_endless_whole_body_is_cut_at_the_response_limit() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::Endless);
    let provider = without_retries(ProviderConfig {
        limits: ResponseLimits {
            max_response_bytes: 256 * 1024,
            ..ResponseLimits::default()
        },
        ..config(llm.base_url())
    });
    let err = provider
        .chat(&request("talk forever"), &ignore)
        .await
        .expect_err("cut");
    assert!(err.to_string().contains("llm.max_response_bytes"), "{err}");
}

#[tokio::test]
async fn a_huge_whole_reply_is_refused() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("x".repeat(100_000)));
    let provider = without_retries(ProviderConfig {
        limits: ResponseLimits {
            max_reply_bytes: 50_000,
            ..ResponseLimits::default()
        },
        ..config(llm.base_url())
    });
    let err = provider
        .chat(&request("hi"), &ignore)
        .await
        .expect_err("too large");
    assert!(err.to_string().contains("llm.max_reply_bytes"), "{err}");
}

#[tokio::test]
async fn a_stream_that_breaks_is_retried_and_its_text_reset_not_repeated() {
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::BreakAfter("thinking thinking".into()));
    llm.push(Reply::text("thinking, then the answer"));
    let recorder = Recorder::default();
    let response = provider(llm.base_url())
        .chat(&streamed("hi"), &recorder.sink())
        .await
        .expect("the retry succeeds");
    assert_eq!(response.content, "thinking, then the answer");
    assert_eq!(recorder.shown(), "thinking, then the answer");
    let events = recorder.events();
    assert!(events.contains(&StreamEvent::Reset), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Status(s) if s.contains("attempt 2 of 4"))),
        "{events:?}"
    );
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn a_huge_retry_after_does_not_panic() {
    use axum::http::header::RETRY_AFTER;
    use axum::response::IntoResponse;
    // A server that asks for an absurd wait: the client must treat it as "too long", not
    // overflow a Duration.
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [(RETRY_AFTER, "1e300")],
                "slow down",
            )
                .into_response()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let err = provider(format!("http://{addr}/v1"))
        .chat(&request("hi"), &ignore)
        .await
        .expect_err("429");
    assert!(matches!(err.root(), LlmError::RateLimited { .. }), "{err}");
    assert!(
        !err.to_string().contains("gave up"),
        "a wait that long is not waited for: {err}"
    );
}
