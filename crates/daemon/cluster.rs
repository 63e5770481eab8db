//! `[cluster]` in the daemon: what this process is ([`Place`]) — alone, or a gateway, a
//! worker or both on a cluster — and what the cluster puts in place of the one-process parts:
//! the bus and the session stores. Without the `cluster` feature every process is alone, and
//! a config with `[cluster]` is refused.

use std::path::Path;
use std::sync::Arc;

use switchboard_adapter::FileMedia;
use switchboard_agent::{ChoiceStore, StateChoices};
use switchboard_core::{AgentName, Bus, ChatHub, MediaStore, StateStore};
use switchboard_scheduler::{JobStore, StateJobStore};
use switchboard_sessions::{FileState, SessionStore};
use switchboard_usage::{StateUsageStore, UsageStore};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Where the daemon keeps what is not a session: the small documents (pairing, a platform's
/// cursor), the scheduler's jobs, the chats' choices and what the models cost — one state
/// store, whose documents are files in the state directory alone, and entries of the
/// cluster's state bucket on a cluster, so every member sees one truth.
#[derive(Clone)]
pub(crate) struct Stores {
    state: Arc<dyn StateStore>,
    /// Files waiting for their channel: the state directory's alone; on a cluster, also in
    /// its object store, for the gateway that delivers them.
    media: Arc<dyn MediaStore>,
    /// This process as a writer of the day's spending totals: its member name on a
    /// cluster, [`switchboard_usage::ALONE`] alone.
    writer: String,
}

impl Stores {
    /// The stores of the config's daemon, for the operator's commands (`pairing`, `cron`,
    /// `usage`): on a cluster they connect to it with the config's `[cluster]` (whose
    /// secrets must then be readable where the command runs).
    pub(crate) async fn open(config: &Config) -> anyhow::Result<Self> {
        let state_dir = config.path(&config.agent.state_dir);
        #[cfg(feature = "cluster")]
        if let Some(section) = &config.cluster {
            let resolved = section
                .resolve()
                .map_err(|problem| config.source.problem("cluster", problem))?;
            let cluster = Box::pin(switchboard_nats::Cluster::connect(resolved)).await?;
            return Ok(Self::of_cluster(&cluster, &state_dir));
        }
        check_owner(&state_dir)?;
        crate::migrate::tell_left_behind(&state_dir);
        Ok(Self::alone(&state_dir))
    }

    fn alone(state_dir: &Path) -> Self {
        Self {
            state: Arc::new(FileState::new(state_dir)),
            media: Arc::new(FileMedia::new(state_dir)),
            writer: switchboard_usage::ALONE.to_owned(),
        }
    }

    #[cfg(feature = "cluster")]
    fn of_cluster(cluster: &switchboard_nats::Cluster, state_dir: &Path) -> Self {
        Self {
            state: Arc::new(switchboard_nats::NatsState::new(cluster)),
            media: Arc::new(switchboard_nats::NatsMedia::new(cluster, state_dir)),
            writer: cluster.member().to_owned(),
        }
    }

    /// The small documents.
    pub(crate) fn state(&self) -> &Arc<dyn StateStore> {
        &self.state
    }

    /// Files waiting for their channel.
    pub(crate) fn media(&self) -> &Arc<dyn MediaStore> {
        &self.media
    }

    /// The scheduler's jobs.
    pub(crate) fn jobs(&self) -> Arc<dyn JobStore> {
        Arc::new(self.job_store())
    }

    pub(crate) fn job_store(&self) -> StateJobStore {
        StateJobStore::new(self.state.clone())
    }

    /// What `agent`'s chats chose (`/model`).
    pub(crate) fn choices(&self, agent: &AgentName) -> Arc<dyn ChoiceStore> {
        Arc::new(StateChoices::new(self.state.clone(), agent.as_str()))
    }

    /// What the models cost.
    pub(crate) fn usage(&self) -> Arc<dyn UsageStore> {
        Arc::new(self.usage_store())
    }

    pub(crate) fn usage_store(&self) -> StateUsageStore {
        StateUsageStore::new(self.state.clone(), &self.writer)
    }
}

/// What this process is, and the bus it is on.
pub(crate) struct Place {
    bus: Arc<dyn Bus>,
    stores: Stores,
    runs_channels: bool,
    runs_agents: bool,
    /// Whether compaction on the cluster keeps what it replaces (`[memory]` on).
    #[cfg(feature = "cluster")]
    keep_history: bool,
    #[cfg(feature = "cluster")]
    nats: Option<(switchboard_nats::Cluster, switchboard_nats::NatsBus)>,
}

impl Place {
    /// Joins the cluster when the config has one (connecting to NATS and making what is
    /// missing there); else the process is alone, on a [`ChatHub`].
    pub(crate) async fn join(config: &Config, intake: &CancellationToken) -> anyhow::Result<Self> {
        let capacity = config.daemon.inbound_queue;
        #[cfg(feature = "cluster")]
        if let Some(section) = &config.cluster {
            let mut resolved = section
                .resolve()
                .map_err(|problem| config.source.problem("cluster", problem))?;
            if let Some(role) = &config.role {
                resolved.role = role
                    .parse()
                    .map_err(|why: String| config.source.error_at(None, "--role".into(), why))?;
            }
            let role = resolved.role;
            if let Some(server) = resolved.in_the_clear() {
                tracing::warn!(%server, auth = resolved.auth.kind(),
                    "the bus to a server on another host is not encrypted: set [cluster.tls] \
                     (or a tls:// URL) so credentials and chats do not cross the network in \
                     the clear");
            }
            let cluster = Box::pin(switchboard_nats::Cluster::connect(resolved)).await?;
            tracing::info!(member = cluster.member(), role = role.as_str(),
                cluster = %cluster.config().name, partitions = cluster.config().partitions,
                auth = cluster.config().auth.kind(), "joined the cluster");
            let bus = switchboard_nats::NatsBus::new(cluster.clone(), capacity, intake.clone());
            return Ok(Self {
                bus: Arc::new(bus.clone()),
                stores: Stores::of_cluster(&cluster, &config.path(&config.agent.state_dir)),
                runs_channels: role.runs_channels(),
                runs_agents: role.runs_agents(),
                keep_history: config.memory.enabled,
                nats: Some((cluster, bus)),
            });
        }
        let state_dir = config.path(&config.agent.state_dir);
        let stores = Stores::alone(&state_dir);
        crate::migrate::move_in(&state_dir, &stores).await?;
        Ok(Self {
            bus: Arc::new(ChatHub::new(capacity, intake.clone())),
            stores,
            runs_channels: true,
            runs_agents: true,
            #[cfg(feature = "cluster")]
            keep_history: false,
            #[cfg(feature = "cluster")]
            nats: None,
        })
    }

    /// The bus adapters and agents meet on.
    pub(crate) fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// Where what is not a session is kept.
    pub(crate) fn stores(&self) -> &Stores {
        &self.stores
    }

    /// Whether this process runs the channels (alone, or a gateway).
    pub(crate) fn runs_channels(&self) -> bool {
        self.runs_channels
    }

    /// Whether this process runs the agents (alone, or a worker).
    pub(crate) fn runs_agents(&self) -> bool {
        self.runs_agents
    }

    /// Whether the process is one of a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return self.nats.is_some();
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// Where `agent`'s sessions are kept on the cluster; `None` alone (its state directory).
    pub(crate) fn session_store(&self, agent: &AgentName) -> Option<Arc<dyn SessionStore>> {
        #[cfg(feature = "cluster")]
        if let Some((cluster, _)) = &self.nats {
            return Some(Arc::new(
                switchboard_nats::NatsStore::new(cluster, agent).keeping_history(self.keep_history),
            ));
        }
        let _ = agent;
        None
    }

    /// Follows each of `agents`' chats on the cluster into `index` (a worker's memory
    /// search), on tasks of their own; `false` alone, where the index reads the files.
    pub(crate) fn follow_said(
        &self,
        index: &switchboard_memory::MemoryIndex,
        agents: &[AgentName],
    ) -> bool {
        #[cfg(feature = "cluster")]
        if let Some((cluster, _)) = &self.nats {
            for agent in agents {
                let feed = switchboard_nats::SaidFeed::new(cluster, agent);
                tokio::spawn(crate::memory_feed::follow(
                    feed,
                    agent.clone(),
                    index.clone(),
                ));
            }
            return true;
        }
        let _ = (index, agents);
        false
    }

    /// Starts taking partitions (a worker on a cluster; nothing alone). A gateway that
    /// runs no agents only keeps itself listed among the members.
    pub(crate) fn start_worker(&self) {
        #[cfg(feature = "cluster")]
        if let Some((_, bus)) = &self.nats {
            if self.runs_agents {
                bus.start_worker();
            } else {
                bus.start_presence();
            }
        }
    }
}

/// Refuses to work on a state directory as root when another user owns it: files root made
/// there would lock the daemon (running as that user) out of them.
pub(crate) fn check_owner(state_dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(state_dir) else {
        return Ok(());
    };
    let me = rustix::process::geteuid().as_raw();
    if me == 0 && meta.uid() != 0 {
        anyhow::bail!(
            "{} belongs to uid {}, and files root writes there would lock the daemon out: run \
             this as the daemon's user (sudo -u switchboard switchboard …)",
            state_dir.display(),
            meta.uid()
        );
    }
    Ok(())
}
