//! One turn: context → [LLM → tools]* → reply.
//!
//! Every message is saved the moment it is complete — the user message first, then each
//! assistant message together with all of its tool results, then the final reply — so the
//! file never holds a tool call without its results and the reply never leaves before it
//! is saved. When a save fails, the turn goes on (the person still gets an answer) and the
//! chat is told, once, that the conversation is not being kept.
//!
//! The LLM call is one call of the provider: retries, the call's deadline and "still
//! waiting" status lines belong to the provider's retry layer, whose events reach the chat.

use std::collections::HashSet;
use std::sync::Arc;

use switchboard_core::{ChatMessage, MessageId, TurnEnd, Usage, make_call_ids_unique};
use switchboard_llm::{ChatRequest, ChatResponse, StreamEvent};
use switchboard_sessions::{Batch, InboundState, Session};
use switchboard_tools::ToolContext;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::Agent;
use crate::batch;
use crate::events::{AgentEvent, EventSink};
use crate::hooks::{TurnInfo, TurnSummary};

/// What the person sees when a turn is stopped.
pub(crate) const STOPPED_REPLY: &str = "Stopped.";
/// What history keeps for a stopped turn, so the model knows the request went unanswered.
pub(crate) const STOPPED_NOTE: &str = "[This turn was stopped before it finished.]";

/// What a turn answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TurnInput {
    /// The person's text (with a line for each attachment, naming where it was saved).
    pub text: String,
    /// The inbound message's platform id: the turn's progress is journaled under it, so a
    /// message delivered again after a crash is taken up, not answered twice.
    pub inbound: Option<MessageId>,
    /// The user message is in history already (a turn a crash interrupted, taken up again):
    /// answer it without saving it again.
    pub resume: bool,
}

impl TurnInput {
    /// A new message's text, without a platform id.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }
}

pub(crate) async fn run(
    agent: &Agent,
    session: &mut Session,
    input: TurnInput,
    cancel: &CancellationToken,
    events: &EventSink,
) {
    let span = tracing::info_span!("turn", session = %session.key(), resume = input.resume);
    async {
        let mut turn = Turn {
            agent,
            session,
            new: Vec::new(),
            usage: Usage::default(),
            events,
            unsaved: false,
            inbound: input.inbound.clone(),
        };
        let _ = events.send(AgentEvent::Started);
        let end = turn.drive(input, cancel).await;
        if agent.hooks.is_empty() {
            turn.finish(end);
            return;
        }
        let (kind, text) = match &end {
            End::Reply(reply, end) => (Some(*end), reply.clone()),
            End::Failed(message) => (None, message.clone()),
        };
        let usage = turn.usage;
        let key = turn.session.key().clone();
        turn.finish(end);
        let info = TurnInfo {
            session: &key,
            iteration: 0,
        };
        let summary = TurnSummary {
            end: kind,
            text: &text,
            usage,
        };
        agent.hooks.on_turn_end(info, summary).await;
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
    /// This turn's messages, saved already unless `unsaved`; they join the session at the end.
    new: Vec<Arc<ChatMessage>>,
    usage: Usage,
    events: &'a EventSink,
    /// A save failed and the chat was told so (it is told once per turn).
    unsaved: bool,
    /// The inbound message's id, when its progress is journaled.
    inbound: Option<MessageId>,
}

impl Turn<'_> {
    async fn drive(&mut self, input: TurnInput, cancel: &CancellationToken) -> End {
        let events = self.events;
        let agent = self.agent;
        let config = &agent.config;
        if !input.resume {
            let received = InboundState::Received;
            let id = self.inbound.clone();
            let batch_inbound = id.as_ref().map(|id| (id, &received));
            self.save_with(vec![ChatMessage::user(input.text)], batch_inbound);
        }

        let mut request = ChatRequest {
            system: agent.context.get(
                &config.system_prompt,
                &config.workspace,
                config.context_file_max_bytes,
            ),
            messages: self.session.history(),
            tools: self.agent.tools.definitions(),
            stream: config.stream,
        };
        request.messages.extend(self.new.iter().cloned());
        let ctx = ToolContext {
            workspace: config.workspace.clone(),
            session: self.session.key().clone(),
            cancel: cancel.clone(),
        };

        for iteration in 1..=config.max_iterations {
            let response = match self.call_llm(&request, cancel, iteration).await {
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
            let outcome =
                batch::run(self.agent, &response.tool_calls, &ctx, events, iteration).await;
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

    /// Calls the model once (its retry layer retries); a failure ends the turn with the
    /// error, which says what to fix. The response's tool-call ids are made unique across
    /// the conversation, since providers refuse repeated ones.
    async fn call_llm(
        &mut self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        iteration: usize,
    ) -> Result<ChatResponse, End> {
        let agent = self.agent;
        let events = self.events;
        let forward = |event: StreamEvent| {
            let _ = events.send(match event {
                StreamEvent::Text(text) => AgentEvent::TextDelta(text),
                StreamEvent::Reset => AgentEvent::TextReset,
                StreamEvent::Status(text) => AgentEvent::Status(text),
            });
        };
        let info = TurnInfo {
            session: self.session.key(),
            iteration,
        };
        let altered = if agent.hooks.is_empty() {
            None
        } else {
            let mut altered = request.clone();
            agent.hooks.before_llm(info, &mut altered).await;
            Some(altered)
        };
        let request = altered.as_ref().unwrap_or(request);
        let span = tracing::info_span!("llm", model = agent.llm.model(), iteration);
        let call = agent.llm.chat(request, &forward).instrument(span);
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(self.stopped()),
            result = call => result,
        };
        let mut response = match result {
            Ok(response) => response,
            Err(err) => {
                tracing::warn!(error = %err, "LLM call failed");
                return Err(End::Failed(format!("The model call failed: {err}")));
            }
        };
        if !agent.hooks.is_empty() {
            let info = TurnInfo {
                session: self.session.key(),
                iteration,
            };
            agent.hooks.after_llm(info, &response).await;
        }
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
        Ok(response)
    }

    fn stopped(&mut self) -> End {
        End::Reply(STOPPED_REPLY.to_owned(), TurnEnd::Cancelled)
    }

    /// Appends messages to the store, then to this turn; returns them as saved.
    fn save(&mut self, messages: Vec<ChatMessage>) -> &[Arc<ChatMessage>] {
        self.save_with(messages, None)
    }

    /// Appends messages, and how far the inbound message got, in one write.
    fn save_with(
        &mut self,
        messages: Vec<ChatMessage>,
        inbound: Option<(&MessageId, &InboundState)>,
    ) -> &[Arc<ChatMessage>] {
        let batch = Batch {
            messages: &messages,
            usage: None,
            inbound,
        };
        let saved = self.agent.store.append(self.session.key(), &batch);
        let ok = saved.is_ok();
        self.check_saved(saved);
        if ok && let Some((id, state)) = inbound {
            self.session.note_inbound(id.clone(), state.clone());
        }
        let start = self.new.len();
        self.new.extend(messages.into_iter().map(Arc::new));
        &self.new[start..]
    }

    /// Logs a failed save and tells the chat, once per turn.
    fn check_saved(&mut self, saved: Result<(), switchboard_sessions::StoreError>) {
        let Err(err) = saved else { return };
        tracing::error!(session = %self.session.key(), path = ?err.path(), error = %err,
            "could not save session messages");
        if !self.unsaved {
            self.unsaved = true;
            let _ = self.events.send(AgentEvent::Notice(format!(
                "This conversation could not be saved: {err}. Replies still come, but what \
                 is said now will be forgotten when switchboard restarts."
            )));
        }
    }

    /// Saves the final message with the turn's usage (one write, before the reply is
    /// published), moves the turn into the session, compacts when due, and reports.
    fn finish(mut self, end: End) {
        let last = match &end {
            End::Reply(_, TurnEnd::Cancelled) => Some(ChatMessage::assistant(STOPPED_NOTE)),
            End::Reply(reply, _) => Some(ChatMessage::assistant(reply.clone())),
            End::Failed(_) => None,
        };
        let last: Vec<ChatMessage> = last.into_iter().collect();
        let spent = (self.usage != Usage::default()).then_some(self.usage);
        let answered = match &end {
            End::Reply(_, end) => InboundState::Answered {
                end: *end,
                error: None,
            },
            End::Failed(message) => InboundState::Answered {
                end: TurnEnd::Failed,
                error: Some(message.clone()),
            },
        };
        let inbound = self.inbound.clone();
        if !last.is_empty() || spent.is_some() || inbound.is_some() {
            let batch = Batch {
                messages: &last,
                usage: spent,
                inbound: inbound.as_ref().map(|id| (id, &answered)),
            };
            let saved = self.agent.store.append(self.session.key(), &batch);
            let ok = saved.is_ok();
            self.check_saved(saved);
            if ok && let Some(id) = inbound {
                self.session.note_inbound(id, answered);
            }
        }
        let Turn {
            agent,
            session,
            mut new,
            usage,
            events,
            ..
        } = self;
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
                .compact(session.key(), &session.snapshot(&messages))
            {
                Ok(()) => session.compacted(),
                Err(err) => tracing::error!(session = %session.key(), path = ?err.path(),
                    error = %err, "could not compact session file"),
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
