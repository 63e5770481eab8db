//! [`ResponseLimits`]: how much of a model's response is read before the call is ended.
//!
//! A server that streams forever, or answers with hundreds of megabytes, must not take the
//! daemon's memory with it: every client reads a response through these caps, and whatever
//! is saved or sent on from a response is bounded by them.

/// Caps on one response. Passing one ends the call with [`LlmError::TooLarge`].
///
/// [`LlmError::TooLarge`]: crate::LlmError::TooLarge
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseLimits {
    /// Bytes read from the server for one response, streaming framing included.
    pub max_response_bytes: usize,
    /// Bytes of the reply's text.
    pub max_reply_bytes: usize,
    /// Bytes of tool-call arguments, all calls of the response together.
    pub max_tool_arguments_bytes: usize,
}

impl Default for ResponseLimits {
    fn default() -> Self {
        Self {
            max_response_bytes: 32 * 1024 * 1024,
            max_reply_bytes: 1024 * 1024,
            max_tool_arguments_bytes: 1024 * 1024,
        }
    }
}

impl ResponseLimits {
    /// The most one server-sent event may hold: a whole reply and its tool calls in one
    /// event, plus room for the JSON around them. Bounds what the event parser buffers.
    pub fn max_event_bytes(&self) -> usize {
        self.max_reply_bytes
            .saturating_add(self.max_tool_arguments_bytes)
            .saturating_add(64 * 1024)
            .min(self.max_response_bytes)
    }
}
