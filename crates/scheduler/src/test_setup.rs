//! What the scheduler's tests share: a scheduler on paused time over the jobs in files of a
//! temporary directory, with a hub whose messages the test reads, and a channel that keeps
//! what the chat is told.

use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use switchboard_core::{
    Bus, Channel, ChannelContext, ChannelName, ChatHub, ChatId, CoreError, InboundMessage,
    LaneOptions, Lanes, OutboundKind, OutboundMessage, Tenure,
};
use tokio::sync::mpsc::Receiver;
use tokio_util::sync::CancellationToken;

use super::clock::{Clock, TokioClock};
use super::due::Schedule;
use super::job::{Job, JobKind, SessionMode};
use super::jobs::SchedulerConfig;
use super::jobs::{Asker, NewJob};
use super::runner::Scheduler;
use super::state_store::StateJobStore;

/// A channel that keeps what it is sent.
pub(super) struct Collect(Mutex<Vec<OutboundKind>>);

#[async_trait]
impl Channel for Collect {
    fn name(&self) -> ChannelName {
        ChannelName::from("websocket")
    }
    async fn run(&self, _ctx: ChannelContext) -> Result<(), CoreError> {
        Ok(())
    }
    async fn send(&self, message: OutboundMessage) -> Result<switchboard_core::Sent, CoreError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.kind);
        Ok(switchboard_core::Sent::accepted())
    }
}

pub(super) struct Setup {
    pub(super) _dir: tempfile::TempDir,
    pub(super) scheduler: Scheduler,
    pub(super) inbound: Receiver<InboundMessage>,
    sent: Arc<Collect>,
    pub(super) stop: CancellationToken,
    pub(super) store: StateJobStore,
}

impl Setup {
    /// Adds `new_job(schedule)` (a job of chat "c").
    pub(super) async fn add(&self, schedule: Schedule) -> Result<Job, String> {
        self.scheduler.jobs().add(new_job(schedule)).await
    }

    /// Every job left.
    pub(super) async fn left(&self) -> Vec<Job> {
        self.scheduler
            .jobs()
            .list(&Asker::Operator)
            .await
            .expect("jobs")
    }

    /// What the chat was sent so far.
    pub(super) fn told(&self) -> Vec<OutboundKind> {
        self.sent
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

pub(super) fn start_at(now: &str, state: Option<tempfile::TempDir>) -> Setup {
    start_with(now, state, Duration::from_secs(1))
}

pub(super) fn start_with(
    now: &str,
    state: Option<tempfile::TempDir>,
    min_interval: Duration,
) -> Setup {
    let clock = Arc::new(TokioClock::starting_at(
        Timestamp::from_str(now).expect("ts"),
    ));
    let config = SchedulerConfig {
        min_interval,
        ..SchedulerConfig::default()
    };
    start_on(clock, state, config)
}

pub(super) fn start_on(
    clock: Arc<dyn Clock>,
    state: Option<tempfile::TempDir>,
    config: SchedulerConfig,
) -> Setup {
    let dir = state.unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
    let store = files(dir.path());
    let hub: Arc<dyn Bus> = Arc::new(ChatHub::new(64, CancellationToken::new()));
    let sent = Arc::new(Collect(Mutex::new(Vec::new())));
    hub.register_channel(sent.clone(), LaneOptions::default());
    let inbound = hub.take_inbound().expect("inbound");
    let scheduler = Scheduler::new(Arc::new(store.clone()), hub, clock, config);
    let stop = CancellationToken::new();
    let running = scheduler.clone();
    let until = stop.clone();
    tokio::spawn(async move { running.run(until).await });
    Setup {
        _dir: dir,
        scheduler,
        inbound,
        sent,
        stop,
        store,
    }
}

/// The bus of one process, whose firing duty is held as the test says: `lead` waits until
/// the test hands it a tenure (as a member of a cluster waits for the lease), then returns
/// that.
pub(super) struct Duty {
    hub: ChatHub,
    tenure: tokio::sync::watch::Receiver<Option<Tenure>>,
}

impl Duty {
    /// The bus, and what hands it the duty.
    pub(super) fn new() -> (Self, tokio::sync::watch::Sender<Option<Tenure>>) {
        let (give, tenure) = tokio::sync::watch::channel(None);
        let hub = ChatHub::new(64, CancellationToken::new());
        (Self { hub, tenure }, give)
    }
}

#[async_trait]
impl Bus for Duty {
    async fn publish_inbound(&self, message: InboundMessage) -> Result<(), CoreError> {
        self.hub.publish_inbound(message).await
    }
    fn is_accepting(&self) -> bool {
        self.hub.is_accepting()
    }
    fn take_inbound(&self) -> Result<Receiver<InboundMessage>, CoreError> {
        self.hub.take_inbound()
    }
    fn register_channel(&self, channel: Arc<dyn Channel>, options: LaneOptions) -> Lanes {
        self.hub.register_channel(channel, options)
    }
    fn channels(&self) -> Vec<ChannelName> {
        self.hub.channels()
    }
    async fn publish_outbound(&self, message: OutboundMessage) -> Result<(), CoreError> {
        self.hub.publish_outbound(message).await
    }
    async fn deliver_outbound(
        &self,
        message: OutboundMessage,
    ) -> Result<switchboard_core::Sent, CoreError> {
        self.hub.deliver_outbound(message).await
    }
    async fn may_notify(&self, channel: &ChannelName, chat: &ChatId) -> Result<bool, CoreError> {
        self.hub.may_notify(channel, chat).await
    }
    fn has_person(&self, channel: &ChannelName) -> bool {
        self.hub.has_person(channel)
    }
    async fn lead(&self, _duty: &str) -> Tenure {
        let mut tenure = self.tenure.clone();
        loop {
            if let Some(held) = tenure.borrow_and_update().clone()
                && !held.is_lost()
            {
                return held;
            }
            if tenure.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
    async fn close_outbound(&self, deadline: Duration) -> bool {
        self.hub.close_outbound(deadline).await
    }
}

/// A scheduler on `bus` over the jobs in `dir`, starting at `now` (paused time), running.
pub(super) fn start_on_bus(
    now: &str,
    dir: &std::path::Path,
    bus: Arc<dyn Bus>,
) -> (Scheduler, Receiver<InboundMessage>, CancellationToken) {
    let clock = Arc::new(TokioClock::starting_at(
        Timestamp::from_str(now).expect("ts"),
    ));
    let config = SchedulerConfig {
        min_interval: Duration::from_secs(1),
        ..SchedulerConfig::default()
    };
    let sent = Arc::new(Collect(Mutex::new(Vec::new())));
    bus.register_channel(sent, LaneOptions::default());
    let inbound = bus.take_inbound().expect("inbound");
    let store = Arc::new(files(dir));
    let scheduler = Scheduler::new(store, bus, clock, config);
    let stop = CancellationToken::new();
    let running = scheduler.clone();
    let until = stop.clone();
    tokio::spawn(async move { running.run(until).await });
    (scheduler, inbound, stop)
}

/// The jobs kept in files under `dir`, as one process keeps them.
pub(super) fn files(dir: &std::path::Path) -> StateJobStore {
    StateJobStore::new(Arc::new(switchboard_sessions::FileState::new(dir)))
}

/// A job `id` of chat "c", every minute, due now.
pub(super) fn job(id: &str) -> Job {
    Job {
        id: id.into(),
        name: format!("job {id}"),
        message: "ping".into(),
        schedule: Schedule::Every {
            every_secs: 60,
            from: Timestamp::UNIX_EPOCH,
        },
        channel: "websocket".into(),
        chat_id: "c".into(),
        session: SessionMode::Chat,
        enabled: true,
        created_by: "operator".into(),
        catch_up_secs: 3600,
        created_at: Timestamp::UNIX_EPOCH,
        next_due: Some(Timestamp::UNIX_EPOCH),
        last: None,
        declared: None,
        kind: JobKind::Task,
        active_hours: None,
        retry: None,
        agent: None,
        owner: None,
    }
}

pub(super) fn chat() -> (ChannelName, ChatId) {
    (ChannelName::from("websocket"), ChatId::from("c"))
}

pub(super) fn new_job(schedule: Schedule) -> NewJob {
    NewJob {
        name: Some("tea".into()),
        message: "Remind me to drink tea.".into(),
        schedule,
        chat: chat(),
        session: SessionMode::Chat,
        catch_up: None,
        created_by: None,
        agent: None,
        owner: None,
    }
}

/// The next scheduled message, within `within` of (paused) time.
pub(super) async fn next(setup: &mut Setup, within: Duration) -> Option<InboundMessage> {
    tokio::time::timeout(within, setup.inbound.recv())
        .await
        .ok()
        .flatten()
}
