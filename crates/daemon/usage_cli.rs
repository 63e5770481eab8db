//! `switchboard usage`: what the models cost, per day, agent and chat, from the usage
//! records of the config's state directory (`usage/`) — while the daemon runs or not.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use switchboard_agent::usage::{FileUsageStore, Spent, UsageStore};

use crate::cli::resolve_config;
use crate::config::{Config, Secrets};

/// Prints the last `days` days' spending (today included), a line per day, agent and chat,
/// the day's total after each day, and the whole period's at the end.
pub async fn run(config: Option<&Path>, days: u32) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    let config = Config::load_with(&path, Secrets::Skip)?;
    let state_dir = config.path(&config.agent.state_dir);
    let zone = config
        .limits_zone()
        .map(|name| switchboard_agent::scheduler::zone(&name))
        .transpose()
        .map_err(anyhow::Error::msg)?
        .unwrap_or_else(|| jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC));
    let today = jiff::Timestamp::now().to_zoned(zone).date();
    let back = i64::from(days.clamp(1, 3660)) - 1;
    let from = today
        .checked_sub(jiff::Span::new().days(back))
        .unwrap_or(today);
    let store = FileUsageStore::new(&state_dir);
    let mut records = store.spent(from, today).await?;
    records.sort_by(|a, b| {
        (b.key.day, &a.key.agent, &a.key.session).cmp(&(a.key.day, &b.key.agent, &b.key.session))
    });
    let mut out = std::io::stdout().lock();
    if records.is_empty() {
        writeln!(out, "Nothing was spent from {from} to {today}.")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<10}  {:<12}  {:<28}  {:>12}  {:>12}  {:>10}  {:>10}",
        "day", "agent", "chat", "tokens in", "cached", "out", "usd"
    )?;
    let mut total = Spent::default();
    let mut index = 0;
    while index < records.len() {
        let day = records[index].key.day;
        let mut day_total = Spent::default();
        while index < records.len() && records[index].key.day == day {
            // One line per agent and chat: a chat's models summed.
            let (agent, session) = (&records[index].key.agent, &records[index].key.session);
            let mut line = Spent::default();
            while index < records.len()
                && records[index].key.day == day
                && &records[index].key.agent == agent
                && &records[index].key.session == session
            {
                line += records[index].spent;
                index += 1;
            }
            writeln!(
                out,
                "{day:<10}  {agent:<12}  {session:<28}  {:>12}  {:>12}  {:>10}  {:>10.4}",
                line.input, line.cached, line.output, line.usd
            )?;
            day_total += line;
        }
        writeln!(
            out,
            "{day:<10}  {:<12}  {:<28}  {:>12}  {:>12}  {:>10}  {:>10.4}",
            "all", "", day_total.input, day_total.cached, day_total.output, day_total.usd
        )?;
        total += day_total;
    }
    writeln!(
        out,
        "{from} to {today}: {} tokens in ({} cached), {} out, ${:.4}",
        total.input, total.cached, total.output, total.usd
    )?;
    Ok(ExitCode::SUCCESS)
}
