//! Properties of the client-frame parser, over random input: no text panics it, a frame is
//! accepted exactly when the protocol's rules hold (chat id of 1 to 128 bytes without
//! control characters, content not blank, no unknown fields), and what is accepted is what
//! was sent.
//!
//! Case counts: proptest's default (256), or `PROPTEST_CASES`.

use proptest::prelude::*;
use serde_json::json;
use switchboard_websocket::ClientFrame;

const LIMIT: usize = 64 * 1024;

fn valid_chat_id(chat_id: &str) -> bool {
    (1..=128).contains(&chat_id.len()) && !chat_id.chars().any(char::is_control)
}

proptest! {
    #[test]
    fn any_text_is_a_frame_or_an_error_never_a_panic(text in any::<String>()) {
        let _ = ClientFrame::parse(&text, LIMIT);
    }

    #[test]
    fn json_like_text_never_panics(text in r#"\{("[a-z_]{0,9}":("[^"]{0,9}"|[0-9]{1,3}|null|\[\]|\{\}),?){0,4}\}"#) {
        let _ = ClientFrame::parse(&text, LIMIT);
    }

    #[test]
    fn a_message_frame_is_accepted_exactly_when_its_fields_are_valid(
        chat_id in prop_oneof![any::<String>(), "[a-z0-9]{1,8}", "€{40,45}"],
        content in prop_oneof![any::<String>(), "[a-z ]{0,8}"],
    ) {
        let text = json!({"type": "message", "chat_id": chat_id, "content": content}).to_string();
        let parsed = ClientFrame::parse(&text, LIMIT);
        let valid = valid_chat_id(&chat_id) && !content.trim().is_empty();
        prop_assert_eq!(parsed.is_ok(), valid, "{:?}", parsed);
        if let Ok(frame) = parsed {
            prop_assert_eq!(frame, ClientFrame::Message { chat_id, content, id: None, attachments: Vec::new() });
        }
    }

    #[test]
    fn unknown_fields_and_frames_over_the_limit_are_refused(
        field in "[a-z]{1,8}",
        size in 0usize..300,
    ) {
        prop_assume!(!["type", "chat_id", "content", "id"].contains(&field.as_str()));
        let mut frame = json!({"type": "message", "chat_id": "c", "content": "x".repeat(size)});
        let whole = frame.to_string();
        let parsed = ClientFrame::parse(&whole, 200);
        prop_assert_eq!(parsed.is_ok(), whole.len() <= 200 && size > 0);
        frame[field.as_str()] = json!(1);
        prop_assert!(ClientFrame::parse(&frame.to_string(), LIMIT).is_err());
    }
}
