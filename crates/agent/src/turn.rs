//! One turn: context → [LLM → tools]* → reply.
//!
//! Every message is saved the moment it is complete — the user message first, then each
//! assistant message together with all of its tool results, then the final reply — so the
//! file never holds a tool call without its results and the reply never leaves before it
//! is saved.

use std::sync::Arc;

use switchboard_core::{ChatMessage, Usage};
use switchboard_llm::{ChatRequest, ChatResponse, LlmError};
use switchboard_sessions::Session;
use switchboard_tools::ToolContext;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::Agent;
use crate::batch;
use crate::events::{AgentEvent, EventSink, TurnEnd};

/// What the person sees when a turn is stopped.
pub(crate) const STOPPED_REPLY: &str = "Stopped.";
/// What history keeps for a stopped turn, so the model knows the request went unanswered.
const STOPPED_NOTE: &str = "[This turn was stopped before it finished.]";

pub(crate) async fn run(
    agent: &Agent,
    session: &mut Session,
    text: String,
    cancel: &CancellationToken,
    events: &EventSink,
) {
    let span = tracing::info_span!("turn", session = %session.key());
    async {
        let mut turn = Turn {
            agent,
            session,
            new: Vec::new(),
            usage: Usage::default(),
        };
        let _ = events.send(AgentEvent::Started);
        let end = turn.drive(text, cancel, events).await;
        turn.finish(end, events);
    }
    .instrument(span)
    .await;
}

/// How the loop ended.
enum End {
    Reply(String, TurnEnd),
    Failed(String),
}

struct Turn<'a> {
    agent: &'a Agent,
    session: &'a mut Session,
    /// This turn's messages, all saved already; they join the session at the end.
    new: Vec<Arc<ChatMessage>>,
    usage: Usage,
}

impl Turn<'_> {
    async fn drive(&mut self, text: String, cancel: &CancellationToken, events: &EventSink) -> End {
        let agent = self.agent;
        let config = &agent.config;
        self.save(vec![ChatMessage::user(text)]);

        let mut request = ChatRequest {
            system: agent.context.get(
                &config.system_prompt,
                &config.workspace,
                config.context_file_max_bytes,
            ),
            messages: self.session.history(),
            tools: self.agent.tools.definitions(),
        };
        request.messages.extend(self.new.iter().cloned());
        let ctx = ToolContext {
            workspace: config.workspace.clone(),
            session: self.session.key().clone(),
            cancel: cancel.clone(),
        };

        for iteration in 1..=config.max_iterations {
            let response = match self.call_llm(&request, cancel, events, iteration).await {
                Ok(response) => response,
                Err(end) => return end,
            };
            self.usage += response.usage;
            if response.tool_calls.is_empty() {
                let reply = if response.content.trim().is_empty() {
                    "(the model returned an empty reply)".to_owned()
                } else {
                    response.content
                };
                return End::Reply(reply, TurnEnd::Answered);
            }

            let assistant = response.to_message();
            let outcome = batch::run(self.agent, &response.tool_calls, &ctx, events).await;
            agent.context.invalidate();
            tracing::info!(
                iteration,
                calls = response.tool_calls.len(),
                cancelled = outcome.cancelled,
                "tool batch done"
            );
            let mut step = Vec::with_capacity(outcome.results.len() + 1);
            step.push(assistant);
            step.extend(outcome.results);
            request.messages.extend(self.save(step).iter().cloned());
            if outcome.cancelled {
                return self.stopped();
            }
        }

        let max = config.max_iterations;
        let reply = format!(
            "I stopped after {max} rounds of tool calls without a final answer \
             (the limit is agent.max_iterations = {max}). Ask me to continue if you want more."
        );
        End::Reply(reply, TurnEnd::IterationLimit)
    }

    /// Calls the model, trying again after a failure until `max_llm_failures` consecutive
    /// calls failed or the error is one that a retry cannot fix.
    async fn call_llm(
        &mut self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        events: &EventSink,
        iteration: usize,
    ) -> Result<ChatResponse, End> {
        let agent = self.agent;
        let config = &agent.config;
        let forward = |text: String| {
            let _ = events.send(AgentEvent::TextDelta(text));
        };
        let sink: Option<&switchboard_llm::DeltaSink<'_>> = config.stream.then_some(&forward);
        let mut failures = 0;
        loop {
            let span = tracing::info_span!("llm", model = agent.llm.model(), iteration);
            let call = agent.llm.chat(request, sink).instrument(span);
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(self.stopped()),
                result = call => result,
            };
            let err: LlmError = match result {
                Ok(response) => return Ok(response),
                Err(err) => err,
            };
            failures += 1;
            tracing::warn!(error = %err, failures, "LLM call failed");
            if !err.is_transient() || failures >= config.max_llm_failures {
                let message = if failures > 1 {
                    format!("The model could not be reached ({failures} attempts): {err}")
                } else {
                    format!("The model call failed: {err}")
                };
                return Err(End::Failed(message));
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(self.stopped()),
                () = tokio::time::sleep(config.llm_failure_backoff) => {}
            }
        }
    }

    fn stopped(&mut self) -> End {
        End::Reply(STOPPED_REPLY.to_owned(), TurnEnd::Cancelled)
    }

    /// Appends messages to the store, then to this turn; returns them as saved.
    fn save(&mut self, messages: Vec<ChatMessage>) -> &[Arc<ChatMessage>] {
        if let Err(err) = self.agent.store.append(self.session.key(), &messages, None) {
            tracing::error!(session = %self.session.key(), error = %err,
                "could not save session messages");
        }
        let start = self.new.len();
        self.new.extend(messages.into_iter().map(Arc::new));
        &self.new[start..]
    }

    /// Saves the final message with the turn's usage (one write, before the reply is
    /// published), moves the turn into the session, compacts when due, and reports.
    fn finish(self, end: End, events: &EventSink) {
        let Turn {
            agent,
            session,
            mut new,
            usage,
        } = self;
        let last = match &end {
            End::Reply(_, TurnEnd::Cancelled) => Some(ChatMessage::assistant(STOPPED_NOTE)),
            End::Reply(reply, _) => Some(ChatMessage::assistant(reply.clone())),
            End::Failed(_) => None,
        };
        let last: Vec<ChatMessage> = last.into_iter().collect();
        let spent = (usage != Usage::default()).then_some(usage);
        if (!last.is_empty() || spent.is_some())
            && let Err(err) = agent.store.append(session.key(), &last, spent)
        {
            tracing::error!(session = %session.key(), error = %err,
                "could not save the end of the turn");
        }
        new.extend(last.into_iter().map(Arc::new));
        session.extend(new);
        if let Some(usage) = spent {
            session.add_usage(usage);
        }
        if session.needs_compaction() {
            let messages: Vec<ChatMessage> =
                session.messages().iter().map(|m| (**m).clone()).collect();
            match agent
                .store
                .compact(session.key(), &messages, session.usage())
            {
                Ok(()) => session.compacted(),
                Err(err) => tracing::error!(session = %session.key(), error = %err,
                    "could not compact session file"),
            }
        }
        let event = match end {
            End::Reply(reply, end) => {
                tracing::info!(
                    input_tokens = usage.input_tokens,
                    output_tokens = usage.output_tokens,
                    ?end,
                    "turn finished"
                );
                AgentEvent::Finished { reply, end, usage }
            }
            End::Failed(message) => {
                tracing::warn!(%message, "turn failed");
                AgentEvent::Failed { message }
            }
        };
        let _ = events.send(event);
    }
}
