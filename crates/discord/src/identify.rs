//! Discord's budget of new sessions: a bot that IDENTIFYs too often has its token reset, so a
//! reconnect loop Discord keeps refusing waits between IDENTIFYs ([`identify_wait`]).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// IDENTIFYs remembered; more than this many in [`IDENTIFY_SPAN`] and the next one waits.
pub(crate) const IDENTIFY_WINDOW: usize = 5;
/// The span [`IDENTIFY_WINDOW`] IDENTIFYs may take before the next one waits.
const IDENTIFY_SPAN: Duration = Duration::from_secs(600);
/// The least time between two IDENTIFYs once the window is full: at most 720 a day,
/// under Discord's 1,000.
const IDENTIFY_EVERY: Duration = Duration::from_secs(120);

/// How long to wait before the next IDENTIFY, given when the last ones were sent (oldest
/// first): nothing while fewer than [`IDENTIFY_WINDOW`] were sent in [`IDENTIFY_SPAN`];
/// else until [`IDENTIFY_EVERY`] after the last. A reconnect loop that Discord keeps
/// refusing (op 9, closes) then identifies at most 720 times a day.
pub(crate) fn identify_wait(sent: &VecDeque<Instant>, now: Instant) -> Duration {
    let recent = sent
        .iter()
        .filter(|at| now.saturating_duration_since(**at) < IDENTIFY_SPAN)
        .count();
    match sent.back() {
        Some(last) if recent >= IDENTIFY_WINDOW => {
            (*last + IDENTIFY_EVERY).saturating_duration_since(now)
        }
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifies_stay_within_discords_daily_budget() {
        let start = Instant::now();
        let mut sent = VecDeque::new();
        let mut now = start;
        // A loop that reconnects as fast as it can for a day.
        let day = start + Duration::from_secs(86_400);
        let mut count = 0;
        while now < day {
            now += identify_wait(&sent, now);
            if sent.len() >= IDENTIFY_WINDOW {
                sent.pop_front();
            }
            sent.push_back(now);
            count += 1;
            // Discord refuses it at once (op 9): the next attempt a second later.
            now += Duration::from_secs(1);
        }
        assert!(count <= 1_000, "{count} identifies in a day");
        assert!(count >= 700, "not slower than needed: {count}");
        // A few restarts in a row are not held up.
        let mut few = VecDeque::new();
        for i in 0..IDENTIFY_WINDOW as u64 - 1 {
            few.push_back(start + Duration::from_secs(i));
        }
        assert_eq!(
            identify_wait(&few, start + Duration::from_secs(5)),
            Duration::ZERO
        );
    }
}
