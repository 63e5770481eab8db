//! Errors of tool calls; each becomes an error result the model reads.

/// Why a tool call produced no result.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model named a tool that does not exist.
    #[error("unknown tool `{name}`; the tools are: {available}")]
    Unknown {
        /// The name the model used.
        name: String,
        /// The registered tools, comma-separated (`none` when there are none).
        available: String,
    },
    /// The arguments were not valid JSON or did not fit the tool's schema.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The call was refused: it asked for something outside what the agent may do (a path
    /// outside the workspace, a denied command). The message says what and why.
    #[error("refused: {0}")]
    Denied(String),
    /// The tool ran and failed; the message says why.
    #[error("{0}")]
    Failed(String),
    /// The tool did not finish within its timeout.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The turn was cancelled while the tool ran.
    #[error("cancelled")]
    Cancelled,
}
