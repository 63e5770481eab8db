//! Memory search on a cluster (`[memory]` with `[cluster]`): each member keeps its own index
//! of the shared chats, following the sessions stream. A fact said on one worker and
//! compacted out of the window there is found by every member — the gateway (the web page's
//! search), both workers (`/memory`, `memory_search`) — exactly once, and stays found once
//! across `/new`, a member killed with -9 and started again, NATS killed and restarted, and
//! an index cleared under a running member.

use std::path::{Path, PathBuf};

use switchboard_testkit::{NatsServer, ScriptedLlm};

use crate::cluster::{echoing, gateway_and_two_workers, member_config_with, wait_until};
use crate::util::{self, WsClient};

/// A member with a window of four messages (so a few turns compact it) and memory on.
fn memory_member(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    role: &str,
    member: &str,
) -> PathBuf {
    member_config_with(
        root,
        llm,
        nats,
        role,
        member,
        "history_limit = 4",
        "[memory]\nenabled = true\n",
    )
}

/// The lines of `switchboard memory search QUERY` on `member`'s config that contain `word`:
/// what that member's own index finds.
async fn found(root: &Path, member: &str, query: &str, word: &str) -> Vec<String> {
    let config = root.join(member).join("config.toml");
    util::cli(&["memory", "search", "--limit", "50", query], &config)
        .await
        .lines()
        .filter(|line| line.contains(word))
        .map(str::to_owned)
        .collect()
}

/// Waits until every one of `members` finds `query` in exactly `count` lines containing
/// `word`, each satisfying `check`; a count past it fails at once (a message doubled).
async fn every_member_finds(
    root: &Path,
    members: &[&str],
    query: &str,
    word: &str,
    count: usize,
    check: fn(&str) -> bool,
) {
    for member in members {
        wait_until(
            &format!("{member} finds {query:?} {count} times"),
            || async {
                let lines = found(root, member, query, word).await;
                assert!(
                    lines.len() <= count,
                    "{member}: found more than once: {lines:?}"
                );
                lines.len() == count && lines.iter().all(|line| check(line))
            },
        )
        .await;
    }
}

/// Says `n` filler messages in `chat`, each answered (and so compacted away, a window of 4).
async fn chatter(client: &mut WsClient, chat: &str, from: usize, n: usize) {
    for i in from..from + n {
        let text = format!("filler message {i}");
        assert_eq!(client.say(chat, &text).await.reply(), format!("re: {text}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_finds_each_message_once_across_compaction_kills_and_restarts() {
    let mut nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let root = tempfile::tempdir().expect("tempdir");
    let members = ["gw", "w1", "w2"];
    let (addr, [_gateway, mut w1, _w2]) =
        gateway_and_two_workers(root.path(), &llm, &nats, memory_member).await;
    let mut client = WsClient::connect(addr).await;

    // Said once, answered once (the echo repeats it): two messages with the code.
    client.say("c1", "my locker code is 4711").await;
    chatter(&mut client, "c1", 0, 12).await;
    // Out of the window on the cluster (the session holds the last few messages only), and
    // found by each member's own index …
    let not_archived = |line: &str| line.contains("websocket_c1") && !line.contains("archived");
    every_member_finds(root.path(), &members, "locker", "4711", 2, not_archived).await;
    // … and by `/memory` in the chat, on its worker.
    let asked = client.say("c1", "/memory locker code").await;
    let answer = asked.reply();
    assert_eq!(
        answer.matches("4711").count(),
        2,
        "/memory finds the fact and its echo once each: {answer}"
    );
    let fillers = |line: &str| line.contains("websocket_c1");
    every_member_finds(root.path(), &members, "filler", "filler", 24, fillers).await;

    // A worker killed with -9 and started again reads on from what its index committed.
    w1.start_kill().expect("kill -9");
    w1.wait().await.expect("ended");
    chatter(&mut client, "c2", 0, 3).await;
    let (_w1_again, _) = util::spawn_daemon(&root.path().join("w1").join("config.toml")).await;
    every_member_finds(root.path(), &members, "locker", "4711", 2, not_archived).await;
    every_member_finds(root.path(), &members, "filler", "filler", 30, |_| true).await;

    // NATS killed and started again: every member follows on.
    nats.kill();
    nats.resume();
    client.say("c1", "the boat is called Mira").await;
    every_member_finds(root.path(), &members, "boat", "Mira", 2, not_archived).await;

    // `/new` closes the conversation: all of it archived, nothing doubled.
    client.say("c1", "/new").await;
    let archived = |line: &str| line.contains("websocket_c1") && line.contains("archived");
    every_member_finds(root.path(), &members, "locker", "4711", 2, archived).await;
    every_member_finds(root.path(), &members, "boat", "Mira", 2, archived).await;

    // An index cleared under its running member is built again from the stream.
    let rebuilt = util::cli(
        &["memory", "reindex"],
        &root.path().join("w2").join("config.toml"),
    )
    .await;
    assert!(rebuilt.contains("from the cluster"), "{rebuilt}");
    // The member learns of it with the next piece it takes.
    client.say("c3", "one more").await;
    every_member_finds(root.path(), &members, "locker", "4711", 2, archived).await;
    every_member_finds(root.path(), &members, "filler", "filler", 30, |_| true).await;
}
