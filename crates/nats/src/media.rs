//! [`NatsMedia`]: the media store of a cluster. A file is kept where it is made — a worker's
//! state directory, as one process keeps it ([`FileMedia`]) — and put, under the same key,
//! into the cluster's object store (`{name}_media`, on JetStream: the bytes cross the bus as
//! the messages do, in chunks, kept [`KEEP`]); the gateway that delivers it fetches it from
//! there into its own state directory the first time it is asked for, and reads it locally
//! after (a retry, the web page's link).
//!
//! The object store is made by the first member that keeps a file, so a cluster that sends
//! no files has none. Keys are never reused (each names a day and a random number), so no
//! object is ever replaced — the roles' permissions may deny purging streams.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use async_trait::async_trait;
use switchboard_adapter::FileMedia;
use switchboard_core::{KeptFile, MediaError, MediaStore};
use tokio::sync::OnceCell;

use crate::cluster::Cluster;

/// How long the object store keeps a file (as long as one process does).
pub const KEEP: Duration = Duration::from_secs(switchboard_adapter::KEEP_DAYS * 86_400);

/// How long putting or fetching one file may take.
const TRANSFER_TIME: Duration = Duration::from_secs(300);

/// Files waiting for their channel, on this host and in the cluster's object store.
#[derive(Clone)]
pub struct NatsMedia {
    js: jetstream::Context,
    bucket: String,
    /// The files of this host (made here, or fetched).
    local: Arc<FileMedia>,
    /// The object store, once a file was kept or asked for.
    store: Arc<OnceCell<object_store::ObjectStore>>,
}

impl std::fmt::Debug for NatsMedia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsMedia")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl NatsMedia {
    /// The media of `cluster`, kept locally under `state_dir`.
    pub fn new(cluster: &Cluster, state_dir: &std::path::Path) -> Self {
        Self {
            js: cluster.js.clone(),
            bucket: cluster.names.media_bucket(),
            local: Arc::new(FileMedia::new(state_dir)),
            store: Arc::default(),
        }
    }

    fn failed(&self, what: &str, err: impl std::fmt::Display) -> MediaError {
        MediaError::Failed {
            place: format!("the cluster's object store {}", self.bucket),
            what: what.to_owned(),
            why: err.to_string(),
        }
    }

    /// The object store, made when missing (`create`) or only opened.
    async fn store(&self, create: bool) -> Result<&object_store::ObjectStore, MediaError> {
        self.store
            .get_or_try_init(|| async {
                match self.js.get_object_store(&self.bucket).await {
                    Ok(store) => Ok(store),
                    Err(_) if create => self
                        .js
                        .create_object_store(object_store::Config {
                            bucket: self.bucket.clone(),
                            description: Some("files waiting for their channel".into()),
                            max_age: KEEP,
                            ..Default::default()
                        })
                        .await
                        .map_err(|err| self.failed("make the bucket", err)),
                    Err(err) => Err(self.failed("open the bucket", err)),
                }
            })
            .await
    }

    /// Puts the local file of `kept` into the object store.
    async fn share(&self, kept: &KeptFile) -> Result<(), MediaError> {
        let store = self.store(true).await?;
        let path = self.local.local(&kept.key).await?;
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|err| self.failed("read a kept file", err))?;
        tokio::time::timeout(TRANSFER_TIME, store.put(kept.key.as_str(), &mut file))
            .await
            .map_err(|_| {
                self.failed(
                    "put a file",
                    format!("it took longer than {TRANSFER_TIME:?}"),
                )
            })?
            .map_err(|err| self.failed("put a file", err))?;
        Ok(())
    }
}

#[async_trait]
impl MediaStore for NatsMedia {
    async fn keep(&self, source: std::fs::File, name: &str) -> Result<KeptFile, MediaError> {
        let kept = self.local.keep(source, name).await?;
        self.share(&kept).await?;
        Ok(kept)
    }

    async fn keep_bytes(&self, bytes: Vec<u8>, name: &str) -> Result<KeptFile, MediaError> {
        let kept = self.local.keep_bytes(bytes, name).await?;
        self.share(&kept).await?;
        Ok(kept)
    }

    async fn local(&self, key: &str) -> Result<PathBuf, MediaError> {
        if let Ok(path) = self.local.local(key).await {
            return Ok(path);
        }
        if self.local.path_of(key).is_none() {
            return Err(MediaError::Gone(key.to_owned()));
        }
        let store = self.store(false).await?;
        let fetch = async {
            let mut object = store.get(key).await.map_err(|err| match err.kind() {
                object_store::GetErrorKind::NotFound => MediaError::Gone(key.to_owned()),
                _ => self.failed("fetch a file", err),
            })?;
            self.local.receive(key, &mut object).await
        };
        tokio::time::timeout(TRANSFER_TIME, fetch)
            .await
            .unwrap_or_else(|_| {
                Err(self.failed(
                    "fetch a file",
                    format!("it took longer than {TRANSFER_TIME:?}"),
                ))
            })
    }
}
