//! The conformance runs of voice: a voice note a person records on the platform reaches the
//! transcription server whole, the model gets what it said (marked as transcribed, the file
//! still named) and the person sees it quoted; a note over its cap costs no call at all; a
//! server that cannot hear it leaves the turn to run and says why; an answer to a voice note
//! comes back as text and as a voice message.

use switchboard_testkit::audio::voice_note;
use switchboard_testkit::{FakeAudio, Reply};

use super::{ADA, Platform, Run, Shown, replies};

/// `[transcription]` on `audio`, with `extra` lines.
fn transcription(audio: &FakeAudio, extra: &str) -> String {
    format!(
        "[transcription]\nenabled = true\nbase_url = \"{}\"\nmodel = \"whisper-test\"\n{extra}\n",
        audio.base_url()
    )
}

/// The text the model got last.
fn asked<P: Platform>(t: &Run<P>) -> String {
    let requests = t.llm.requests();
    switchboard_testkit::last_user_text(requests.last().expect("a request"))
}

pub(crate) async fn a_voice_note_is_heard_and_the_person_sees_what_was_heard<P: Platform>() {
    let audio = FakeAudio::start().await.expect("fake audio");
    audio.push_transcript("remind me to water the plants");
    let t = Run::<P>::start_beside(0.3, "stream = false", &transcription(&audio, "")).await;
    t.llm.push(Reply::text("Noted, the plants."));
    let note = voice_note(4.0);
    let said = t.fake.dm_voice(ADA, note.clone(), 4);
    t.fake
        .wait("what was heard, then the answer", |f| {
            let posts = replies(f, &said);
            posts
                .iter()
                .any(|p| p.text.contains("remind me to water the plants"))
                && posts.iter().any(|p| p.text == "Noted, the plants.")
        })
        .await;
    let heard = audio.heard();
    assert_eq!(heard.len(), 1);
    assert_eq!(
        heard[0].bytes, note,
        "the whole recording reached the server"
    );
    assert_eq!(heard[0].model, "whisper-test");
    let text = asked(&t);
    assert!(
        text.contains("voice note")
            && text.contains("transcribed: \"remind me to water the plants\""),
        "the model reads what was said, marked: {text}"
    );
    assert!(
        text.contains(&format!("media/{}/", P::NAME)),
        "the file named: {text}"
    );
    // What was heard comes before the answer.
    let posts = replies(&t.fake, &said);
    let echo = posts
        .iter()
        .position(|p| p.text.contains("remind me to water the plants"))
        .expect("the echo");
    let answer = posts
        .iter()
        .position(|p| p.text == "Noted, the plants.")
        .expect("the answer");
    assert!(echo < answer, "{posts:?}");
    t.daemon.shutdown().await;
}

pub(crate) async fn a_voice_note_over_its_cap_is_answered_without_any_call<P: Platform>() {
    let audio = FakeAudio::start().await.expect("fake audio");
    let sections = transcription(&audio, "max_duration_secs = 60");
    let t = Run::<P>::start_beside(0.3, "stream = false", &sections).await;
    let said = t.fake.dm_voice(ADA, voice_note(120.0), 120);
    t.fake
        .wait("the answer", |f| !replies(f, &said).is_empty())
        .await;
    let answer = replies(&t.fake, &said).remove(0).text;
    assert!(
        answer.contains("2:00 long") && answer.contains("transcription.max_duration_secs"),
        "the cap is named: {answer}"
    );
    assert!(audio.heard().is_empty(), "the server was not called");
    assert!(t.llm.requests().is_empty(), "nor the model");
    t.daemon.shutdown().await;
}

pub(crate) async fn a_voice_note_the_servers_cannot_hear_still_reaches_the_model_and_the_person_is_told<
    P: Platform,
>() {
    let audio = FakeAudio::start().await.expect("fake audio");
    audio.fail(503, 100);
    let sections = transcription(&audio, "max_retries = 1");
    let t = Run::<P>::start_beside(0.3, "stream = false", &sections).await;
    t.llm.push(Reply::text("I have your recording."));
    let said = t.fake.dm_voice(ADA, voice_note(3.0), 3);
    t.fake
        .wait("the answer and why it was not heard", |f| {
            f.posted(&said.chat)
                .iter()
                .any(|p| p.text.contains("Couldn't transcribe"))
                && replies(f, &said)
                    .iter()
                    .any(|p| p.text == "I have your recording.")
        })
        .await;
    assert_eq!(audio.heard().len(), 2, "tried, and once more");
    let text = asked(&t);
    assert!(
        text.contains("not transcribed: the transcription failed") && text.contains("503"),
        "the model is told why, the file named: {text}"
    );
    let notice = t
        .fake
        .posted(&said.chat)
        .into_iter()
        .find(|p| p.text.contains("Couldn't transcribe"))
        .expect("the notice");
    assert!(notice.text.contains("503"), "{}", notice.text);
    t.daemon.shutdown().await;
}

pub(crate) async fn an_answer_to_a_voice_note_comes_as_text_and_as_a_voice_message<P: Platform>() {
    let audio = FakeAudio::start().await.expect("fake audio");
    audio.push_transcript("what is the weather");
    let sections = format!(
        "{}[speech]\nenabled = true\nbase_url = \"{}\"\nvoice = \"nova\"\n",
        transcription(&audio, "echo = false"),
        audio.base_url()
    );
    let t = Run::<P>::start_beside(0.3, "stream = false", &sections).await;
    t.llm.push(Reply::text("It is **sunny** today."));
    let said = t.fake.dm_voice(ADA, voice_note(2.0), 2);
    t.fake
        .wait("the text and the voice message", |f| {
            replies(f, &said).iter().any(|p| p.text.contains("sunny"))
                && f.files(&said.chat)
                    .iter()
                    .any(|file| file.shown == Shown::Voice)
        })
        .await;
    let spoken = audio.said();
    assert_eq!(spoken.len(), 1);
    assert_eq!(spoken[0].input, "It is sunny today.", "read as plain words");
    assert_eq!(spoken[0].voice, "nova");
    let files = t.fake.files(&said.chat);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].bytes.starts_with(b"OggS"),
        "the server's audio, as it made it"
    );
    assert!(
        !replies(&t.fake, &said)
            .iter()
            .any(|p| p.text.contains("what is the weather")),
        "echo = false shows nothing of what was heard"
    );
    // A typed message is answered in text only: once the message after it is answered, all
    // it brought is out (a chat's messages are handled in order, a voice before its `done`).
    t.fake.dm(ADA, "and tomorrow?");
    let after = t.fake.dm(ADA, "thanks");
    t.fake
        .wait("the answers after", |f| !replies(f, &after).is_empty())
        .await;
    assert_eq!(audio.said().len(), 1, "no voice for a typed message");
    assert_eq!(t.fake.files(&said.chat).len(), 1);
    t.daemon.shutdown().await;
}
