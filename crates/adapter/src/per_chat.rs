//! [`PerChat`]: an adapter's intake work, in order within each chat and side by side across
//! chats — so one person's slow download (a file fetched before their message is published)
//! holds up neither the platform's event stream nor anyone else's messages.
//!
//! Quick work for a chat with nothing in flight runs inline (most messages: no task, no
//! allocation). Otherwise the work runs in a task that first waits for the chat's previous
//! one, so a chat's messages still reach the hub in the order they were sent. At most
//! [`MAX_IN_FLIGHT`] tasks exist; beyond, [`PerChat::run`] waits for a slot, which slows
//! the caller (the poll loop, the gateway reader) rather than growing without bound.
//!
//! Why the order holds: a chat's work is either run inline — only when no task of that chat
//! is pending, so everything sent before it is already done — or chained after the chat's
//! last pending task, which itself waited for the one before.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Tasks in flight at most, all chats together.
pub const MAX_IN_FLIGHT: usize = 256;

/// Intake work by chat. Owned by the one loop that takes a channel's events.
#[derive(Debug)]
pub struct PerChat {
    /// Each chat's last task still in flight.
    pending: HashMap<String, JoinHandle<()>>,
    slots: Arc<Semaphore>,
}

impl Default for PerChat {
    fn default() -> Self {
        Self {
            pending: HashMap::new(),
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

impl PerChat {
    /// Runs `work` for `chat` after the chat's earlier work: inline when `quick` and nothing
    /// of the chat is in flight, else in a task.
    pub async fn run<F>(&mut self, chat: &str, quick: bool, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.pending.retain(|_, task| !task.is_finished());
        let before = self.pending.remove(chat);
        if quick && before.is_none() {
            work.await;
            return;
        }
        // Closed never: the semaphore lives as long as `self`.
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        let task = tokio::spawn(async move {
            if let Some(before) = before {
                // A panic there is its own; this chat's work goes on.
                let _ = before.await;
            }
            work.await;
            drop(slot);
        });
        self.pending.insert(chat.to_owned(), task);
    }

    /// Chats with work in flight.
    pub fn in_flight(&mut self) -> usize {
        self.pending.retain(|_, task| !task.is_finished());
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    type Log = Arc<Mutex<Vec<&'static str>>>;

    fn push(log: &Log, what: &'static str) {
        log.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }

    fn work(log: &Log, what: &'static str, wait: Duration) -> impl Future<Output = ()> + use<> {
        let log = log.clone();
        async move {
            tokio::time::sleep(wait).await;
            push(&log, what);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slow_work_holds_up_its_own_chat_only_and_order_is_kept() {
        let log: Log = Arc::default();
        let mut chats = PerChat::default();
        chats
            .run("a", false, work(&log, "a1 (slow)", Duration::from_secs(5)))
            .await;
        chats.run("a", true, work(&log, "a2", Duration::ZERO)).await;
        chats.run("b", true, work(&log, "b1", Duration::ZERO)).await;
        assert_eq!(chats.in_flight(), 1, "a's two are chained in one task");
        tokio::time::sleep(Duration::from_secs(6)).await;
        let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(log, ["b1", "a1 (slow)", "a2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn randomized_chats_and_delays_keep_each_chats_order() {
        for seed in 0..50u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let log: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
            let mut chats = PerChat::default();
            let mut sent = [0usize; 4];
            for _ in 0..40 {
                let chat = rng.usize(0..4);
                let number = sent[chat];
                sent[chat] += 1;
                let wait = Duration::from_millis(rng.u64(0..50));
                let quick = rng.bool();
                let log = log.clone();
                let name = chat.to_string();
                chats
                    .run(&name, quick, async move {
                        if !quick {
                            tokio::time::sleep(wait).await;
                        }
                        log.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((chat, number));
                    })
                    .await;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
            let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
            assert_eq!(log.len(), 40, "seed {seed}: every piece of work ran");
            for (chat, count) in sent.iter().enumerate() {
                let order: Vec<usize> = log
                    .iter()
                    .filter(|(c, _)| *c == chat)
                    .map(|(_, n)| *n)
                    .collect();
                let expected: Vec<usize> = (0..*count).collect();
                assert_eq!(order, expected, "seed {seed}: chat {chat} kept its order");
            }
        }
    }
}
