//! Reading a response body within limits, for every provider: a chunk must arrive within
//! the idle timeout of the one before, the body may not pass its byte cap, and one
//! server-sent event may not grow past its own cap while the parser buffers it.
//!
//! The checks sit on the byte stream itself, below the event parser: a parser that is fed
//! an endless event keeps reading without yielding, so checking between events would come
//! too late.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};

use crate::error::LlmError;
use crate::limits::ResponseLimits;

/// Why the byte stream ended early.
#[derive(Debug)]
enum BodyError {
    /// The transport failed.
    Transport(String),
    /// A limit was passed, or the server fell silent.
    Limit(LlmError),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(message) => f.write_str(message),
            Self::Limit(err) => err.fmt(f),
        }
    }
}

/// Bytes read, in all and since the last event; shared by the byte stream (which counts and
/// checks) and the event loop (which resets the per-event count).
#[derive(Default)]
struct Counts {
    total: AtomicUsize,
    since_event: AtomicUsize,
}

/// The body's chunks, each within `idle` of the last, ending with an error once
/// `max_bytes` in all or `max_pending` since the last event are passed.
fn guarded<S, B, E>(
    body: S,
    idle: Duration,
    max_bytes: usize,
    max_pending: usize,
    counts: Arc<Counts>,
) -> impl Stream<Item = Result<B, BodyError>>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::error::Error,
{
    futures::stream::unfold(Some(body), move |body| {
        let counts = counts.clone();
        async move {
            let mut body = body?;
            let item = match tokio::time::timeout(idle, body.next()).await {
                Err(_) => Err(BodyError::Limit(LlmError::Timeout {
                    what: "between two chunks of the response",
                    after: idle,
                    key: "idle_timeout_secs",
                })),
                Ok(None) => return None,
                Ok(Some(Err(err))) => Err(BodyError::Transport(error_chain(&err))),
                Ok(Some(Ok(chunk))) => {
                    let len = chunk.as_ref().len();
                    let total = counts.total.fetch_add(len, Ordering::Relaxed) + len;
                    let pending = counts.since_event.fetch_add(len, Ordering::Relaxed) + len;
                    if total > max_bytes {
                        Err(BodyError::Limit(too_large_body(max_bytes)))
                    } else if pending > max_pending {
                        Err(BodyError::Limit(LlmError::TooLarge {
                            what: "single streamed event",
                            limit: max_pending,
                            key: "max_reply_bytes",
                        }))
                    } else {
                        Ok(chunk)
                    }
                }
            };
            // After an error the stream ends: nothing more is read.
            let next = if item.is_ok() { Some(body) } else { None };
            Some((item, next))
        }
    })
}

fn too_large_body(limit: usize) -> LlmError {
    LlmError::TooLarge {
        what: "body",
        limit,
        key: "max_response_bytes",
    }
}

/// Reads a whole body of at most `max_bytes`, each chunk within `idle` of the last.
pub(crate) async fn read_whole<S, B, E>(
    body: S,
    idle: Duration,
    max_bytes: usize,
) -> Result<Vec<u8>, LlmError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::error::Error,
{
    let counts = Arc::new(Counts::default());
    let mut chunks = std::pin::pin!(guarded(body, idle, max_bytes, usize::MAX, counts));
    let mut out = Vec::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(chunk) => out.extend_from_slice(chunk.as_ref()),
            Err(BodyError::Limit(err)) => return Err(err),
            Err(BodyError::Transport(message)) => return Err(LlmError::Stream(message)),
        }
    }
    Ok(out)
}

/// Reads the start of a body (an error's explanation): at most `max_bytes`, the rest left
/// unread; whatever fails just ends the text.
pub(crate) async fn read_prefix<S, B, E>(body: S, idle: Duration, max_bytes: usize) -> String
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::error::Error,
{
    let counts = Arc::new(Counts::default());
    let mut chunks = std::pin::pin!(guarded(body, idle, usize::MAX, usize::MAX, counts));
    let mut out = Vec::new();
    while let Some(Ok(chunk)) = chunks.next().await {
        out.extend_from_slice(chunk.as_ref());
        if out.len() >= max_bytes {
            out.truncate(max_bytes);
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The server-sent events of a body, read within `limits`, each chunk within `idle` of the
/// last. Calls `on_event` for each event's data, in order, until it returns `Ok(false)`
/// (done), an error, or the body ends.
pub(crate) async fn read_sse<S, B, E, F>(
    body: S,
    idle: Duration,
    limits: &ResponseLimits,
    mut on_event: F,
) -> Result<(), LlmError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::error::Error,
    F: FnMut(Event) -> Result<bool, LlmError>,
{
    let counts = Arc::new(Counts::default());
    let chunks = guarded(
        body,
        idle,
        limits.max_response_bytes,
        limits.max_event_bytes(),
        counts.clone(),
    );
    let mut events = std::pin::pin!(Box::pin(chunks).eventsource());
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(EventStreamError::Transport(BodyError::Limit(err))) => return Err(err),
            Err(EventStreamError::Transport(BodyError::Transport(message))) => {
                return Err(LlmError::Stream(message));
            }
            Err(err) => return Err(LlmError::Stream(err.to_string())),
        };
        counts.since_event.store(0, Ordering::Relaxed);
        if !on_event(event)? {
            break;
        }
    }
    Ok(())
}

pub(crate) use switchboard_core::error_chain;

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    fn chunks(parts: Vec<&'static str>) -> impl Stream<Item = Result<&'static str, Infallible>> {
        futures::stream::iter(parts.into_iter().map(Ok))
    }

    #[derive(Debug)]
    struct Never;
    impl std::fmt::Display for Never {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("never")
        }
    }
    impl std::error::Error for Never {}

    fn limits(max_response_bytes: usize, max_reply_bytes: usize) -> ResponseLimits {
        ResponseLimits {
            max_response_bytes,
            max_reply_bytes,
            max_tool_arguments_bytes: 0,
        }
    }

    #[tokio::test]
    async fn events_are_parsed_across_chunk_boundaries() {
        let body = chunks(vec!["data: a", "b\n\nda", "ta: c\n\n"]);
        let mut seen = Vec::new();
        read_sse(body, Duration::from_secs(1), &limits(1000, 100), |event| {
            seen.push(event.data);
            Ok(true)
        })
        .await
        .expect("read");
        assert_eq!(seen, ["ab", "c"]);
    }

    #[tokio::test]
    async fn an_endless_event_is_cut_at_its_cap_while_it_arrives() {
        // One event that never ends: the parser would buffer it forever.
        let endless = futures::stream::repeat_with(|| Ok::<_, Never>("data: xxxxxxxxxx"));
        let mut events = 0;
        let err = read_sse(
            Box::pin(endless),
            Duration::from_secs(1),
            &limits(usize::MAX, 1000),
            |_| {
                events += 1;
                Ok(true)
            },
        )
        .await
        .expect_err("cut");
        assert!(matches!(err, LlmError::TooLarge { .. }), "{err}");
        assert_eq!(events, 0);
    }

    #[tokio::test]
    async fn an_endless_stream_of_events_is_cut_at_the_body_cap() {
        let endless = futures::stream::repeat_with(|| Ok::<_, Never>("data: x\n\n"));
        let err = read_sse(
            Box::pin(endless),
            Duration::from_secs(1),
            &limits(100_000, 100),
            |_| Ok(true),
        )
        .await
        .expect_err("cut");
        assert!(
            matches!(
                err,
                LlmError::TooLarge {
                    key: "max_response_bytes",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out_between_chunks() {
        let stalled = chunks(vec!["data: a\n\n"]).chain(futures::stream::pending());
        let err = read_sse(
            Box::pin(stalled),
            Duration::from_secs(5),
            &limits(1000, 100),
            |_| Ok(true),
        )
        .await
        .expect_err("stall");
        assert!(matches!(err, LlmError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("idle_timeout_secs"), "{err}");
    }

    #[tokio::test]
    async fn a_whole_body_is_read_up_to_its_cap() {
        let body = chunks(vec!["12345", "67890"]);
        assert_eq!(
            read_whole(body, Duration::from_secs(1), 10)
                .await
                .expect("fits"),
            b"1234567890"
        );
        let err = read_whole(chunks(vec!["12345", "678901"]), Duration::from_secs(1), 10)
            .await
            .expect_err("too big");
        assert!(matches!(err, LlmError::TooLarge { limit: 10, .. }), "{err}");
        let prefix = read_prefix(chunks(vec!["12345", "67890"]), Duration::from_secs(1), 7).await;
        assert_eq!(prefix, "1234567");
    }
}
