//! kill -9 at random moments, cycle after cycle. Over WebSocket, during tool-calling turns:
//! afterwards every
//! acknowledged message is on disk exactly once, nothing is on disk twice, and every
//! session replays to the scripted LLM in strict mode (which answers unpaired or repeated
//! tool-call ids with a provider's 400).
//!
//! `SWITCHBOARD_CRASH_CYCLES` sets the number of cycles (8 by default) and
//! `SWITCHBOARD_CRASH_SEED` the random seed (printed, to replay a failure). Over Telegram:
//! every update is answered exactly once.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchboard_testkit::{FakeTelegram, Reply, ScriptedLlm};
use tokio_tungstenite::tungstenite::Message;

use crate::telegram::{ADA, BOB, chat, table};
use crate::util::{self, Extra, PATIENCE, WsClient};

const CHATS: usize = 3;

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the model does: a user message gets two tool calls, always with the same ids (as
/// some local servers send), after a short random pause; tool results get a streamed reply.
fn responder(seed: u64) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    let rng = std::sync::Mutex::new(Rng(seed | 1));
    move |request| {
        let pause = Duration::from_millis(rng.lock().map(|mut r| r.below(120)).unwrap_or(0));
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().cloned().unwrap_or_default();
        if last["role"] == "user" {
            let text = last["content"].as_str().unwrap_or_default().to_owned();
            Reply::ToolCallsWithIds(vec![
                ("call_0".into(), "echo".into(), json!({"text": text})),
                ("call_1".into(), "lookup".into(), json!({"q": text})),
            ])
            .delayed(pause)
        } else {
            Reply::paced("the tools answered, and so do I", Duration::from_millis(10))
                .delayed(pause)
        }
    }
}

#[tokio::test]
async fn kill_9_during_tool_calling_turns_loses_and_doubles_nothing() {
    let cycles: usize = std::env::var("SWITCHBOARD_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let seed: u64 = std::env::var("SWITCHBOARD_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    eprintln!("crash test: {cycles} cycles, SWITCHBOARD_CRASH_SEED={seed}");
    let mut rng = Rng(seed | 1);

    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict().respond_with(responder(seed));
    let config = dir.path().join("config.toml");
    let text = util::config_text(&llm.base_url(), dir.path(), "history_limit = 1000");
    std::fs::write(&config, text).expect("write");

    // Per chat: the messages sent, and those acknowledged (their reply and done arrived).
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut acknowledged: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cycle in 0..cycles {
        let (mut child, addr) = util::spawn_daemon(&config).await;
        let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
            .await
            .expect("connects");
        let mut in_flight: HashMap<String, String> = HashMap::new();
        for k in 0..CHATS {
            let chat = format!("c{k}");
            let content = format!("cycle {cycle} chat {k}");
            let frame = json!({"type": "message", "chat_id": chat, "content": content});
            socket
                .send(Message::text(frame.to_string()))
                .await
                .expect("send");
            sent.entry(chat.clone()).or_default().push(content.clone());
            in_flight.insert(chat, content);
        }
        // Read replies until the random moment of the kill.
        let kill_at = tokio::time::Instant::now() + Duration::from_millis(rng.below(450));
        let mut replied: HashMap<String, bool> = HashMap::new();
        loop {
            let frame = tokio::select! {
                () = tokio::time::sleep_until(kill_at) => break,
                frame = socket.next() => frame,
            };
            let Some(Ok(Message::Text(text))) = frame else {
                continue;
            };
            let frame: Value = serde_json::from_str(text.as_str()).expect("JSON");
            let chat = frame["chat_id"].as_str().unwrap_or_default().to_owned();
            match frame["type"].as_str() {
                Some("message") => {
                    replied.insert(chat, true);
                }
                Some("error") => {
                    replied.insert(chat, false);
                }
                Some("done") if replied.get(&chat) == Some(&true) => {
                    if let Some(content) = in_flight.remove(&chat) {
                        acknowledged.entry(chat).or_default().push(content);
                    }
                }
                _ => {}
            }
        }
        util::signal(&child, "-KILL");
        child.wait().await.expect("wait");
    }

    // Every session replays to the strict model, and the conversation goes on.
    let (mut child, addr) = util::spawn_daemon(&config).await;
    let mut client = WsClient::connect(addr).await;
    for k in 0..CHATS {
        let chat = format!("c{k}");
        let turn = client.say(&chat, "after the crashes").await;
        assert!(turn.error().is_none(), "{chat}: {:?}", turn.frames);
        assert_eq!(turn.reply(), "the tools answered, and so do I");
    }
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());

    let acked: usize = acknowledged.values().map(Vec::len).sum();
    eprintln!(
        "crash test: {acked} of {} messages acknowledged",
        cycles * CHATS
    );
    for (chat, messages) in &sent {
        let records = util::read_session_file(&util::session_file(dir.path(), chat));
        let users: Vec<&str> = records
            .iter()
            .filter(|r| r["role"] == "user")
            .filter_map(|r| r["content"].as_str())
            .collect();
        for content in messages {
            let copies = users.iter().filter(|u| **u == content).count();
            let acked = acknowledged
                .get(chat)
                .is_some_and(|a| a.iter().any(|c| c == content));
            if acked {
                assert_eq!(
                    copies, 1,
                    "{chat}: acknowledged `{content}` is on disk {copies} times"
                );
            } else {
                assert!(copies <= 1, "{chat}: `{content}` is on disk {copies} times");
            }
        }
        assert_replays_strictly(chat, &records);
    }
}

/// Whether a session's records, read back (and repaired) as the daemon would, are a
/// conversation a strict provider takes.
fn assert_replays_strictly(chat: &str, records: &[Value]) {
    let messages: Vec<switchboard_core::ChatMessage> = records
        .iter()
        .filter(|r| r.get("role").is_some())
        .map(|r| serde_json::from_value(r.clone()).expect("a message"))
        .collect();
    let repaired = switchboard_sessions::repair(messages);
    let wire = repaired
        .iter()
        .map(|m| switchboard_testkit::strict::WireMessage {
            role: match m {
                switchboard_core::ChatMessage::User { .. } => "user",
                switchboard_core::ChatMessage::Assistant { .. } => "assistant",
                switchboard_core::ChatMessage::Tool { .. } => "tool",
            },
            tool_call_ids: m.tool_calls().iter().map(|c| c.id.as_str()).collect(),
            tool_call_id: m.tool_call_id(),
        });
    switchboard_testkit::strict::check_conversation(wire)
        .unwrap_or_else(|err| panic!("{chat}: the history read back is refused: {err}"));
}

/// kill -9 the binary at different moments, cycle after cycle, then let it finish: every
/// update is answered exactly once. `SWITCHBOARD_TELEGRAM_KILLS` sets the cycles (8).
///
/// The moments: right after Telegram handed the updates out; while the model answers; at a
/// random moment before any answer can go out; when all is answered and confirmed. Not
/// targeted: the instant between Telegram accepting an answer and the daemon recording that
/// (no Bot API call can be made idempotent; a crash there sends that answer twice — see
/// crates/agent/src/worker.rs).
#[tokio::test]
async fn kill_9_at_any_moment_neither_loses_an_update_nor_answers_one_twice() {
    let cycles: usize = std::env::var("SWITCHBOARD_TELEGRAM_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake");
    // The model echoes, after a pause that varies, so kills land before, during and after.
    let state = std::sync::Arc::new(std::sync::Mutex::new(0x2545_f491_4f6c_dd1du64));
    let next = move || {
        let mut s = state.lock().expect("lock");
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    };
    let pause = next.clone();
    llm.respond_with(move |request| {
        let last = util::conversation(request)
            .into_iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Reply::text(format!("echo: {last}")).delayed(Duration::from_millis(30 + pause() % 120))
    });
    let config = dir.path().join("config.toml");
    let tables = table(&fake, "stream = false");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            tables: &tables,
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");

    let mut sent: Vec<(i64, i64, String)> = Vec::new();
    let answered = |f: &FakeTelegram, chat: i64, id: i64| {
        f.messages_to(chat).iter().any(|m| m.reply_to == Some(id))
    };
    for cycle in 0..cycles {
        let (mut child, _) = util::spawn_daemon(&config).await;
        let delivered = fake.delivered();
        let requests = llm.requests().len();
        let mine: Vec<(i64, i64, String)> = [ADA, BOB]
            .iter()
            .map(|user| {
                let text = format!("cycle {cycle} from {user}");
                (chat(*user), fake.private_text(*user, &text), text)
            })
            .collect();
        match cycle % 4 {
            // Right after Telegram handed the updates out.
            0 => {
                fake.wait_until(PATIENCE, "the updates delivered", |f| {
                    f.delivered() > delivered
                })
                .await;
            }
            // While the model is answering.
            1 => {
                llm.wait_for_requests(requests + 1, PATIENCE).await;
            }
            // At a random moment before the model (which pauses at least 30 ms) answers.
            2 => tokio::time::sleep(Duration::from_millis(next() % 25)).await,
            // When all is answered and confirmed: nothing may be answered again.
            _ => {
                fake.wait_until(PATIENCE, "this cycle's answers, confirmed", |f| {
                    mine.iter().all(|(chat, id, _)| answered(f, *chat, *id)) && f.unconfirmed() == 0
                })
                .await;
            }
        }
        util::signal(&child, "-KILL");
        child.wait().await.expect("wait");
        sent.extend(mine);
    }

    let (mut child, _) = util::spawn_daemon(&config).await;
    fake.wait_until(PATIENCE * 3, "every message answered", |f| {
        sent.iter().all(|(chat, id, _)| answered(f, *chat, *id))
    })
    .await;
    fake.wait_until(PATIENCE, "every update confirmed", |f| f.unconfirmed() == 0)
        .await;
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
    for (chat, id, text) in &sent {
        let replies: Vec<String> = fake
            .messages_to(*chat)
            .into_iter()
            .filter(|m| m.reply_to == Some(*id))
            .map(|m| m.visible)
            .collect();
        assert_eq!(
            replies,
            [format!("echo: {text}")],
            "message {id} in chat {chat}"
        );
    }
}

/// kill -9 around scheduled runs, cycle after cycle: before a run is due, during its turn,
/// at a random moment before any answer can go out, and after its answer (journaled
/// delivered in its session) before or while its run is recorded — then let it finish: every
/// run came into its Telegram chat exactly once, and every history replays to a strict
/// provider. `SWITCHBOARD_SCHEDULE_KILLS` sets the cycles (8). Not targeted, as for
/// Telegram's updates above: the instant between Telegram accepting an answer and the
/// daemon journaling it.
#[tokio::test]
async fn kill_9_around_scheduled_runs_neither_loses_nor_doubles_one() {
    let cycles: usize = std::env::var("SWITCHBOARD_SCHEDULE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake");
    // The model echoes the task (the last line of the scheduled message), after a pause.
    let pause = std::sync::Mutex::new(Rng(0x2545_f491_4f6c_dd1d));
    llm.strict().respond_with(move |request| {
        let task = util::conversation(request)
            .into_iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| {
                m["content"]
                    .as_str()
                    .and_then(|t| t.lines().last())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let wait = pause.lock().map(|mut r| r.below(150)).unwrap_or(0);
        Reply::text(format!("echo: {task}")).delayed(Duration::from_millis(30 + wait))
    });
    let config = dir.path().join("config.toml");
    let tables = table(&fake, "stream = false");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            tables: &tables,
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");

    let echoed = |f: &FakeTelegram, chat: i64, task: &str| {
        let want = format!("echo: {task}");
        f.messages_to(chat)
            .iter()
            .filter(|m| m.visible == want)
            .count()
    };
    let mut tasks: Vec<(i64, String)> = Vec::new();
    for cycle in 0..cycles {
        let (mut child, _) = util::spawn_daemon(&config).await;
        let requests = llm.requests().len();
        let mut mine = Vec::new();
        let mut ids = Vec::new();
        let added = std::time::Instant::now();
        for user in [ADA, BOB] {
            let task = format!("task of cycle {cycle} for {user}");
            let target = format!("telegram:{}", chat(user));
            let (ok, said) = crate::scheduler::cron(
                &config,
                &["add", "--chat", &target, "--in", "1s", "--message", &task],
            )
            .await;
            assert!(ok, "{said}");
            let id = said
                .strip_prefix("Added job ")
                .and_then(|rest| rest.split_whitespace().next())
                .expect("the job's id")
                .to_owned();
            ids.push((chat(user), id));
            mine.push((chat(user), task));
        }
        match cycle % 4 {
            // Before the runs are due.
            0 => {}
            // During a run's turn.
            1 => {
                llm.wait_for_requests(requests + 1, PATIENCE).await;
            }
            // At a random moment before any answer can go out (due after 1 s, and the
            // model takes at least 30 ms).
            2 => {
                let at = Duration::from_millis(800 + rng.below(230));
                tokio::time::sleep(at.saturating_sub(added.elapsed())).await;
            }
            // Once each answer is journaled delivered: the run's record follows.
            _ => {
                for (chat, id) in &ids {
                    journaled_delivered(dir.path(), *chat, id).await;
                }
            }
        }
        util::signal(&child, "-KILL");
        child.wait().await.expect("wait");
        tasks.extend(mine);
    }

    let (mut child, _) = util::spawn_daemon(&config).await;
    fake.wait_until(PATIENCE * 3, "every run answered", |f| {
        tasks.iter().all(|(chat, task)| echoed(f, *chat, task) >= 1)
    })
    .await;
    // Every run settled: a reminder that ran is removed once its run is recorded.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (_, listed) = crate::scheduler::cron(&config, &["list"]).await;
        if listed.trim() == "There are no scheduled jobs." {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runs left unsettled: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
    for (chat, task) in &tasks {
        assert_eq!(echoed(&fake, *chat, task), 1, "`{task}` in chat {chat}");
    }
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    for user in [ADA, BOB] {
        let name = format!("telegram_{}", chat(user));
        let path = dir.path().join(format!("state/sessions/{name}.jsonl"));
        assert_replays_strictly(&name, &util::read_session_file(&path));
    }
}

/// Waits until the run of job `id` is journaled delivered in the session of Telegram chat
/// `chat`.
async fn journaled_delivered(dir: &std::path::Path, chat: i64, id: &str) {
    let path = dir.join(format!("state/sessions/telegram_{chat}.jsonl"));
    let prefix = format!("sched:{id}:");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let delivered = text.lines().any(|line| {
            serde_json::from_str::<Value>(line).is_ok_and(|record| {
                record["inbound"]["state"] == "delivered"
                    && record["inbound"]["id"]
                        .as_str()
                        .is_some_and(|i| i.starts_with(&prefix))
            })
        });
        if delivered {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} was never journaled delivered in {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Runs due while the daemon was down (killed): one within its catch-up runs once after
/// start; one past it is recorded skipped and its chat told once.
#[tokio::test]
async fn runs_due_while_the_daemon_was_killed_run_once_or_are_skipped_and_told_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = FakeTelegram::start().await.expect("fake");
    llm.respond_with(|request| {
        let task = util::conversation(request)
            .into_iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| {
                m["content"]
                    .as_str()
                    .and_then(|t| t.lines().last())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        Reply::text(format!("echo: {task}"))
    });
    let config = dir.path().join("config.toml");
    let tables = table(&fake, "stream = false");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            tables: &tables,
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");
    let target = format!("telegram:{}", chat(ADA));

    let (mut child, _) = util::spawn_daemon(&config).await;
    for (name, catch_up) in [("kept", "1h"), ("late", "1s")] {
        let (ok, said) = crate::scheduler::cron(
            &config,
            &[
                "add",
                "--chat",
                &target,
                "--in",
                "2s",
                "--name",
                name,
                "--catch-up",
                catch_up,
                "--message",
                name,
            ],
        )
        .await;
        assert!(ok, "{said}");
    }
    util::signal(&child, "-KILL");
    child.wait().await.expect("wait");
    // Down past both due times, and past the second's catch-up: the wall clock is the
    // subject here.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(fake.messages_to(chat(ADA)).is_empty(), "nothing while down");

    let (mut child, _) = util::spawn_daemon(&config).await;
    let told = |f: &FakeTelegram| {
        f.messages_to(chat(ADA))
            .iter()
            .filter(|m| m.visible.contains("\"late\" (job j2) did not run"))
            .count()
    };
    fake.wait_until(
        PATIENCE,
        "the kept run answered and the late one told",
        |f| {
            f.messages_to(chat(ADA))
                .iter()
                .any(|m| m.visible == "echo: kept")
                && told(f) >= 1
        },
    )
    .await;
    let (_, runs) = crate::scheduler::cron(&config, &["runs", "j2"]).await;
    assert!(
        runs.lines()
            .nth(1)
            .is_some_and(|l| l.contains("skipped: it was due at") && l.contains("catch-up of 1s")),
        "{runs}"
    );
    // Both settled, so both gone: nothing is left that could run or be told again.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (_, listed) = crate::scheduler::cron(&config, &["list"]).await;
        if listed.trim() == "There are no scheduled jobs." {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "left: {listed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
    let sent = fake.messages_to(chat(ADA));
    let visible: Vec<&str> = sent.iter().map(|m| m.visible.as_str()).collect();
    assert_eq!(
        visible.iter().filter(|v| **v == "echo: kept").count(),
        1,
        "{visible:?}"
    );
    assert_eq!(told(&fake), 1, "{visible:?}");
    assert!(!visible.contains(&"echo: late"), "{visible:?}");
    assert_eq!(
        llm.requests().len(),
        1,
        "only the kept run reached the model"
    );
}
