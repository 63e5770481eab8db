//! [`Lanes`]: a few threads of the store's own for its file work.
//!
//! The store's calls block (open, write, read a tail, rename, fsync), so they cannot run on
//! the runtime's workers. tokio's blocking pool would take them, but it starts a thread for
//! every task that finds none idle, up to 512: a thousand sessions loading at once made a
//! thousand-odd threads and 70 MiB, and a semaphore in front of it does not help — the next
//! task is handed over before the thread that finished is counted idle, so new threads are
//! started anyway. Lanes are that pool with a bound that holds: at most `size` threads,
//! started as work comes (an idle daemon has none), each leaving after `idle` without work.
//! Work waits in one queue, oldest first; a thread takes the next piece as it finishes one.
//! A disk does not get faster with more operations in parallel, so a few lanes lose nothing;
//! more than one keeps a slow compaction (its fsync) from holding up every append behind it.
//!
//! Work must not wait for other work in the lanes (it would wait for a lane it holds): the
//! store's operations each stand alone.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// A bounded set of threads for blocking work; see the module.
#[derive(Debug)]
pub struct Lanes {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    size: usize,
    idle_for: Duration,
    state: Mutex<State>,
    work_came: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads alive.
    threads: usize,
    /// Of those, the ones waiting for work.
    idle: usize,
    /// The most threads alive at once.
    peak: usize,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("queued", &self.queue.len())
            .field("threads", &self.threads)
            .field("idle", &self.idle)
            .finish()
    }
}

/// Why work given to the lanes did not finish.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("no thread could be started for it: {0}")]
    NoThread(String),
    #[error("it panicked")]
    Panicked,
}

impl Lanes {
    /// At most `size` threads (at least one), each leaving after `idle_for` without work.
    pub fn new(size: usize, idle_for: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                size: size.max(1),
                idle_for,
                state: Mutex::new(State::default()),
                work_came: Condvar::new(),
            }),
        }
    }

    /// Runs `work` on a lane and waits for its result.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, LaneError> {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = catch_unwind(AssertUnwindSafe(work)).map_err(|_| LaneError::Panicked);
            let _ = done.send(outcome);
        });
        self.submit(job)?;
        result.await.unwrap_or(Err(LaneError::Panicked))
    }

    /// The most threads that were alive at once.
    #[cfg(test)]
    pub fn peak(&self) -> usize {
        self.shared.lock().peak
    }

    /// Threads alive now.
    #[cfg(test)]
    pub fn threads(&self) -> usize {
        self.shared.lock().threads
    }

    fn submit(&self, job: Job) -> Result<(), LaneError> {
        let mut state = self.shared.lock();
        state.queue.push_back(job);
        if state.idle > 0 {
            drop(state);
            self.shared.work_came.notify_one();
            return Ok(());
        }
        if state.threads >= self.shared.size {
            // Every lane is busy: the first to finish takes it.
            return Ok(());
        }
        state.threads += 1;
        state.peak = state.peak.max(state.threads);
        drop(state);
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("switchboard-files".into())
            .spawn(move || shared.work());
        if let Err(err) = started {
            let mut state = self.shared.lock();
            state.threads -= 1;
            if state.threads == 0 {
                // Nobody would take it: it is dropped, and its caller told.
                state.queue.pop_back();
                return Err(LaneError::NoThread(err.to_string()));
            }
        }
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A lane: takes work until none came for `idle_for`.
    fn work(&self) {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.queue.pop_front() {
                drop(state);
                job();
                state = self.lock();
                continue;
            }
            state.idle += 1;
            let (woken, waited) = self
                .work_came
                .wait_timeout(state, self.idle_for)
                .unwrap_or_else(PoisonError::into_inner);
            state = woken;
            state.idle -= 1;
            if waited.timed_out() && state.queue.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_pieces_at_once_run_on_at_most_size_threads_and_all_finish() {
        let lanes = Arc::new(Lanes::new(4, Duration::from_secs(10)));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let pieces: Vec<_> = (0..1000)
            .map(|i| {
                let (lanes, running, most) = (lanes.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    lanes
                        .run(move || {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_micros(200));
                            running.fetch_sub(1, Ordering::SeqCst);
                            i
                        })
                        .await
                })
            })
            .collect();
        let mut sum = 0;
        for piece in pieces {
            sum += piece.await.expect("joined").expect("ran");
        }
        assert_eq!(sum, (0..1000).sum::<usize>());
        assert!(lanes.peak() <= 4, "{} threads", lanes.peak());
        assert!(
            most.load(Ordering::SeqCst) > 1,
            "the lanes ran side by side"
        );
    }

    #[tokio::test]
    async fn idle_lanes_leave_and_come_back_with_work() {
        let lanes = Lanes::new(2, Duration::from_millis(20));
        assert_eq!(lanes.threads(), 0, "none before any work");
        assert_eq!(lanes.run(|| 1).await.expect("ran"), 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while lanes.threads() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the lane did not leave"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(lanes.run(|| 2).await.expect("ran"), 2);
    }

    #[tokio::test]
    async fn a_panic_is_an_error_and_the_lane_goes_on() {
        let lanes = Lanes::new(1, Duration::from_secs(10));
        let failed = lanes.run(|| -> u8 { panic!("broken") }).await;
        assert!(matches!(failed, Err(LaneError::Panicked)));
        assert_eq!(lanes.run(|| 3).await.expect("ran"), 3);
        assert_eq!(lanes.peak(), 1);
    }
}
