//! Properties of reading responses, over random shapes: SSE parses the same however the
//! bytes are split; no chunk sequence or body — garbage, tool-call fragments with any
//! index, id or argument shape — panics the reader; and what comes out stays within the
//! limits, with an id for every call.
//!
//! Case counts: proptest's default (256), or `PROPTEST_CASES`.

use std::convert::Infallible;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::body::read_sse;
use crate::limits::ResponseLimits;
use crate::openai::parse_whole;
use crate::openai::stream::{Assembler, MAX_TOOL_CALLS};
use crate::openai::wire::Chunk;

fn limits() -> ResponseLimits {
    ResponseLimits {
        max_response_bytes: 1 << 20,
        max_reply_bytes: 256,
        max_tool_arguments_bytes: 256,
    }
}

/// Splits `bytes` at the given points (taken modulo its length).
fn split(bytes: &[u8], points: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = points.iter().map(|p| p % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for point in points {
        pieces.push(bytes[start..point].to_vec());
        start = point;
    }
    pieces.push(bytes[start..].to_vec());
    pieces
}

fn events_of(pieces: Vec<Vec<u8>>) -> Result<Vec<String>, crate::LlmError> {
    let body = futures::stream::iter(pieces.into_iter().map(Ok::<_, Infallible>));
    let mut seen = Vec::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(read_sse(
        body,
        Duration::from_secs(5),
        &ResponseLimits::default(),
        |event| {
            seen.push(event.data);
            Ok(true)
        },
    ))?;
    Ok(seen)
}

/// A JSON value of the shapes stream chunks take, with wrong types mixed in.
fn fragment() -> impl Strategy<Value = Value> {
    let id = prop_oneof![
        Just(Value::Null),
        Just(json!("a")),
        Just(json!("b")),
        Just(json!("")),
        Just(json!(7))
    ];
    let index = prop_oneof![
        Just(Value::Null),
        (0u64..4).prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
    ];
    let arguments = prop_oneof![
        "[{}\":a-z0-9]{0,12}".prop_map(Value::from),
        Just(json!({"k": 1})),
        Just(Value::Null),
    ];
    let name = prop_oneof![Just(Value::Null), "[a-z]{0,6}".prop_map(Value::from)];
    (id, index, arguments, name).prop_map(|(id, index, arguments, name)| {
        json!({"index": index, "id": id, "function": {"name": name, "arguments": arguments}})
    })
}

fn chunk() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[ -~]{0,40}".prop_map(|text| json!({"choices": [{"delta": {"content": text}}]})),
        prop::collection::vec(fragment(), 0..3)
            .prop_map(|calls| json!({"choices": [{"delta": {"tool_calls": calls}}]})),
        Just(json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})),
        Just(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})),
        Just(json!({"choices": [{"delta": null}]})),
        Just(json!({"error": {"message": "overloaded"}})),
        Just(json!({"choices": "not a list"})),
        Just(json!([1, 2, 3])),
    ]
}

proptest! {
    #[test]
    fn sse_parses_the_same_however_the_bytes_are_split(
        datas in prop::collection::vec("[ -~]{0,30}", 1..8),
        points in prop::collection::vec(any::<usize>(), 0..12),
        crlf in any::<bool>(),
    ) {
        let newline = if crlf { "\r\n" } else { "\n" };
        let text: String = datas
            .iter()
            .map(|data| format!("data: {data}{newline}{newline}"))
            .collect();
        let whole = events_of(vec![text.clone().into_bytes()]).expect("whole");
        let pieces = events_of(split(text.as_bytes(), &points)).expect("split");
        prop_assert_eq!(&whole, &pieces);
        let expected: Vec<String> = datas.iter().map(|d| d.trim_start().to_owned()).collect();
        prop_assert_eq!(whole.iter().map(|d| d.trim_start().to_owned()).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn any_bytes_as_a_stream_end_in_events_or_an_error_never_a_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        points in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let _ = events_of(split(&bytes, &points));
    }

    #[test]
    fn any_chunks_assemble_within_the_limits_or_fail_cleanly(
        chunks in prop::collection::vec(chunk(), 0..16),
    ) {
        let mut assembler = Assembler::new(limits());
        let mut failed = false;
        for value in chunks {
            let Ok(chunk) = serde_json::from_value::<Chunk>(value) else { continue };
            if assembler.push(chunk).is_err() {
                failed = true;
                break;
            }
        }
        if !failed && let Ok(response) = assembler.finish() {
            prop_assert!(response.content.len() <= limits().max_reply_bytes);
            prop_assert!(response.tool_calls.len() <= MAX_TOOL_CALLS);
            for call in &response.tool_calls {
                prop_assert!(!call.id.is_empty());
            }
        }
    }

    #[test]
    fn any_whole_body_parses_or_fails_cleanly(
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            chunk().prop_map(|c| c.to_string().into_bytes()),
            "[ -~]{0,300}".prop_map(|text| json!({"choices": [{"message": {"content": text}}]}).to_string().into_bytes()),
        ],
    ) {
        if let Ok(response) = parse_whole(&body, &limits()) {
            prop_assert!(response.content.len() <= limits().max_reply_bytes);
        }
    }
}
