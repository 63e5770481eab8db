//! Errors of the hub and of channel adapters.

/// What can go wrong on the hub or in a channel adapter.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The daemon is shutting down and takes no new messages.
    #[error("switchboard is shutting down and takes no new messages")]
    ShuttingDown,
    /// No adapter is registered under the channel an outbound message names.
    #[error("no channel named `{0}` is running")]
    UnknownChannel(String),
    /// The adapter's outbound queue is closed (the adapter stopped).
    #[error("channel `{0}` stopped taking messages")]
    ChannelClosed(String),
    /// The inbound receiver was already taken by a dispatcher.
    #[error("the inbound queue already has a consumer")]
    InboundTaken,
    /// A channel adapter failed; the message says how.
    #[error("channel `{channel}` failed: {message}")]
    Channel {
        /// The channel that failed.
        channel: String,
        /// What went wrong.
        message: String,
    },
}
