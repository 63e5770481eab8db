//! The memory index over generated transcripts: how long a build from scratch takes, its
//! size per MB of transcript, and how fast queries answer — at each corpus size asked for
//! (messages), in this process through `switchboard-memory` (what `switchboard memory
//! reindex` and the daemon's reader run). Idle cost is the daemon's, in `main.rs`.
//!
//! The corpus is written as the session store writes it (one JSON line a message, with its
//! time), 100 chats sharing it, user and assistant lines alternating; their words are drawn
//! from a 20,000-word vocabulary by a Zipf-like rule, so a few words are everywhere and
//! most are rare, as in conversation. Queries are one or two words drawn the same way.

use std::io::Write;
use std::time::Instant;

use anyhow::Context;
use switchboard_core::{AgentName, MemoryQuery, MemoryScope};

/// What one corpus measured.
#[derive(Debug)]
pub struct MemoryRun {
    pub transcript_bytes: u64,
    pub index_bytes: u64,
    pub build_secs: f64,
    pub query_us: Vec<f64>,
}

const VOCABULARY: usize = 20_000;
const CHATS: usize = 100;

/// A small deterministic generator (no dependency for a bench's words).
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A word, rank-weighted: rank r with probability about 1/r.
    fn word(&mut self) -> String {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let rank = (VOCABULARY as f64).powf(unit) as usize;
        format!("w{}", rank.min(VOCABULARY))
    }
}

/// Builds a corpus of `messages` under `dir/sessions`, indexes it from scratch and queries it.
pub fn run(dir: &std::path::Path, messages: usize, queries: usize) -> anyhow::Result<MemoryRun> {
    let sessions = dir.join("sessions");
    std::fs::create_dir_all(&sessions)?;
    let mut words = Words(0x9e37_79b9_7f4a_7c15);
    let mut files: Vec<std::io::BufWriter<std::fs::File>> = (0..CHATS)
        .map(|chat| {
            std::fs::File::create(sessions.join(format!("websocket_c{chat}.jsonl")))
                .map(std::io::BufWriter::new)
        })
        .collect::<Result<_, _>>()?;
    let start_at = 1_780_000_000_000i64;
    for i in 0..messages {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let count = 8 + (words.next() % 30) as usize;
        let content: Vec<String> = (0..count).map(|_| words.word()).collect();
        let line = serde_json::json!({"role": role, "content": content.join(" "), "at": start_at + i as i64 * 1000});
        let file = &mut files[(i / 2) % CHATS];
        serde_json::to_writer(&mut *file, &line)?;
        file.write_all(b"\n")?;
    }
    for mut file in files {
        file.flush()?;
    }
    let transcript_bytes = std::fs::read_dir(&sessions)?
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    let home = switchboard_memory::Home {
        agent: AgentName::default(),
        state_dir: dir.to_owned(),
        workspace: dir.join("workspace"),
        shared: false,
    };
    let started = Instant::now();
    let counts = switchboard_memory::reindex(&home, |_| {}).context("reindex")?;
    let build_secs = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        counts.entries == messages as u64,
        "indexed {} of {messages}",
        counts.entries
    );
    let reader = switchboard_memory::Reader::open(&home.database())?;
    let mut query_us = Vec::with_capacity(queries);
    let mut draw = Words(0x1234_5678_9abc_def1);
    for i in 0..queries {
        let text = if i % 2 == 0 {
            draw.word()
        } else {
            format!("{} {}", draw.word(), draw.word())
        };
        let query = MemoryQuery::new(text, MemoryScope::All);
        let started = Instant::now();
        reader.search(&query)?;
        query_us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(MemoryRun {
        transcript_bytes,
        index_bytes: counts.bytes,
        build_secs,
        query_us,
    })
}
