//! Reassembly of a Gemini response. A stream (`streamGenerateContent?alt=sse`) sends one
//! response per event, each holding what came since the one before: text parts to append,
//! calls whole, usage so far, and a `finishReason` on the last; a whole response is the
//! same thing once. So one assembler reads both.
//!
//! A signature comes on the part it belongs to (the first call of a step, or the text), or
//! alone on an empty text part at the end of a stream: a call's is kept with the call; the
//! text's is not kept (Gemini does not check it, and a final answer is saved as text).
//! Thoughts (`thought: true`) are not part of the reply. A stream that ends without a
//! finish reason is an error (a cut response must not be run or shown as whole).

use switchboard_core::{ToolCall, Usage};

use super::wire::{self, Response};
use crate::error::LlmError;
use crate::limits::ResponseLimits;
use crate::openai::stream::{MAX_TOOL_CALLS, check_calls, check_reply, too_many_calls};
use crate::provider::{ChatResponse, StopReason};

/// Collects the responses of one call, within its limits.
pub(crate) struct Assembler {
    limits: ResponseLimits,
    content: String,
    calls: Vec<ToolCall>,
    call_bytes: usize,
    usage: Usage,
    finish_reason: Option<String>,
    /// A blocked prompt's or answer's reason, with the categories blocked.
    filtered: Option<String>,
}

impl Assembler {
    pub(crate) fn new(limits: ResponseLimits) -> Self {
        Self {
            limits,
            content: String::new(),
            calls: Vec::new(),
            call_bytes: 0,
            usage: Usage::default(),
            finish_reason: None,
            filtered: None,
        }
    }

    /// Takes one response (an event of a stream); returns the text it added, if any.
    pub(crate) fn push(&mut self, response: Response) -> Result<Option<String>, LlmError> {
        if let Some(error) = response.error {
            let message = error["message"]
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(LlmError::Stream(message));
        }
        if let Some(usage) = response.usage_metadata {
            // Each event's usage is the call's so far.
            self.usage = usage.into();
        }
        if let Some(feedback) = response.prompt_feedback
            && let Some(reason) = feedback.block_reason
        {
            self.filtered = Some(wire::blocked(&reason, &feedback.safety_ratings));
        }
        // Only one candidate is asked for.
        let Some(candidate) = response.candidates.into_iter().next() else {
            return Ok(None);
        };
        let mut text: Option<String> = None;
        for part in candidate.content.unwrap_or_default().parts {
            if let Some(call) = part.function_call {
                if self.calls.len() >= MAX_TOOL_CALLS {
                    return Err(too_many_calls());
                }
                let call = wire::tool_call(call, part.thought_signature);
                self.call_bytes += call.id.len()
                    + call.name.len()
                    + call.arguments.len()
                    + call.signature.as_ref().map_or(0, String::len);
                check_calls(self.call_bytes, &self.limits)?;
                self.calls.push(call);
                continue;
            }
            let Some(piece) = part.text.filter(|piece| !piece.is_empty() && !part.thought) else {
                continue;
            };
            check_reply(self.content.len() + piece.len(), &self.limits)?;
            self.content.push_str(&piece);
            match &mut text {
                Some(text) => text.push_str(&piece),
                None => text = Some(piece),
            }
        }
        if let Some(reason) = candidate.finish_reason {
            if is_filter(&reason) {
                self.filtered = Some(wire::blocked(&reason, &candidate.safety_ratings));
            }
            self.finish_reason = Some(reason);
        }
        Ok(text)
    }

    /// Whether the last response came (a finish reason, or a blocked prompt).
    pub(crate) fn is_complete(&self) -> bool {
        self.finish_reason.is_some() || self.filtered.is_some()
    }

    /// The whole response. `streamed`: it came as events, and one without an end was cut.
    pub(crate) fn finish(self, streamed: bool) -> Result<ChatResponse, LlmError> {
        if streamed && !self.is_complete() {
            return Err(LlmError::Stream(
                "the stream ended before the response was complete (no finishReason)".into(),
            ));
        }
        let stop = match (self.filtered, self.finish_reason.as_deref()) {
            (Some(filtered), _) => Some(StopReason::Filtered(filtered)),
            // The model wrote a call that is not one (Gemini says so instead of sending
            // it): bad output, which the agent asks again for.
            (None, Some(reason @ ("MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL"))) => {
                return Err(LlmError::Decode(format!(
                    "the model wrote a call it could not make (finishReason {reason})"
                )));
            }
            // Gemini ends a step that calls tools with STOP.
            (None, _) if !self.calls.is_empty() => Some(StopReason::ToolUse),
            (None, Some("STOP")) => Some(StopReason::EndTurn),
            (None, Some("MAX_TOKENS")) => Some(StopReason::MaxTokens),
            (None, Some(other)) => Some(StopReason::Other(other.to_owned())),
            (None, None) => None,
        };
        Ok(ChatResponse {
            content: self.content,
            tool_calls: self.calls,
            usage: self.usage,
            stop,
            ..ChatResponse::default()
        })
    }
}

/// Whether a finish reason is a filter's (Gemini's safety, recitation, term and PII
/// filters, for text and for images).
fn is_filter(reason: &str) -> bool {
    matches!(
        reason,
        "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn push_all(events: &[Value]) -> Result<ChatResponse, LlmError> {
        let mut assembler = Assembler::new(ResponseLimits::default());
        for event in events {
            assembler.push(serde_json::from_value(event.clone()).expect("event"))?;
        }
        assembler.finish(true)
    }

    #[test]
    fn text_streams_calls_keep_their_signatures_and_thoughts_are_left_out() {
        let response = push_all(&[
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "hmm", "thought": true},
                {"text": "Let me "}]}}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "look."},
                {"functionCall": {"name": "read_file", "args": {"path": "a"}},
                    "thoughtSignature": "c2ln"},
                {"functionCall": {"name": "read_file", "args": {"path": "b"}}}]},
                "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20,
                    "thoughtsTokenCount": 30, "cachedContentTokenCount": 40}}),
        ])
        .expect("response");
        assert_eq!(response.content, "Let me look.");
        assert_eq!(response.stop, Some(StopReason::ToolUse));
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(response.tool_calls[0].signature.as_deref(), Some("c2ln"));
        assert_eq!(response.tool_calls[1].signature, None);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 50,
                cached_input_tokens: 40,
                reasoning_tokens: 30,
            }
        );
    }

    #[test]
    fn a_blocked_answer_or_prompt_says_why() {
        let answer = push_all(&[json!({"candidates": [{"finishReason": "SAFETY",
            "safetyRatings": [
                {"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH", "blocked": true},
                {"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "LOW"}]}]})])
        .expect("response");
        assert_eq!(
            answer.stop,
            Some(StopReason::Filtered(
                "SAFETY (HARM_CATEGORY_HARASSMENT)".into()
            ))
        );
        let prompt = push_all(&[json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})])
            .expect("response");
        assert_eq!(
            prompt.stop,
            Some(StopReason::Filtered("PROHIBITED_CONTENT".into()))
        );
        assert!(prompt.content.is_empty());
    }

    #[test]
    fn a_cut_stream_a_malformed_call_and_an_error_event_fail() {
        let cut = push_all(&[json!({"candidates": [{"content": {"parts": [{"text": "Hal"}]}}]})]);
        assert!(matches!(cut, Err(LlmError::Stream(_))), "{cut:?}");
        let malformed =
            push_all(&[json!({"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}]})]);
        assert!(
            malformed.as_ref().is_err_and(LlmError::is_bad_output),
            "{malformed:?}"
        );
        let error = push_all(&[json!({"error": {"code": 500, "message": "internal"}})]);
        assert!(
            matches!(&error, Err(LlmError::Stream(m)) if m == "internal"),
            "{error:?}"
        );
    }

    #[test]
    fn the_output_limit_and_other_reasons_are_kept() {
        let cut = push_all(&[
            json!({"candidates": [{"content": {"parts": [{"text": "Long"}]},
            "finishReason": "MAX_TOKENS"}]}),
        ])
        .expect("response");
        assert_eq!(cut.stop, Some(StopReason::MaxTokens));
        let other =
            push_all(&[json!({"candidates": [{"finishReason": "LANGUAGE"}]})]).expect("response");
        assert_eq!(other.stop, Some(StopReason::Other("LANGUAGE".into())));
    }
}
