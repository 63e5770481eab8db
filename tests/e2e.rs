//! End-to-end tests of the switchboard daemon: the real daemon (in-process on
//! 127.0.0.1:0, or the binary itself) against the testkit's scripted LLM, driven through
//! WebSocket clients the way a user's client would, over real sockets. Nothing here
//! reaches the internet.

/// Headless Chromium over the DevTools protocol, for the web page tests.
mod browser;
/// Helpers: the test daemon, the WebSocket client, history invariants.
mod util;

/// The agent loop: both providers, a provider switch, failover, the token budget,
/// verification, cut / malformed / empty responses.
/// The control panel: its own token, masked secrets, sessions, reload, pairing in Chromium.
mod admin;
mod agent_loop;
/// Several agents: bindings, each agent's persona, workspace, sessions and tools.
mod agents;
/// The binary: SIGTERM during a turn, right after start and under load; config errors;
/// the terminal agent.
mod binary;
/// The built-in tools through the daemon: skills, files, escapes refused, `exec` confined
/// and without secrets, kill -9 during a command.
mod builtin;
/// The cluster under a seeded nemesis (kill -9, NATS restarts, a worker paused past its
/// lease): nothing lost, nothing twice, no hole in a transcript, each due time once.
#[cfg(feature = "cluster")]
mod chaos;
/// A message in, the reply out: streaming, several chats and sockets, commands.
mod chat;
/// A cluster on a real nats-server: a gateway and workers as separate processes, failover.
#[cfg(feature = "cluster")]
mod cluster;
/// The cluster's fencing: a partition taken back, a worker paused past its lease — no
/// stale session answered from or written to.
#[cfg(feature = "cluster")]
mod cluster_faults;
/// One bot on two gateways of a cluster: the standby takes a killed gateway's connection over.
#[cfg(feature = "cluster")]
mod cluster_gateways;
/// Memory search on a cluster: every member's index of the shared chats, each message found
/// once across compaction, `/new`, kill -9, a NATS restart and a rebuild.
#[cfg(feature = "cluster")]
mod cluster_memory;
/// The bus authenticated and encrypted: the example server config with a user per role and
/// TLS, strangers and forgeries refused, no password shown.
#[cfg(feature = "cluster")]
mod cluster_secure;
/// One suite run for every chat platform against its fake: replies, splits, streaming,
/// pairing, 429s held per chat, /stop, commands, files, kill -9.
mod conformance;
/// kill -9 at random moments (WebSocket tool turns, Telegram updates): nothing acknowledged is lost or doubled.
mod crash;
/// What only Discord does, against its fake gateway and REST API: mentions and servers,
/// fences in long replies, pings, resume, slash commands, a wrong token (the rest is in
/// `conformance`).
mod discord;
/// One chat never holds up another; floods are refused; `/stop` acts at once.
mod dispatch;
/// What only email does, on a real Dovecot and an SMTP sink: threads and quotes, HTML,
/// strangers and robots unanswered, the mail size cap, Dovecot restarting (the rest is in
/// `conformance`).
#[cfg(feature = "email")]
mod email;
/// The shipped examples (configs, the one-machine cluster, the container recipe) read.
mod examples;
/// Google's Gemini API natively: a multi-step tool loop with parallel calls and their
/// thought signatures, a safety block, a refused key, a 429 failing over, Telegram streaming.
mod gemini;
/// Scheduled work in sessions of its own: what is worth saying posted, the heartbeat.
mod heartbeat;
/// The listener under abuse: DNS rebinding, slowloris, oversized frames.
mod http;
/// Images tools return (`read_file`'s, an MCP server's) shown to the model in its dialect.
mod images;
/// A misbehaving LLM: endless, huge, stalled, broken streams; repeated tool-call ids.
mod llm;
/// Matrix on a real Synapse: encryption across a restart, threads, invites, an access
/// token, the homeserver restarting.
#[cfg(feature = "matrix")]
mod matrix;
/// MCP servers over stdio: tools offered and called, only the entry's environment, a crash
/// and a restart, `/stop` mid-call.
#[cfg(feature = "mcp")]
mod mcp;
/// Calls to MCP tools: `/stop` mid-call, approvals, read-only tools side by side, timeouts.
#[cfg(feature = "mcp")]
mod mcp_calls;
/// Files and voice through the daemon: a file the agent sends on the WebSocket channel and
/// its signed link (the platforms' runs are in `conformance`).
mod media;
/// Memory that is found again: `memory_search`, recall and `/memory` over transcripts long out
/// of the window, agents kept apart, archived conversations, a rebuild, a kill mid-build.
mod memory;
/// `onboard`: the starter workspace, a config from flags, the service's tokens.
mod onboard;
/// A message delivered again is answered exactly once (ignored, resent, or taken up).
mod once;
/// What an operator reaches for: `/metrics`, `/readyz`.
mod operations;
/// A turn pausing on the person: approvals and `ask_user`.
mod pause;
/// Restart keeps the conversation; long conversations stay within the history limit.
mod persistence;
/// Auth, malformed frames, LLM errors (429, unreachable, missing key).
mod protocol;
/// SIGHUP's reload: an allow list, the tools, a key, an agent's model, prices and caps, live.
mod reload;
/// What `exec`'s commands cannot do: read the daemon's secrets, keep root's privileges,
/// outlive their call (through the daemon, and the sandbox helper by hand).
mod sandbox;
/// Scheduled work: a reminder asked for in a chat comes there once, as scheduled work.
mod scheduler;
/// The binary as a service: notify protocol, journald logs, credentials, status, SIGHUP.
mod service;
/// What only Signal does, against its fake signal-cli: the event stream broken and followed
/// again from the last event, the read receipt (the rest is in `conformance`).
#[cfg(feature = "signal")]
mod signal;
/// What only Slack does, against its fake Web API and Socket Mode: mentions and threads,
/// a disconnect, an envelope sent again, a wrong token (the rest is in `conformance`).
#[cfg(feature = "slack")]
mod slack;
/// Sub-agents: three at once answered together once, `/status` and `/stop` over them, a
/// parent waiting at one turn slot.
mod spawn;
/// `/stop` ends a turn at once and leaves a valid session.
mod stop;
/// Disk trouble (unwritable, full) and chat ids of any length.
mod storage;
/// What only Telegram does, against its fake Bot API: the offset, HTML in long replies,
/// revoking, a broken getMe, groups, refused HTML, photos as images, the webhook (the rest
/// is in `conformance`).
mod telegram;
/// The terminal agent in a pseudo-terminal: editing, history, paste, Ctrl-C.
mod terminal;
/// Tool calls: run concurrently, errors and unknown tools reach the model.
mod tools;
/// What the models cost: the daily caps (80 % told once, 100 % refused), `/usage`, a
/// scheduled run skipped, `switchboard usage`, `/metrics`, a kill -9 keeping the total.
mod usage;
/// The web chat page in headless Chromium: Markdown streaming, history, conversations,
/// approvals, stop, a phone's screen, XSS payloads.
mod web_page;
/// What a person sends from the page: kept while offline and sent once, over the limit,
/// files picked or pasted, the token prompt.
mod web_sending;
/// The page's voice notes (a fake microphone in Chromium) and the files the agent sends.
mod web_voice;
/// What only WhatsApp does, against its fake Graph API and Meta's signed webhook: the
/// signature and the verify handshake, the read mark, the 24-hour window (the rest is in
/// `conformance`).
#[cfg(feature = "whatsapp")]
mod whatsapp;
