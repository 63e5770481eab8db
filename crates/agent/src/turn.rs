//! One turn: context → [LLM → tools]* → check → reply.
//!
//! The loop ends when the model answers without tool calls and the answer passes its
//! checks (`verify`), or on a stop condition: `max_iterations` rounds, the token budget
//! (`max_turn_tokens`, checked after each call that asks for tools), the time budget
//! (`turn_timeout`, which stops the turn as `/stop` would), [`MAX_LLM_FAILURES`]
//! consecutive calls whose output could not be used, an LLM error the provider chain
//! could not get past, or cancellation. Each ends with its reason in the reply.
//!
//! Every message is saved the moment it is complete — the user message first, then each
//! assistant message together with all of its tool results, then the final reply — so the
//! file never holds a tool call without its results and the reply never leaves before it
//! is saved. When a save fails, the turn goes on (the person still gets an answer) and the
//! chat is told, once, that the conversation is not being kept.
//!
//! A save refused as *stale* is different: another worker wrote the session since this one
//! read it (on a cluster, its partition moved while this worker was paused). The turn is
//! then **superseded**: it ends at once, saves nothing more, sends no reply and runs no
//! end-of-turn hooks; its worker reads the session again and decides anew what the message
//! needs.
//!
//! The LLM call is one call of the provider: retries, the call's deadline and "still
//! waiting" status lines belong to the provider's retry layer, whose events reach the chat.

use std::sync::Arc;

use switchboard_core::{ChatMessage, MessageId, ScheduledRun, SessionKey, TurnEnd, Usage};
use switchboard_llm::{ChatRequest, ChatResponse, ImageData, LlmError, StopReason};
use switchboard_sessions::{Batch, InboundState, Session, StoreError};
use switchboard_tools::{ToolContext, ToolRegistry, User};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::Agent;
use crate::batch;
use crate::call::{Call, CallFailed};
use crate::end::End;
use crate::events::{AgentEvent, EventSink};
use crate::hearing::{self, Heard};
use crate::hooks::{TurnInfo, TurnSummary};
use crate::input::{ImageBudget, TurnInput, show_images};
use crate::verify::{self, Verdict};

/// Consecutive LLM calls whose output could not be used (unreadable, too large) after
/// which the turn gives up.
pub const MAX_LLM_FAILURES: usize = 3;

/// What a chat is told when an interrupted answer is taken up again (after a crash, or by
/// another worker of a cluster) and starts over.
pub const TAKING_OVER: &str = "The answer was interrupted; taking it over and starting it again.";

pub(crate) async fn run(
    agent: &Agent,
    session: &mut Session,
    input: TurnInput,
    cancel: &CancellationToken,
    events: &EventSink,
) {
    let span = tracing::info_span!("turn", session = %session.key(), resume = input.resume,
        input_bytes = input.text.len(), images = input.images.len());
    async {
        let started = std::time::Instant::now();
        let model = agent.chosen_model(session.key()).await;
        let chat = input
            .on_behalf_of
            .clone()
            .unwrap_or_else(|| session.key().clone());
        let mut turn = Turn {
            agent,
            session,
            new: Vec::new(),
            usage: Usage::default(),
            events,
            unsaved: false,
            inbound: input.inbound.clone(),
            user: input.user.clone(),
            model,
            chat,
        };
        let _ = events.send(AgentEvent::Started);
        if input.resume {
            // Taken up after a crash or by another worker (a cluster's failover): what the
            // chat was shown of the interrupted answer is cleared — the answer starts over —
            // and the person is told why, instead of a silent gap and a glued stream.
            let _ = events.send(AgentEvent::TextReset);
            let _ = events.send(AgentEvent::Status(TAKING_OVER.to_owned()));
        }
        // The time budget stops the turn the way `/stop` does (open tool calls get their
        // results), then says why.
        let limits = agent.budget(&input.origin);
        let scheduled = input.run.clone();
        let budget = cancel.child_token();
        let drive = turn.drive(input, &budget, limits.max_turn_tokens);
        let end = match limits.turn_timeout {
            None => drive.await,
            Some(limit) => {
                let mut drive = std::pin::pin!(drive);
                tokio::select! {
                    end = &mut drive => end,
                    () = tokio::time::sleep(limit) => {
                        budget.cancel();
                        match drive.await {
                            End::Reply(_, TurnEnd::Cancelled) if !cancel.is_cancelled() => {
                                tracing::warn!(limit_s = limit.as_secs_f64(), "turn ran out of time");
                                End::out_of_time(limit)
                            }
                            end => end,
                        }
                    }
                }
            }
        };
        turn.end(end, started, scheduled.as_ref()).await;
    }
    .instrument(span)
    .await;
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
    /// The person, to ask something of.
    user: Option<User>,
    /// The model the chat chose (`/model`), if any.
    model: Option<String>,
    /// The chat what it spends and the sub-agents it starts count against: its session's,
    /// or the chat it works for (a sub-agent's task, an isolated scheduled run).
    chat: SessionKey,
}

/// A final answer under check: the question it answers, and which attempt it is.
struct Answer<'q> {
    question: &'q str,
    attempt: usize,
}

/// One round of tool calls: the turn's tools and what they are given.
struct Step<'t> {
    tools: &'t ToolRegistry,
    ctx: &'t ToolContext,
    iteration: usize,
}

impl Turn<'_> {
    async fn drive(
        &mut self,
        mut input: TurnInput,
        cancel: &CancellationToken,
        max_turn_tokens: Option<u64>,
    ) -> End {
        let agent = self.agent;
        let heard = self.hear(&mut input, cancel).await;
        let question = input.text.clone();
        // The tools of this turn (a reload may replace the agent's meanwhile).
        let tools = agent.turn_tools(self.session.key(), &input.origin);
        let mut images = ImageBudget::default();
        let shown = self.receive(&mut input, &mut images).await;
        if self.session.is_stale() {
            return End::Superseded;
        }
        if let Heard::Answered(answer) = heard {
            return End::Reply(answer, TurnEnd::Answered);
        }
        let (mut request, ctx) = self.prepare(input, &tools, shown, cancel).await;
        let mut failures = 0;
        // Final answers the model gave so far (each checked, see `conclude`).
        let mut answers = 0;
        for iteration in 1..=agent.config.max_iterations {
            let response = match self.call_llm(&request, cancel, iteration).await {
                Ok(response) => response,
                Err(CallFailed::Stopped(shown)) => return End::stopped_after(&shown),
                Err(CallFailed::Llm(err)) => {
                    failures += 1;
                    if err.is_bad_output() && failures < MAX_LLM_FAILURES {
                        self.ask_again(&err);
                        continue;
                    }
                    return End::Failed(if failures > 1 {
                        format!("The model failed {failures} times in a row: {err}")
                    } else {
                        format!("The model call failed: {err}")
                    });
                }
            };
            failures = 0;
            self.spend(&response.model, response.usage).await;
            if response.tool_calls.is_empty() {
                answers += 1;
                let answer = Answer {
                    question: &question,
                    attempt: answers,
                };
                match self.conclude(answer, response, &mut request, cancel).await {
                    Some(end) => return end,
                    None => continue,
                }
            }
            if let Some(end) = self.over_budget(max_turn_tokens) {
                return end;
            }
            let step = Step {
                tools: &tools,
                ctx: &ctx,
                iteration,
            };
            let cancelled = self
                .run_tools(step, response, &mut request, &mut images)
                .await;
            if self.session.is_stale() {
                return End::Superseded;
            }
            if cancelled {
                return End::stopped();
            }
        }
        let max = agent.config.max_iterations;
        let reply = format!(
            "I stopped after {max} rounds of tool calls without a final answer \
             (the limit is agent.max_iterations = {max}). Ask me to continue if you want more."
        );
        End::Reply(reply, TurnEnd::IterationLimit)
    }

    /// Hears the message's recordings, when transcription is on (see `hearing`) — not
    /// again for a turn taken up again: its message was saved with what was heard.
    async fn hear(&self, input: &mut TurnInput, cancel: &CancellationToken) -> Heard {
        let Some(transcription) = &self.agent.voice.transcription else {
            return Heard::Runs;
        };
        if input.resume {
            return Heard::Runs;
        }
        let workspace = &self.agent.config.workspace;
        // Boxed: its state (a recording read, an HTTP call) is held only while it runs, not
        // in every turn's future.
        Box::pin(hearing::hear(
            transcription,
            workspace,
            input,
            self.events,
            cancel,
        ))
        .await
    }

    /// Takes the message in (its text and images, out of `input`): reads the images it
    /// shows the model and saves it, journaled received — not again when a crash interrupted
    /// its turn and this one takes it up.
    async fn receive(&mut self, input: &mut TurnInput, images: &mut ImageBudget) -> Vec<ImageData> {
        if input.resume {
            return Vec::new();
        }
        let config = &self.agent.config;
        let shown = show_images(&config.workspace, &input.images, images).await;
        let received = InboundState::Received;
        let id = self.inbound.clone();
        let message = ChatMessage::User {
            content: std::mem::take(&mut input.text),
            images: std::mem::take(&mut input.images),
            origin: input.origin.clone(),
        };
        self.save_with(vec![message], id.as_ref().map(|id| (id, &received)))
            .await;
        shown
    }

    /// The first request — the system prompt from the workspace's files, the history, this
    /// turn's message — and what the turn's tools are given.
    async fn prepare(
        &self,
        input: TurnInput,
        tools: &ToolRegistry,
        images: Vec<ImageData>,
        cancel: &CancellationToken,
    ) -> (ChatRequest, ToolContext) {
        let agent = self.agent;
        let config = &agent.config;
        let context = tracing::info_span!(
            "context",
            system_bytes = tracing::field::Empty,
            messages = tracing::field::Empty,
            images = images.len()
        );
        let system = agent
            .context
            .get(
                &config.system_prompt,
                &config.workspace,
                config.context_file_max_bytes,
            )
            .instrument(context.clone())
            .await;
        let system = match self.session.summary() {
            Some(summary) => system + crate::summary::prompt_section(summary).as_str(),
            None => system,
        };
        let mut request = context.in_scope(|| ChatRequest {
            system,
            messages: self.session.history(),
            tools: tools.definitions(),
            stream: config.stream,
            images,
        });
        request.messages.extend(self.new.iter().cloned());
        if let Some(memory) = agent.memory()
            && let Some(block) = memory
                .recall(agent.name(), self.session.key(), &request.messages)
                .instrument(context.clone())
                .await
        {
            crate::recall::with_recalled(&mut request.messages, &block);
        }
        context.record("system_bytes", request.system.len());
        context.record("messages", request.messages.len());
        drop(context);
        let key = self.session.key();
        let ctx = ToolContext {
            workspace: config.workspace.clone(),
            session: key.clone(),
            agent: agent.name().clone(),
            cancel: cancel.clone(),
            user: self.user.clone(),
            sender: input.sender.clone(),
            slot: input.slot.clone(),
            chat: input.chat.clone(),
            subagents: agent.children_of_turn(key, &self.chat, &input.origin, cancel, input.slot),
        };
        (request, ctx)
    }

    /// The model's output could not be used, but a new call may go better: the draft is
    /// void, and the person is told the model is asked again.
    fn ask_again(&self, err: &LlmError) {
        let _ = self.events.send(AgentEvent::TextReset);
        let _ = self.events.send(AgentEvent::Status(format!(
            "The model's answer could not be used ({}); asking again.",
            err.summary()
        )));
    }

    /// Adds a call's usage (the model's, or its judge's) to the turn and records what it
    /// cost against the chat the turn counts against, passing on a warning of a cap drawing
    /// near.
    async fn spend(&mut self, model: &str, usage: Usage) {
        self.usage += usage;
        let agent = self.agent;
        let Some(spending) = agent.spending() else {
            return;
        };
        let recorded = spending
            .record(agent.name(), self.session.key(), &self.chat, model, &usage)
            .await;
        if let Some(warning) = recorded {
            let _ = self.events.send(AgentEvent::Notice(warning));
        }
    }

    /// A response without tool calls: the answer, if it passes its checks (`verify`); when
    /// it does not, it goes back to the model with the feedback (`None`: ask again) until the
    /// attempts are used up.
    async fn conclude(
        &mut self,
        answer: Answer<'_>,
        response: ChatResponse,
        request: &mut ChatRequest,
        cancel: &CancellationToken,
    ) -> Option<End> {
        let config = &self.agent.config;
        let reply = verify::strip_thinking(&response.content);
        let check = verify::Check {
            question: answer.question,
            reply: &reply,
            attempt: answer.attempt,
        };
        let mut judged = None;
        let verdict = verify::check(&config.verify, check, self.events, &mut judged, cancel).await;
        if let Some((model, usage)) = judged {
            self.spend(&model, usage).await;
        }
        // An answer the provider stopped (its filter, the output limit) says so in one
        // sentence after what it holds, whatever the provider.
        let notice = response.stop.as_ref().and_then(StopReason::notice);
        let reason = match verdict {
            Some(Verdict::Pass) if let Some(notice) = notice => {
                let reply = if reply.is_empty() {
                    notice
                } else {
                    format!("{reply}\n\n{notice}")
                };
                return Some(End::Reply(reply, TurnEnd::Answered));
            }
            Some(Verdict::Pass) if reply.is_empty() => {
                return Some(End::Reply(
                    "(the model returned an empty reply)".to_owned(),
                    TurnEnd::Answered,
                ));
            }
            Some(Verdict::Pass) => return Some(End::Reply(reply, TurnEnd::Answered)),
            Some(Verdict::Fail(reason)) => reason,
            None => return Some(End::stopped()),
        };
        let max = config.verify.max_attempts.max(1);
        // The rejected text was a draft at most: it is void now.
        let _ = self.events.send(AgentEvent::TextReset);
        if answer.attempt >= max {
            tracing::warn!(attempts = answer.attempt, "no reply passed verification");
            return Some(End::Reply(
                verify::graceful_failure(answer.attempt),
                TurnEnd::Unverified,
            ));
        }
        // The rejected reply and the feedback go to the model, not into history.
        request
            .messages
            .push(Arc::new(ChatMessage::assistant(response.content)));
        request
            .messages
            .push(Arc::new(ChatMessage::user(verify::feedback(
                &reason,
                answer.attempt,
                max,
            ))));
        None
    }

    /// Whether the turn used up its token budget (checked before its tools run).
    fn over_budget(&self, max_turn_tokens: Option<u64>) -> Option<End> {
        let total = self.usage.input_tokens + self.usage.output_tokens;
        let max = max_turn_tokens.filter(|max| total >= *max)?;
        tracing::warn!(total, max, "turn used up its token budget");
        Some(End::Reply(
            format!(
                "I stopped: this turn used {total} tokens, its budget is {max} \
                 (agent.max_turn_tokens). Ask me to continue if you want more."
            ),
            TurnEnd::TokenLimit,
        ))
    }

    /// Runs the response's tool calls (together, see `batch`) and saves the assistant
    /// message with all their results in one write; the next request gets both, and the
    /// images the results show. Whether the turn was stopped meanwhile.
    async fn run_tools(
        &mut self,
        step: Step<'_>,
        response: ChatResponse,
        request: &mut ChatRequest,
        images: &mut ImageBudget,
    ) -> bool {
        let agent = self.agent;
        let assistant = response.to_message();
        let outcome = batch::run(
            agent,
            step.tools,
            &response.tool_calls,
            step.ctx,
            self.events,
            step.iteration,
        )
        .await;
        agent.context.invalidate();
        tracing::info!(
            iteration = step.iteration,
            calls = response.tool_calls.len(),
            cancelled = outcome.cancelled,
            "tool batch done"
        );
        for result in &outcome.results {
            let shown = show_images(&agent.config.workspace, result.images(), images).await;
            request.images.extend(shown);
        }
        let mut step = Vec::with_capacity(outcome.results.len() + 1);
        step.push(assistant);
        step.extend(outcome.results);
        request
            .messages
            .extend(self.save(step).await.iter().cloned());
        outcome.cancelled
    }

    /// Calls the model once (see `call.rs`): a failure ends the turn with the error, which
    /// says what to fix.
    async fn call_llm(
        &mut self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        iteration: usize,
    ) -> Result<ChatResponse, CallFailed> {
        let call = Call {
            llm: self.agent.models().chain(self.model.as_deref()).clone(),
            hooks: &self.agent.hooks,
            info: TurnInfo {
                session: self.session.key(),
                iteration,
                user: self.user.as_ref(),
            },
            events: self.events,
        };
        call.run(request, cancel).await
    }

    /// Appends messages to the store, then to this turn; returns them as saved.
    async fn save(&mut self, messages: Vec<ChatMessage>) -> &[Arc<ChatMessage>] {
        self.save_with(messages, None).await
    }

    /// Appends messages, and how far the inbound message got, in one write.
    async fn save_with(
        &mut self,
        messages: Vec<ChatMessage>,
        inbound: Option<(&MessageId, &InboundState)>,
    ) -> &[Arc<ChatMessage>] {
        let batch = Batch {
            messages: &messages,
            usage: None,
            inbound,
        };
        let saved = self.agent.save(self.session, &batch).await;
        let ok = saved.is_ok();
        self.check_saved(saved);
        if ok && let Some((id, state)) = inbound {
            self.session.note_inbound(id.clone(), state.clone());
        }
        let start = self.new.len();
        self.new.extend(messages.into_iter().map(Arc::new));
        &self.new[start..]
    }

    /// Logs a failed save and tells the chat, once per turn (a stale one supersedes the
    /// turn instead: the chat hears nothing of it).
    fn check_saved(&mut self, saved: Result<(), StoreError>) {
        let Err(err) = saved else { return };
        if let StoreError::Stale = err {
            crate::agent::stale(self.session);
            return;
        }
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

    /// Finishes the turn with `end` (see [`Turn::finish`]) and tells the hooks how it ended,
    /// `started` then, answering the scheduled run `run` if it was one.
    async fn end(self, end: End, started: std::time::Instant, run: Option<&ScheduledRun>) {
        let agent = self.agent;
        if agent.hooks.is_empty() {
            self.finish(end).await;
            return;
        }
        let (kind, text) = end.told();
        let usage = self.usage;
        let key = self.session.key().clone();
        let inbound = self.inbound.clone();
        if !self.finish(end).await {
            return;
        }
        let info = TurnInfo {
            session: &key,
            iteration: 0,
            user: None,
        };
        let summary = TurnSummary {
            end: kind,
            text: &text,
            usage,
            duration: started.elapsed(),
            inbound: inbound.as_ref(),
            run,
        };
        agent.hooks.on_turn_end(info, summary).await;
    }

    /// Saves the final message with the turn's usage (one write, before the reply is
    /// published), moves the turn into the session, compacts when due, and reports; whether
    /// the turn ended so (not when it was superseded: nothing is saved or reported).
    async fn finish(mut self, end: End) -> bool {
        let Some((last, answered)) = end.kept() else {
            tracing::warn!("the turn was superseded: its session was written elsewhere");
            return false;
        };
        let last = [last];
        let spent = (self.usage != Usage::default()).then_some(self.usage);
        let inbound = self.inbound.clone();
        let batch = Batch {
            messages: &last,
            usage: spent,
            inbound: inbound.as_ref().map(|id| (id, &answered)),
        };
        let saved = self.agent.save(self.session, &batch).await;
        let ok = saved.is_ok();
        self.check_saved(saved);
        if self.session.is_stale() {
            return false;
        }
        if ok && let Some(id) = inbound {
            self.session.note_inbound(id, answered);
        }
        let Turn {
            agent,
            session,
            mut new,
            usage,
            events,
            model,
            chat,
            ..
        } = self;
        new.extend(last.into_iter().map(Arc::new));
        session.extend(new);
        if let Some(usage) = spent {
            session.add_usage(usage);
        }
        agent.compact_if_due(session).await;
        let Some(event) = end.event(usage) else {
            return false;
        };
        let _ = events.send(event);
        // After the answer went out: the summary's call holds up only this chat's next turn.
        agent
            .summarize_if_due(session, model.as_deref(), &chat)
            .await;
        true
    }
}
