//! The web page's voice and files in Chromium: a voice note recorded with the page's
//! microphone button (Chromium's fake microphone playing a WAV file) reaches the transcription
//! server, what was heard shows under it, and the spoken answer plays under the text; a
//! picture the agent sends shows inline, a document as a download card.

use serde_json::json;
use switchboard_testkit::{FakeAudio, Reply};

use crate::browser::{Chat, LOG_TEXT};

/// A WAV recording: `seconds` of a 440 Hz tone, 16-bit mono at 48 kHz.
fn tone(seconds: f64) -> Vec<u8> {
    let rate = 48_000u32;
    let samples = (seconds * f64::from(rate)) as u32;
    let mut data = Vec::with_capacity(samples as usize * 2);
    for n in 0..samples {
        let value = (f64::from(n) * 440.0 * std::f64::consts::TAU / f64::from(rate)).sin();
        data.extend_from_slice(&((value * 12_000.0) as i16).to_le_bytes());
    }
    let mut wav = b"RIFF".to_vec();
    wav.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&(rate * 2).to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(data.len() as u32).to_le_bytes());
    wav.extend(data);
    wav
}

/// A PNG of `width` × `height` pixels of one colour: real chunks with their CRCs, the
/// pixels in an uncompressed (stored) zlib stream — what a browser draws.
fn png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    }
    // Each row: its filter byte (none), then its pixels.
    let row: Vec<u8> = std::iter::once(0)
        .chain((0..width).flat_map(|_| rgb))
        .collect();
    let raw = row.repeat(height as usize);
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &raw {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    let mut zlib = vec![0x78, 0x01, 0x01];
    let length = raw.len() as u16;
    zlib.extend_from_slice(&length.to_le_bytes());
    zlib.extend_from_slice(&(!length).to_le_bytes());
    zlib.extend_from_slice(&raw);
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut header = width.to_be_bytes().to_vec();
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &header);
    chunk(&mut out, b"IDAT", &zlib);
    chunk(&mut out, b"IEND", &[]);
    out
}

#[tokio::test]
async fn a_voice_note_recorded_in_the_page_is_heard_shown_and_answered_in_voice() {
    let audio = FakeAudio::start().await.expect("fake audio");
    audio.push_transcript("what is on my list today");
    let recording = tempfile::tempdir().expect("tempdir");
    let wav = recording.path().join("speech.wav");
    std::fs::write(&wav, tone(3.0)).expect("wav");
    let tables = format!(
        "[transcription]\nenabled = true\nbase_url = \"{url}\"\n\
         [speech]\nenabled = true\nbase_url = \"{url}\"\n",
        url = audio.base_url()
    );
    let flags = [
        "--use-fake-ui-for-media-stream".to_owned(),
        "--use-fake-device-for-media-stream".to_owned(),
        format!("--use-file-for-fake-audio-capture={}", wav.display()),
    ];
    let test = "a_voice_note_recorded_in_the_page_is_heard_shown_and_answered_in_voice";
    let Some(t) = Chat::start_with(test, &tables, &flags).await else {
        return;
    };
    t.llm.push(Reply::text("Milk, and the dentist at four."));
    let page = &t.page;
    page.click("#record").await;
    page.wait_until(
        "document.getElementById('record').getAttribute('aria-pressed') === 'true'",
        "the recording started",
    )
    .await;
    page.wait_until(
        "document.getElementById('hint').textContent.includes('Recording 0:01')",
        "a second recorded",
    )
    .await;
    page.click("#record").await;
    page.wait_until(
        "[...document.querySelectorAll('.msg.user .heard')].some(h => h.textContent.includes('what is on my list today'))",
        "what was heard, under the voice note",
    )
    .await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('the dentist at four')"),
        "the answer",
    )
    .await;
    page.wait_until(
        "document.querySelector('.turn .file.voice audio')",
        "the spoken answer's player",
    )
    .await;
    // The page's recording reached the server whole: a real recording of about a second or
    // more, in what the browser records.
    let heard = audio.heard();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(
        heard[0].bytes.len() > 1000,
        "{} bytes",
        heard[0].bytes.len()
    );
    assert!(
        heard[0].name.starts_with("voice-")
            && heard[0]
                .mime
                .as_deref()
                .is_some_and(|m| m.starts_with("audio/")),
        "{heard:?}"
    );
    let bubble: String = page
        .eval("document.querySelector('.msg.user .voice').textContent")
        .await;
    assert!(bubble.starts_with("🎙️ Voice note · 0:0"), "{bubble}");
    // The player's audio is served to the page.
    let status: u16 = page
        .eval("fetch(document.querySelector('.turn .file.voice audio').src).then(r => r.status)")
        .await;
    assert_eq!(status, 200);
    assert_eq!(audio.said()[0].input, "Milk, and the dentist at four.");

    // After a reload, the history shows the note with what was heard.
    page.reload().await;
    page.wait_connected().await;
    page.wait_until(
        "[...document.querySelectorAll('.msg.user .heard')].some(h => h.textContent.includes('what is on my list today'))",
        "what was heard, after a reload",
    )
    .await;
    t.end().await;
}

#[tokio::test]
async fn a_picture_shows_in_the_page_and_a_document_is_a_download() {
    let test = "a_picture_shows_in_the_page_and_a_document_is_a_download";
    let Some(t) = Chat::start(test, "").await else {
        return;
    };
    let workspace = t.dir.path().join("workspace");
    std::fs::write(workspace.join("dots.png"), png(2, 2, [200, 40, 40])).expect("png");
    std::fs::write(workspace.join("report.pdf"), b"%PDF-1.4\n%%EOF\n").expect("pdf");
    t.llm.push(Reply::tools([
        (
            "send_file",
            json!({"path": "dots.png", "caption": "the **dots**"}),
        ),
        ("send_file", json!({"path": "report.pdf"})),
    ]));
    t.llm.push(Reply::text("There you go."));
    t.page.say("show me").await;
    t.page
        .wait_until(
            "(() => { const img = document.querySelector('.file.image img'); return img && img.complete && img.naturalWidth === 2; })()",
            "the picture drawn",
        )
        .await;
    let caption: String = t
        .page
        .eval("document.querySelector('.file.image figcaption strong').textContent")
        .await;
    assert_eq!(caption, "dots", "the caption's Markdown rendered");
    let download: (String, String) = t
        .page
        .eval("(() => { const a = document.querySelector('a.file.doc'); return [a.getAttribute('download'), a.textContent]; })()")
        .await;
    assert_eq!(download.0, "report.pdf");
    assert!(download.1.contains("report.pdf"), "{download:?}");
    t.end().await;
}
