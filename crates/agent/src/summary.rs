//! A running summary of what leaves the window (`[memory] summarize`), so a conversation
//! longer than 50 messages keeps its thread.
//!
//! With it on, the window may run [`OVERFLOW`] messages past its limit. Once more than half
//! of that is past it, after the turn's answer went out, the model is asked to fold the
//! messages that would be trimmed (whole turns, oldest first) into the summary so far; the
//! window is then trimmed to its limit and the session compacted with the new summary, in
//! one atomic rewrite — so a crash before it leaves the messages in the window, to be folded
//! in next time, and never a summary that names messages still in the window, or a window
//! whose dropped messages no summary took in. The summary opens the next requests' system
//! prompt. Its call is counted as the chat's spending, like any other.
//!
//! When the call fails the messages stay (up to the overflow) and the next turn tries again;
//! past the overflow they are trimmed as without a summary (they are still in the transcript
//! and found by memory search).

use std::sync::Arc;

use switchboard_core::{ChatMessage, SessionKey, Usage, cut_at};
use switchboard_llm::ChatRequest;
use switchboard_sessions::Session;

use crate::agent::Agent;

/// How many messages past the limit the window may hold while they wait to be summarised.
pub const OVERFLOW: usize = 16;

/// The longest summary kept (a model that writes more is cut, at a character boundary).
const MAX_SUMMARY_BYTES: usize = 8 * 1024;

/// What each message contributes to the summary request at most.
const MAX_MESSAGE_BYTES: usize = 4 * 1024;

const PROMPT: &str = "You keep the running summary of a conversation between a person and \
    their assistant. You are given the summary so far (if any) and the messages that are now \
    leaving the assistant's view. Write the new summary: what the person told, asked and \
    decided, facts, names, numbers and dates worth keeping, open questions and promises — \
    in short plain sentences, at most 250 words, oldest first. Write only the summary.";

/// The request that folds `leaving` into `previous`.
pub(crate) fn request(previous: Option<&str>, leaving: &[Arc<ChatMessage>]) -> ChatRequest {
    let mut text = String::new();
    match previous {
        Some(summary) => {
            text.push_str("Summary so far:\n");
            text.push_str(summary);
        }
        None => text.push_str("Summary so far: none yet."),
    }
    text.push_str("\n\nMessages leaving the view:\n");
    for message in leaving {
        let (who, content) = match &**message {
            ChatMessage::User { .. } => ("Person", message.model_text().into_owned()),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let calls: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                let content = if calls.is_empty() {
                    content.clone()
                } else {
                    format!("{content} [called {}]", calls.join(", "))
                };
                ("Assistant", content)
            }
            ChatMessage::Tool { name, content, .. } => {
                ("Tool result", format!("{name}: {content}"))
            }
        };
        let content = content.trim();
        if content.is_empty() {
            continue;
        }
        text.push_str(who);
        text.push_str(": ");
        text.push_str(cut_at(content, MAX_MESSAGE_BYTES));
        text.push('\n');
    }
    ChatRequest {
        system: PROMPT.to_owned(),
        messages: vec![Arc::new(ChatMessage::user(text))],
        ..ChatRequest::default()
    }
}

/// The system prompt's section that carries `summary`.
pub(crate) fn prompt_section(summary: &str) -> String {
    format!(
        "\n\n## Earlier in this conversation\nA summary of what is no longer in the messages \
         below:\n{summary}"
    )
}

impl Agent {
    /// Folds what is past the window's limit into the session's summary, when summaries are
    /// on and enough is waiting (see the module); `model`: the chat's choice, `chat`: what
    /// the call's spending counts against.
    pub(crate) async fn summarize_if_due(
        &self,
        session: &mut Session,
        model: Option<&str>,
        chat: &SessionKey,
    ) {
        if !self.config.summarize || !session.overflowing() || session.is_stale() {
            return;
        }
        let leaving = session.leaving();
        if leaving.is_empty() {
            return;
        }
        let request = request(session.summary(), &leaving);
        let llm = self.models().chain(model).clone();
        let span =
            tracing::info_span!("summarize", session = %session.key(), messages = leaving.len());
        let answer =
            tracing::Instrument::instrument(llm.chat(&request, &|_| {}), span.clone()).await;
        let response = match answer {
            Ok(response) => response,
            Err(err) => {
                span.in_scope(|| tracing::warn!(error = %err,
                    "the summary of what leaves the window could not be written; trying again after the next turn"));
                return;
            }
        };
        let summary = crate::verify::strip_thinking(&response.content)
            .trim()
            .to_owned();
        if summary.is_empty() {
            span.in_scope(|| {
                tracing::warn!("the model wrote an empty summary; trying again after the next turn")
            });
            return;
        }
        self.spend_outside_turn(session, chat, &response.model, response.usage)
            .await;
        session.summarized(cut_at(&summary, MAX_SUMMARY_BYTES).to_owned());
        self.compact(session).await;
    }

    /// Records what a call outside a turn spent: in the session's total (written with the
    /// next compaction, which follows at once) and against the chat's caps.
    async fn spend_outside_turn(
        &self,
        session: &mut Session,
        chat: &SessionKey,
        model: &str,
        usage: Usage,
    ) {
        session.add_usage(usage);
        if let Some(spending) = self.spending() {
            // A warning of a cap drawing near is told by the next turn's own spending.
            let _ = spending
                .record(self.name(), session.key(), chat, model, &usage)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_carries_the_summary_so_far_and_what_leaves() {
        let leaving = vec![
            Arc::new(ChatMessage::user("my sister is called Ada")),
            Arc::new(ChatMessage::assistant("Noted.")),
        ];
        let request = request(Some("They met in May."), &leaving);
        let ChatMessage::User { content, .. } = &*request.messages[0] else {
            panic!("a user message");
        };
        assert_eq!(
            content,
            "Summary so far:\nThey met in May.\n\nMessages leaving the view:\nPerson: my sister is called Ada\nAssistant: Noted.\n"
        );
        assert!(request.tools.is_empty() && !request.stream);
    }
}
