//! [`RetryPolicy`]: how long to wait before sending a failed request again.

use std::time::Duration;

/// Exponential backoff with jitter; a server's Retry-After wins when it gives one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    /// The wait before the first retry, doubled for each further one.
    pub base_delay: Duration,
    /// The longest wait between attempts (Retry-After included): a server asking for
    /// more gets its error passed on instead.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based), or `None` when no retry is left or
    /// the server asked for a longer wait than `max_delay`.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if retry >= self.max_retries {
            return None;
        }
        if let Some(wait) = retry_after {
            return (wait <= self.max_delay).then_some(wait);
        }
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay);
        // Jitter: anywhere from half to all of the exponential delay, so clients that
        // failed together do not retry together.
        let half = exp / 2;
        let jitter = half.mul_f64(fastrand::f64());
        Some(half + jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_exponentially_within_jitter_bounds() {
        let policy = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        for (retry, full) in [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1000)] {
            for _ in 0..50 {
                let delay = policy.delay(retry, None).expect("retry left");
                let full = Duration::from_millis(full);
                assert!(delay >= full / 2 && delay <= full, "{retry}: {delay:?}");
            }
        }
    }

    #[test]
    fn retries_run_out() {
        let policy = RetryPolicy {
            max_retries: 2,
            ..RetryPolicy::default()
        };
        assert!(policy.delay(1, None).is_some());
        assert!(policy.delay(2, None).is_none());
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3600))), None);
    }
}
