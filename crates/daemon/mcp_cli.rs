//! `switchboard mcp list`: each configured MCP server started here, its tools listed as the
//! model would see them, and stopped — to check a server before (or beside) the daemon.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::resolve_config;
use crate::config::Config;

/// Lists the configured servers and their tools; fails if one could not be started.
pub async fn list(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    let config = Config::load(&path)?;
    let mut out = std::io::stdout();
    if config.mcp.servers.is_empty() {
        writeln!(
            out,
            "No MCP servers are configured ([mcp.servers.NAME] in {}).",
            path.display()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    for (name, entry) in &config.mcp.servers {
        if !entry.enabled {
            writeln!(out, "{name}: disabled (enabled = false)")?;
        }
    }
    let mut failed = false;
    for mut spec in config.mcp_servers()? {
        let command = std::iter::once(spec.command.as_str())
            .chain(spec.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        // Before the daemon's first start there is no workspace yet (the daemon makes it, as
        // its user): a server that would start there is listed from the temporary directory.
        let defaulted = config
            .mcp
            .servers
            .get(&spec.name)
            .is_some_and(|entry| entry.cwd.is_none());
        let mut moved = None;
        if spec.url.is_none() && defaulted && !spec.cwd.is_dir() {
            let workspace = std::mem::replace(&mut spec.cwd, std::env::temp_dir());
            moved = Some(workspace);
        }
        match switchboard_mcp::probe(&spec).await {
            Ok(tools) => {
                writeln!(out, "{}: up, {} tools ({command})", spec.name, tools.len())?;
                if let Some(workspace) = moved {
                    writeln!(
                        out,
                        "  (started in {}: its working directory, the workspace {}, is made at \
                         the daemon's first start)",
                        spec.cwd.display(),
                        workspace.display()
                    )?;
                }
                for (tool, description) in tools {
                    let first = description.lines().next().unwrap_or_default();
                    let short: String = first.chars().take(80).collect();
                    writeln!(out, "  {tool}  {short}")?;
                }
            }
            Err(why) => {
                failed = true;
                writeln!(out, "{}: down: {why} ({command})", spec.name)?;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
