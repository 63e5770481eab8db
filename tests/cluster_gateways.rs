//! One bot, two gateways, on a real `nats-server`: a platform connection (Telegram polling,
//! Discord's gateway) runs on the gateway holding its lease; kill -9 that gateway and the
//! standby takes over from where it left off (the kept offset, the kept session), with
//! nothing lost or answered twice.

use std::path::Path;

use switchboard_testkit::{NatsServer, ScriptedLlm};
use tokio::time::{Duration, Instant};

use crate::cluster::{
    CLUSTER_PATIENCE, LEASE_SECS, echoing, holders, member_config, member_config_with, partitions,
    wait_until,
};
use crate::util;

/// Two gateways with the channel `table` (Telegram, Discord) and a worker, once one gateway
/// holds the channel's connection and the worker every partition: the gateways, the worker,
/// and which gateway holds the connection.
async fn two_gateways(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    table: &str,
    channel: &str,
) -> ([tokio::process::Child; 3], String) {
    let gateway =
        |name: &str| member_config_with(root, llm, nats, "gateway", name, "stream = false", table);
    let (first, _) = util::spawn_daemon(&gateway("gw1")).await;
    let (second, _) = util::spawn_daemon(&gateway("gw2")).await;
    let (worker, _) = util::spawn_daemon(&member_config(root, llm, nats, "worker", "w1")).await;
    let lease = format!("channel.{channel}");
    wait_until(
        "one gateway holds the connection, the worker the partitions",
        || async {
            let held = holders(nats).await;
            held.contains_key(&lease) && partitions(&held) == 8
        },
    )
    .await;
    let holder = holders(nats).await[&lease].clone();
    ([first, second, worker], holder)
}

/// Kills (-9) the gateway of `gateways` that is `holder`: the other, and its name.
async fn kill_the_holder(
    gateways: [tokio::process::Child; 2],
    holder: &str,
) -> (tokio::process::Child, &'static str) {
    let [first, second] = gateways;
    let (mut killed, standby) = if holder == "gw1" {
        (first, (second, "gw2"))
    } else {
        (second, (first, "gw1"))
    };
    killed.start_kill().expect("kill -9");
    killed.wait().await.expect("ended");
    standby
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_telegram_bot_and_the_standby_takes_over_a_kill_9() {
    use switchboard_testkit::FakeTelegram;
    use switchboard_testkit::telegram::TEST_TOKEN;
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let telegram = FakeTelegram::start().await.expect("fake Telegram");
    let people: Vec<u64> = (1001..1011).collect();
    let allowed: Vec<String> = people.iter().map(|p| format!("\"{p}\"")).collect();
    let table = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\nallow_from = [{}]\npoll_timeout_secs = 1\n",
        telegram.api_url(),
        allowed.join(", ")
    );
    let root = tempfile::tempdir().expect("tempdir");
    let ([first, second, _worker], holder) =
        two_gateways(root.path(), &llm, &nats, &table, "telegram").await;
    // The answers as the person sees them: each message the bot sent, as last edited.
    let answers = |person: u64| -> Vec<String> {
        let chat = i64::try_from(person).expect("id");
        let mut ids: Vec<i64> = Vec::new();
        for sent in telegram.messages_to(chat) {
            if !ids.contains(&sent.message_id) {
                ids.push(sent.message_id);
            }
        }
        ids.into_iter()
            .filter_map(|id| telegram.current_text(chat, id))
            .filter(|text| text.starts_with("re: "))
            .collect()
    };
    for person in &people {
        telegram.private_text(*person, "0");
    }
    wait_until("every first message answered", || async {
        people.iter().all(|person| answers(*person) == ["re: 0"])
    })
    .await;

    // A stranger gets a pairing code from the gateway that polls; the operator approves it
    // with the config of another host (a worker's): pairing is the cluster's.
    const STRANGER: i64 = 2001;
    telegram.private_text(STRANGER as u64, "hello?");
    let mut code = String::new();
    wait_until("the stranger gets a code", || {
        let sent = telegram.messages_to(STRANGER);
        code = sent
            .iter()
            .find_map(|s| s.text.lines().nth(2).map(str::to_owned))
            .unwrap_or_default();
        std::future::ready(!code.is_empty())
    })
    .await;
    let worker_config = root.path().join("w1/config.toml");
    util::cli(&["pairing", "approve", &code], &worker_config).await;
    let listed = util::cli(&["pairing", "list"], &worker_config).await;
    assert!(listed.contains(&format!("telegram:{STRANGER}")), "{listed}");

    // The gateway that polls is killed; messages keep coming meanwhile.
    let (_standby, standby) = kill_the_holder([first, second], &holder).await;
    let polls = telegram.polls();
    let at = Instant::now();
    for person in &people {
        telegram.private_text(*person, "1");
    }
    telegram.private_text(STRANGER as u64, "1");
    wait_until("the standby polls", || async {
        telegram.polls() > polls
            && holders(&nats)
                .await
                .get("channel.telegram")
                .map(String::as_str)
                == Some(standby)
    })
    .await;
    let took_over = at.elapsed();
    assert!(
        took_over < Duration::from_secs_f64(LEASE_SECS * 3.0),
        "the standby polled {took_over:?} after the kill"
    );
    // Answered as the last edit says (the standby's draft is edited on to the reply), or
    // answered more than twice — which the assertion below names.
    wait_until("every second message answered", || async {
        people.iter().all(|person| {
            let answers = answers(*person);
            answers == ["re: 0", "re: 1"] || answers.len() > 2
        })
    })
    .await;
    // The standby polled from the offset the dead gateway kept, not from Telegram's oldest.
    let offsets = telegram.poll_offsets();
    assert!(
        offsets[usize::try_from(polls).expect("count")..]
            .iter()
            .all(Option::is_some),
        "the standby's polls carry the kept offset: {offsets:?}"
    );
    // The stranger, approved through another host, is answered by the standby.
    wait_until("the approved stranger is answered", || async {
        answers(STRANGER as u64) == ["re: 1"]
    })
    .await;
    // Anything answered twice would show by now: the chats' turns are done.
    llm.wait_for_requests(2 * people.len() + 1, CLUSTER_PATIENCE)
        .await;
    for person in &people {
        assert_eq!(
            answers(*person),
            ["re: 0", "re: 1"],
            "{person}: none lost, none twice"
        );
    }
    assert_eq!(
        llm.requests().len(),
        2 * people.len() + 1,
        "the model was asked once per message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_discord_bot_and_the_standby_resumes_the_dead_ones_session() {
    use switchboard_testkit::FakeDiscord;
    use switchboard_testkit::discord::TEST_TOKEN;
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let discord = FakeDiscord::start().await.expect("fake Discord");
    let people: Vec<u64> = (42..47).collect();
    let allowed: Vec<String> = people.iter().map(|p| format!("\"{p}\"")).collect();
    let table = format!(
        "[channels.discord]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\nallow_from = [{}]\n",
        discord.api_url(),
        allowed.join(", ")
    );
    let root = tempfile::tempdir().expect("tempdir");
    let ([first, second, _worker], holder) =
        two_gateways(root.path(), &llm, &nats, &table, "discord").await;
    discord
        .wait_until(
            CLUSTER_PATIENCE,
            "the bot connected",
            FakeDiscord::connected,
        )
        .await;
    // What each person was answered, in order, as last edited.
    let answers = |person: u64| -> Vec<String> {
        discord
            .messages_to(FakeDiscord::dm_channel(person))
            .into_iter()
            .map(|sent| {
                discord
                    .current_text(sent.channel, sent.message_id)
                    .unwrap_or(sent.content)
            })
            .collect()
    };
    for person in &people {
        discord.dm(*person, "0");
    }
    wait_until("every first message answered", || async {
        people.iter().all(|person| answers(*person) == ["re: 0"])
    })
    .await;

    // The gateway connected to Discord is killed; people write before anyone reconnects.
    let (_standby, standby) = kill_the_holder([first, second], &holder).await;
    wait_until("Discord sees the connection gone", || {
        std::future::ready(!discord.connected())
    })
    .await;
    for person in &people {
        discord.dm(*person, "1");
    }
    wait_until("the standby resumed the session", || async {
        discord.resumes() == 1
            && discord.connected()
            && holders(&nats)
                .await
                .get("channel.discord")
                .map(String::as_str)
                == Some(standby)
    })
    .await;
    // Answered as the last edit says (the standby's draft is edited on to the reply), or
    // answered more than twice — which the assertion below names.
    wait_until("every second message answered", || async {
        people.iter().all(|person| {
            let answers = answers(*person);
            answers == ["re: 0", "re: 1"] || answers.len() > 2
        })
    })
    .await;
    llm.wait_for_requests(2 * people.len(), CLUSTER_PATIENCE)
        .await;
    for person in &people {
        assert_eq!(
            answers(*person),
            ["re: 0", "re: 1"],
            "{person}: none lost, none twice"
        );
    }
    assert_eq!(discord.identifies(), 1, "resumed, not identified anew");
    assert_eq!(
        llm.requests().len(),
        2 * people.len(),
        "the model was asked once per message"
    );
}

/// A web page's socket on one gateway, mid-answer, when that gateway is killed: the client
/// reconnects to the other gateway and subscribes again naming the last frame it had. It
/// gets the rest of the answer — every frame after that one, none it had, and exactly one
/// `done` — though the other gateway kept every frame of the chat, having had no socket on
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_client_that_moves_to_the_other_gateway_gets_only_what_it_had_not_seen() {
    use switchboard_testkit::Reply;
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    let words: Vec<String> = (0..30).map(|n| format!("w{n}")).collect();
    let answer = words.join(" ");
    let paced = answer.clone();
    llm.respond_with(move |_| Reply::paced(paced.clone(), Duration::from_millis(60)));
    let root = tempfile::tempdir().expect("tempdir");
    let gateway = |name: &str| member_config(root.path(), &llm, &nats, "gateway", name);
    let (mut first, first_addr) = util::spawn_daemon(&gateway("gw1")).await;
    let (_second, second_addr) = util::spawn_daemon(&gateway("gw2")).await;
    let (_worker, _) =
        util::spawn_daemon(&member_config(root.path(), &llm, &nats, "worker", "w1")).await;
    wait_until("the worker holds the partitions", || async {
        partitions(&holders(&nats).await) == 8
    })
    .await;

    let mut page = util::WsClient::connect(first_addr).await;
    page.send("c", "tell me a long story").await;
    let mut had = Vec::new();
    while had
        .iter()
        .filter(|frame: &&serde_json::Value| frame["type"] == "delta")
        .count()
        < 5
    {
        had.push(page.next_frame().await);
    }
    let last = had
        .last()
        .and_then(|frame| frame["seq"].as_u64())
        .expect("frames are numbered");
    first.start_kill().expect("kill -9");
    first.wait().await.expect("ended");

    let mut moved = util::WsClient::connect(second_addr).await;
    moved
        .send_json(serde_json::json!({"type": "subscribe", "chat_id": "c", "after": last}))
        .await;
    let mut rest = Vec::new();
    let deadline = Instant::now() + CLUSTER_PATIENCE;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let frame = moved
            .try_next_frame(wait)
            .await
            .expect("the rest of the answer");
        let done = frame["type"] == "done";
        rest.push(frame);
        if done {
            break;
        }
    }
    assert!(
        rest.iter()
            .all(|frame| frame["seq"].as_u64().is_some_and(|seq| seq > last)),
        "only frames after the last it had: {rest:?}"
    );
    let streamed: String = had
        .iter()
        .chain(&rest)
        .filter(|frame| frame["type"] == "delta")
        .filter_map(|frame| frame["text"].as_str())
        .collect();
    assert_eq!(streamed, answer, "every piece once, in order");
    assert!(
        rest.iter()
            .any(|frame| frame["type"] == "message" && frame["content"] == answer.as_str())
    );
    let extra = moved.try_next_frame(Duration::from_millis(500)).await;
    assert!(extra.is_none(), "nothing after its one `done`: {extra:?}");
}

/// A Telegram answer streaming into its draft when the gateway that polls is killed: the
/// standby takes the connection and the rest of the turn's frames, finds the draft the dead
/// gateway kept in the cluster's state, and edits that same message to the whole answer —
/// the person sees one message, finished, not a stray fragment and the answer again beside
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_answer_streaming_when_its_gateway_dies_is_finished_in_its_own_draft() {
    use switchboard_testkit::telegram::TEST_TOKEN;
    use switchboard_testkit::{FakeTelegram, Reply};
    const PERSON: i64 = 1001;
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    let answer: String = (0..40)
        .map(|n| format!("w{n} "))
        .collect::<String>()
        .trim()
        .to_owned();
    let paced = answer.clone();
    llm.respond_with(move |_| Reply::paced(paced.clone(), Duration::from_millis(100)));
    let telegram = FakeTelegram::start().await.expect("fake Telegram");
    let table = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\nallow_from = [\"{PERSON}\"]\npoll_timeout_secs = 1\nedit_interval_secs = 0.2\n",
        telegram.api_url(),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let gateway =
        |name: &str| member_config_with(root.path(), &llm, &nats, "gateway", name, "", &table);
    let (first, _) = util::spawn_daemon(&gateway("gw1")).await;
    let (second, _) = util::spawn_daemon(&gateway("gw2")).await;
    let (_worker, _) =
        util::spawn_daemon(&member_config(root.path(), &llm, &nats, "worker", "w1")).await;
    wait_until(
        "a gateway polls, the worker holds the partitions",
        || async {
            let held = holders(&nats).await;
            held.contains_key("channel.telegram") && partitions(&held) == 8
        },
    )
    .await;
    let holder = holders(&nats).await["channel.telegram"].clone();

    telegram.private_text(PERSON as u64, "tell me a long story");
    // The draft is out and has been edited at least once when its gateway dies.
    wait_until("the draft streams", || {
        let drafts = telegram.messages_to(PERSON);
        let edited = drafts
            .first()
            .and_then(|draft| telegram.current_text(PERSON, draft.message_id));
        std::future::ready(edited.is_some_and(|text| text.starts_with("w0 w1 w2")))
    })
    .await;
    let (_standby, _) = kill_the_holder([first, second], &holder).await;
    let shown = || -> Vec<String> {
        telegram
            .messages_to(PERSON)
            .iter()
            .filter_map(|sent| telegram.current_text(PERSON, sent.message_id))
            .collect()
    };
    wait_until("the whole answer is shown", || {
        std::future::ready(shown().contains(&answer))
    })
    .await;
    // The chat's next turn: whatever of the first could still come (a frame the dead gateway
    // took and did not deliver) comes before it, in the chat's order.
    telegram.private_text(PERSON as u64, "and another");
    wait_until("the second answer is shown", || {
        std::future::ready(shown().iter().filter(|text| **text == answer).count() == 2)
    })
    .await;
    assert_eq!(
        shown(),
        [answer.clone(), answer],
        "one message per answer, the first the draft it started in: {:?}",
        telegram.messages_to(PERSON)
    );
}
