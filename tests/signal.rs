//! What only Signal does, against the fake signal-cli (the rest is in `conformance`): its
//! event stream breaking — a message written meanwhile is answered once it is followed again,
//! from the last event taken in — and the read receipt with "typing…".

use switchboard_testkit::{FakeSignalCli, ScriptedLlm};

use crate::conformance::signal::{Signal, number};
use crate::conformance::{ADA, CAROL};
use crate::util::{self, Extra, PATIENCE};

#[tokio::test]
async fn a_broken_event_stream_is_followed_again_from_the_last_event_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let platform = Signal(FakeSignalCli::start().await.expect("fake signal-cli"));
    let tables = platform.section("");
    let config = Extra {
        tables: &tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
    let fake = platform.0;
    fake.wait_until(PATIENCE, "the stream followed", |f| f.sessions() == 1)
        .await;
    let first = fake.dm(&number(ADA), "before the break");
    fake.wait_until(PATIENCE, "the first answer", |f| {
        f.sent_to(&number(ADA)).len() == 1
    })
    .await;
    assert_eq!(
        fake.sent_to(&number(ADA))[0].quote.as_deref(),
        Some(first.as_str()),
        "a reply quotes the message it answers"
    );
    assert!(
        fake.receipts()
            .contains(&(number(ADA), first.parse().expect("a timestamp"))),
        "marked read: {:?}",
        fake.receipts()
    );
    assert!(fake.typing(&number(ADA)) >= 1);

    // signal-cli drops the stream; Carol writes before the channel follows it again.
    fake.drop_streams();
    fake.dm(&number(CAROL), "during the break");
    fake.wait_until(PATIENCE, "the stream followed again", |f| f.sessions() == 2)
        .await;
    fake.wait_until(PATIENCE, "Carol's answer", |f| {
        f.sent_to(&number(CAROL)).len() == 1
    })
    .await;
    let texts: Vec<String> = fake.sent().into_iter().map(|sent| sent.text).collect();
    assert_eq!(
        texts,
        ["echo: before the break", "echo: during the break"],
        "each answered once: what came before the break was not sent again"
    );
    daemon.shutdown().await;
}
