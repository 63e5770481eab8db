//! switchboard-testkit: fake upstreams over real sockets on 127.0.0.1, for tests,
//! benchmarks and trying the daemon by hand. Never a dependency of the daemon itself.
//!
//! # Layout
//! - `audio`: [`FakeAudio`], an OpenAI-compatible transcription and speech server, and
//!   [`voice_note`](audio::voice_note), an OGG/Opus recording of a given length.
//! - `email`: [`MailServers`](email::MailServers), a real Dovecot (IMAP, LMTP delivery) and an
//!   SMTP sink, for the email channel; [`Compose`](email::Compose) writes people's mails.
//! - `llm`: [`ScriptedLlm`], an OpenAI chat-completions and Anthropic Messages server
//!   (whole and SSE responses, scripted tool calls, injected errors, recorded requests).
//! - `matrix` (feature `matrix`): a real Synapse, the proxy the bot reaches it through, and
//!   people with Matrix clients of their own in encrypted rooms.
//! - `multipart`: form bodies as the fakes read them, and [`Uploaded`](multipart::Uploaded),
//!   a file a fake was sent.
//! - `nats`: [`NatsServer`], a real `nats-server` with JetStream, for the cluster.
//! - `otlp`: [`OtlpReceiver`], a collector's OTLP/HTTP traces endpoint (JSON).
//! - `process`: waiting for a file's line, whether processes run (for `exec` tests).
//! - `signal`: [`FakeSignalCli`], signal-cli's JSON-RPC daemon (its RPC and its event stream).
//! - `strict`: what a strict provider refuses (orphaned or duplicated tool-call ids), as a
//!   pure check shared by the fake's strict mode and property tests.
//! - `telegram`: [`FakeTelegram`], a Bot API server (long polling, 429s, Telegram's 400s,
//!   recordings of what the bot sends).
//! - `web`: [`FakeWeb`], web pages, redirects and the Brave and SearXNG search APIs.
//! - `whatsapp`: [`FakeWhatsApp`], the Cloud API's Graph calls and Meta's signed webhook posts.
//! - `tools`: tools for tests: [`EchoTool`], [`FailTool`], [`SleepTool`], [`BarrierTool`].
//! - `bin/fake_llm`: the scripted server as a program that echoes every message.

#![recursion_limit = "256"]

pub mod audio;
pub mod discord;
pub mod email;
mod llm;
#[cfg(feature = "matrix")]
pub mod matrix;
pub mod mcp;
pub mod multipart;
pub mod nats;
pub mod otlp;
pub mod process;
pub mod signal;
pub mod slack;
pub mod strict;
pub mod telegram;
mod tools;
pub mod web;
pub mod whatsapp;

pub use audio::FakeAudio;
pub use discord::FakeDiscord;
pub use llm::{Reply, Responder, ScriptedLlm, TokenUsage, last_user_text};
pub use nats::NatsServer;
pub use otlp::OtlpReceiver;
pub use signal::FakeSignalCli;
pub use slack::FakeSlack;
pub use telegram::FakeTelegram;
use tokio_util::sync::CancellationToken;
pub use tools::{BarrierTool, EchoTool, FailTool, NamedTool, SleepTool};
pub use web::FakeWeb;
pub use whatsapp::FakeWhatsApp;

/// Serves `app` on `addr` (port 0: any free one) until the token is cancelled; returns the
/// address it listens on.
pub(crate) async fn serve(
    app: axum::Router,
    addr: std::net::SocketAddr,
) -> std::io::Result<(std::net::SocketAddr, CancellationToken)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned());
        let _ = serve.await;
    });
    Ok((addr, stop))
}

/// Waits until `check` holds, looking again each time `changed` is notified; panics after
/// `timeout` naming `what`, with `context` (what the fake recorded) for the reader.
pub(crate) async fn wait_on(
    changed: &tokio::sync::Notify,
    timeout: std::time::Duration,
    what: &str,
    check: impl Fn() -> bool,
    context: impl FnOnce() -> String,
) {
    let wait = async {
        loop {
            let notified = changed.notified();
            if check() {
                return;
            }
            notified.await;
        }
    };
    if tokio::time::timeout(timeout, wait).await.is_err() {
        panic!("{what} did not happen within {timeout:?}; {}", context());
    }
}
