//! One conformance suite for every chat platform: the same runs, written once, against each
//! channel and the fake of its platform (`conformance/<platform>.rs` implements
//! [`Platform`] and invokes [`suite!`]). A person writes where they would on the platform,
//! and the answer is read where they would see it.
//!
//! What every channel must do: answer in the chat, replying to the message; split a long
//! reply within the platform's limit, losing nothing; stream into one message edited at most
//! once per interval, closing it as soon as the answer exists; keep strangers out (a pairing
//! code, then let in once approved); hold a whole chat for a 429's `retry_after` — draft,
//! final reply and all — while other chats go on; stop a turn on `/stop`; answer commands
//! without the model; save files people send in the workspace; answer nothing twice across
//! a kill -9, nor a message the platform delivers again; let a slow download hold up only its own chat, in order.
//!
//! `conformance/platform.rs` is what a platform provides ([`Platform`] and the records the
//! runs compare); the runs are here, those that kill the daemon in `crash`, files out in
//! `media`, voice notes in `voice`.

use std::time::Duration;

use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Extra, PATIENCE};

/// Generates the suite's tests for a platform: `suite!(Telegram);` in its module, or
/// `suite!(WhatsApp, without edits);` for a platform where a bot cannot edit what it sent
/// (its answers are never streamed: the streaming runs are left out), or `suite!(Email,
/// mail);` for mail, which also has no pairing codes (a sender can be forged), no voice
/// notes, and no downloads (a mail's files come in it).
macro_rules! suite {
    ($platform:ty) => {
        suite!(@tests $platform;
            streaming_edits_one_message_an_interval_apart_and_ends_with_the_whole_reply,
            a_short_streamed_reply_is_closed_without_waiting_out_the_interval,
            a_429_holds_every_call_to_its_chat_and_no_other_chat,
        );
        suite!(@common $platform);
    };
    ($platform:ty, without edits) => {
        suite!(@tests $platform;
            a_429_on_a_reply_holds_its_chat_and_no_other_chat,
        );
        suite!(@common $platform);
    };
    ($platform:ty, mail) => {
        suite!(@tests $platform;
            a_429_on_a_reply_holds_its_chat_and_no_other_chat,
        );
        suite!(@delivery $platform);
    };
    (@common $platform:ty) => {
        suite!(@tests $platform;
            a_stranger_gets_a_pairing_code_and_is_answered_once_approved,
            a_slow_download_holds_up_only_its_own_chat_and_keeps_its_order,
            a_voice_note_is_heard_and_the_person_sees_what_was_heard,
            a_voice_note_over_its_cap_is_answered_without_any_call,
            a_voice_note_the_servers_cannot_hear_still_reaches_the_model_and_the_person_is_told,
            an_answer_to_a_voice_note_comes_as_text_and_as_a_voice_message,
        );
        suite!(@delivery $platform);
    };
    // What every platform does, mail included.
    (@delivery $platform:ty) => {
        suite!(@tests $platform;
            a_message_is_answered_in_its_chat,
            a_long_reply_arrives_in_parts_within_the_limit_and_loses_nothing,
            stop_ends_the_running_turn,
            commands_are_answered_without_the_model,
            a_file_is_saved_in_the_workspace_and_handed_to_the_agent,
            nothing_is_answered_twice_across_a_kill_9,
            messages_in_flight_at_a_kill_9_are_answered_once_after_the_restart,
            a_message_delivered_again_is_answered_once_before_during_and_after_its_answer,
            a_picture_and_a_document_the_agent_sends_arrive_with_their_bytes,
            a_file_outside_the_workspace_or_over_the_platforms_limit_is_not_uploaded,
            a_file_being_uploaded_at_a_kill_9_arrives_once,
            a_file_the_platform_took_before_a_kill_9_is_not_sent_again,
        );
    };
    (@tests $platform:ty; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                crate::conformance::$test::<$platform>().await;
            }
        )*
    };
}

mod crash;
mod discord;
#[cfg(feature = "email")]
pub(crate) mod email;
#[cfg(feature = "matrix")]
pub(crate) mod matrix;
mod media;
mod platform;
#[cfg(feature = "signal")]
pub(crate) mod signal;
#[cfg(feature = "slack")]
mod slack;
mod telegram;
mod voice;
#[cfg(feature = "whatsapp")]
pub(crate) mod whatsapp;

pub(crate) use crash::{
    a_file_being_uploaded_at_a_kill_9_arrives_once,
    a_file_the_platform_took_before_a_kill_9_is_not_sent_again,
    messages_in_flight_at_a_kill_9_are_answered_once_after_the_restart,
    nothing_is_answered_twice_across_a_kill_9,
};
pub(crate) use media::{
    a_file_outside_the_workspace_or_over_the_platforms_limit_is_not_uploaded,
    a_picture_and_a_document_the_agent_sends_arrive_with_their_bytes,
};
pub(crate) use platform::{ADA, CAROL, Platform, Posted, Received, STRANGER, Shown, Written};
pub(crate) use voice::{
    a_voice_note_is_heard_and_the_person_sees_what_was_heard,
    a_voice_note_over_its_cap_is_answered_without_any_call,
    a_voice_note_the_servers_cannot_hear_still_reaches_the_model_and_the_person_is_told,
    an_answer_to_a_voice_note_comes_as_text_and_as_a_voice_message,
};

/// A daemon with the platform's channel (and the WebSocket channel) against the fakes.
struct Run<P: Platform> {
    dir: tempfile::TempDir,
    llm: ScriptedLlm,
    fake: P,
    daemon: switchboard::app::Running,
}

impl<P: Platform> Run<P> {
    /// Streaming `stream`, drafts edited at most every 0.3 s.
    async fn start(stream: bool) -> Self {
        Self::start_with(0.3, &format!("stream = {stream}")).await
    }

    async fn start_with(interval: f64, extra: &str) -> Self {
        Self::start_beside(interval, extra, "").await
    }

    /// With `sections` (whole tables: `[transcription]`, …) beside the channel's.
    async fn start_beside(interval: f64, extra: &str, sections: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let fake = P::start().await;
        let before = fake.sessions();
        let tables = format!("{}\n{sections}", fake.table(interval, extra));
        let config = Extra {
            tables: &tables,
            ..Extra::default()
        };
        let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
        fake.attach(daemon.addr());
        fake.wait("the channel listening", |f| f.sessions() > before)
            .await;
        Self {
            dir,
            llm,
            fake,
            daemon,
        }
    }

    /// The bot's posts replying to `written`, once there is one.
    async fn replies(&self, written: &Written) -> Vec<Posted> {
        self.fake
            .wait("a reply", |f| !replies(f, written).is_empty())
            .await;
        replies(&self.fake, written)
    }

    /// The bot's posts replying to `written` once everything [`ADA`] wrote before is handled:
    /// `after` is written and answered (one chat's messages are handled in order).
    async fn replies_once_handled(&self, written: &Written, after: &str) -> Vec<Posted> {
        let next = self.fake.dm(ADA, after);
        self.reply(&next).await;
        replies(&self.fake, written)
    }

    /// The text of the first post replying to `written`, once there is one.
    async fn reply(&self, written: &Written) -> String {
        self.replies(written).await.remove(0).text
    }
}

/// The bot's posts replying to `written` so far.
pub(crate) fn replies<P: Platform>(fake: &P, written: &Written) -> Vec<Posted> {
    fake.posted(&written.chat)
        .into_iter()
        .filter(|post| post.reply_to.as_ref() == Some(&written.id))
        .collect()
}

/// `count` words, `{prefix}0 {prefix}1 …`: a reply whose every word can be found.
fn numbered(prefix: &str, count: usize) -> String {
    (0..count)
        .map(|i| format!("{prefix}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The words of a text, Markdown fences and whitespace aside.
fn words(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("```"))
        .flat_map(str::split_whitespace)
        .map(str::to_owned)
        .collect()
}

pub(crate) async fn a_message_is_answered_in_its_chat<P: Platform>() {
    let t = Run::<P>::start(false).await;
    let said = t.fake.dm(ADA, "hello bot");
    assert_eq!(t.reply(&said).await, "echo: hello bot");
    let conversation = util::conversation(&t.llm.requests()[0]);
    assert_eq!(
        conversation.last().expect("message")["content"],
        "hello bot"
    );
    if let Some(typing) = t.fake.typing(&said.chat) {
        assert!(typing > 0, "\"typing…\" was shown");
    }
    t.daemon.shutdown().await;
}

pub(crate) async fn a_long_reply_arrives_in_parts_within_the_limit_and_loses_nothing<
    P: Platform,
>() {
    let t = Run::<P>::start(false).await;
    let code: String = (0..P::LIMIT / 30)
        .map(|i| format!("    total = total + values[{i}]  # step {i}\n"))
        .collect();
    let reply = format!(
        "Here is the program, explained after the code.\n\n```python\n{code}```\n\n{}",
        "It adds the values one by one and prints the total. ".repeat(P::LIMIT / 50)
    );
    assert!(reply.len() > 2 * P::LIMIT, "{}", reply.len());
    t.llm.push(Reply::text(reply.clone()));
    let said = t.fake.dm(ADA, "write me a program");
    let expected = words(&reply);
    t.fake
        .wait("the whole reply", |f| {
            let got: Vec<String> = f
                .posted(&said.chat)
                .iter()
                .flat_map(|post| words(&post.text))
                .collect();
            got == expected
        })
        .await;
    let parts = t.fake.posted(&said.chat);
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert_eq!(
        parts[0].reply_to.as_ref(),
        Some(&said.id),
        "the first part answers"
    );
    for part in &parts {
        assert!(part.text.chars().count() <= P::LIMIT, "{}", part.text.len());
    }
    t.daemon.shutdown().await;
}

pub(crate) async fn streaming_edits_one_message_an_interval_apart_and_ends_with_the_whole_reply<
    P: Platform,
>() {
    let t = Run::<P>::start(true).await;
    let reply = numbered("word", 50);
    t.llm
        .push(Reply::paced(reply.clone(), Duration::from_millis(40)));
    let said = t.fake.dm(ADA, "stream something");
    t.fake
        .wait("the draft ending with the whole reply", |f| {
            f.posted(&said.chat)
                .first()
                .is_some_and(|draft| draft.text == reply)
        })
        .await;
    let drafts = t.fake.posted(&said.chat);
    assert_eq!(drafts.len(), 1, "one message, edited in place");
    assert_eq!(drafts[0].reply_to.as_ref(), Some(&said.id));
    let writes = t.fake.writes(&said.chat, Some(&drafts[0].id));
    assert!(writes.len() >= 3, "it streamed: {} writes", writes.len());
    // The first words are sent at once; the edits after are an interval apart, but for the
    // closing one, which goes out as the answer ends.
    for pair in writes[1..writes.len() - 1].windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(gap >= Duration::from_millis(300), "edits {gap:?} apart");
    }
    t.daemon.shutdown().await;
}

pub(crate) async fn a_short_streamed_reply_is_closed_without_waiting_out_the_interval<
    P: Platform,
>() {
    // An interval far longer than the answer takes, and than a loaded machine makes its
    // writes take (encrypted ones took 12 s beside a CI run): the closing edit must not
    // wait for it.
    let t = Run::<P>::start_with(60.0, "stream = true").await;
    let reply = "a short answer, streamed";
    t.llm.push(Reply::paced(reply, Duration::from_millis(20)));
    let said = t.fake.dm(ADA, "say something short");
    t.fake
        .wait("the draft ending with the whole reply", |f| {
            f.posted(&said.chat)
                .first()
                .is_some_and(|draft| draft.text == reply)
        })
        .await;
    let draft = t.fake.posted(&said.chat).remove(0);
    let writes = t.fake.writes(&said.chat, Some(&draft.id));
    let took = writes[writes.len() - 1].duration_since(writes[0]);
    assert!(
        took < Duration::from_secs(30),
        "the answer closed {took:?} after its first words, waiting out the 60 s interval"
    );
    t.daemon.shutdown().await;
}

pub(crate) async fn a_stranger_gets_a_pairing_code_and_is_answered_once_approved<P: Platform>() {
    let t = Run::<P>::start(false).await;
    let first = t.fake.dm(STRANGER, "hello?");
    let text = t.reply(&first).await;
    assert!(text.contains("switchboard pairing approve"), "{text}");
    let code = text.lines().nth(2).expect("the code").trim().to_owned();
    assert!(
        t.llm.requests().is_empty(),
        "a stranger never reaches the model"
    );

    // The operator approves it with the CLI while the daemon runs.
    let config = t.dir.path().join("config.toml");
    let tables = t.fake.table(0.3, "stream = false");
    let extra = Extra {
        tables: &tables,
        ..Extra::default()
    };
    std::fs::write(
        &config,
        util::config_text_with(&t.llm.base_url(), t.dir.path(), extra),
    )
    .expect("write");
    util::cli(&["pairing", "approve", &code], &config).await;
    let second = t.fake.dm(STRANGER, "may I talk now?");
    assert_eq!(t.reply(&second).await, "echo: may I talk now?");
    t.daemon.shutdown().await;
}

pub(crate) async fn a_429_holds_every_call_to_its_chat_and_no_other_chat<P: Platform>() {
    let retry_after = P::RETRY_AFTER;
    let t = Run::<P>::start(true).await;
    let reply = numbered("word", 20);
    t.llm
        .push(Reply::paced(reply.clone(), Duration::from_millis(40)));
    let ada = t.fake.dm(ADA, "first in line");
    t.fake
        .wait("the draft", |f| !f.posted(&ada.chat).is_empty())
        .await;
    // The draft's next edit is answered 429: nothing more may reach Ada's chat for 3 s.
    t.fake.rate_limit(&ada.chat, retry_after, 1);
    t.fake
        .wait("the 429", |f| !f.limited_at(&ada.chat).is_empty())
        .await;
    let limited = t.fake.limited_at(&ada.chat)[0];
    let carol = t.fake.dm(CAROL, "second in line");
    t.fake
        .wait("Carol's whole reply", |f| {
            replies(f, &carol)
                .iter()
                .any(|post| post.text == "echo: second in line")
        })
        .await;
    let carol_at = *t.fake.writes(&carol.chat, None).last().expect("writes");
    t.fake
        .wait("Ada's whole reply", |f| {
            f.posted(&ada.chat).iter().any(|post| post.text == reply)
        })
        .await;
    let early: Vec<_> = t
        .fake
        .writes(&ada.chat, None)
        .into_iter()
        .filter(|at| *at > limited && *at < limited + retry_after)
        .collect();
    assert!(
        early.is_empty(),
        "{} writes reached the chat within retry_after",
        early.len()
    );
    let last = *t.fake.writes(&ada.chat, None).last().expect("writes");
    assert!(
        last >= limited + retry_after,
        "the reply waited out retry_after"
    );
    assert!(
        carol_at < limited + retry_after,
        "the other chat was not held"
    );
    let posts = t.fake.posted(&ada.chat);
    assert_eq!(
        posts.iter().filter(|post| post.text == reply).count(),
        1,
        "the reply went out once: {posts:?}"
    );
    t.daemon.shutdown().await;
}

/// Where a bot cannot edit, the reply itself is what a 429 holds.
#[cfg_attr(
    not(any(feature = "whatsapp", feature = "signal", feature = "email")),
    expect(dead_code, reason = "only the platforms without edits run it")
)]
pub(crate) async fn a_429_on_a_reply_holds_its_chat_and_no_other_chat<P: Platform>() {
    let retry_after = P::RETRY_AFTER;
    let t = Run::<P>::start(false).await;
    let ada_chat = t.fake.chat_of(ADA);
    t.fake.rate_limit(&ada_chat, retry_after, 1);
    let ada = t.fake.dm(ADA, "first in line");
    t.fake
        .wait("the 429", |f| !f.limited_at(&ada.chat).is_empty())
        .await;
    let limited = t.fake.limited_at(&ada.chat)[0];
    let carol = t.fake.dm(CAROL, "second in line");
    assert_eq!(t.reply(&carol).await, "echo: second in line");
    let carol_at = *t.fake.writes(&carol.chat, None).last().expect("writes");
    assert_eq!(t.reply(&ada).await, "echo: first in line");
    let writes = t.fake.writes(&ada.chat, None);
    assert!(
        writes
            .iter()
            .all(|at| *at <= limited || *at >= limited + retry_after),
        "a write reached the chat within retry_after"
    );
    assert!(
        carol_at < limited + retry_after,
        "the other chat was not held"
    );
    assert_eq!(replies(&t.fake, &ada).len(), 1, "the reply went out once");
    t.daemon.shutdown().await;
}

pub(crate) async fn stop_ends_the_running_turn<P: Platform>() {
    let t = Run::<P>::start(false).await;
    let endless = numbered("w", 400);
    t.llm.push(Reply::paced(endless, Duration::from_millis(50)));
    let said = t.fake.dm(ADA, "talk for a long time");
    t.llm.wait_for_requests(1, PATIENCE).await;
    let stop = t.fake.dm(ADA, "/stop");
    let stopped = |f: &P| {
        replies(f, &said)
            .into_iter()
            .chain(replies(f, &stop))
            .find(|post| post.text.to_lowercase().contains("stopped"))
    };
    t.fake
        .wait("the turn ended", |f| stopped(f).is_some())
        .await;
    let post = stopped(&t.fake).expect("stopped");
    assert!(
        !post.text.contains("w399"),
        "the answer did not run on: {post:?}"
    );
    assert!(
        t.llm.requests().len() <= 1,
        "/stop is not sent to the model"
    );
    t.daemon.shutdown().await;
}

pub(crate) async fn commands_are_answered_without_the_model<P: Platform>() {
    let t = Run::<P>::start(false).await;
    let help = t.fake.dm(ADA, "/help");
    let text = t.reply(&help).await;
    assert!(text.contains("/stop") && text.contains("/new"), "{text}");
    let first = t.fake.dm(ADA, "remember me");
    t.reply(&first).await;
    let new = t.fake.dm(ADA, "/new");
    t.reply(&new).await;
    let after = t.fake.dm(ADA, "who am I?");
    t.reply(&after).await;
    let requests = t.llm.requests();
    assert_eq!(
        requests.len(),
        2,
        "only the two questions reached the model"
    );
    let conversation = util::conversation(&requests[1]);
    assert!(
        !conversation.iter().any(|m| m["content"] == "remember me"),
        "/new started over: {conversation:?}"
    );
    t.daemon.shutdown().await;
}

pub(crate) async fn a_file_is_saved_in_the_workspace_and_handed_to_the_agent<P: Platform>() {
    let t = Run::<P>::start(false).await;
    let bytes = b"\xff\xd8\xff the notes of the meeting".to_vec();
    let said = t.fake.dm_file(ADA, "what is this?", bytes.clone());
    t.reply(&said).await;
    let conversation = util::conversation(&t.llm.requests()[0]);
    let content = &conversation.last().expect("message")["content"];
    let text = content
        .as_str()
        .or_else(|| content[0]["text"].as_str())
        .expect("text")
        .to_owned();
    assert!(text.starts_with("what is this?"), "{text}");
    let path = text
        .split("saved in the workspace at ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("a path in {text}"));
    assert!(path.starts_with(&format!("media/{}/", P::NAME)), "{path}");
    let saved = std::fs::read(t.dir.path().join("workspace").join(path)).expect("saved");
    assert_eq!(saved, bytes);
    t.daemon.shutdown().await;
}

pub(crate) async fn a_slow_download_holds_up_only_its_own_chat_and_keeps_its_order<P: Platform>() {
    let t = Run::<P>::start(false).await;
    t.fake.set_file_delay(Duration::from_secs(3));
    let file = t.fake.dm_file(ADA, "what is this?", b"slow bytes".to_vec());
    let after = t.fake.dm(ADA, "and then this");
    let other = t.fake.dm(CAROL, "meanwhile");
    assert_eq!(t.reply(&other).await, "echo: meanwhile");
    t.reply(&after).await;
    let order: Vec<Option<String>> = t
        .fake
        .posted(&after.chat)
        .into_iter()
        .map(|post| post.reply_to)
        .collect();
    assert_eq!(
        order,
        [Some(file.id), Some(after.id)],
        "Ada's messages in her order"
    );
    let served = t.fake.files_served();
    assert_eq!(served.len(), 1);
    assert!(
        t.fake.posted(&other.chat)[0].at < served[0],
        "Carol was answered while Ada's file was still downloading"
    );
    t.daemon.shutdown().await;
}

pub(crate) async fn a_message_delivered_again_is_answered_once_before_during_and_after_its_answer<
    P: Platform,
>() {
    let t = Run::<P>::start(true).await;
    // At once, while the first delivery is still being taken in.
    let zeroth = t.fake.dm(ADA, "zeroth");
    t.fake.deliver_again(&zeroth);
    let posts = t.replies_once_handled(&zeroth, "after the zeroth").await;
    assert_eq!(posts.len(), 1, "one answer to the zeroth: {posts:?}");

    // While the model is still working on it.
    t.llm
        .push(Reply::text("the first answer").delayed(Duration::from_millis(600)));
    let first = t.fake.dm(ADA, "first");
    t.llm.wait_for_requests(1, PATIENCE).await;
    t.fake.deliver_again(&first);
    let posts = t.replies_once_handled(&first, "after the first").await;
    assert_eq!(posts.len(), 1, "one answer to the first: {posts:?}");
    assert_eq!(posts[0].text, "the first answer");

    // While its answer streams.
    let reply = numbered("word", 30);
    t.llm
        .push(Reply::paced(reply.clone(), Duration::from_millis(30)));
    let second = t.fake.dm(ADA, "second");
    t.fake
        .wait("the answer streaming", |f| !replies(f, &second).is_empty())
        .await;
    t.fake.deliver_again(&second);
    let posts = t.replies_once_handled(&second, "after the second").await;
    assert_eq!(posts.len(), 1, "one answer to the second: {posts:?}");
    assert_eq!(posts[0].text, reply);

    // After its answer went out.
    let third = t.fake.dm(ADA, "third");
    t.fake
        .wait("the third answered", |f| {
            replies(f, &third)
                .first()
                .is_some_and(|post| post.text == "echo: third")
        })
        .await;
    t.fake.deliver_again(&third);
    let posts = t.replies_once_handled(&third, "after the third").await;
    assert_eq!(posts.len(), 1, "one answer to the third: {posts:?}");

    let asked: Vec<String> = t
        .llm
        .requests()
        .iter()
        .map(switchboard_testkit::last_user_text)
        .collect();
    for said in ["zeroth", "first", "second", "third"] {
        let times = asked.iter().filter(|text| *text == said).count();
        assert_eq!(
            times, 1,
            "{said:?} reached the model {times} times: {asked:?}"
        );
    }
    t.daemon.shutdown().await;
}
