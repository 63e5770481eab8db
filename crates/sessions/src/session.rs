//! [`Session`]: the window of a conversation the agent sends to the model.

use std::collections::VecDeque;
use std::sync::Arc;

use switchboard_core::{ChatMessage, MessageId, SessionKey, Usage};

use crate::record::note_inbound;
use crate::store::{InboundState, Loaded, Revision, Snapshot};
use crate::trim::{repair, trim};

/// The last `limit` messages of one chat, always valid to send to a provider.
#[derive(Clone, Debug)]
pub struct Session {
    key: SessionKey,
    /// Shared with the requests built from it, so a turn copies pointers, not text.
    messages: VecDeque<Arc<ChatMessage>>,
    limit: usize,
    usage: Usage,
    /// The recent inbound messages (with a platform id) and how far each got, oldest first.
    inbound: Vec<(MessageId, InboundState)>,
    /// Records in the session's file; compaction is due when it outgrows the window.
    records: usize,
    /// Where the record stood after the last read or write: the next write is made after it.
    revision: Revision,
    /// A write was refused because another writer changed the record (see [`Revision`]):
    /// this picture of the session is out of date, and only a fresh read may be used.
    stale: bool,
    /// How many messages past `limit` the window may hold before it is trimmed: room for
    /// what leaves the window to be summarised in batches ([`Session::with_overflow`]).
    overflow: usize,
    /// The running summary of what left the window.
    summary: Option<String>,
}

impl Session {
    /// An empty session.
    pub fn new(key: SessionKey, limit: usize) -> Self {
        Self {
            key,
            messages: VecDeque::new(),
            limit: limit.max(2),
            usage: Usage::default(),
            inbound: Vec::new(),
            records: 0,
            revision: Revision::default(),
            stale: false,
            overflow: 0,
            summary: None,
        }
    }

    /// Lets the window hold up to `overflow` messages past its limit: what leaves it is then
    /// trimmed only by [`Session::summarized`], once it is in the summary (`[memory]
    /// summarize`), never by [`Session::extend`] below `limit + overflow`.
    pub fn with_overflow(mut self, overflow: usize) -> Self {
        self.overflow = overflow;
        trim(&mut self.messages, self.limit + self.overflow);
        self
    }

    /// The running summary of what left the window.
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// Whether the window holds more than its limit and what is past it should be summarised.
    pub fn overflowing(&self) -> bool {
        self.overflow > 0 && self.messages.len() > self.limit + self.overflow / 2
    }

    /// The messages trimming to the limit would drop (whole turns, oldest first): what a
    /// summary must take in before [`Session::summarized`].
    pub fn leaving(&self) -> Vec<Arc<ChatMessage>> {
        let mut kept = self.messages.clone();
        trim(&mut kept, self.limit);
        let gone = self.messages.len() - kept.len();
        self.messages.iter().take(gone).cloned().collect()
    }

    /// Takes `summary` as the running summary (of what [`Session::leaving`] named and all
    /// before it) and trims the window to its limit; the caller compacts with it next.
    pub fn summarized(&mut self, summary: String) {
        self.summary = Some(summary);
        trim(&mut self.messages, self.limit);
    }

    /// A session from what the store read back, repaired and trimmed.
    pub fn from_loaded(key: SessionKey, limit: usize, loaded: Loaded) -> Self {
        Self::from_loaded_with(key, limit, 0, loaded)
    }

    /// A session from what the store read back, its window allowed `overflow` messages past
    /// `limit` (see [`Session::with_overflow`]).
    pub fn from_loaded_with(
        key: SessionKey,
        limit: usize,
        overflow: usize,
        loaded: Loaded,
    ) -> Self {
        let mut session = Self::new(key, limit);
        session.overflow = overflow;
        session.messages = repair(loaded.messages).into_iter().map(Arc::new).collect();
        trim(&mut session.messages, session.limit + overflow);
        session.usage = loaded.usage;
        session.summary = loaded.summary;
        session.inbound = loaded.inbound;
        session.records = loaded.records;
        session.revision = loaded.revision;
        session
    }

    /// Where the record stood after the last read or write.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Notes the result of a write made after [`Session::revision`]: its new revision, or —
    /// when the store refused it as stale — that this session must be read again.
    pub fn note_write(
        &mut self,
        written: Result<Revision, crate::StoreError>,
    ) -> Result<(), crate::StoreError> {
        match written {
            Ok(revision) => {
                self.revision = revision;
                Ok(())
            }
            Err(crate::StoreError::Stale) => {
                self.stale = true;
                Err(crate::StoreError::Stale)
            }
            Err(err) => Err(err),
        }
    }

    /// Whether a write was refused as stale: what this session holds is out of date.
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// How far the inbound message `id` got, if this chat has seen it recently.
    pub fn inbound(&self, id: &MessageId) -> Option<&InboundState> {
        self.inbound
            .iter()
            .find(|(known, _)| known == id)
            .map(|(_, state)| state)
    }

    /// Notes how far an inbound message got (already persisted).
    pub fn note_inbound(&mut self, id: MessageId, state: InboundState) {
        note_inbound(&mut self.inbound, id, state);
        self.records += 1;
    }

    /// What the file is rewritten with when it is compacted.
    pub fn snapshot<'a>(&'a self, messages: &'a [ChatMessage]) -> Snapshot<'a> {
        Snapshot {
            messages,
            usage: self.usage,
            inbound: &self.inbound,
            summary: self.summary.as_deref(),
        }
    }

    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &VecDeque<Arc<ChatMessage>> {
        &self.messages
    }

    /// The history for a request (shared, not copied).
    pub fn history(&self) -> Vec<Arc<ChatMessage>> {
        self.messages.iter().cloned().collect()
    }

    /// How many messages are kept.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Tokens spent over the session's life.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Appends the messages of a turn (already persisted) and trims.
    pub fn extend(&mut self, messages: impl IntoIterator<Item = Arc<ChatMessage>>) {
        let before = self.messages.len();
        self.messages.extend(messages);
        self.records += self.messages.len() - before;
        trim(&mut self.messages, self.limit + self.overflow);
    }

    /// Adds a turn's token usage (already persisted).
    pub fn add_usage(&mut self, usage: Usage) {
        self.usage += usage;
        self.records += 1;
    }

    /// Forgets everything (for `/new`, after the store archived the file).
    pub fn clear(&mut self) {
        self.messages.clear();
        self.usage = Usage::default();
        self.inbound.clear();
        self.records = 0;
        self.summary = None;
    }

    /// Whether the file holds so many records beyond the window that it should be
    /// rewritten: more than three windows' worth.
    pub fn needs_compaction(&self) -> bool {
        self.records > self.limit * 3 + 8
    }

    /// Notes that the store rewrote the file with [`Session::snapshot`].
    pub fn compacted(&mut self) {
        self.records = self.messages.len() + 1 + self.inbound.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_trims_to_the_limit_by_whole_turns() {
        let mut session = Session::new("s".into(), 4);
        for i in 0..5 {
            session.extend([
                ChatMessage::user(format!("q{i}")).into(),
                ChatMessage::assistant("a").into(),
            ]);
        }
        assert_eq!(session.len(), 4);
        assert_eq!(*session.messages()[0], ChatMessage::user("q3"));
    }

    #[test]
    fn with_an_overflow_what_leaves_is_named_and_trimmed_only_once_summarised() {
        let turns = |n: usize| {
            (0..n)
                .flat_map(|i| {
                    [
                        ChatMessage::user(format!("q{i}")),
                        ChatMessage::assistant(format!("a{i}")),
                    ]
                })
                .map(Arc::new)
                .collect::<Vec<_>>()
        };
        let mut session = Session::new("s".into(), 4).with_overflow(4);
        session.extend(turns(4));
        assert_eq!(session.len(), 8, "within the overflow: nothing trimmed");
        assert!(session.overflowing(), "past half the overflow");
        let leaving: Vec<String> = session
            .leaving()
            .iter()
            .map(|m| m.model_text().into_owned())
            .collect();
        assert_eq!(leaving, ["q0", "a0", "q1", "a1"]);
        session.summarized("q0 was asked".into());
        assert_eq!(session.len(), 4);
        assert_eq!(session.summary(), Some("q0 was asked"));
        assert_eq!(session.snapshot(&[]).summary, Some("q0 was asked"));
        // Past the overflow itself, trimming happens anyway.
        session.extend(turns(5));
        assert_eq!(session.len(), 8);
        session.clear();
        assert_eq!(session.summary(), None);
    }

    #[test]
    fn loading_repairs_and_trims() {
        let loaded = Loaded {
            messages: vec![
                ChatMessage::assistant("orphan"),
                ChatMessage::user("q1"),
                ChatMessage::assistant("a1"),
                ChatMessage::user("q2"),
                ChatMessage::assistant("a2"),
            ],
            usage: Usage::new(3, 4),
            inbound: Vec::new(),
            records: 5,
            revision: Revision(7),
            summary: None,
        };
        let session = Session::from_loaded("s".into(), 2, loaded);
        assert_eq!(
            session.history(),
            vec![
                ChatMessage::user("q2").into(),
                ChatMessage::assistant("a2").into()
            ]
        );
        assert_eq!(session.usage().output_tokens, 4);
        assert_eq!(
            session.revision(),
            Revision(7),
            "the next write is made after it"
        );
    }

    #[test]
    fn a_stale_write_marks_the_session_out_of_date_and_others_do_not() {
        let mut session = Session::new("s".into(), 4);
        assert!(session.note_write(Ok(Revision(3))).is_ok());
        assert_eq!(session.revision(), Revision(3));
        let failed = std::io::Error::other("disk full");
        let io = crate::StoreError::Io {
            path: "f".into(),
            source: failed,
        };
        assert!(session.note_write(Err(io)).is_err());
        assert!(!session.is_stale(), "a failed write is not a stale one");
        assert!(matches!(
            session.note_write(Err(crate::StoreError::Stale)),
            Err(crate::StoreError::Stale)
        ));
        assert!(session.is_stale());
        assert_eq!(session.revision(), Revision(3));
    }

    #[test]
    fn compaction_is_due_after_several_windows() {
        let mut session = Session::new("s".into(), 2);
        for _ in 0..8 {
            session.extend([
                ChatMessage::user("q").into(),
                ChatMessage::assistant("a").into(),
            ]);
        }
        assert!(session.needs_compaction());
        session.compacted();
        assert!(!session.needs_compaction());
    }
}
