//! Frames read and written as docs/protocol.md says, and a bad one refused with why.

use super::*;

#[test]
fn message_frames_parse() {
    let frame = ClientFrame::parse(r#"{"type":"message","chat_id":"c1","content":"hi"}"#, 1000);
    assert_eq!(
        frame,
        Ok(ClientFrame::Message {
            chat_id: "c1".into(),
            content: "hi".into(),
            id: None,
            attachments: Vec::new(),
        })
    );
}

#[test]
fn errors_name_the_problem() {
    let cases = [
        ("not json", "invalid frame"),
        (
            r#"{"type":"message","content":"hi"}"#,
            "missing field `chat_id`",
        ),
        (
            r#"{"type":"shout","chat_id":"c"}"#,
            "unknown variant `shout`",
        ),
        (
            r#"{"type":"message","chat_id":"","content":"hi"}"#,
            "`chat_id` must be",
        ),
        (
            r#"{"type":"message","chat_id":"c","content":"  "}"#,
            "`content` is empty",
        ),
        (
            r#"{"type":"message","chat_id":"c","content":"x","extra":1}"#,
            "unknown field `extra`",
        ),
    ];
    for (text, expected) in cases {
        let err = ClientFrame::parse(text, 1000).expect_err(text);
        assert!(err.contains(expected), "{text}: {err}");
    }
    let big = format!(
        r#"{{"type":"message","chat_id":"c","content":"{}"}}"#,
        "x".repeat(100)
    );
    assert!(
        ClientFrame::parse(&big, 50)
            .expect_err("big")
            .contains("frame too large")
    );
}

#[test]
fn server_frames_serialize_as_documented() {
    let frames = [
        (
            ServerFrame::Ready {
                version: "1",
                max_frame_bytes: 65536,
                max_attachment_bytes: 0,
            },
            r#"{"type":"ready","version":"1","max_frame_bytes":65536,"max_attachment_bytes":0}"#,
        ),
        (
            ServerFrame::Delta {
                chat_id: "c".into(),
                text: "t".into(),
            },
            r#"{"type":"delta","chat_id":"c","text":"t"}"#,
        ),
        (
            ServerFrame::Message {
                chat_id: "c".into(),
                content: "t".into(),
            },
            r#"{"type":"message","chat_id":"c","content":"t"}"#,
        ),
        (
            ServerFrame::Tool {
                chat_id: "c".into(),
                id: "call_1".into(),
                name: "n".into(),
                status: "started",
                detail: "{}".into(),
                elapsed_ms: None,
            },
            r#"{"type":"tool","chat_id":"c","id":"call_1","name":"n","status":"started","detail":"{}"}"#,
        ),
        (
            ServerFrame::Tool {
                chat_id: "c".into(),
                id: "call_1".into(),
                name: "n".into(),
                status: "finished",
                detail: "ok".into(),
                elapsed_ms: Some(12),
            },
            r#"{"type":"tool","chat_id":"c","id":"call_1","name":"n","status":"finished","detail":"ok","elapsed_ms":12}"#,
        ),
        (
            ServerFrame::Done {
                chat_id: "c".into(),
                end: "answered",
            },
            r#"{"type":"done","chat_id":"c","end":"answered"}"#,
        ),
        (
            ServerFrame::Started {
                chat_id: "c".into(),
            },
            r#"{"type":"started","chat_id":"c"}"#,
        ),
        (
            ServerFrame::frame_error("bad"),
            r#"{"type":"error","message":"bad"}"#,
        ),
        (
            ServerFrame::Reset {
                chat_id: "c".into(),
            },
            r#"{"type":"reset","chat_id":"c"}"#,
        ),
        (
            ServerFrame::Status {
                chat_id: "c".into(),
                text: "slow".into(),
                waiting_for: None,
            },
            r#"{"type":"status","chat_id":"c","text":"slow"}"#,
        ),
        (
            ServerFrame::Status {
                chat_id: "c".into(),
                text: "Run `exec`?".into(),
                waiting_for: Some("approval"),
            },
            r#"{"type":"status","chat_id":"c","text":"Run `exec`?","waiting_for":"approval"}"#,
        ),
        (
            ServerFrame::Notice {
                chat_id: "c".into(),
                text: "unsaved".into(),
            },
            r#"{"type":"notice","chat_id":"c","text":"unsaved"}"#,
        ),
    ];
    for (frame, json) in frames {
        assert_eq!(frame.to_json(), json);
    }
}

#[test]
fn a_frame_answering_a_message_with_an_id_names_it_and_every_frame_its_place() {
    let message = |reply_to: Option<&str>| OutboundMessage {
        channel: "websocket".into(),
        chat_id: "c".into(),
        reply_to: reply_to.map(Into::into),
        kind: OutboundKind::Delta("t".into()),
        cursor: None,
        turn: None,
    };
    assert_eq!(
        ServerFrame::outbound_json(message(Some("m-1")), 7, |_| None),
        r#"{"type":"delta","chat_id":"c","text":"t","reply_to":"m-1","seq":7}"#
    );
    assert_eq!(
        ServerFrame::outbound_json(message(None), 8, |_| None),
        r#"{"type":"delta","chat_id":"c","text":"t","seq":8}"#
    );
    let quoted = ServerFrame::outbound_json(message(Some("m\"1")), 9, |_| None);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&quoted).expect("JSON")["reply_to"],
        "m\"1"
    );
}
