//! `switchboard usage`: what the models cost, per day, agent and chat, from the usage
//! records of the config's state directory (`usage/`) — while the daemon runs or not. A
//! chat's line holds what counts against its cap: its own turns', its sub-agents' and its
//! isolated scheduled runs' spending, the latter two also said apart.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use switchboard_usage::{Spent, UsageStore};

use crate::cli::resolve_config;
use crate::config::{Config, Secrets};

/// One line of the report: a day, an agent and a chat, its models summed.
#[derive(Debug, serde::Serialize)]
pub struct Line {
    /// The day, in the caps' time zone.
    pub day: jiff::civil::Date,
    /// The agent.
    pub agent: String,
    /// The chat's session.
    pub session: String,
    /// What it spent, everything that counts against its cap.
    pub spent: Spent,
    /// Of that, what its sub-agents and its isolated scheduled runs spent.
    pub delegated: Spent,
}

/// The spending of the last days (today included), as `switchboard usage` prints it and the
/// control panel shows it.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The first day.
    pub from: jiff::civil::Date,
    /// Today.
    pub to: jiff::civil::Date,
    /// The lines, newest day first, then by agent and chat.
    pub lines: Vec<Line>,
}

impl Report {
    /// The last `days` days' records of `config`'s state directory.
    pub async fn read(config: &Config, store: &dyn UsageStore, days: u32) -> anyhow::Result<Self> {
        let zone = config
            .limits_zone()
            .map(|name| switchboard_scheduler::zone(&name))
            .transpose()
            .map_err(anyhow::Error::msg)?
            .unwrap_or_else(|| jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC));
        let today = jiff::Timestamp::now().to_zoned(zone).date();
        let back = i64::from(days.clamp(1, 3660)) - 1;
        let from = today
            .checked_sub(jiff::Span::new().days(back))
            .unwrap_or(today);
        let mut records = store.spent(from, today).await?;
        records.sort_by(|a, b| {
            (b.key.day, &a.key.agent, a.key.chat()).cmp(&(a.key.day, &b.key.agent, b.key.chat()))
        });
        let mut lines: Vec<Line> = Vec::new();
        for record in records {
            let delegated = if record.key.chat.is_some() {
                record.spent
            } else {
                Spent::default()
            };
            match lines.last_mut() {
                // A chat's models and sessions summed.
                Some(line)
                    if line.day == record.key.day
                        && line.agent == record.key.agent
                        && line.session == record.key.chat() =>
                {
                    line.spent += record.spent;
                    line.delegated += delegated;
                }
                _ => lines.push(Line {
                    day: record.key.day,
                    agent: record.key.agent.clone(),
                    session: record.key.chat().to_owned(),
                    spent: record.spent,
                    delegated,
                }),
            }
        }
        Ok(Self {
            from,
            to: today,
            lines,
        })
    }

    /// Each day's total, newest first.
    pub fn days(&self) -> Vec<(jiff::civil::Date, Spent)> {
        let mut days: Vec<(jiff::civil::Date, Spent)> = Vec::new();
        for line in &self.lines {
            match days.last_mut() {
                Some((day, total)) if *day == line.day => *total += line.spent,
                _ => days.push((line.day, line.spent)),
            }
        }
        days
    }
}

/// Prints the last `days` days' spending (today included), a line per day, agent and chat,
/// the day's total after each day, and the whole period's at the end.
pub async fn run(config: Option<&Path>, days: u32) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    let config = Config::load_with(&path, Secrets::Skip)?;
    let stores = crate::cluster::Stores::open(&config).await?;
    let report = Report::read(&config, &*stores.usage(), days).await?;
    write_table(&mut std::io::stdout().lock(), &report)?;
    Ok(ExitCode::SUCCESS)
}

/// The report as a table whose columns are as wide as what they hold.
fn write_table(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    let (from, today) = (report.from, report.to);
    if report.lines.is_empty() {
        return writeln!(out, "Nothing was spent from {from} to {today}.");
    }
    let width = |column: &str, of: fn(&Line) -> &str| {
        report
            .lines
            .iter()
            .map(|line| of(line).chars().count())
            .chain([column.len()])
            .max()
            .unwrap_or(0)
    };
    let agents = width("agent", |line| &line.agent);
    let chats = width("chat", |line| &line.session);
    writeln!(
        out,
        "{:<10}  {:<agents$}  {:<chats$}  {:>12}  {:>12}  {:>10}  {:>10}  {:>15}",
        "day", "agent", "chat", "tokens in", "cached", "out", "usd", "sub-agents+runs"
    )?;
    let mut total = Spent::default();
    for (day, day_total) in report.days() {
        for line in report.lines.iter().filter(|line| line.day == day) {
            let (agent, session, spent) = (&line.agent, &line.session, line.spent);
            writeln!(
                out,
                "{day:<10}  {agent:<agents$}  {session:<chats$}  {:>12}  {:>12}  {:>10}  {:>10.4}  {:>15.4}",
                spent.input, spent.cached, spent.output, spent.usd, line.delegated.usd
            )?;
        }
        writeln!(
            out,
            "{day:<10}  {:<agents$}  {:<chats$}  {:>12}  {:>12}  {:>10}  {:>10.4}",
            "all", "", day_total.input, day_total.cached, day_total.output, day_total.usd
        )?;
        total += day_total;
    }
    writeln!(
        out,
        "{from} to {today}: {} tokens in ({} cached), {} out ({} thinking), ${:.4}",
        total.input, total.cached, total.output, total.reasoning, total.usd
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_what_they_hold() {
        let day = jiff::civil::date(2026, 11, 27);
        let spent = Spent {
            input: 1200,
            output: 30,
            cached: 0,
            usd: 0.5,
            reasoning: 0,
        };
        let line = |agent: &str, session: &str| Line {
            day,
            agent: agent.into(),
            session: session.into(),
            spent,
            delegated: Spent::default(),
        };
        let report = Report {
            from: day,
            to: day,
            lines: vec![
                line("default", "telegram_1"),
                line("research-assistant", "slack_C0123ABCD:1732700000.123456"),
            ],
        };
        let mut out = Vec::new();
        write_table(&mut out, &report).expect("written");
        let text = String::from_utf8(out).expect("text");
        let rows: Vec<&str> = text.lines().take(4).collect();
        // Every row's "out" column ends where the header's does.
        let end = rows[0].find(" out").expect("header") + " out".len();
        for (row, out) in rows[1..].iter().zip(["30", "30", "60"]) {
            assert_eq!(&row[end - 2..end], out, "{text}");
        }
        assert!(
            rows[2].contains("research-assistant  slack_C0123ABCD"),
            "{text}"
        );
    }
}
