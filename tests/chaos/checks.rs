//! The invariants of the chaos run, checked once every part is up again: over what the
//! clients saw (nothing lost, nothing answered twice), what the cluster stored (no hole or
//! duplicate in a transcript), what the model was sent (no hole or duplicate in a history),
//! the job's runs (each due time once), and every member's memory index (each message once).

use std::collections::BTreeMap;

use switchboard_testkit::{FakeTelegram, NatsServer, ScriptedLlm, last_user_text};

use super::clients::{Ledger, Shared, bot_texts, lock};
use super::{Report, Settings};
use crate::cluster_faults::{stored, stored_sessions};

/// The whole conversation of a chat whose messages are `texts`: each, then its answer.
fn whole(texts: &[String]) -> Vec<String> {
    texts
        .iter()
        .flat_map(|text| [format!("user: {text}"), format!("assistant: re: {text}")])
        .collect()
}

/// Whether `part` is a run of `whole` with nothing missing or twice, starting at a user
/// message (a window of it, as a history limit cuts one).
fn is_window(part: &[String], whole: &[String]) -> bool {
    part.is_empty()
        || whole
            .windows(part.len())
            .any(|window| window == part && part[0].starts_with("user: "))
}

/// The web clients' ids, for the checks.
pub(super) fn report_ledger(
    ledger: &Shared<Ledger>,
    report: &mut Report,
    chats: &[String],
    settings: &Settings,
) -> BTreeMap<String, (usize, bool)> {
    let ledger = lock(ledger);
    report.reconnects = ledger.reconnects;
    let mut answers = BTreeMap::new();
    for chat in chats {
        for n in 0..settings.messages {
            let id = format!("{chat}-{n:03}");
            let live = ledger.answers.get(&id).copied().unwrap_or(0);
            let later = ledger.in_history.contains(&format!("{chat} m{n:03}"));
            answers.insert(id, (live, later));
        }
    }
    answers
}

/// Nothing lost, nothing twice, at the web clients: each answer came once live, or was in
/// the history the client asked for after a reconnect.
pub(super) fn check(_: &Settings, answers: &BTreeMap<String, (usize, bool)>, report: &mut Report) {
    report.sent = answers.len();
    for (id, (live, later)) in answers {
        match live {
            0 if *later => {}
            0 => {
                report.lost += 1;
                eprintln!("chaos: {id} was never answered at its client");
            }
            1 => {}
            n => {
                report.twice += 1;
                eprintln!("chaos: {id} was answered {n} times at its client");
            }
        }
    }
}

/// Each person's messages answered once, in order, one bot message each (no stray draft).
pub(super) fn check_telegram(
    telegram: &FakeTelegram,
    people: &[u64],
    settings: &Settings,
    report: &mut Report,
) {
    for person in people {
        let expected: Vec<String> = (0..settings.person_messages)
            .map(|n| format!("re: tg{person} m{n:03}"))
            .collect();
        report.telegram_sent += expected.len();
        let got = bot_texts(telegram, *person);
        if got != expected {
            report.telegram_wrong += 1;
            eprintln!("chaos: telegram {person} got {got:?}");
        }
    }
}

/// Every stored transcript a window of its chat's whole conversation.
pub(super) async fn check_transcripts(
    nats: &NatsServer,
    chats: &[String],
    people: &[u64],
    settings: &Settings,
    report: &mut Report,
) {
    let sessions = stored_sessions(nats).await;
    let mut chats_of: Vec<(String, Vec<String>)> = chats
        .iter()
        .map(|chat| {
            let texts = (0..settings.messages)
                .map(|n| format!("{chat} m{n:03}"))
                .collect();
            (format!("websocket_{chat}"), texts)
        })
        .collect();
    chats_of.extend(people.iter().map(|person| {
        let texts = (0..settings.person_messages)
            .map(|n| format!("tg{person} m{n:03}"))
            .collect();
        (format!("telegram_{person}"), texts)
    }));
    for (key, texts) in chats_of {
        let stored = stored(&sessions, &key).await;
        let whole = whole(&texts);
        let ends_whole = stored.last() == whole.last();
        if !is_window(&stored, &whole) || !ends_whole {
            report.transcripts_bad += 1;
            eprintln!("chaos: {key} is stored as {stored:?}");
        }
    }
}

/// Every history the model was sent a window of its chat's conversation, ending in the
/// message it answers.
pub(super) fn check_histories(llm: &ScriptedLlm, report: &mut Report) {
    for request in llm.requests() {
        let conversation: Vec<String> = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|message| message["role"] == "user" || message["role"] == "assistant")
            .map(|message| {
                let text = message["content"].as_str().unwrap_or_default();
                format!("{}: {text}", message["role"].as_str().unwrap_or_default())
            })
            .collect();
        let last = last_user_text(&request);
        let Some((chat, round)) = last.rsplit_once(" m") else {
            continue; // a scheduled run's
        };
        let Ok(round) = round.parse::<usize>() else {
            continue;
        };
        let texts: Vec<String> = (0..=round).map(|n| format!("{chat} m{n:03}")).collect();
        let mut whole = whole(&texts);
        whole.pop(); // the answer it asks for
        if !is_window(&conversation, &whole) || conversation.last() != whole.last() {
            report.histories_bad += 1;
            eprintln!("chaos: the model was sent {conversation:?}");
        }
    }
}

/// Every due time from the first to the last accounted for, once (`every` seconds apart).
pub(super) fn check_runs(runs: &[(String, String)], every: u64, report: &mut Report) {
    report.runs = runs.len();
    report.runs_answered = runs.iter().filter(|(_, o)| o == "answered").count();
    report.runs_skipped = runs.iter().filter(|(_, o)| o == "skipped").count();
    let dues: Vec<jiff::Timestamp> = runs
        .iter()
        .filter_map(|(due, _)| due.parse().ok())
        .collect();
    for pair in dues.windows(2) {
        if pair[1].duration_since(pair[0]) != jiff::SignedDuration::from_secs(every as i64) {
            report.due_holes += 1;
            eprintln!("chaos: due times {} then {}", pair[0], pair[1]);
        }
    }
    for (due, outcome) in runs {
        if outcome != "answered" && outcome != "skipped" {
            report.due_holes += 1;
            eprintln!("chaos: the run due {due} ended {outcome}");
        }
    }
}

/// Every member's memory index (each keeps its own, following the stream through the same
/// nemesis) finds each message of every chat once: each text and its answer, none missing,
/// none twice. A member still catching up is waited for; a count past the expected is a
/// message taken twice, at once.
pub(super) async fn check_memory(
    configs: &[&std::path::Path],
    chats: &[String],
    people: &[u64],
    settings: &Settings,
    report: &mut Report,
) {
    let mut chats_of: Vec<(String, usize)> = chats
        .iter()
        .map(|chat| (format!("websocket_{chat}"), settings.messages))
        .collect();
    chats_of.extend(
        people
            .iter()
            .map(|person| (format!("telegram_{person}"), settings.person_messages)),
    );
    for config in configs {
        for (key, messages) in &chats_of {
            // Each text, then its answer; at most a search's 50 hits (the bounded run's).
            let wanted = 2 * (*messages).min(25);
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
            let found = loop {
                let out = crate::util::cli(
                    &["memory", "search", "--chat", key, "--limit", "50", "m0*"],
                    config,
                )
                .await;
                let lines: Vec<String> = out
                    .lines()
                    .filter(|line| line.starts_with('['))
                    .map(str::to_owned)
                    .collect();
                if lines.len() >= wanted || tokio::time::Instant::now() > deadline {
                    break lines;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            };
            let mut distinct = found.clone();
            distinct.sort();
            distinct.dedup();
            if found.len() != wanted || distinct.len() != found.len() {
                report.memory_bad += 1;
                eprintln!(
                    "chaos: {} finds {} of {key}'s {wanted} messages: {found:?}",
                    config.display(),
                    found.len()
                );
            }
        }
    }
}
