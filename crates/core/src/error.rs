//! Errors of the hub and of channel adapters.

/// What can go wrong on the hub or in a channel adapter. Delivery retries
/// [`CoreError::RateLimited`] and [`CoreError::Unavailable`]; everything else is final.
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
    /// The platform asked to slow down; the same message may be sent again after the wait.
    #[error("the platform is rate limiting{}", .retry_after.map(|d| format!("; retry after {} s", d.as_secs_f64())).unwrap_or_default())]
    RateLimited {
        /// How long it asked to wait, if it said.
        retry_after: Option<std::time::Duration>,
    },
    /// The platform could not be reached or failed for a while (network, 5xx): sending
    /// again may work.
    #[error("channel `{channel}` is unavailable: {message}")]
    Unavailable {
        /// The channel.
        channel: String,
        /// What went wrong.
        message: String,
    },
    /// The bus between the hosts of a cluster failed (its server unreachable, a message it
    /// cannot carry); the message says what.
    #[error("the cluster's bus failed: {0}")]
    Bus(String),
    /// A channel adapter failed in a way that sending again will not fix; the message says how.
    #[error("channel `{channel}` failed: {message}")]
    Channel {
        /// The channel that failed.
        channel: String,
        /// What went wrong.
        message: String,
    },
}

impl CoreError {
    /// Whether sending the same message again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::RateLimited { .. } | Self::Unavailable { .. })
    }
}

/// An error with its sources joined by `: `, since HTTP clients' own text hides the useful
/// part (the connection refused, the DNS name not found).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
