//! The agent's side of scheduled work: the hook that tells the scheduler how a run's turn
//! ended — where it ended (on a cluster, perhaps another member than the one that handed the
//! run over), or when its message is handled again without a turn.

use async_trait::async_trait;
use switchboard_core::{InboundMessage, SessionKey, TurnEnd};
use switchboard_scheduler::Outcomes;

use crate::hooks::{Hook, TurnInfo, TurnSummary};

/// The hook that settles scheduled runs (add it to every agent a scheduler hands runs to).
pub struct RunOutcomes(pub Outcomes);

#[async_trait]
impl Hook for RunOutcomes {
    async fn on_turn_end(&self, _turn: TurnInfo<'_>, summary: TurnSummary<'_>) {
        if let Some(run) = summary.run {
            self.0.turn_ended(run, summary.end, summary.text).await;
        }
    }

    async fn on_handled_again(
        &self,
        _session: &SessionKey,
        message: &InboundMessage,
        end: Option<TurnEnd>,
    ) {
        if let Some(run) = &message.run {
            self.0.handled_again(run, end).await;
        }
    }
}
