//! One chat never holds up another: a chat that floods past its queue gets "too many
//! messages waiting" for the surplus, another chat is answered meanwhile, and `/stop` acts
//! at once, dropping what waited behind the stopped turn.

use std::time::Duration;

use switchboard_testkit::Reply;

use crate::util::{self, Harness};

#[tokio::test]
async fn a_flooding_chat_delays_neither_another_chat_nor_stop() {
    let mut h = Harness::start("max_queued_messages = 4").await;
    // The flooding chat's first turn waits on a slow model (far longer than the test).
    h.llm
        .push(Reply::text("slow answer").delayed(Duration::from_secs(600)));
    h.client.send("flood", "first").await;
    h.llm.wait_for_requests(1, util::PATIENCE).await;

    // Four wait in the queue; the six after them are refused.
    for i in 2..=11 {
        h.client.send("flood", &format!("message {i}")).await;
    }
    let mut refused = 0;
    while refused < 6 {
        let turn = h.client.turn("flood").await;
        let error = turn.error().unwrap_or_else(|| panic!("{:?}", turn.frames));
        assert!(error.contains("Too many messages are waiting"), "{error}");
        refused += 1;
    }

    // Another chat is answered while the flooding chat's turn still runs.
    let other = h.client.say("other", "are you free?").await;
    assert_eq!(other.reply(), "echo: are you free?");

    // /stop ends the running turn at once and drops the four queued messages.
    let (stopped, answer) = h.client.stop("flood").await;
    assert_eq!(stopped.reply(), "Stopped.");
    assert_eq!(
        answer.reply(),
        "Dropped 4 messages that were waiting when you sent /stop."
    );
    assert_eq!(
        h.llm.requests().len(),
        2,
        "dropped and refused messages never reach the model"
    );

    // A message after the /stop runs as usual.
    assert_eq!(h.client.say("flood", "after").await.reply(), "echo: after");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn stop_while_a_turn_waits_for_a_turn_slot_stops_it() {
    let mut h = Harness::start("max_concurrent_turns = 1").await;
    h.llm
        .push(Reply::text("slow answer").delayed(Duration::from_secs(600)));
    h.client.send("busy", "take the only slot").await;
    h.llm.wait_for_requests(1, util::PATIENCE).await;

    // This chat's turn waits for the slot the other chat holds, and says so; /stop must
    // reach it there.
    h.client.send("waiting", "my turn?").await;
    let status = loop {
        let frame = h.client.next_frame().await;
        if frame["type"] == "status" && frame["chat_id"] == "waiting" {
            break frame;
        }
    };
    assert!(
        status["text"]
            .as_str()
            .is_some_and(|t| t.contains("agent.max_concurrent_turns")),
        "{status}"
    );
    assert_eq!(h.client.stop("waiting").await.0.reply(), "Stopped.");
    assert_eq!(h.llm.requests().len(), 1);

    assert_eq!(h.client.stop("busy").await.0.reply(), "Stopped.");
    h.daemon.shutdown().await;
}
