//! Checking a final reply before the person sees it.
//!
//! Two layers. [`leaked`] always runs: a reply that is a tool call the model wrote as text
//! (`<tool_call>…`, `{"name": …, "arguments": …}`, `[TOOL_CALLS]`, chat-template tokens)
//! never reaches the person as an answer. [`Verify`] (`[agent.verify]`, off by default)
//! adds rules — not empty, within length bounds — and optionally an LLM judge. A reply
//! that fails goes back to the model with the reason as feedback, at most
//! `max_attempts` times in all; then the turn ends with a graceful failure.
//!
//! `<think>` blocks are not a failure: [`strip_thinking`] removes them first.

use std::sync::Arc;

use switchboard_core::{ChatMessage, Usage};
use switchboard_llm::{ChatRequest, LlmProvider};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::events::{AgentEvent, EventSink};

/// `[agent.verify]`.
#[derive(Clone)]
pub struct Verify {
    /// Whether the rules (and the judge) run at all.
    pub enabled: bool,
    /// Attempts at a passing reply, the first included.
    pub max_attempts: usize,
    /// The shortest reply accepted, in characters.
    pub min_chars: usize,
    /// The longest reply accepted, in characters.
    pub max_chars: Option<usize>,
    /// An LLM that judges the reply, with its instructions.
    pub judge: Option<Judge>,
}

impl Default for Verify {
    fn default() -> Self {
        Self {
            enabled: false,
            max_attempts: 3,
            min_chars: 1,
            max_chars: None,
            judge: None,
        }
    }
}

impl std::fmt::Debug for Verify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verify")
            .field("enabled", &self.enabled)
            .field("max_attempts", &self.max_attempts)
            .field("min_chars", &self.min_chars)
            .field("max_chars", &self.max_chars)
            .field(
                "judge",
                &self.judge.as_ref().map(|j| j.llm.model().to_owned()),
            )
            .finish()
    }
}

/// An LLM judge: it reads the question and the reply and answers `PASS`, or `FAIL:` and
/// why.
#[derive(Clone)]
pub struct Judge {
    /// The model that judges (its own provider chain).
    pub llm: Arc<dyn LlmProvider>,
    /// Its instructions (the system prompt of the judging call).
    pub prompt: String,
}

/// The judge's instructions when the config gives none.
pub const DEFAULT_JUDGE_PROMPT: &str = "You check an assistant's reply before it is sent. \
Read the user's message and the reply. If the reply answers the message, is coherent and \
contains no internal markup, answer exactly PASS. Otherwise answer FAIL: followed by one \
sentence saying what to fix.";

/// A final reply to check, and what it answers.
pub(crate) struct Check<'a> {
    /// The person's message.
    pub question: &'a str,
    /// The reply, `<think>` blocks removed.
    pub reply: &'a str,
    /// Which attempt at the reply this is, from 1.
    pub attempt: usize,
}

/// Checks a final reply: leaked tool-call markup always, the rules and the judge when
/// verification is on. The judge's call (its model and tokens) is left in `judged` for the
/// turn to count and record like its own; the verdict is sent as an event and traced.
/// `None` when the turn was stopped meanwhile.
pub(crate) async fn check(
    verify: &Verify,
    check: Check<'_>,
    events: &EventSink,
    judged: &mut Option<(String, Usage)>,
    cancel: &CancellationToken,
) -> Option<Verdict> {
    let Check {
        question,
        reply,
        attempt,
    } = check;
    let span = tracing::info_span!("verify", attempt, reply_bytes = reply.len());
    let mut verdict = match leaked(reply) {
        Some(reason) => Verdict::Fail(reason),
        None if !verify.enabled => return Some(Verdict::Pass),
        None => match verify.rules(reply) {
            Err(reason) => Verdict::Fail(reason),
            Ok(()) => Verdict::Pass,
        },
    };
    if verdict == Verdict::Pass
        && verify.enabled
        && let Some(judge) = &verify.judge
    {
        let _ = events.send(AgentEvent::Status("Checking the answer…".into()));
        let request = judge_request(judge, question, reply);
        let call = judge.llm.chat(&request, &|_| {}).instrument(span.clone());
        let answer = tokio::select! {
            biased;
            () = cancel.cancelled() => return None,
            answer = call => answer,
        };
        match answer {
            Ok(answer) => {
                *judged = Some((answer.model.to_string(), answer.usage));
                verdict = self::verdict(&answer.content);
            }
            // A judge that cannot be reached must not hold every reply back.
            Err(err) => span.in_scope(|| {
                tracing::warn!(error = %err, "the verification judge failed; reply passed unjudged");
            }),
        }
    }
    let rejected = match &verdict {
        Verdict::Pass => None,
        Verdict::Fail(reason) => Some(reason.clone()),
    };
    span.in_scope(|| tracing::info!(passed = rejected.is_none(), reason = ?rejected, "verified"));
    let _ = events.send(AgentEvent::Verified { attempt, rejected });
    Some(verdict)
}

/// What the person gets when no attempt passed.
pub(crate) fn graceful_failure(attempts: usize) -> String {
    format!(
        "Sorry — I could not produce an answer that passed my checks ({attempts} attempts). \
         Please rephrase or try again."
    )
}

/// Removes `<think>…</think>` blocks (and a dangling `</think>` prefix some servers leave
/// when the opening tag was in the prompt), trimming what is left.
pub(crate) fn strip_thinking(reply: &str) -> String {
    let mut text = reply;
    if let Some(end) = text.find("</think>")
        && !text[..end].contains("<think>")
    {
        text = &text[end + "</think>".len()..];
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            // An unclosed block: everything after it is thinking.
            None => rest = "",
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// Markers of a tool call or chat template written into the text.
const MARKUP: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<function_call>",
    "<function=",
    "<invoke name=",
    "</invoke>",
    "<|tool_call",
    "<|im_start|>",
    "<|im_end|>",
    "<|start_header_id|>",
    "<|eot_id|>",
    "[TOOL_CALLS]",
    "<tool_use>",
    "<｜tool",
];

/// Why a reply is leaked tool-call markup rather than an answer, if it is.
pub(crate) fn leaked(reply: &str) -> Option<String> {
    if let Some(marker) = MARKUP.iter().find(|marker| reply.contains(**marker)) {
        return Some(format!(
            "the reply contains tool-call markup (`{marker}`) instead of a real tool call or \
             an answer"
        ));
    }
    let trimmed = reply
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    let json = serde_json::from_str::<serde_json::Value>(trimmed).ok()?;
    let looks_like_call = |value: &serde_json::Value| {
        value.get("name").is_some()
            && (value.get("arguments").is_some() || value.get("parameters").is_some())
            || value.get("tool_calls").is_some()
            || value
                .get("function")
                .is_some_and(|f| f.get("name").is_some())
    };
    let is_call = match &json {
        serde_json::Value::Array(items) => items.iter().any(looks_like_call),
        other => looks_like_call(other),
    };
    is_call.then(|| {
        "the reply is a tool call written as JSON text; call the tool properly or answer in \
         words"
            .to_owned()
    })
}

impl Verify {
    /// The rule checks: `Err(why)` for a reply that fails one.
    pub(crate) fn rules(&self, reply: &str) -> Result<(), String> {
        let chars = reply.chars().count();
        if reply.trim().is_empty() || chars < self.min_chars {
            return Err(if reply.trim().is_empty() {
                "the reply is empty".to_owned()
            } else {
                format!(
                    "the reply is {chars} characters long; at least {} are expected",
                    self.min_chars
                )
            });
        }
        if let Some(max) = self.max_chars
            && chars > max
        {
            return Err(format!(
                "the reply is {chars} characters long; at most {max} are allowed — shorten it"
            ));
        }
        Ok(())
    }
}

/// What a judge said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pass,
    Fail(String),
}

/// Reads a judge's answer: `PASS`, or `FAIL` and a reason. Anything else is a pass (a
/// judge that rambles must not block every reply) and is logged.
pub(crate) fn verdict(answer: &str) -> Verdict {
    let answer = strip_thinking(answer);
    let starts = |word: &str| {
        answer
            .get(..word.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(word))
    };
    if starts("FAIL") {
        let reason = answer[4..].trim_start_matches([':', ' ', '-', '—']).trim();
        return Verdict::Fail(if reason.is_empty() {
            "the reviewer rejected the reply".to_owned()
        } else {
            reason.to_owned()
        });
    }
    if !starts("PASS") {
        tracing::warn!(answer = %answer.chars().take(200).collect::<String>(),
            "the verification judge answered neither PASS nor FAIL; taken as a pass");
    }
    Verdict::Pass
}

/// The judge's request: its prompt, then the question and the reply as one user message.
pub(crate) fn judge_request(judge: &Judge, question: &str, reply: &str) -> ChatRequest {
    let text = format!(
        "User's message:\n<message>\n{question}\n</message>\n\nReply to check:\n<reply>\n{reply}\n</reply>"
    );
    ChatRequest {
        system: judge.prompt.clone(),
        messages: vec![Arc::new(ChatMessage::user(text))],
        ..ChatRequest::default()
    }
}

/// The feedback the model reads after a rejected reply.
pub(crate) fn feedback(reason: &str, attempt: usize, max: usize) -> String {
    format!(
        "[check] Your reply was not sent to the user: {reason}. Write the reply again \
         (attempt {} of {max}). Do not mention this check.",
        attempt + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinking_is_removed_wherever_it_is() {
        assert_eq!(strip_thinking("<think>hmm</think>Hello"), "Hello");
        assert_eq!(
            strip_thinking("a <think>x</think>b<think>y</think> c"),
            "a b c"
        );
        assert_eq!(strip_thinking("reasoning…</think>\n\nHello"), "Hello");
        assert_eq!(strip_thinking("Hi <think>never closed"), "Hi");
        assert_eq!(strip_thinking("plain"), "plain");
    }

    #[test]
    fn leaked_calls_are_recognised_and_ordinary_answers_are_not() {
        for reply in [
            "<tool_call>{\"name\": \"exec\"}</tool_call>",
            "Sure.\n<function=read_file>{\"path\": \"a\"}</function>",
            r#"{"name": "read_file", "arguments": {"path": "notes.md"}}"#,
            "```json\n[{\"name\": \"web_fetch\", \"parameters\": {}}]\n```",
            r#"{"tool_calls": [{"id": "1"}]}"#,
            "[TOOL_CALLS] [{\"name\": \"x\"}]",
            "<|im_start|>assistant",
        ] {
            assert!(leaked(reply).is_some(), "{reply}");
        }
        for reply in [
            "The config uses {\"name\": \"x\"} style objects.",
            r#"{"name": "Ada", "born": 1815}"#,
            "Use `<div>` for that.",
            "",
        ] {
            assert_eq!(leaked(reply), None, "{reply}");
        }
    }

    #[test]
    fn rules_check_emptiness_and_length() {
        let verify = Verify {
            enabled: true,
            min_chars: 3,
            max_chars: Some(10),
            ..Verify::default()
        };
        assert!(verify.rules("fine").is_ok());
        assert!(verify.rules("  ").expect_err("empty").contains("empty"));
        assert!(
            verify
                .rules("ab")
                .expect_err("short")
                .contains("at least 3")
        );
        assert!(
            verify
                .rules("far too long here")
                .expect_err("long")
                .contains("at most 10")
        );
    }

    #[test]
    fn verdicts_are_read_leniently() {
        assert_eq!(verdict("PASS"), Verdict::Pass);
        assert_eq!(verdict("pass."), Verdict::Pass);
        assert_eq!(
            verdict("FAIL: it does not answer the question"),
            Verdict::Fail("it does not answer the question".into())
        );
        assert_eq!(
            verdict("<think>hm</think>Fail - too vague"),
            Verdict::Fail("too vague".into())
        );
        assert_eq!(verdict("I think it is fine"), Verdict::Pass);
    }
}
