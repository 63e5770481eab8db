//! The audio chain against the testkit's fake server over real sockets: a transcription
//! and a spoken answer, retries of what may heal, failover to the next server, a refused key
//! named, and a voice note's length read from its bytes.

use switchboard_audio::{AudioError, SpeechSection, TranscriptionSection, duration};
use switchboard_testkit::FakeAudio;
use switchboard_testkit::audio::voice_note;

fn transcription(text: &str) -> switchboard_audio::Transcription {
    let section: TranscriptionSection = toml::from_str(text).expect("parses");
    section.validate().expect("valid");
    section.build(None).expect("builds").expect("on")
}

#[tokio::test]
async fn a_voice_note_is_sent_and_its_text_comes_back() {
    let fake = FakeAudio::start().await.expect("fake");
    fake.push_transcript("buy milk on the way home");
    let hearing = transcription(&format!(
        "enabled = true\nbase_url = \"{}\"\napi_key = \"sk-test\"\nmodel = \"whisper-large\"\nlanguage = \"en\"",
        fake.base_url()
    ));
    let note = voice_note(3.0);
    let text = hearing
        .transcribe(note.clone(), "voice.ogg", "audio/ogg")
        .await
        .expect("heard");
    assert_eq!(text, "buy milk on the way home");
    let heard = fake.heard();
    assert_eq!(heard.len(), 1);
    assert_eq!(heard[0].bytes, note, "the whole file went");
    assert_eq!(heard[0].model, "whisper-large");
    assert_eq!(heard[0].language.as_deref(), Some("en"));
    assert_eq!(heard[0].token.as_deref(), Some("sk-test"));
}

#[tokio::test]
async fn a_failing_server_is_retried_then_the_next_one_answers() {
    let down = FakeAudio::start().await.expect("fake");
    down.fail(503, 100);
    let up = FakeAudio::start().await.expect("fake");
    let hearing = transcription(&format!(
        "enabled = true\nbase_url = \"{}\"\nmax_retries = 1\n\
         [[fallbacks]]\nbase_url = \"{}\"\nmodel = \"local\"",
        down.base_url(),
        up.base_url()
    ));
    let text = hearing
        .transcribe(voice_note(1.0), "voice.ogg", "audio/ogg")
        .await
        .expect("the fallback answered");
    assert_eq!(text, switchboard_testkit::audio::DEFAULT_TRANSCRIPT);
    assert_eq!(down.heard().len(), 2, "tried, and tried once more");
    assert_eq!(up.heard().len(), 1);
    assert_eq!(up.heard()[0].model, "local");
}

#[tokio::test]
async fn a_refused_key_is_not_retried_and_names_the_key() {
    let fake = FakeAudio::start().await.expect("fake");
    fake.fail(401, 100);
    let hearing = transcription(&format!(
        "enabled = true\nbase_url = \"{}\"\napi_key = \"wrong\"",
        fake.base_url()
    ));
    let err = hearing
        .transcribe(voice_note(1.0), "voice.ogg", "audio/ogg")
        .await
        .expect_err("refused");
    assert!(err.is_permanent(), "{err}");
    assert!(err.to_string().contains("transcription.api_key"), "{err}");
    assert_eq!(fake.heard().len(), 1, "not retried");
}

#[tokio::test]
async fn no_server_answering_is_said_plainly() {
    // A port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let hearing = transcription(&format!(
        "enabled = true\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmax_retries = 0"
    ));
    let err = hearing
        .transcribe(voice_note(1.0), "voice.ogg", "audio/ogg")
        .await
        .expect_err("down");
    assert!(matches!(err, AudioError::Server { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("refused") && text.contains("transcription.base_url"),
        "{text}"
    );
}

#[tokio::test]
async fn an_answer_is_spoken_in_the_voice_asked_for() {
    let fake = FakeAudio::start().await.expect("fake");
    let section: SpeechSection = toml::from_str(&format!(
        "enabled = true\nbase_url = \"{}\"\nvoice = \"nova\"\nmax_chars = 40",
        fake.base_url()
    ))
    .expect("parses");
    section.validate().expect("valid");
    let speech = section.build(None).expect("builds").expect("on");
    let spoken = speech.speak("It is sunny today.").await.expect("spoken");
    assert_eq!(spoken.mime, "audio/ogg");
    assert_eq!(spoken.name, "answer.ogg");
    assert!(spoken.bytes.starts_with(b"OggS"));
    let said = fake.said();
    assert_eq!(said[0].input, "It is sunny today.");
    assert_eq!(said[0].voice, "nova");
    assert_eq!(said[0].format, "opus");
    let long = speech
        .speak(&"word ".repeat(20))
        .await
        .expect_err("too long");
    assert!(long.to_string().contains("speech.max_chars"), "{long}");
    assert_eq!(fake.said().len(), 1, "a long answer costs no call");
}

#[test]
fn a_voice_notes_length_is_read_from_its_bytes() {
    let note = voice_note(30.0);
    let length = duration::of(&note, &note).expect("a length");
    assert!((length.as_secs_f64() - 30.0).abs() < 0.01, "{length:?}");
}
