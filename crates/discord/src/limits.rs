//! [`RateLimits`]: Discord's rate limits, kept the way Discord documents them
//! (<https://discord.com/developers/docs/topics/rate-limits>), so the bot waits before a
//! call rather than drawing a 429:
//!
//! - **Buckets.** Every answer names its route's bucket (`X-RateLimit-Bucket`) and what is
//!   left of it (`X-RateLimit-Remaining`, `X-RateLimit-Reset-After`); routes that name the
//!   same bucket share it, per major parameter (the channel, guild or webhook in the path).
//!   A call to a bucket with nothing left waits for its reset — a moment inline, longer as a
//!   `RateLimited` the delivery lane holds its chat for.
//! - **Global.** At most [`GLOBAL_PER_SECOND`] calls a second in all; a 429 that says it is
//!   global (`X-RateLimit-Global`, or `"global": true`) holds every call until it is over.
//! - **Invalid requests.** 401, 403 and 429 answers (but a 429 of a `shared` bucket) count;
//!   Discord bans an IP that makes 10,000 in ten minutes. Past [`INVALID_GUARD`] in ten
//!   minutes the bot makes no call until the count falls, and says why.
//!
//! Times are tokio's, so the tests run on paused time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::time::Instant;

/// Calls a second Discord allows a bot in all.
pub const GLOBAL_PER_SECOND: usize = 50;

/// Invalid requests in ten minutes after which the bot stops calling (Discord bans at 10,000).
pub const INVALID_GUARD: usize = 9_000;

/// The window invalid requests are counted over.
const INVALID_WINDOW: Duration = Duration::from_secs(600);

/// The longest a call waits inline for its bucket or the global limit; longer, it is
/// handed back as rate limited (its chat is held).
pub(crate) const INLINE_WAIT: Duration = Duration::from_secs(1);

/// Routes (and buckets) remembered; beyond, the table starts over.
const MAX_ROUTES: usize = 4096;

/// A call's route, as Discord limits it: its method and path with ids taken out, and its
/// major parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    key: String,
    major: String,
}

impl Route {
    /// The route of `method` on `path` (relative to `/api/v10/`).
    pub(crate) fn of(method: &reqwest::Method, path: &str) -> Self {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let mut major = String::new();
        let mut key = method.as_str().to_owned();
        for (at, segment) in segments.iter().enumerate() {
            key.push('/');
            let is_major = at == 1
                && matches!(
                    segments.first(),
                    Some(&("channels" | "guilds" | "webhooks"))
                );
            let is_id = segment.bytes().all(|b| b.is_ascii_digit()) || segment.len() > 32;
            if is_major {
                major = (*segment).to_owned();
                key.push_str(":major");
            } else if is_id && !segment.is_empty() {
                key.push_str(":id");
            } else {
                key.push_str(segment);
            }
        }
        Self { key, major }
    }
}

/// What a call must do before it is sent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Send it.
    Go,
    /// Wait this long, then ask again.
    Wait(Duration),
    /// Do not send it now: the invalid-request guard; why.
    Refused(String),
}

/// The limits of one bot's calls.
#[derive(Default)]
pub(crate) struct RateLimits {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The bucket each route belongs to, as Discord named it.
    bucket_of: HashMap<String, String>,
    /// Each bucket, per major parameter.
    buckets: HashMap<(String, String), Bucket>,
    global_until: Option<Instant>,
    /// When the calls of the last second were sent.
    sent: VecDeque<Instant>,
    /// When the invalid requests of the last ten minutes were answered.
    invalid: VecDeque<Instant>,
}

#[derive(Debug)]
struct Bucket {
    remaining: u32,
    reset_at: Instant,
}

/// What an answer said of the limits.
#[derive(Debug, Default)]
pub(crate) struct Answered {
    pub status: u16,
    /// A 429's `retry_after`.
    pub retry_after: Option<Duration>,
    /// A 429's `"global": true`.
    pub global: bool,
}

impl RateLimits {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call on `route` may be sent at `now`; when it may, it is counted (against
    /// its bucket and the global limit).
    pub(crate) fn before(&self, route: &Route, now: Instant) -> Gate {
        let mut state = self.lock();
        while state
            .invalid
            .front()
            .is_some_and(|at| now.duration_since(*at) >= INVALID_WINDOW)
        {
            state.invalid.pop_front();
        }
        if state.invalid.len() >= INVALID_GUARD {
            let clears = state.invalid.front().map_or(INVALID_WINDOW, |at| {
                INVALID_WINDOW - now.duration_since(*at)
            });
            return Gate::Refused(format!(
                "{} of Discord's answers in ten minutes refused the bot (401, 403 or 429); \
                 Discord bans a bot at 10,000, so it makes no call for {} s",
                state.invalid.len(),
                clears.as_secs() + 1
            ));
        }
        if let Some(until) = state.global_until {
            if until > now {
                return Gate::Wait(until - now);
            }
            state.global_until = None;
        }
        while state
            .sent
            .front()
            .is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(1))
        {
            state.sent.pop_front();
        }
        if state.sent.len() >= GLOBAL_PER_SECOND
            && let Some(first) = state.sent.front()
        {
            return Gate::Wait(Duration::from_secs(1) - now.duration_since(*first));
        }
        let key = state.bucket_key(route);
        if let Some(bucket) = state.buckets.get_mut(&key) {
            if bucket.reset_at <= now {
                state.buckets.remove(&key);
            } else if bucket.remaining == 0 {
                return Gate::Wait(bucket.reset_at - now);
            } else {
                bucket.remaining -= 1;
            }
        }
        state.sent.push_back(now);
        Gate::Go
    }

    /// Takes in what the answer to a call on `route` at `now` said of the limits.
    pub(crate) fn after(
        &self,
        route: &Route,
        headers: &HeaderMap,
        answered: &Answered,
        now: Instant,
    ) {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let mut state = self.lock();
        if state.bucket_of.len() >= MAX_ROUTES || state.buckets.len() >= MAX_ROUTES {
            state.bucket_of.clear();
            state.buckets.clear();
        }
        if let Some(bucket) = header("x-ratelimit-bucket") {
            state.bucket_of.insert(route.key.clone(), bucket.to_owned());
        }
        let remaining = header("x-ratelimit-remaining").and_then(|v| v.parse::<u32>().ok());
        let reset_after = header("x-ratelimit-reset-after")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|secs| secs.is_finite() && *secs >= 0.0)
            .map(|secs| Duration::from_secs_f64(secs.min(3600.0)));
        let key = state.bucket_key(route);
        if let (Some(remaining), Some(reset_after)) = (remaining, reset_after) {
            state.buckets.insert(
                key.clone(),
                Bucket {
                    remaining,
                    reset_at: now + reset_after,
                },
            );
        }
        let scope = header("x-ratelimit-scope");
        if answered.status == 429 {
            let global = answered.global
                || header("x-ratelimit-global").is_some_and(|v| v.eq_ignore_ascii_case("true"))
                || scope == Some("global");
            let wait = answered.retry_after.unwrap_or(Duration::from_secs(1));
            if global {
                state.global_until = Some(now + wait);
            } else {
                // The bucket is empty until the wait is over, whatever the headers said.
                state.buckets.insert(
                    key,
                    Bucket {
                        remaining: 0,
                        reset_at: now + wait,
                    },
                );
            }
        }
        let invalid = matches!(answered.status, 401 | 403)
            || (answered.status == 429 && scope != Some("shared"));
        if invalid {
            state.invalid.push_back(now);
        }
    }
}

impl State {
    /// Where a route's bucket is kept: the bucket Discord named for it (else the route
    /// itself), per major parameter.
    fn bucket_key(&self, route: &Route) -> (String, String) {
        let bucket = self
            .bucket_of
            .get(&route.key)
            .cloned()
            .unwrap_or_else(|| route.key.clone());
        (bucket, route.major.clone())
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_str(value).expect("value"));
        }
        headers
    }

    fn ok() -> Answered {
        Answered {
            status: 200,
            ..Answered::default()
        }
    }

    #[test]
    fn routes_keep_their_major_parameter_and_lose_other_ids() {
        let post = reqwest::Method::POST;
        let a = Route::of(&post, "channels/111/messages");
        let b = Route::of(&post, "channels/222/messages");
        assert_eq!(a.key, b.key);
        assert_ne!(a.major, b.major);
        let edit = Route::of(&reqwest::Method::PATCH, "channels/111/messages/999");
        assert_eq!(edit.key, "PATCH/channels/:major/messages/:id");
        let callback = Route::of(
            &post,
            "interactions/123/aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDEyMzQ1Njc4OQ/callback",
        );
        assert_eq!(callback.key, "POST/interactions/:id/:id/callback");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_with_nothing_left_waits_for_its_reset_and_routes_naming_it_share_it() {
        let limits = RateLimits::default();
        let now = Instant::now();
        let create = Route::of(&reqwest::Method::POST, "channels/1/messages");
        let edit = Route::of(&reqwest::Method::PATCH, "channels/1/messages/5");
        let other = Route::of(&reqwest::Method::POST, "channels/2/messages");
        assert_eq!(limits.before(&create, now), Gate::Go, "nothing known yet");
        let said = headers(&[
            ("x-ratelimit-bucket", "abcd"),
            ("x-ratelimit-limit", "5"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset-after", "2.5"),
        ]);
        limits.after(&create, &said, &ok(), now);
        limits.after(&edit, &said, &ok(), now);
        assert_eq!(
            limits.before(&edit, now),
            Gate::Wait(Duration::from_millis(2500)),
            "an edit shares the bucket"
        );
        assert_eq!(
            limits.before(&other, now),
            Gate::Go,
            "another channel has its own"
        );
        let later = now + Duration::from_millis(2500);
        assert_eq!(limits.before(&create, later), Gate::Go, "reset");
    }

    #[tokio::test(start_paused = true)]
    async fn a_global_429_holds_every_route_and_no_more_than_50_calls_go_a_second() {
        let limits = RateLimits::default();
        let now = Instant::now();
        let a = Route::of(&reqwest::Method::POST, "channels/1/messages");
        let b = Route::of(&reqwest::Method::POST, "channels/2/messages");
        let global = Answered {
            status: 429,
            retry_after: Some(Duration::from_millis(700)),
            global: false,
        };
        limits.after(
            &a,
            &headers(&[("x-ratelimit-global", "true")]),
            &global,
            now,
        );
        assert_eq!(
            limits.before(&b, now),
            Gate::Wait(Duration::from_millis(700))
        );
        let later = now + Duration::from_millis(700);
        for n in 0..GLOBAL_PER_SECOND {
            let route = Route::of(&reqwest::Method::POST, &format!("channels/{n}/messages"));
            assert_eq!(limits.before(&route, later), Gate::Go);
        }
        assert_eq!(limits.before(&a, later), Gate::Wait(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn invalid_requests_near_the_ban_stop_every_call_until_they_age_out() {
        let limits = RateLimits::default();
        let start = Instant::now();
        let route = Route::of(&reqwest::Method::POST, "channels/1/messages");
        let shared = Answered {
            status: 429,
            retry_after: Some(Duration::ZERO),
            global: false,
        };
        // A shared bucket's 429 does not count.
        limits.after(
            &route,
            &headers(&[("x-ratelimit-scope", "shared")]),
            &shared,
            start,
        );
        let refused = Answered {
            status: 403,
            ..Answered::default()
        };
        for _ in 0..INVALID_GUARD {
            limits.after(&route, &HeaderMap::new(), &refused, start);
        }
        let Gate::Refused(why) = limits.before(&route, start) else {
            panic!("refused near the ban");
        };
        assert!(why.contains("bans a bot at 10,000"), "{why}");
        assert_eq!(
            limits.before(&route, start + INVALID_WINDOW),
            Gate::Go,
            "ten minutes later"
        );
    }
}
