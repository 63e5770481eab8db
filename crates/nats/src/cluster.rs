//! [`Cluster`]: one process's connection to the cluster's NATS, and the streams and buckets
//! every member shares, made when missing.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};

use crate::config::{Auth, ClusterConfig};
use crate::error::ClusterError;
use crate::names::Names;

/// How long a request to the server may take before it counts as failed.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a member's presence lasts unrenewed, in leases: a member is gone this long after
/// it stopped renewing.
const MEMBER_LEASES: u32 = 1;

/// A process's connection to the cluster: the client, JetStream, and the shared buckets.
#[derive(Clone)]
pub struct Cluster {
    pub(crate) config: ClusterConfig,
    pub(crate) names: Names,
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    /// Who holds each partition and each platform connection (`p.N`, `channel.NAME`).
    pub(crate) leases: kv::Store,
    /// Who is in the cluster and what it runs (`MEMBER` → role).
    pub(crate) members: kv::Store,
    /// The documents every member shares, kept until removed (see [`NatsState`]).
    ///
    /// [`NatsState`]: crate::NatsState
    pub(crate) state: kv::Store,
    /// Counts the connections made again after a break: readers open their consumers
    /// afresh rather than wait to learn that the server forgot them.
    pub(crate) reconnects: tokio::sync::watch::Receiver<u64>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.config.name)
            .field("member", &self.config.member)
            .finish_non_exhaustive()
    }
}

/// How this member connects: its name, timeouts, reconnecting for ever (each connection
/// counted in `reconnected`), its credentials and TLS.
fn options(
    config: &ClusterConfig,
    reconnected: tokio::sync::watch::Sender<u64>,
) -> Result<async_nats::ConnectOptions, ClusterError> {
    let mut options = async_nats::ConnectOptions::new()
        .name(format!(
            "switchboard {} ({})",
            config.member,
            config.role.as_str()
        ))
        .connection_timeout(REQUEST_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .retry_on_initial_connect()
        .max_reconnects(None)
        .event_callback(move |event| {
            let reconnected = reconnected.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!("connected to NATS");
                        reconnected.send_modify(|count| *count += 1);
                    }
                    async_nats::Event::Disconnected => {
                        tracing::warn!("disconnected from NATS; reconnecting");
                    }
                    other => tracing::debug!(event = %other, "NATS"),
                }
            }
        });
    options = match &config.auth {
        Auth::None => options,
        Auth::Credentials(creds) => options
            .credentials(creds)
            .map_err(|err| ClusterError::Credentials(err.to_string()))?,
        Auth::Nkey(seed) => options.nkey(seed.clone()),
        Auth::Token(token) => options.token(token.clone()),
        Auth::UserPassword(user, password) => {
            options.user_and_password(user.clone(), password.clone())
        }
    };
    if let Some(tls) = &config.tls {
        options = options.require_tls(true);
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &tls.client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    Ok(options)
}

impl Cluster {
    /// Connects to the servers and makes what is missing of the streams and buckets. The
    /// client reconnects by itself for as long as the process runs.
    pub async fn connect(config: ClusterConfig) -> Result<Self, ClusterError> {
        let (reconnected, reconnects) = tokio::sync::watch::channel(0u64);
        let options = options(&config, reconnected)?;
        let unreachable = |why: String| ClusterError::Unreachable {
            url: config.nats_url.clone(),
            why,
        };
        let within = REQUEST_TIMEOUT * 2;
        let late = || unreachable(format!("no answer within {} s", within.as_secs()));
        let client = tokio::time::timeout(within, options.connect(config.nats_url.as_str()))
            .await
            .map_err(|_| late())?
            .map_err(|err| unreachable(err.to_string()))?;
        // Wait until the connection is up (retry_on_initial_connect returns at once).
        tokio::time::timeout(within, client.flush())
            .await
            .map_err(|_| late())?
            .map_err(|err| unreachable(err.to_string()))?;
        let names = Names::new(&config.name);
        let mut js = jetstream::new(client.clone());
        js.set_timeout(REQUEST_TIMEOUT);
        for stream in [
            names.inbound_stream(config.partitions),
            names.outbound_stream(),
            names.sessions_stream(),
            names.history_stream(),
        ] {
            ensure_stream(&js, stream).await?;
        }
        let leases = ensure_bucket(&js, &names.leases_bucket(), config.lease).await?;
        let members =
            ensure_bucket(&js, &names.members_bucket(), config.lease * MEMBER_LEASES).await?;
        let state = ensure_bucket(&js, &names.state_bucket(), Duration::ZERO).await?;
        Ok(Self {
            config,
            names,
            client,
            js,
            leases,
            members,
            state,
            reconnects,
        })
    }

    /// This process's name among the members.
    pub fn member(&self) -> &str {
        &self.config.member
    }

    /// The resolved `[cluster]`.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }
}

/// Makes a stream unless it exists (an existing one is used as it is).
async fn ensure_stream(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<stream::Stream, ClusterError> {
    let name = config.name.clone();
    match js.get_stream(&name).await {
        Ok(stream) => Ok(stream),
        Err(err)
            if matches!(
                err.kind(),
                jetstream::context::GetStreamErrorKind::JetStream(ref js_err)
                    if js_err.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
            ) =>
        {
            js.create_stream(config)
                .await
                .map_err(|err| ClusterError::Server {
                    what: format!("create the stream {name}"),
                    why: err.to_string(),
                })
        }
        Err(err) => Err(ClusterError::Server {
            what: format!("read the stream {name}"),
            why: err.to_string(),
        }),
    }
}

/// A key-value bucket whose entries vanish `ttl` after their last write (never, for zero). Its stream is made
/// here, as NATS's own key-value layout, rather than by the client's `create_key_value`: that
/// asks the server for account facts that servers before 2.10 (Debian's) do not give.
async fn ensure_bucket(
    js: &jetstream::Context,
    bucket: &str,
    ttl: Duration,
) -> Result<kv::Store, ClusterError> {
    ensure_stream(
        js,
        stream::Config {
            name: format!("KV_{bucket}"),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            max_age: ttl,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            duplicate_window: if ttl.is_zero() {
                Duration::from_secs(120)
            } else {
                ttl.min(Duration::from_secs(120))
            },
            ..Default::default()
        },
    )
    .await?;
    js.get_key_value(bucket)
        .await
        .map_err(|err| ClusterError::Server {
            what: format!("open the bucket {bucket}"),
            why: err.to_string(),
        })
}

/// The cluster as its buckets show it: who is there and who holds what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Survey {
    /// The NATS server answering this member, and its version.
    pub server: String,
    /// The members present, with their roles.
    pub members: std::collections::BTreeMap<String, String>,
    /// Who holds each lease (`p.N` for partitions).
    pub leases: std::collections::BTreeMap<String, String>,
    /// Messages waiting in each partition that has a reader: not yet handed to its worker,
    /// or handed and not yet settled.
    pub lag: std::collections::BTreeMap<u32, u64>,
}

impl Cluster {
    /// Reads the members and leases buckets.
    pub async fn survey(&self) -> Result<Survey, ClusterError> {
        let failed = |what: &str| {
            let what = what.to_owned();
            move |err: Box<dyn std::error::Error + Send + Sync>| ClusterError::Server {
                what: what.clone(),
                why: err.to_string(),
            }
        };
        let info = self.client.server_info();
        let mut survey = Survey {
            server: format!("{} {}", info.server_name, info.version),
            ..Survey::default()
        };
        for (store, into) in [
            (&self.members, &mut survey.members),
            (&self.leases, &mut survey.leases),
        ] {
            let mut keys = store
                .keys()
                .await
                .map_err(|err| failed("read a bucket")(Box::new(err)))?;
            while let Some(key) = futures::StreamExt::next(&mut keys).await {
                let key = key.map_err(|err| failed("read a bucket")(Box::new(err)))?;
                if let Ok(Some(value)) = store.get(&key).await {
                    let text = String::from_utf8_lossy(&value).into_owned();
                    let shown = serde_json::from_str::<Presence>(&text)
                        .map_or(text, |presence| presence.role);
                    into.insert(key, shown);
                }
            }
        }
        if let Ok(stream) = self.js.get_stream(self.names.inbound_stream_name()).await {
            for partition in 0..self.config.partitions {
                if let Ok(info) = stream
                    .consumer_info(self.names.partition_consumer(partition))
                    .await
                {
                    survey
                        .lag
                        .insert(partition, info.num_pending + info.num_ack_pending as u64);
                }
            }
        }
        Ok(survey)
    }
}

/// What a member says of itself in the members bucket.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Presence {
    pub(crate) role: String,
}
