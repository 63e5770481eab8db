//! What everything of a cluster is called on the server: streams, subjects, consumers and
//! buckets, all under the cluster's `name`; and which partition a session is on.

use std::fmt::Write;
use std::time::Duration;

use async_nats::jetstream::stream;
use switchboard_core::SessionKey;
use switchboard_core::wire::MAX_WIRE_BYTES;

/// How long the server remembers a published message's id, so a message published twice
/// (a platform's redelivery, a retried publish) is stored once.
pub(crate) const DEDUPE_WINDOW: Duration = Duration::from_secs(120);

/// How long an outbound message is kept for a gateway that is down.
const OUTBOUND_KEPT: Duration = Duration::from_secs(24 * 60 * 60);

/// The most outbound messages kept (the oldest go first). A count, not bytes: a byte limit
/// is reserved on the server's disk when the stream is made, and a server short of space
/// then refuses the stream.
const OUTBOUND_MESSAGES: i64 = 1_000_000;

/// The names of one cluster's things.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    prefix: String,
}

impl Names {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// Inbound messages, one subject per partition; a message is removed once its worker
    /// acknowledged it (a work queue).
    pub(crate) fn inbound_stream(&self, _partitions: u32) -> stream::Config {
        stream::Config {
            name: format!("{}_inbound", self.prefix),
            subjects: vec![format!("{}.in.*", self.prefix)],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: DEDUPE_WINDOW,
            max_message_size: wire_limit(),
            ..Default::default()
        }
    }

    pub(crate) fn inbound_stream_name(&self) -> String {
        format!("{}_inbound", self.prefix)
    }

    pub(crate) fn inbound_subject(&self, partition: u32) -> String {
        format!("{}.in.{partition}", self.prefix)
    }

    /// The durable consumer that reads a partition (recreated by each new owner).
    pub(crate) fn partition_consumer(&self, partition: u32) -> String {
        format!("p{partition}")
    }

    /// Outbound messages, one subject per channel; kept a day (at most a million) for a
    /// gateway that is down.
    pub(crate) fn outbound_stream(&self) -> stream::Config {
        stream::Config {
            name: self.outbound_stream_name(),
            subjects: vec![format!("{}.out.*", self.prefix)],
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            max_age: OUTBOUND_KEPT,
            max_messages: OUTBOUND_MESSAGES,
            duplicate_window: DEDUPE_WINDOW,
            discard: stream::DiscardPolicy::Old,
            max_message_size: wire_limit(),
            ..Default::default()
        }
    }

    pub(crate) fn outbound_stream_name(&self) -> String {
        format!("{}_outbound", self.prefix)
    }

    pub(crate) fn outbound_subject(&self, channel: &str) -> String {
        format!("{}.out.{}", self.prefix, token(channel))
    }

    /// The durable consumer that delivers a platform channel's messages.
    pub(crate) fn outbound_consumer(&self, channel: &str) -> String {
        format!("out-{}", token(channel).replace('%', "_"))
    }

    /// Sessions: one subject per session, compacted by rolling the subject up.
    pub(crate) fn sessions_stream(&self) -> stream::Config {
        stream::Config {
            name: self.sessions_stream_name(),
            subjects: vec![
                format!("{}.sessions.>", self.prefix),
                format!("{}.archive.>", self.prefix),
            ],
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            allow_rollup: true,
            allow_direct: true,
            max_message_size: wire_limit(),
            ..Default::default()
        }
    }

    pub(crate) fn sessions_stream_name(&self) -> String {
        format!("{}_sessions", self.prefix)
    }

    /// Every subject of the cluster (`NAME.>`).
    pub(crate) fn any_subject(&self) -> String {
        format!("{}.>", self.prefix)
    }

    /// Where `agent`'s sessions are (`…sessions.AGENT.>`).
    pub(crate) fn sessions_of(&self, agent: &str) -> String {
        format!("{}.sessions.{}", self.prefix, token(agent))
    }

    pub(crate) fn session_subject(&self, agent: &str, key: &SessionKey) -> String {
        format!("{}.{}", self.sessions_of(agent), token(key.as_str()))
    }

    pub(crate) fn archive_subject(&self, agent: &str, key: &SessionKey, millis: u128) -> String {
        format!(
            "{}.archive.{}.{}.{millis}",
            self.prefix,
            token(agent),
            token(key.as_str())
        )
    }

    /// The copies compaction keeps of the generations it replaces (`[memory]` on), one
    /// subject per generation. A stream of their own: in the sessions stream they would grow
    /// the stream every turn's conditional write goes to, and on NATS 2.9 that write costs
    /// more as the stream grows (twice the time of a turn after 500 turns of one chat,
    /// docs/benchmarks.md).
    pub(crate) fn history_stream(&self) -> stream::Config {
        stream::Config {
            name: self.history_stream_name(),
            subjects: vec![format!("{}.history.>", self.prefix)],
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            allow_direct: true,
            max_message_size: wire_limit(),
            ..Default::default()
        }
    }

    pub(crate) fn history_stream_name(&self) -> String {
        format!("{}_history", self.prefix)
    }

    /// Where `agent`'s history is (`…history.AGENT.>`).
    pub(crate) fn history_of(&self, agent: &str) -> String {
        format!("{}.history.{}.>", self.prefix, token(agent))
    }

    /// Where compaction keeps the generation of `key` that started at `generation` before it
    /// replaces it.
    pub(crate) fn history_subject(&self, agent: &str, key: &SessionKey, generation: u64) -> String {
        format!(
            "{}.history.{}.{}.{generation}",
            self.prefix,
            token(agent),
            token(key.as_str())
        )
    }

    /// The chat a subject of `agent`'s transcripts is of, and which of them it is; `None`
    /// for another subject.
    pub(crate) fn said_subject(&self, agent: &str, subject: &str) -> Option<(String, Said)> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix('.')?;
        let (kind, rest) = rest.split_once('.')?;
        let rest = rest.strip_prefix(&token(agent))?.strip_prefix('.')?;
        let (key, tail) = rest.split_once('.').unwrap_or((rest, ""));
        let said = match kind {
            "sessions" if tail.is_empty() => Said::Session,
            // History kept among the archives by the build before its stream (it never
            // shipped in a release, but a cluster may have run it).
            "archive" if tail.starts_with("history.") => Said::History,
            "archive" if !tail.is_empty() => Said::Archive,
            "history" if !tail.is_empty() => Said::History,
            _ => return None,
        };
        Some((untoken(key)?, said))
    }

    pub(crate) fn leases_bucket(&self) -> String {
        format!("{}_leases", self.prefix)
    }

    pub(crate) fn members_bucket(&self) -> String {
        format!("{}_members", self.prefix)
    }

    /// The documents every member shares (pairing, cursors, jobs, spending).
    pub(crate) fn state_bucket(&self) -> String {
        format!("{}_state", self.prefix)
    }

    /// Asked whether the agent may write to a chat of a channel unasked.
    /// The object store of files waiting for their channel.
    pub(crate) fn media_bucket(&self) -> String {
        format!("{}_media", self.prefix)
    }

    pub(crate) fn notify_subject(&self, channel: &str) -> String {
        format!("{}.notify.{}", self.prefix, token(channel))
    }
}

/// Which of a chat's transcripts a subject holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Said {
    /// The chat's session: its current generation.
    Session,
    /// A conversation `/new` closed.
    Archive,
    /// A generation compaction replaced.
    History,
}

/// The lease key of a partition.
pub(crate) fn partition_key(partition: u32) -> String {
    format!("p.{partition}")
}

/// The lease key of a duty only one member does at a time (`duty.scheduler`).
pub(crate) fn duty_key(duty: &str) -> String {
    format!("duty.{}", lease_token(duty))
}

/// The lease key of a platform channel's connection (a channel's name is letters, digits,
/// `-` and `_`; anything else is written `_`).
pub(crate) fn connection_key(channel: &str) -> String {
    format!("channel.{}", lease_token(channel))
}

/// A name as one token of a lease key: letters, digits and `-`; anything else `_`.
fn lease_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The partition a session's messages are on: a hash of its key that every build computes
/// alike (FNV-1a), modulo the partitions.
pub fn partition_of(key: &SessionKey, partitions: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.as_str().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(partitions.max(1))).unwrap_or(0)
}

/// `text` as one subject token: letters, digits, `-` and `_` kept, every other byte `%XX`
/// (so no `.`, `*`, `>` or space reaches a subject).
pub(crate) fn token(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    if out.is_empty() {
        out.push('%');
    }
    out
}

/// The text a [`token`] was made from; `None` when it is not one.
pub(crate) fn untoken(token: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(token.len());
    let mut rest = token.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2)?;
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

fn wire_limit() -> i32 {
    i32::try_from(MAX_WIRE_BYTES + 64 * 1024).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_carry_subject_syntax() {
        assert_eq!(token("telegram_42"), "telegram_42");
        assert_eq!(token("a.b*c>d e"), "a%2Eb%2Ac%3Ed%20e");
        assert_eq!(token(""), "%");
        for text in ["telegram_42", "slack_C1:17.5", "websocket_é ✓"] {
            assert_eq!(untoken(&token(text)).as_deref(), Some(text));
        }
    }

    #[test]
    fn what_was_said_is_told_by_its_subject() {
        let names = Names::new("sb");
        let key = SessionKey::from("web_a.b");
        let session = names.session_subject("main", &key);
        let archive = names.archive_subject("main", &key, 17);
        assert!(archive.starts_with("sb.archive."), "{archive}");
        let history = names.history_subject("main", &key, 5);
        assert!(history.starts_with("sb.history."), "{history}");
        for (subject, said) in [
            (session.clone(), Said::Session),
            (archive, Said::Archive),
            (history, Said::History),
            (
                "sb.archive.main.web_a%2Eb.history.5".to_owned(),
                Said::History,
            ),
        ] {
            assert_eq!(
                names.said_subject("main", &subject),
                Some(("web_a.b".to_owned(), said)),
                "{subject}"
            );
        }
        assert_eq!(names.said_subject("main", "sb.history.main.web"), None);
        assert_eq!(names.said_subject("other", &session), None);
        assert_eq!(names.said_subject("main", "sb.out.web"), None);
    }

    #[test]
    fn a_session_is_always_on_the_same_partition_and_sessions_spread() {
        let key = SessionKey::from("telegram_42");
        assert_eq!(partition_of(&key, 16), partition_of(&key, 16));
        // Fixed across builds: the value is part of the cluster's layout.
        assert_eq!(
            partition_of(&key, 16),
            partition_of(&SessionKey::from("telegram_42"), 16)
        );
        let mut seen = [0usize; 16];
        for chat in 0..1600 {
            let key = SessionKey::from(format!("websocket_chat-{chat}").as_str());
            seen[partition_of(&key, 16) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (50..=150).contains(&n)), "{seen:?}");
    }
}
