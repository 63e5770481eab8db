//! The command line.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

/// switchboard: talk to your own AI agent from Telegram, Discord and the web.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about)]
pub struct Cli {
    /// Log format (logs go to stderr).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: channels, agent, HTTP (/ws, /, /healthz).
    Run {
        /// The config file (else $SWITCHBOARD_CONFIG, ~/.config/switchboard/config.toml,
        /// /etc/switchboard/config.toml).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// On a cluster (`[cluster]`), what this process runs: `gateway` (channels and
        /// HTTP), `worker` (agents) or `all` (both); over `[cluster] role`.
        #[arg(long)]
        role: Option<String>,
    },
    /// Who may talk: list pairing codes and approved senders, approve a code, revoke a sender.
    Pairing {
        /// The config file (same search as `run`); its `agent.state_dir` holds pairing.
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        /// What to do.
        #[command(subcommand)]
        action: PairingAction,
    },
    /// Scheduled jobs: list, add, remove, pause, resume, run now, and a job's last runs —
    /// over the config's state directory, while the daemon runs or not (a running daemon
    /// sees a change within two seconds). Run it as the daemon's user.
    Cron {
        /// The config file (same search as `run`); its `agent.state_dir` holds the jobs.
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        /// What to do.
        #[command(subcommand)]
        action: CronAction,
    },
    /// MCP servers: `list` starts each configured server, lists the tools it offers (as the
    /// model sees them), and stops it. Exits non-zero if one could not be started.
    #[cfg(feature = "mcp")]
    Mcp {
        /// The config file (same search as `run`).
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        /// What to do.
        #[command(subcommand)]
        action: McpAction,
    },
    /// The agents' memory: search what was said (every chat's transcript, archived ones
    /// included, and the memory files), build the index again, or say what it holds — over
    /// the config's state directory, while the daemon runs or not. Run it as the daemon's user.
    Memory {
        /// The config file (same search as `run`).
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        /// What to do.
        #[command(subcommand)]
        action: MemoryAction,
    },
    /// What the models cost: a line per day, agent and chat (tokens and US dollars by the
    /// price table), from the usage records in the config's state directory.
    Usage {
        /// The config file (same search as `run`).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// How many days, today included.
        #[arg(long, default_value_t = 7)]
        days: u32,
    },
    /// Set up: write a commented config (asking for its few choices when run in a
    /// terminal, else from the flags) and a workspace with starter files (SOUL.md,
    /// AGENTS.md, USER.md, TOOLS.md, MEMORY.md, a sample skill). Existing files are kept
    /// unless --force. With only --workspace, writes just the workspace.
    Onboard {
        /// The workspace directory (else the config's `agent.workspace`).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// The config file to write, or to read when it exists (same search as `run`;
        /// written to ~/.config/switchboard/config.toml when none is found).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The LLM's API: `openai` (any OpenAI-compatible server) or `anthropic`.
        #[arg(long)]
        provider: Option<String>,
        /// The model.
        #[arg(long)]
        model: Option<String>,
        /// The API root (default: the provider's).
        #[arg(long)]
        base_url: Option<String>,
        /// The environment variable that will hold the API key (`none` for none).
        #[arg(long, conflicts_with = "credential_key")]
        api_key_env: Option<String>,
        /// The systemd credential that will hold the API key (a file in the credentials
        /// directory beside the config, which the unit loads): the config reads
        /// `${credential:NAME}`, and the WebSocket and panel tokens are generated there too.
        #[arg(long)]
        credential_key: Option<String>,
        /// The state directory (sessions, cursors, pairing), e.g. /var/lib/switchboard/state.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// For the systemd service: the config in /etc/switchboard, the workspace and state
        /// in /var/lib/switchboard, the key and a WebSocket and a panel token generated as
        /// credentials in /etc/switchboard/credentials (each flag above still overrides).
        #[arg(long, conflicts_with = "api_key_env")]
        service: bool,
        /// Replace files that exist.
        #[arg(long)]
        force: bool,
    },
    /// Ask a running daemon (at the config's `http.bind`) how it is: channels, checks,
    /// sessions. Exits 0 when healthy, 1 when degraded, 2 when nothing answers, 3 when there
    /// is no config or it does not read. Resolves no secret.
    Status {
        /// The config file (same search as `run`).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Check a config before running it: directories, every model (a tiny request), every
    /// channel's token. One ✓/✗ line each; exits non-zero if any failed.
    Doctor {
        /// The config file (same search as `run`).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Runs one `exec` command confined (used by the daemon itself, not by people).
    #[command(hide = true)]
    SandboxExec {
        /// Only tell (by the exit status) whether a PID namespace can be had here.
        #[arg(long, exclusive = true)]
        probe_isolation: bool,
        /// The workspace: working directory, readable and writable.
        #[arg(long, required_unless_present = "probe_isolation")]
        workspace: Option<PathBuf>,
        /// The command's private temp directory.
        #[arg(long, required_unless_present = "probe_isolation")]
        tmp: Option<PathBuf>,
        /// Paths the command may not read.
        #[arg(long)]
        forbid: Vec<PathBuf>,
        /// The user id the command runs as (the helper must be root).
        #[arg(long, requires = "gid")]
        uid: Option<u32>,
        /// The group id the command runs as.
        #[arg(long, requires = "uid")]
        gid: Option<u32>,
        /// `pid-namespace` or `subreaper`: how the command's processes are kept from
        /// outliving it.
        #[arg(long, default_value = "subreaper", value_parser = parse_isolation)]
        isolation: switchboard_tools::sandbox::Isolation,
        /// The `sh -c` command line.
        #[arg(last = true)]
        command: Option<String>,
    },
    /// Talk to the agent in the terminal: one turn with -m, else an interactive prompt.
    Agent {
        /// The config file (same search as `run`).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The message for a single turn.
        #[arg(long, short)]
        message: Option<String>,
        /// The terminal session's name (its key is `cli_<name>`).
        #[arg(long, default_value = "local")]
        session: String,
    },
}

/// `switchboard pairing …`.
#[derive(Debug, Subcommand)]
pub enum PairingAction {
    /// The codes waiting for approval, and the senders approved.
    List,
    /// Approve a code: its sender may talk from now on (the running daemon sees it at once).
    Approve {
        /// The code the sender was given, e.g. K7QX-9M2P.
        code: String,
    },
    /// Turn a code down: it is forgotten; the sender is not approved (a later message of
    /// theirs gets a new code).
    Deny {
        /// The code the sender was given.
        code: String,
    },
    /// Revoke an approved sender: `12345`, or `telegram:12345` for one channel.
    Revoke {
        /// The sender's id, as `pairing list` shows it.
        sender: String,
    },
}

/// `switchboard memory …`.
#[derive(Debug, Subcommand)]
pub enum MemoryAction {
    /// What was said that matches: words (all must match), "quoted phrases", OR, NOT,
    /// prefix*; a line per hit with its date (UTC), chat and speaker.
    Search {
        /// What to find.
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
        /// The agent whose memory (default: `[agent]`'s).
        #[arg(long)]
        agent: Option<String>,
        /// Only this chat's session (`telegram_42`).
        #[arg(long)]
        chat: Option<String>,
        /// Only from this UTC date or time on (`2026-11-30`).
        #[arg(long)]
        since: Option<String>,
        /// Only before this UTC date or time.
        #[arg(long)]
        until: Option<String>,
        /// Hits at most.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Build the index again from the transcripts and memory files (every agent's, or one).
    Reindex {
        /// Only this agent's.
        #[arg(long)]
        agent: Option<String>,
    },
    /// What each agent's index holds and its size on disk.
    Stats,
}

/// `switchboard cron …`.
#[derive(Debug, Subcommand)]
pub enum CronAction {
    /// Every job: id, name, schedule, next run, last outcome, chat.
    List,
    /// Add a job: its chat, its message, and exactly one of --in, --at, --every, --cron.
    #[command(group(clap::ArgGroup::new("when").required(true).args(["after", "at", "every", "cron"])))]
    Add {
        /// The chat it runs in, `channel:chat_id` (`telegram:123456`).
        #[arg(long)]
        chat: String,
        /// What the agent is told when it runs.
        #[arg(long, short)]
        message: String,
        /// A short name (default: the start of the message).
        #[arg(long)]
        name: Option<String>,
        /// Once, this long from now: `10m`, `2h 30m`.
        #[arg(long = "in", value_name = "DURATION")]
        after: Option<String>,
        /// Once, at this time: `2026-12-24T18:00:00+01:00`, or `2026-12-24 18:00` in --tz.
        #[arg(long)]
        at: Option<String>,
        /// Repeatedly, this often: `30m`, `1 day`.
        #[arg(long)]
        every: Option<String>,
        /// A cron expression, read in --tz: `0 9 * * 1-5`.
        #[arg(long)]
        cron: Option<String>,
        /// The IANA zone for --at and --cron (default: `scheduler.timezone`, else the
        /// system's).
        #[arg(long)]
        tz: Option<String>,
        /// `chat` (a turn in the chat's session) or `isolated` (a session of its own whose
        /// answer is posted to the chat).
        #[arg(long, default_value = "chat", value_parser = parse_session_mode)]
        session: switchboard_scheduler::SessionMode,
        /// How late a run may still start after the daemon was down (default:
        /// `scheduler.catch_up_secs`): `30m`.
        #[arg(long, value_name = "DURATION")]
        catch_up: Option<String>,
    },
    /// Remove a job (its runs stay readable).
    Rm {
        /// The job's id, as `cron list` shows it.
        id: String,
    },
    /// Pause a job: it keeps its schedule but does not run.
    Pause {
        /// The job's id.
        id: String,
    },
    /// Resume a paused job: it runs at its next time from now on.
    Resume {
        /// The job's id.
        id: String,
    },
    /// Run a job now, once, besides its schedule (by the running daemon).
    Run {
        /// The job's id.
        id: String,
    },
    /// A job's last runs: when due, when started, how long, what came of it.
    Runs {
        /// The job's id.
        id: String,
        /// How many (newest first).
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
}

fn parse_session_mode(text: &str) -> Result<switchboard_scheduler::SessionMode, String> {
    switchboard_scheduler::SessionMode::parse(text)
        .ok_or_else(|| "expected chat or isolated".to_owned())
}

fn parse_isolation(text: &str) -> Result<switchboard_tools::sandbox::Isolation, String> {
    switchboard_tools::sandbox::Isolation::parse(text)
        .ok_or_else(|| "expected pid-namespace or subreaper".to_owned())
}

/// Where `onboard` writes a config when none exists: `$XDG_CONFIG_HOME` or
/// `~/.config`, then `switchboard/config.toml`.
pub fn default_config_path() -> Option<PathBuf> {
    config_home(
        std::env::var_os("XDG_CONFIG_HOME"),
        std::env::var_os("HOME"),
    )
    .map(|dir| dir.join("switchboard/config.toml"))
}

/// The user's configuration directory: `$XDG_CONFIG_HOME` when set to an absolute path
/// (the XDG spec ignores an empty or relative one), else `$HOME/.config`.
fn config_home(
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    xdg.map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| {
            home.filter(|home| !home.is_empty())
                .map(|home| PathBuf::from(home).join(".config"))
        })
}

/// The config file to use: the flag, else `$SWITCHBOARD_CONFIG`, else the XDG path, else
/// `/etc/switchboard/config.toml`. Errors list where it looked.
pub fn resolve_config(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("SWITCHBOARD_CONFIG").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let mut candidates = Vec::new();
    if let Some(path) = default_config_path() {
        candidates.push(path);
    }
    candidates.push(PathBuf::from("/etc/switchboard/config.toml"));
    if let Some(found) = candidates.iter().find(|path| path.is_file()) {
        return Ok(found.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    anyhow::bail!(
        "no config file found (looked at $SWITCHBOARD_CONFIG, {}); write one with \
         `switchboard onboard`, or pass --config PATH",
        looked.join(", ")
    )
}

/// `switchboard mcp …`.
#[cfg(feature = "mcp")]
#[derive(Debug, Subcommand)]
pub enum McpAction {
    /// Each configured server: started, its tools listed, stopped.
    List,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_relative_xdg_config_home_is_not_used() {
        let home = Some("/home/ada".into());
        let dir = |xdg: Option<&str>| config_home(xdg.map(Into::into), home.clone());
        assert_eq!(dir(Some("/etc/xdg")), Some(PathBuf::from("/etc/xdg")));
        for ignored in [None, Some(""), Some("relative/config")] {
            assert_eq!(
                dir(ignored),
                Some(PathBuf::from("/home/ada/.config")),
                "{ignored:?}"
            );
        }
        assert_eq!(config_home(Some("".into()), None), None);
    }
}
