//! What only Matrix does, on a real Synapse with people's own Matrix clients (the rest is in
//! `conformance`): end-to-end encryption — every message the bot writes is encrypted, and
//! its device and keys outlive a restart, so what people wrote meanwhile is read and
//! answered once — threads as chats of their own, answered in the thread, invites taken
//! from people who may talk and declined from others, an access token instead of a
//! password, and the homeserver restarting under the channel.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_testkit::ScriptedLlm;
use switchboard_testkit::matrix::matrix_sdk;

use crate::conformance::matrix::{BOT_PASSWORD, Matrix, PATIENCE};
use crate::conformance::{ADA, CAROL, Platform, STRANGER};
use crate::util::{self, Extra};

/// What reached the model: the person's text of each request, in order.
fn asked(llm: &ScriptedLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(switchboard_testkit::last_user_text)
        .collect()
}

/// A daemon with `[channels.matrix]` as `section` writes it, once it is syncing.
async fn start(
    llm: &ScriptedLlm,
    dir: &std::path::Path,
    platform: &Matrix,
    section: &str,
) -> switchboard::app::Running {
    let before = platform.sessions();
    let config = Extra {
        tables: section,
        ..Extra::default()
    };
    let daemon = util::start_configured(llm, dir, config, Vec::new()).await;
    platform
        .wait("the channel syncing", |p| p.sessions() > before)
        .await;
    daemon
}

/// The device the channel kept its session as.
fn kept_device(dir: &std::path::Path) -> String {
    let session = std::fs::read_to_string(dir.join("state/matrix/session.json")).expect("session");
    let session: Value = serde_json::from_str(&session).expect("JSON");
    session["device_id"].as_str().expect("a device").to_owned()
}

/// The texts the bot wrote in `room` as `person`'s client shows them (edits applied).
fn texts(platform: &Matrix, room: &str) -> Vec<String> {
    platform
        .posted(room)
        .into_iter()
        .map(|post| post.text)
        .collect()
}

#[tokio::test]
async fn an_encrypted_chat_stays_readable_across_a_restart_and_what_came_meanwhile_is_answered_once()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let platform = Matrix::start().await;
    let section = platform.section("stream = false");
    let daemon = start(&llm, dir.path(), &platform, &section).await;
    let first = platform.dm(ADA, "hello");
    platform
        .wait("the answer", |p| texts(p, &first.chat) == ["echo: hello"])
        .await;
    let device = kept_device(dir.path());
    daemon.shutdown().await;

    // Written while the daemon is down: read from the kept token after the restart.
    let meanwhile = platform.dm(ADA, "while you were away");
    platform
        .wait("sent", |p| p.platform_id(&meanwhile).is_some())
        .await;
    let daemon = start(&llm, dir.path(), &platform, &section).await;
    platform
        .wait("the answer after the restart", |p| {
            texts(p, &first.chat).len() == 2
        })
        .await;
    platform.dm(ADA, "and now");
    platform
        .wait("the third answer", |p| texts(p, &first.chat).len() == 3)
        .await;
    assert_eq!(
        texts(&platform, &first.chat),
        ["echo: hello", "echo: while you were away", "echo: and now"]
    );
    assert_eq!(
        asked(&llm),
        ["hello", "while you were away", "and now"],
        "each reached the model once"
    );
    assert_eq!(kept_device(dir.path()), device, "one device, kept");
    // The device is signed by the bot's own cross-signing identity, set up at its login.
    let bot = matrix_sdk::ruma::UserId::parse(platform.bot.as_str()).expect("an id");
    let identity = platform
        .person(ADA)
        .client
        .encryption()
        .request_user_identity(&bot)
        .await
        .expect("the bot's identity");
    assert!(identity.is_some(), "the bot has a cross-signing identity");
    let writes = platform.proxy.writes(&first.chat);
    assert!(
        !writes.is_empty()
            && writes
                .iter()
                .all(|write| write.event_type == "m.room.encrypted"),
        "every message the bot wrote was encrypted: {writes:?}"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_thread_is_a_chat_of_its_own_answered_in_the_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let platform = Matrix::start().await;
    let ada = platform.person(ADA);
    let carol = platform.person(CAROL);
    let room = ada.room("Plans", &[&platform.bot, &carol.id], true).await;
    let daemon = start(
        &llm,
        dir.path(),
        &platform,
        &platform.section("stream = false"),
    )
    .await;
    ada.wait_joined(&room, &platform.bot, PATIENCE).await;

    let root = ada
        .send(
            &room,
            json!({"msgtype": "m.text", "body": "shall we meet on Friday?"}),
        )
        .await;
    let room_id = room.to_string();
    platform
        .wait("the answer in the room", |_| {
            ada.seen_from(&room_id, &platform.bot).len() == 1
        })
        .await;
    let in_thread = ada
        .send(
            &room,
            json!({"msgtype": "m.text", "body": "at noon?",
                   "m.relates_to": {"rel_type": "m.thread", "event_id": root,
                                    "is_falling_back": true, "m.in_reply_to": {"event_id": root}}}),
        )
        .await;
    platform
        .wait("the answer in the thread", |_| {
            ada.seen_from(&room_id, &platform.bot).len() == 2
        })
        .await;
    let answers = ada.seen_from(&room_id, &platform.bot);
    assert_eq!(
        answers[0].thread(),
        None,
        "the room's message answered in the room"
    );
    assert_eq!(answers[0].reply_to(), Some(root.as_str()));
    assert_eq!(
        answers[1].thread(),
        Some(root.as_str()),
        "answered in the thread"
    );
    assert_eq!(answers[1].reply_to(), Some(in_thread.as_str()));
    assert_eq!(answers[1].content["body"], "echo: at noon?");
    // Its own session: the thread's request holds the thread's message alone.
    let thread_request = util::conversation(&llm.requests()[1]);
    assert_eq!(thread_request.len(), 1, "{thread_request:?}");
    let sessions = std::fs::read_dir(dir.path().join("state/sessions"))
        .expect("sessions")
        .count();
    assert!(
        sessions >= 2,
        "the room and the thread: {sessions} sessions"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn invites_are_taken_from_people_who_may_talk_and_declined_from_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let platform = Matrix::start().await;
    let stranger = platform.person(STRANGER);
    let ada = platform.person(ADA);
    let theirs = stranger.room("Offers", &[&platform.bot], false).await;
    let daemon = start(
        &llm,
        dir.path(),
        &platform,
        &platform.section("stream = false"),
    )
    .await;
    // Ada's room, made while the daemon runs: joined at once.
    let ours = ada
        .room("Ours", &[&platform.bot, &stranger.id], false)
        .await;
    ada.wait_joined(&ours, &platform.bot, PATIENCE).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !stranger.left(&theirs, &platform.bot).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stranger's invite was not declined"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // In a room with several people, only those who may talk are answered, and a stranger
    // gets no pairing code there.
    let ours_id = ours.to_string();
    stranger.accept_invite(&ours).await;
    stranger
        .send(
            &ours,
            json!({"msgtype": "m.text", "body": "give me the keys"}),
        )
        .await;
    ada.send(&ours, json!({"msgtype": "m.text", "body": "hello all"}))
        .await;
    platform
        .wait("Ada's answer", |_| {
            !ada.seen_from(&ours_id, &platform.bot).is_empty()
        })
        .await;
    let answers: Vec<Value> = ada
        .seen_from(&ours_id, &platform.bot)
        .into_iter()
        .map(|seen| seen.content["body"].clone())
        .collect();
    assert_eq!(answers, ["echo: hello all"]);
    assert_eq!(
        asked(&llm),
        ["hello all"],
        "the stranger never reached the model"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn an_access_token_logs_in_as_its_own_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let platform = Matrix::start().await;
    // A device made for the bot by logging in, as the README shows with curl.
    let login = matrix_sdk::Client::builder()
        .homeserver_url(platform.synapse.url())
        .build()
        .await
        .expect("a client");
    let made = login
        .matrix_auth()
        .login_username(&platform.bot, BOT_PASSWORD)
        .initial_device_display_name("switchboard")
        .send()
        .await
        .expect("a login");
    let section = platform.section("stream = false").replace(
        &format!("password = \"{BOT_PASSWORD}\""),
        &format!("access_token = \"{}\"", made.access_token),
    );
    drop(login);
    let daemon = start(&llm, dir.path(), &platform, &section).await;
    let said = platform.dm(ADA, "who are you?");
    platform
        .wait("the answer", |p| {
            texts(p, &said.chat) == ["echo: who are you?"]
        })
        .await;
    assert_eq!(kept_device(dir.path()), made.device_id.as_str());
    daemon.shutdown().await;
}

#[tokio::test]
async fn the_homeserver_restarting_under_the_channel_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let mut platform = Matrix::start().await;
    let section = platform.section("stream = false");
    let daemon = start(&llm, dir.path(), &platform, &section).await;
    let first = platform.dm(ADA, "before");
    platform
        .wait("the first answer", |p| texts(p, &first.chat).len() == 1)
        .await;
    // The sync under way breaks; the channel syncs again (its first try may wait in
    // Synapse's backlog while it starts, then long-polls there until "after" comes).
    platform.synapse.kill();
    platform.synapse.resume().await;
    platform.dm(ADA, "after");
    platform
        .wait("the second answer", |p| texts(p, &first.chat).len() == 2)
        .await;
    assert_eq!(
        texts(&platform, &first.chat),
        ["echo: before", "echo: after"]
    );
    assert_eq!(asked(&llm), ["before", "after"]);
    let health = util::health(daemon.addr()).await;
    assert_eq!(health["channels"]["matrix"]["state"], "running", "{health}");
    daemon.shutdown().await;
}
