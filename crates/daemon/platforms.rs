//! The platform channels (Telegram, Discord) the config enables: built from their sections,
//! run under the supervisor each with its own stop tokens, so a reload can restart one
//! with new settings (a token, an allow list) while the others go on.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use switchboard_adapter::Pairing;
use switchboard_core::{Channel, ChannelContext, ChatHub};
use switchboard_discord::DiscordChannel;
use switchboard_telegram::TelegramChannel;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::health::Health;
use crate::supervisor;

/// How long a stopped channel may take to end before its successor starts anyway.
const STOP_TIMEOUT: Duration = Duration::from_secs(40);

/// The platforms a config may enable.
pub const NAMES: [&str; 2] = ["telegram", "discord"];

/// What building a channel needs besides its section.
#[derive(Clone)]
pub struct Parts {
    pub hub: ChatHub,
    pub health: Health,
    pub state_dir: PathBuf,
    pub workspace: PathBuf,
    pub pairing: Arc<Pairing>,
    /// The daemon's intake token and the channels' stop token: each channel gets children.
    pub intake: CancellationToken,
    pub stop: CancellationToken,
    pub tracker: TaskTracker,
}

/// A running platform channel.
struct Running {
    ctx: ChannelContext,
    task: JoinHandle<()>,
}

/// The running platform channels, by name.
pub struct Platforms {
    parts: Parts,
    running: BTreeMap<&'static str, Running>,
}

/// A platform channel built from a config, not yet running.
pub struct Built {
    pub name: &'static str,
    pub channel: Arc<dyn Channel>,
    /// Its webhook route, if it takes updates that way (mounted once, at start).
    pub router: Option<axum::Router>,
}

impl Platforms {
    pub fn new(parts: Parts) -> Self {
        Self {
            parts,
            running: BTreeMap::new(),
        }
    }

    /// Builds `name`'s channel from `config`; `None` when it is not enabled.
    pub fn build(&self, config: &Config, name: &'static str) -> anyhow::Result<Option<Built>> {
        let parts = &self.parts;
        let built =
            match name {
                "telegram" if config.channels.telegram.enabled => {
                    let settings =
                        config.channels.telegram.settings().map_err(|problem| {
                            config.source.problem("channels.telegram", problem)
                        })?;
                    let channel = TelegramChannel::new(
                        settings,
                        parts.hub.clone(),
                        &parts.state_dir,
                        &parts.workspace,
                        parts.pairing.clone(),
                    )?;
                    let router = channel.router();
                    Built {
                        name,
                        channel: Arc::new(channel),
                        router,
                    }
                }
                "discord" if config.channels.discord.enabled => {
                    let settings =
                        config.channels.discord.settings().map_err(|problem| {
                            config.source.problem("channels.discord", problem)
                        })?;
                    let channel = DiscordChannel::new(
                        settings,
                        parts.hub.clone(),
                        &parts.workspace,
                        parts.pairing.clone(),
                    )?;
                    Built {
                        name,
                        channel: Arc::new(channel),
                        router: None,
                    }
                }
                _ => return Ok(None),
            };
        Ok(Some(built))
    }

    /// Registers a built channel's delivery lanes and runs it under the supervisor.
    pub fn start(&mut self, built: Built) {
        let parts = &self.parts;
        crate::app::register(&parts.hub, &parts.health, built.channel.clone());
        let ctx = ChannelContext {
            hub: parts.hub.clone(),
            intake: parts.intake.child_token(),
            shutdown: parts.stop.child_token(),
        };
        let task = supervisor::spawn_channel(
            built.channel,
            ctx.clone(),
            parts.health.clone(),
            &parts.tracker,
        );
        self.running.insert(built.name, Running { ctx, task });
    }

    /// Stops `name`'s channel and waits (a while) for it to end.
    pub async fn stop(&mut self, name: &str) {
        let Some(running) = self.running.remove(name) else {
            return;
        };
        running.ctx.intake.cancel();
        running.ctx.shutdown.cancel();
        if tokio::time::timeout(STOP_TIMEOUT, running.task)
            .await
            .is_err()
        {
            tracing::warn!(
                channel = name,
                "the channel did not stop in time; its successor starts anyway"
            );
        }
    }
}
