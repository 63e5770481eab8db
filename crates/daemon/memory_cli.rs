//! `switchboard memory search|reindex|stats`: the agents' memory index from the command
//! line, over the config's state directory — while the daemon runs or not (SQLite lets both
//! write, one transaction at a time, and each reads on from what the other committed). Run it
//! as the daemon's user.

use std::process::ExitCode;

use anyhow::Context;
use switchboard_core::{AgentName, MemoryQuery, MemoryScope, SessionKey, memory_lines, parse_utc};
use switchboard_memory::Home;

use crate::cli::{MemoryAction, resolve_config};
use crate::config::{Config, Secrets};

/// Runs `switchboard memory ACTION`.
pub fn run(config: Option<&std::path::Path>, action: MemoryAction) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    let config = Config::load_with(&path, Secrets::Skip)?;
    let homes = homes(&config);
    let out = &mut std::io::stdout().lock();
    match action {
        MemoryAction::Search {
            query,
            agent,
            chat,
            since,
            until,
            limit,
        } => {
            let home = pick(&homes, agent.as_deref())?;
            let text = query.join(" ");
            let time = |value: Option<String>, name: &str| -> anyhow::Result<Option<i64>> {
                value
                    .map(|text| {
                        parse_utc(&text).with_context(|| {
                            format!("--{name} is a UTC date or time like 2026-11-30, not {text:?}")
                        })
                    })
                    .transpose()
            };
            let search = MemoryQuery {
                scope: match chat {
                    Some(chat) => MemoryScope::Chat(SessionKey::from(chat)),
                    None => MemoryScope::All,
                },
                since: time(since, "since")?,
                until: time(until, "until")?,
                limit: limit.clamp(1, MemoryQuery::MAX_LIMIT),
                text: text.clone(),
            };
            let hits = switchboard_memory::search_now(home, &search)?;
            writeln(out, &memory_lines(&text, &hits))?;
        }
        MemoryAction::Reindex { agent } => {
            for home in homes.iter().filter(|home| {
                agent
                    .as_deref()
                    .is_none_or(|name| home.agent.as_str() == name)
            }) {
                let started = std::time::Instant::now();
                let counts = switchboard_memory::reindex(home, |_| {})
                    .with_context(|| format!("reindexing agent {}", home.agent))?;
                if home.shared {
                    // The chats are the cluster's: a running member follows them in again.
                    writeln(
                        out,
                        &format!(
                            "agent {}: index cleared; this member's daemon builds it again \
                             from the cluster's sessions stream (at its start, or when it \
                             runs, as the next message is stored)",
                            home.agent
                        ),
                    )?;
                    continue;
                }
                writeln(
                    out,
                    &format!(
                        "agent {}: {} entries from {} files ({} chats) in {:.1} s, {} on disk",
                        home.agent,
                        counts.entries,
                        counts.files,
                        counts.sessions,
                        started.elapsed().as_secs_f64(),
                        size(counts.bytes)
                    ),
                )?;
            }
        }
        MemoryAction::Stats => {
            if !config.memory.enabled {
                writeln(
                    out,
                    "[memory] is off (memory.enabled = false): nothing is indexed.",
                )?;
            }
            for home in &homes {
                let line = match switchboard_memory::counts(home)? {
                    None => format!("agent {}: no index yet", home.agent),
                    Some(counts) => format!(
                        "agent {}: {} entries ({} archived) from {} files, {} chats, {} on disk",
                        home.agent,
                        counts.entries,
                        counts.archived,
                        counts.files,
                        counts.sessions,
                        size(counts.bytes)
                    ),
                };
                writeln(out, &line)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Every agent's index, as the daemon keeps it.
fn homes(config: &Config) -> Vec<Home> {
    config
        .agent_specs()
        .iter()
        .map(|spec| Home {
            agent: spec.name.clone(),
            state_dir: spec.state_dir.clone(),
            workspace: spec.workspace.clone(),
            shared: on_a_cluster(config),
        })
        .collect()
}

/// Whether the config's sessions are a cluster's (a build without the cluster has none).
fn on_a_cluster(config: &Config) -> bool {
    #[cfg(feature = "cluster")]
    return config.cluster.is_some();
    #[cfg(not(feature = "cluster"))]
    {
        let _ = config;
        false
    }
}

fn pick<'a>(homes: &'a [Home], agent: Option<&str>) -> anyhow::Result<&'a Home> {
    let wanted = agent.map_or_else(AgentName::default, AgentName::from);
    homes
        .iter()
        .find(|home| home.agent == wanted)
        .with_context(|| {
            let names: Vec<&str> = homes.iter().map(|home| home.agent.as_str()).collect();
            format!(
                "no agent {wanted} in the config (it has {})",
                names.join(", ")
            )
        })
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

fn writeln(out: &mut impl std::io::Write, text: &str) -> anyhow::Result<()> {
    std::io::Write::write_all(out, text.as_bytes())?;
    std::io::Write::write_all(out, b"\n")?;
    Ok(())
}
