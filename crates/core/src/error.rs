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
/// part (the connection refused, the DNS name not found) — with the secret of every URL in
/// it hidden ([`without_userinfo`]): clients name the URL they called.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    without_userinfo(&text)
}

/// Why a connection failed, in a few plain words a person reads ("the connection was
/// refused", "the host name was not found"), from the deepest cause that says: HTTP clients
/// wrap it in three or four layers of their own ("error sending request for url (…): client
/// error (Connect): tcp connect error: …"). The whole chain is for the log
/// ([`error_chain`]).
pub fn plain_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest: &(dyn std::error::Error + 'static) = err;
    let mut cause = Some(err);
    while let Some(now) = cause {
        if let Some(io) = now.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind;
            let plain = match io.kind() {
                ErrorKind::ConnectionRefused => Some("the connection was refused"),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                    Some("the connection was cut")
                }
                ErrorKind::TimedOut => Some("the connection timed out"),
                ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => {
                    Some("the host cannot be reached from here")
                }
                _ => None,
            };
            if let Some(plain) = plain {
                return plain.to_owned();
            }
        }
        deepest = now;
        cause = now.source();
    }
    let chain = error_chain(err).to_lowercase();
    if chain.contains("dns error") || chain.contains("failed to lookup address") {
        "the host name was not found (DNS)".to_owned()
    } else if chain.contains("certificate") || chain.contains("tls") {
        format!(
            "the TLS handshake failed: {}",
            without_userinfo(&deepest.to_string())
        )
    } else {
        without_userinfo(&deepest.to_string())
    }
}

/// `text` with the secret of every URL in it replaced by `****`: the password of
/// `scheme://user:password@host`, and the whole of `scheme://token@host` (NATS's token
/// form, an API key used as a user name).
pub fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| {
                c == '/' || c == '?' || c == '#' || c.is_whitespace() || "()<>\"'`,".contains(c)
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rsplit_once('@') {
            Some((userinfo, host)) => match userinfo.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:****@{host}")),
                None => out.push_str(&format!("****@{host}")),
            },
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error wrapping another, as an HTTP client's layers do.
    #[derive(Debug)]
    struct Layer(&'static str, Box<dyn std::error::Error + Send + Sync>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.1)
        }
    }

    #[test]
    fn a_connection_failure_is_told_in_plain_words_under_the_clients_layers() {
        let refused = Layer(
            "error sending request for url (https://api.example/v1)",
            Box::new(Layer(
                "client error (Connect)",
                Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            )),
        );
        assert_eq!(plain_cause(&refused), "the connection was refused");
        let dns = Layer(
            "client error (Connect)",
            Box::new(Layer(
                "dns error",
                Box::new(std::io::Error::other(
                    "failed to lookup address information: Name or service not known",
                )),
            )),
        );
        assert_eq!(plain_cause(&dns), "the host name was not found (DNS)");
        let other = Layer("client error", Box::new(std::io::Error::other("odd")));
        assert_eq!(plain_cause(&other), "odd");
    }

    #[test]
    fn a_urls_secret_is_hidden_wherever_it_is_in_a_text() {
        let text = "error sending request for url (https://ada:s3cret@llm.example/v1/chat) and \
                    nats://T0KEN@10.0.0.2:4222, tls://me:pw@a:1,nats://b:2";
        assert_eq!(
            without_userinfo(text),
            "error sending request for url (https://ada:****@llm.example/v1/chat) and \
             nats://****@10.0.0.2:4222, tls://me:****@a:1,nats://b:2"
        );
        assert_eq!(without_userinfo("no url here: a@b"), "no url here: a@b");
        assert_eq!(without_userinfo("ends with ://"), "ends with ://");
    }
}
