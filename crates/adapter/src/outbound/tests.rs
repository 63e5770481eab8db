//! `Replies` over a recording surface: drafts, parts, resumption, holds.
use std::sync::Mutex;

use switchboard_core::TurnEnd;

use super::*;

/// What the recording surface saw: (call, message id, text, as_reply).
type Call = (&'static str, String, String, bool);

/// A file the recording surface took: its name, caption and bytes.
type Uploaded = (String, Option<String>, Vec<u8>);

/// A 429 with Telegram's and Discord's stated wait.
const RETRY_AFTER: Duration = Duration::from_secs(3);

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
    /// Sends that fail with a rate limit, by the number of the send (0-based).
    failing_send: Mutex<Option<usize>>,
    sends: Mutex<usize>,
    /// Edits fail as if the message were gone.
    edits_fail: bool,
    /// Edits answered 429 (with [`RETRY_AFTER`]), by the number of the edit (0-based).
    limited_edit: Mutex<Option<usize>>,
    edits: Mutex<usize>,
    /// When each call was made, by chat place: (call, when).
    times: Mutex<Vec<(&'static str, Instant)>>,
    /// Files uploaded.
    uploads: Mutex<Vec<Uploaded>>,
}

impl Recorder {
    fn time(&self, call: &'static str) {
        self.times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((call, Instant::now()));
    }
}

#[async_trait]
impl Surface for Recorder {
    type Place = ();
    const CHANNEL: &'static str = "test";
    const PLATFORM: &'static str = "Test";

    fn place(&self, _chat: &ChatId) -> Result<(), CoreError> {
        Ok(())
    }

    fn limit(&self) -> (usize, Measure) {
        (64, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        Duration::from_secs(5)
    }

    async fn send(&self, (): &(), said: Said<'_>) -> Result<String, CoreError> {
        self.time("send");
        let number = {
            let mut sends = self.sends.lock().unwrap_or_else(|e| e.into_inner());
            *sends += 1;
            *sends - 1
        };
        if *self.failing_send.lock().unwrap_or_else(|e| e.into_inner()) == Some(number) {
            return Err(CoreError::RateLimited { retry_after: None });
        }
        let id = format!("m{number}");
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push((
            "send",
            id.clone(),
            said.text.into(),
            said.as_reply,
        ));
        Ok(id)
    }

    async fn edit(&self, (): &(), message: &str, said: Said<'_>) -> Result<(), CoreError> {
        self.time("edit");
        let number = {
            let mut edits = self.edits.lock().unwrap_or_else(|e| e.into_inner());
            *edits += 1;
            *edits - 1
        };
        if *self.limited_edit.lock().unwrap_or_else(|e| e.into_inner()) == Some(number) {
            return Err(CoreError::RateLimited {
                retry_after: Some(RETRY_AFTER),
            });
        }
        if self.edits_fail {
            return Err(CoreError::Channel {
                channel: "test".into(),
                message: "Unknown Message".into(),
            });
        }
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push((
            "edit",
            message.into(),
            said.text.into(),
            said.as_reply,
        ));
        Ok(())
    }

    async fn typing(&self, (): &()) -> Result<(), CoreError> {
        self.time("typing");
        Ok(())
    }

    fn media(&self) -> MediaLimits {
        MediaLimits {
            image: 1000,
            voice: 1000,
            document: 100,
            caption: 10,
        }
    }

    async fn send_file(&self, (): &(), upload: Upload<'_>) -> Result<String, CoreError> {
        self.time("upload");
        let bytes = std::fs::read(upload.path).unwrap_or_default();
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        uploads.push((
            upload.file.name.clone(),
            upload.caption.map(str::to_owned),
            bytes,
        ));
        Ok(format!("f{}", uploads.len() - 1))
    }
}

fn out(kind: OutboundKind) -> OutboundMessage {
    out_to("c", kind)
}

fn out_to(chat: &str, kind: OutboundKind) -> OutboundMessage {
    OutboundMessage {
        channel: "test".into(),
        chat_id: chat.into(),
        reply_to: Some(MessageId::from("u1")),
        kind,
        cursor: None,
        turn: None,
    }
}

fn times(replies: &Replies<Recorder>) -> Vec<(&'static str, Instant)> {
    replies
        .surface()
        .times
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Streams `pieces` (each after its wait) with a 1 s edit interval, then the whole `reply`;
/// returns the calls made and how long it all took (time paused: only the waits count).
async fn stream(pieces: &[(u64, &str)], reply: &str) -> (Vec<Call>, Duration) {
    let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
    let started = Instant::now();
    replies.send(out(OutboundKind::TurnStarted)).await.ok();
    for (wait_ms, piece) in pieces {
        tokio::time::sleep(Duration::from_millis(*wait_ms)).await;
        replies
            .send(out(OutboundKind::Delta((*piece).into())))
            .await
            .ok();
    }
    replies
        .send(out(OutboundKind::Message(reply.into())))
        .await
        .ok();
    (calls(&replies), started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_reply_that_ends_before_the_interval_is_closed_at_once() {
    let (calls, took) = stream(&[(0, "Hello"), (50, "")], "Hello there").await;
    assert_eq!(calls[1], ("edit", "m0".into(), "Hello there".into(), false));
    assert_eq!(
        took,
        Duration::from_millis(50),
        "no wait for the edit interval after the first send"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reply_that_streamed_past_an_edit_is_closed_at_once_not_an_interval_later() {
    let (calls, took) = stream(
        &[(0, "Hello"), (1100, " there"), (200, "")],
        "Hello there, Ada",
    )
    .await;
    assert_eq!(calls[1], ("edit", "m0".into(), "Hello there".into(), false));
    assert_eq!(
        calls[2],
        ("edit", "m0".into(), "Hello there, Ada".into(), false)
    );
    assert_eq!(
        took,
        Duration::from_millis(1300),
        "the closing edit 200 ms after the last one, not at 2.1 s"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_draft_holds_every_call_to_its_chat_and_no_other() {
    let recorder = Recorder::default();
    *recorder
        .limited_edit
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(0);
    let replies = Arc::new(Replies::new(
        Arc::new(recorder),
        true,
        Duration::from_millis(100),
    ));
    replies.send(out(OutboundKind::TurnStarted)).await.ok();
    replies
        .send(out(OutboundKind::Delta("Hello".into())))
        .await
        .ok();
    tokio::time::sleep(Duration::from_millis(150)).await;
    // This edit is answered 429: the chat is held for three seconds.
    let limited = Instant::now();
    replies
        .send(out(OutboundKind::Delta(" there".into())))
        .await
        .ok();
    tokio::time::sleep(Duration::from_millis(150)).await;
    replies
        .send(out(OutboundKind::Delta(", skipped".into())))
        .await
        .ok();
    // Another chat goes on meanwhile.
    replies
        .send(out_to("other", OutboundKind::Post("elsewhere".into())))
        .await
        .ok();
    let elsewhere = Instant::now();
    replies
        .send(out(OutboundKind::Message("Hello there, done".into())))
        .await
        .ok();
    let times = times(&replies);
    let after: Vec<&str> = times
        .iter()
        .filter(|(call, at)| *at > limited && *at < limited + RETRY_AFTER && *call != "send")
        .map(|(call, _)| *call)
        .collect();
    assert!(after.is_empty(), "nothing went to the held chat: {after:?}");
    assert!(elsewhere < limited + Duration::from_millis(500));
    let last = times.last().expect("the final edit");
    assert_eq!(last.0, "edit");
    assert!(
        last.1 >= limited + RETRY_AFTER,
        "the final reply waited out retry_after"
    );
    let calls = calls(&replies);
    assert_eq!(
        calls.iter().filter(|c| c.2 == "Hello there, done").count(),
        1,
        "the reply went out once"
    );
}

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

fn calls(replies: &Replies<Recorder>) -> Vec<Call> {
    replies
        .surface()
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

#[tokio::test(start_paused = true)]
async fn a_streamed_reply_ends_in_the_draft_and_the_rest_follows() {
    let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
    replies.send(out(OutboundKind::TurnStarted)).await.ok();
    replies
        .send(out(OutboundKind::Delta("Hello".into())))
        .await
        .ok();
    replies
        .send(out(OutboundKind::Delta(" there".into())))
        .await
        .ok();
    let reply =
        "Hello there, this is longer than sixty-four characters, the shortest limit split keeps";
    let sent = replies
        .send(out(OutboundKind::Message(reply.into())))
        .await
        .expect("delivered");
    replies
        .send(out(OutboundKind::Done(TurnEnd::Answered)))
        .await
        .ok();
    let calls = calls(&replies);
    assert_eq!(calls[0], ("send", "m0".into(), "Hello".into(), true));
    // What the platform gave back names the reply's last message.
    let last = calls.last().expect("calls");
    assert_eq!(sent.id.as_deref(), Some(last.1.as_str()), "{calls:?}");
    // The final reply's first part went into the draft, the others after it.
    let edits: Vec<_> = calls.iter().filter(|c| c.0 == "edit").collect();
    assert_eq!(edits.last().map(|c| c.1.as_str()), Some("m0"));
    let final_parts: Vec<String> = std::iter::once(edits.last().map(|c| c.2.clone()))
        .flatten()
        .chain(
            calls
                .iter()
                .skip(1)
                .filter(|c| c.0 == "send")
                .map(|c| c.2.clone()),
        )
        .collect();
    assert_eq!(words(&final_parts.join(" ")), words(reply));
    assert!(
        calls.iter().skip(1).all(|c| !c.3),
        "only the first message is a reply"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reply_that_failed_part_way_resumes_without_repeating() {
    let recorder = Recorder::default();
    *recorder
        .failing_send
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(1);
    let replies = Replies::new(Arc::new(recorder), false, Duration::from_secs(1));
    let reply = "one two three four five six seven eight nine ten eleven twelve ".repeat(4);
    let message = out(OutboundKind::Message(reply.clone()));
    replies.send(out(OutboundKind::TurnStarted)).await.ok();
    let first = replies.send(message.clone()).await;
    assert!(
        matches!(first, Err(CoreError::RateLimited { .. })),
        "{first:?} {:?}",
        calls(&replies)
    );
    replies.send(message).await.ok();
    let texts: Vec<String> = calls(&replies).into_iter().map(|c| c.2).collect();
    assert!(texts.len() >= 3, "{texts:?}");
    assert_eq!(
        words(&texts.join(" ")),
        words(&reply),
        "each part once, in order"
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_leaves_the_running_draft_alone() {
    let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
    replies.send(out(OutboundKind::TurnStarted)).await.ok();
    replies
        .send(out(OutboundKind::Delta("draft".into())))
        .await
        .ok();
    replies
        .send(out(OutboundKind::Post("a reminder".into())))
        .await
        .ok();
    replies
        .send(out(OutboundKind::Message("the answer".into())))
        .await
        .ok();
    let calls = calls(&replies);
    assert_eq!(calls[1], ("send", "m1".into(), "a reminder".into(), false));
    assert_eq!(calls[2], ("edit", "m0".into(), "the answer".into(), false));
}

#[tokio::test(start_paused = true)]
async fn a_reply_whose_draft_is_gone_is_sent_anew() {
    let recorder = Recorder {
        edits_fail: true,
        ..Recorder::default()
    };
    let replies = Replies::new(Arc::new(recorder), true, Duration::from_secs(1));
    replies.send(out(OutboundKind::TurnStarted)).await.ok();
    replies
        .send(out(OutboundKind::Delta("draft".into())))
        .await
        .ok();
    let sent = replies
        .send(out(OutboundKind::Message("the answer".into())))
        .await;
    assert!(sent.is_ok(), "{sent:?}");
    let calls = calls(&replies);
    assert_eq!(
        calls.last(),
        Some(&("send", "m1".into(), "the answer".into(), true))
    );
}

/// Two gateways' replies over one platform and one shared state: the first sends the draft
/// and dies mid-answer; the second, given the turn's later frames (and, as the stream offers
/// them again, the ones it had not acknowledged), edits the same draft to the whole reply,
/// sends nothing twice, and skips what the first kept as gone out.
#[tokio::test(start_paused = true)]
async fn a_standby_finishes_the_draft_the_dead_gateway_kept_and_skips_what_went_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state: Arc<dyn switchboard_core::StateStore> =
        Arc::new(switchboard_sessions::FileState::new(dir.path()));
    let platform = Arc::new(Recorder::default());
    let gateway = || {
        Replies::new(platform.clone(), true, Duration::from_secs(1))
            .keeping(Some(KeptChats::new(state.clone(), "test")))
    };
    let at = |cursor: u64, kind: OutboundKind| OutboundMessage {
        cursor: Some(cursor),
        ..out(kind)
    };
    let dead = gateway();
    dead.send(at(1, OutboundKind::TurnStarted))
        .await
        .expect("started");
    dead.send(at(2, OutboundKind::Delta("Once ".into())))
        .await
        .expect("draft");
    tokio::time::sleep(Duration::from_secs(2)).await;
    dead.send(at(3, OutboundKind::Delta("upon ".into())))
        .await
        .expect("edit");
    drop(dead);

    let standby = gateway();
    // Frame 3 the dead one delivered but never acknowledged comes again, then the rest.
    for (cursor, kind) in [
        (3, OutboundKind::Delta("upon ".into())),
        (4, OutboundKind::Delta("a time".into())),
        (5, OutboundKind::Message("Once upon a time".into())),
        (6, OutboundKind::Done(TurnEnd::Answered)),
    ] {
        standby.send(at(cursor, kind)).await.expect("delivered");
    }
    // A third holder is offered the turn's end again: it went out, so nothing is sent.
    let third = gateway();
    third
        .send(at(5, OutboundKind::Message("Once upon a time".into())))
        .await
        .expect("skipped");
    third
        .send(at(6, OutboundKind::Done(TurnEnd::Answered)))
        .await
        .expect("skipped");

    let calls = platform
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let sends: Vec<&Call> = calls.iter().filter(|call| call.0 == "send").collect();
    assert_eq!(sends.len(), 1, "one message, the draft: {calls:?}");
    let last = calls.last().expect("calls");
    assert_eq!(
        (last.0, last.1.as_str(), last.2.as_str()),
        ("edit", "m0", "Once upon a time"),
        "the draft finished: {calls:?}"
    );
}

/// A turn that starts again before it ended (its worker lost the partition and another runs
/// it anew) streams into the draft it had, not a second one beside it.
#[tokio::test(start_paused = true)]
async fn a_turn_started_again_finishes_its_own_draft() {
    let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
    for kind in [
        OutboundKind::TurnStarted,
        OutboundKind::Delta("Once upon".into()),
        OutboundKind::TurnStarted,
        OutboundKind::Delta("Once upon a time".into()),
        OutboundKind::Message("Once upon a time".into()),
        OutboundKind::Done(TurnEnd::Answered),
    ] {
        replies.send(out(kind)).await.expect("delivered");
    }
    let calls = replies
        .surface()
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(
        calls.iter().filter(|call| call.0 == "send").count(),
        1,
        "{calls:?}"
    );
    assert_eq!(
        calls.last().map(|call| call.2.as_str()),
        Some("Once upon a time")
    );
}

/// A turn run again by another worker after its reply went out (its first worker was paused
/// and woke to save its answer first): the second run's stream is not shown — not in the
/// chat's state while the turn is open, nor, through what is kept, on a gateway that takes
/// over after its end — since its reply, a repeat, never comes to finish a draft.
#[tokio::test(start_paused = true)]
async fn a_turn_run_again_after_its_reply_went_out_shows_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state: Arc<dyn switchboard_core::StateStore> =
        Arc::new(switchboard_sessions::FileState::new(dir.path()));
    let platform = Arc::new(Recorder::default());
    let gateway = || {
        Replies::new(platform.clone(), true, Duration::from_secs(1))
            .keeping(Some(KeptChats::new(state.clone(), "test")))
    };
    let at = |cursor: u64, kind: OutboundKind| OutboundMessage {
        cursor: Some(cursor),
        ..out(kind)
    };
    let first = gateway();
    for (cursor, kind) in [
        (1, OutboundKind::TurnStarted),
        (2, OutboundKind::Delta("Once upon a time".into())),
        (3, OutboundKind::Message("Once upon a time".into())),
        // The second run's frames, while the turn is still open here.
        (4, OutboundKind::TurnStarted),
        (5, OutboundKind::Delta("Once".into())),
        (6, OutboundKind::Done(TurnEnd::Answered)),
    ] {
        first.send(at(cursor, kind)).await.expect("delivered");
    }
    // And after its end, on the gateway that took the connection over.
    let standby = gateway();
    for (cursor, kind) in [
        (7, OutboundKind::TurnStarted),
        (8, OutboundKind::Delta("Once up".into())),
    ] {
        standby.send(at(cursor, kind)).await.expect("delivered");
    }
    let calls = platform
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(
        calls.iter().filter(|call| call.0 == "send").count(),
        1,
        "one message: {calls:?}"
    );
    assert_eq!(
        calls.last().map(|call| call.2.as_str()),
        Some("Once upon a time")
    );
}

/// A fragment of an older turn that comes late — a worker paused past its lease wakes and
/// its client sends the draft text it had buffered, after the chat's next turn — is shown
/// nowhere: neither as a new draft, nor in the running turn's.
#[tokio::test(start_paused = true)]
async fn a_late_fragment_of_an_older_turn_is_shown_nowhere() {
    let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
    let of = |turn: &str, kind: OutboundKind| OutboundMessage {
        reply_to: Some(MessageId::from(turn)),
        ..out(kind)
    };
    for message in [
        of("u1", OutboundKind::TurnStarted),
        of("u1", OutboundKind::Message("first".into())),
        of("u1", OutboundKind::Done(TurnEnd::Answered)),
        // Late, after the turn ended.
        of("u1", OutboundKind::Delta("fir".into())),
        of("u2", OutboundKind::TurnStarted),
        of("u2", OutboundKind::Delta("second".into())),
        // Late, while the next turn streams.
        of("u1", OutboundKind::Delta("fi".into())),
        of("u2", OutboundKind::Message("second".into())),
        of("u2", OutboundKind::Done(TurnEnd::Answered)),
    ] {
        replies.send(message).await.expect("delivered");
    }
    let calls = replies
        .surface()
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let texts: Vec<&str> = calls.iter().map(|call| call.2.as_str()).collect();
    assert_eq!(texts, ["first", "second", "second"], "{calls:?}");
}

/// A file of `bytes` kept in a store in `dir`, as an outbound message of `kind`.
async fn kept_file(
    dir: &std::path::Path,
    bytes: &[u8],
    kind: switchboard_core::MediaKind,
    caption: Option<&str>,
) -> (Arc<dyn MediaStore>, OutboundMessage) {
    let media: Arc<dyn MediaStore> = Arc::new(crate::FileMedia::new(dir));
    let kept = media
        .keep_bytes(bytes.to_vec(), "chart.png")
        .await
        .expect("kept");
    let file = OutboundFile {
        key: kept.key,
        name: "chart.png".into(),
        mime: "image/png".into(),
        bytes: kept.bytes,
        kind,
        caption: caption.map(str::to_owned),
    };
    (media, out(OutboundKind::File(file)))
}

#[tokio::test(start_paused = true)]
async fn a_file_goes_up_once_and_a_caption_too_long_for_it_follows_as_text_even_when_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recorder = Recorder::default();
    // The first text send (the caption's first part) is answered 429.
    *recorder
        .failing_send
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(0);
    let caption = "a caption far longer than ten characters";
    let (media, message) = kept_file(
        dir.path(),
        b"png bytes",
        switchboard_core::MediaKind::Image,
        Some(caption),
    )
    .await;
    let replies = Replies::new(Arc::new(recorder), false, Duration::from_secs(1)).with_media(media);
    let first = replies.send(message.clone()).await;
    assert!(
        matches!(first, Err(CoreError::RateLimited { .. })),
        "{first:?}"
    );
    let sent = replies.send(message).await.expect("delivered on the retry");
    assert_eq!(sent.id.as_deref(), Some("f0"), "the file's id");
    let uploads = replies
        .surface()
        .uploads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(uploads.len(), 1, "uploaded once: {uploads:?}");
    assert_eq!(uploads[0].2, b"png bytes");
    assert_eq!(uploads[0].1, None, "the caption did not fit with the file");
    let texts: Vec<String> = calls(&replies).into_iter().map(|c| c.2).collect();
    assert_eq!(
        words(&texts.join(" ")),
        words(caption),
        "the caption after it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_file_the_platform_does_not_take_is_refused_naming_its_limit_and_nothing_goes_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (media, message) = kept_file(
        dir.path(),
        &[7u8; 200],
        switchboard_core::MediaKind::Document,
        Some("short"),
    )
    .await;
    let replies = Replies::new(Arc::new(Recorder::default()), false, Duration::from_secs(1))
        .with_media(media);
    let err = replies.send(message).await.expect_err("refused");
    assert!(
        err.to_string()
            .contains("Test takes document files of at most 100 bytes"),
        "{err}"
    );
    assert!(
        replies
            .surface()
            .uploads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn a_transcript_is_quoted_as_a_reply_to_the_voice_note() {
    let replies = Replies::new(Arc::new(Recorder::default()), false, Duration::from_secs(1));
    replies
        .send(out(OutboundKind::Transcript("buy milk\nand bread".into())))
        .await
        .expect("sent");
    let calls = calls(&replies);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].2, "> 🎙️ buy milk\n> and bread");
    assert!(calls[0].3, "a reply to the voice note");
}
