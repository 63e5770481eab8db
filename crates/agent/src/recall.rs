//! Recall: before a turn, what the agent's memory holds that bears on the new message — said
//! long ago, or in another chat — goes into the request as a marked block with its dates.
//!
//! The message's words are searched for as alternatives (any may match; the index ranks the
//! hits by how well they match), hits the window already holds are left out (the model
//! sees those anyway), and so is `MEMORY.md` (the system prompt carries it whole). The
//! block is cut to the configured token budget, whole hits only. It is added to the
//! request's copy of the new message, never to the saved one: the next turn's history is
//! what was said, and a provider's cached prefix of it stays valid.

use std::sync::Arc;

use switchboard_core::{
    AgentName, ChatMessage, Memory, MemoryHit, MemoryQuery, MemoryScope, SessionKey, cut_at,
};

/// An agent's memory, and how much of it is recalled by itself.
#[derive(Clone, Debug)]
pub struct AgentMemory {
    /// The index.
    pub memory: Arc<dyn Memory>,
    /// Hits recalled before a turn (0: none).
    pub recall: usize,
    /// The most tokens the recalled block takes (about four bytes a token).
    pub recall_max_tokens: usize,
    /// Hits `/memory` shows.
    pub max_results: usize,
}

/// The most words of a message searched for.
const MAX_WORDS: usize = 16;

/// Words too common to search for (their hits say nothing of the message).
const COMMON: [&str; 40] = [
    "the", "and", "for", "are", "but", "not", "you", "your", "all", "any", "can", "had", "her",
    "was", "one", "our", "out", "has", "his", "how", "its", "who", "did", "get", "him", "she",
    "too", "use", "that", "this", "with", "have", "from", "they", "what", "when", "were", "will",
    "would", "there",
];

/// The search that recalls for `text`: its distinctive words (three letters or more, not
/// [`COMMON`]), each quoted, any of them matching.
pub(crate) fn recall_query(text: &str) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if word.chars().count() < 3 || COMMON.contains(&word.as_str()) || words.contains(&word) {
            continue;
        }
        words.push(word);
        if words.len() == MAX_WORDS {
            break;
        }
    }
    if words.is_empty() {
        return None;
    }
    Some(
        words
            .iter()
            .map(|word| format!("\"{word}\""))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

/// The recalled block for `hits`: those not in `window` (by their text) nor from
/// `MEMORY.md`, at most `count`, within `max_bytes`; `None` when none is left.
pub(crate) fn recalled_block(
    hits: &[MemoryHit],
    window: &[Arc<ChatMessage>],
    count: usize,
    max_bytes: usize,
) -> Option<String> {
    let in_window = |hit: &MemoryHit| {
        window.iter().any(|message| {
            let content = match &**message {
                ChatMessage::User { content, .. } | ChatMessage::Assistant { content, .. } => {
                    content
                }
                ChatMessage::Tool { .. } => return false,
            };
            cut_at(content.trim(), MemoryHit::MAX_TEXT) == hit.text
        })
    };
    let mut lines = Vec::new();
    let mut used = 0;
    for hit in hits {
        if lines.len() == count {
            break;
        }
        if (hit.file && hit.place == "MEMORY.md") || in_window(hit) {
            continue;
        }
        let line = hit.line();
        if used + line.len() > max_bytes {
            break;
        }
        used += line.len() + 1;
        lines.push(line);
    }
    if lines.is_empty() {
        return None;
    }
    Some(format!(
        "[Recalled from memory: earlier messages that may bear on this one, with their dates; \
         not part of this conversation]\n{}\n[End of recalled memory]",
        lines.join("\n")
    ))
}

impl AgentMemory {
    /// What is recalled for the last user message of `messages` (the request's: history and
    /// the new message), or `None`: recall off, nothing found, the index failing (logged —
    /// a turn never fails for it).
    pub(crate) async fn recall(
        &self,
        agent: &AgentName,
        session: &SessionKey,
        messages: &[Arc<ChatMessage>],
    ) -> Option<String> {
        if self.recall == 0 {
            return None;
        }
        let text = messages.iter().rev().find_map(|m| match &**m {
            ChatMessage::User { content, .. } => Some(content.as_str()),
            _ => None,
        })?;
        let mut query = MemoryQuery::new(recall_query(text)?, MemoryScope::All);
        // Room for what the window holds, which is left out.
        query.limit = (self.recall * 3 + 4).min(MemoryQuery::MAX_LIMIT);
        match self.memory.search(agent, query).await {
            Ok(hits) => recalled_block(&hits, messages, self.recall, self.recall_max_tokens * 4),
            Err(err) => {
                tracing::warn!(session = %session, error = %err, "recall found nothing: the memory index failed");
                None
            }
        }
    }
}

/// `messages` with `block` put before the text of the last user message (a copy: the saved
/// message is not changed).
pub(crate) fn with_recalled(messages: &mut [Arc<ChatMessage>], block: &str) {
    let Some(last) = messages
        .iter_mut()
        .rev()
        .find(|m| matches!(&***m, ChatMessage::User { .. }))
    else {
        return;
    };
    let mut message = (**last).clone();
    if let ChatMessage::User { content, .. } = &mut message {
        *content = format!("{block}\n\n{content}");
    }
    *last = Arc::new(message);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(text: &str, place: &str, file: bool) -> MemoryHit {
        MemoryHit {
            place: place.into(),
            file,
            at: Some(1_796_148_270_000),
            who: "user".into(),
            snippet: text.replace("locker", "**locker**"),
            text: text.into(),
            archived: false,
        }
    }

    #[test]
    fn the_query_is_the_messages_distinctive_words() {
        assert_eq!(
            recall_query("What was the code of my Locker? the locker!").as_deref(),
            Some("\"code\" OR \"locker\"")
        );
        assert_eq!(recall_query("ok, is it?"), None);
    }

    #[test]
    fn hits_in_the_window_and_memory_md_are_left_out_and_the_budget_holds() {
        let window = vec![Arc::new(ChatMessage::user("  my locker is 12  "))];
        let hits = vec![
            hit("my locker is 12", "telegram_1", false),
            hit("locker notes", "MEMORY.md", true),
            hit("the locker code is 4711", "telegram_1", false),
            hit("locker in memory/places.md", "memory/places.md", true),
            hit(&"locker ".repeat(100), "telegram_1", false),
        ];
        let block = recalled_block(&hits, &window, 5, 200).expect("a block");
        assert_eq!(
            block.lines().skip(1).collect::<Vec<_>>(),
            [
                "[2026-12-01 18:04 UTC, telegram_1, user] the **locker** code is 4711",
                "[2026-12-01 18:04 UTC, memory/places.md] **locker** in memory/places.md",
                "[End of recalled memory]"
            ]
        );
        assert_eq!(recalled_block(&hits[..2], &window, 5, 200), None);
        let one = recalled_block(&hits, &window, 1, 200).expect("a block");
        assert_eq!(one.lines().count(), 3);
    }

    #[test]
    fn the_block_goes_into_a_copy_of_the_last_user_message() {
        let saved = Arc::new(ChatMessage::user("where is it?"));
        let mut messages = vec![Arc::new(ChatMessage::user("first")), saved.clone()];
        with_recalled(&mut messages, "[block]");
        assert_eq!(*messages[1], ChatMessage::user("[block]\n\nwhere is it?"));
        assert_eq!(*saved, ChatMessage::user("where is it?"));
        assert_eq!(*messages[0], ChatMessage::user("first"));
    }
}
