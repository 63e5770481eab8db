//! [`ClusterError`].

/// What can go wrong joining the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No NATS server answered.
    #[error("cannot reach NATS at {url} (cluster.nats_url): {why}")]
    Unreachable {
        /// The servers tried.
        url: String,
        /// What the client said.
        why: String,
    },
    /// The credentials could not be read.
    #[error("the NATS credentials (cluster.credentials) are not a credentials file: {0}")]
    Credentials(String),
    /// The server refused something, or JetStream is not enabled there.
    #[error(
        "NATS could not {what}: {why} (is JetStream enabled on the server: `nats-server -js`?)"
    )]
    Server {
        /// What was asked.
        what: String,
        /// What the server said.
        why: String,
    },
}
