//! One call of the model within a turn: the hooks around it (`before_llm` may alter the
//! request, `after_llm` sees the response), its answer streamed to the chat as it comes, the
//! turn's cancellation (what was shown so far is kept), its `llm` span, and the tool-call ids
//! of its response made unique across the conversation (providers refuse repeated ones). The
//! model's retry layer retries; what fails here fails the call.

use std::collections::HashSet;
use std::sync::Arc;

use switchboard_core::make_call_ids_unique;
use switchboard_llm::{ChatRequest, ChatResponse, LlmError, LlmProvider, StreamEvent};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::events::{AgentEvent, EventSink};
use crate::hooks::{Hooks, TurnInfo};

/// Why a call gave no response.
pub(crate) enum CallFailed {
    /// The turn was stopped meanwhile; the text shown so far.
    Stopped(String),
    /// The call failed.
    Llm(LlmError),
}

/// A call about to be made.
pub(crate) struct Call<'a> {
    /// The chain to call: the agent's, or the one of the model the chat chose (`/model`).
    pub llm: Arc<dyn LlmProvider>,
    /// The agent's hooks.
    pub hooks: &'a Hooks,
    /// The turn's session, round and person.
    pub info: TurnInfo<'a>,
    pub events: &'a EventSink,
}

impl Call<'_> {
    /// Makes it.
    pub(crate) async fn run(
        self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, CallFailed> {
        // The text this call has shown so far: kept if the turn is stopped mid-answer.
        let shown = Shown {
            text: std::sync::Mutex::new(String::new()),
            events: self.events,
        };
        let forward = |event: StreamEvent| shown.forward(event);
        let mut request = std::borrow::Cow::Borrowed(request);
        if !self.hooks.is_empty() {
            self.hooks.before_llm(self.info, &mut request).await;
        }
        let request = &*request;
        let llm = self.llm;
        let span = tracing::info_span!(
            "llm",
            model = llm.model(),
            iteration = self.info.iteration,
            messages = request.messages.len(),
            output_bytes = tracing::field::Empty
        );
        let call = llm.chat(request, &forward).instrument(span.clone());
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(CallFailed::Stopped(shown.take())),
            result = call => result,
        };
        let mut response = match result {
            Ok(response) => response,
            Err(err) => {
                span.in_scope(|| tracing::warn!(error = %err, "LLM call failed"));
                return Err(CallFailed::Llm(err));
            }
        };
        let output: usize = response.content.len()
            + response
                .tool_calls
                .iter()
                .map(|c| c.arguments.len())
                .sum::<usize>();
        span.record("output_bytes", output);
        if !self.hooks.is_empty() {
            self.hooks.after_llm(self.info, &response).await;
        }
        unique_call_ids(request, &mut response);
        Ok(response)
    }
}

/// What a call has shown of its answer so far, forwarded to the chat as it streams.
struct Shown<'e> {
    text: std::sync::Mutex<String>,
    events: &'e EventSink,
}

impl Shown<'_> {
    fn text(&self) -> std::sync::MutexGuard<'_, String> {
        self.text
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forwards a piece of the stream to the chat, keeping the text shown.
    fn forward(&self, event: StreamEvent) {
        let _ = self.events.send(match event {
            StreamEvent::Text(text) => {
                self.text().push_str(&text);
                AgentEvent::TextDelta(text)
            }
            StreamEvent::Reset => {
                self.text().clear();
                AgentEvent::TextReset
            }
            StreamEvent::Status(text) => AgentEvent::Status(text),
        });
    }

    /// The text shown so far.
    fn take(&self) -> String {
        std::mem::take(&mut *self.text())
    }
}

/// Makes the response's tool-call ids unique across the conversation (providers refuse
/// repeated ones).
fn unique_call_ids(request: &ChatRequest, response: &mut ChatResponse) {
    let mut taken: HashSet<String> = request
        .messages
        .iter()
        .flat_map(|message| message.tool_calls())
        .map(|call| call.id.clone())
        .collect();
    let renamed = make_call_ids_unique(&mut response.tool_calls, &mut taken);
    if renamed > 0 {
        tracing::info!(
            renamed,
            "the model repeated tool call ids; they were made unique"
        );
    }
}
