//! `switchboard status`: asks a running daemon's `/healthz` (at the config's `http.bind`) and
//! prints it for people. Exits [`OK`] when the daemon is healthy, [`DEGRADED`] when it answers
//! degraded or stopping, [`NOT_ANSWERING`] when nothing answers, [`NO_CONFIG`] when there is
//! no config or it does not read. It needs only `http.bind`: no secret is resolved, so it
//! works from an operator's shell with the service's config.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cli::resolve_config;
use crate::config::{Config, Secrets};

/// The longest `/healthz` answer read.
const MAX_ANSWER: u64 = 1024 * 1024;

/// Exit status: the daemon answered and is healthy.
pub const OK: u8 = 0;
/// Exit status: the daemon answered degraded (or stopping).
pub const DEGRADED: u8 = 1;
/// Exit status: nothing answered at `http.bind`.
pub const NOT_ANSWERING: u8 = 2;
/// Exit status: no config was found, or it does not read.
pub const NO_CONFIG: u8 = 3;

/// Runs `switchboard status`.
pub async fn run(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let loaded = resolve_config(config).and_then(|path| {
        let config = Config::load_with(&path, Secrets::Skip)?;
        Ok((path, config))
    });
    let (path, config) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "✗ switchboard status: {err:#}");
            return Ok(ExitCode::from(NO_CONFIG));
        }
    };
    let addr = config.http.bind.get_ref().0;
    let health = match healthz(addr).await {
        Ok(health) => health,
        Err(err) => {
            let _ = writeln!(
                std::io::stdout(),
                "✗ no switchboard answers at {addr} (http.bind in {}): {err:#}",
                path.display()
            );
            // The cluster is seen from NATS, whether this host's daemon answers or not.
            if let Some(cluster) = Box::pin(crate::cluster_report::status(&config)).await {
                let _ = write!(std::io::stdout(), "{cluster}");
            }
            return Ok(ExitCode::from(NOT_ANSWERING));
        }
    };
    let _ = write!(std::io::stdout(), "{}", describe(&health));
    if let Some(cluster) = Box::pin(crate::cluster_report::status(&config)).await {
        let _ = write!(std::io::stdout(), "{cluster}");
    }
    Ok(ExitCode::from(if health["status"] == "ok" {
        OK
    } else {
        DEGRADED
    }))
}

/// `GET /healthz` over a plain HTTP/1.1 connection, its JSON body.
async fn healthz(addr: SocketAddr) -> anyhow::Result<Value> {
    let ask = async {
        // A wildcard bind is reached on loopback.
        let target = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        let mut stream = tokio::net::TcpStream::connect(target).await?;
        let request = format!(
            "GET /healthz HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\n\r\n",
            addr.port()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.take(MAX_ANSWER).read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .context("no answer within 5 s")??;
    let text = String::from_utf8_lossy(&response);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .context("not an HTTP answer")?;
    serde_json::from_str(body.trim()).context("/healthz did not answer JSON (is this switchboard?)")
}

/// The health report for people.
pub fn describe(health: &Value) -> String {
    let mut out = String::new();
    let status = health["status"].as_str().unwrap_or("unknown");
    let mark = if status == "ok" { "✓" } else { "✗" };
    let uptime = health["uptime_secs"].as_u64().unwrap_or_default();
    let _ = writeln!(
        out,
        "{mark} switchboard {} — {status}, up {}",
        health["version"].as_str().unwrap_or("?"),
        human(uptime)
    );
    for (name, channel) in health["channels"].as_object().into_iter().flatten() {
        let state = channel["state"].as_str().unwrap_or("?");
        let mark = if state == "running" { "✓" } else { "✗" };
        let restarts = channel["restarts"].as_u64().unwrap_or_default();
        let mut line = format!("  {mark} {name}: {state}");
        if restarts > 0 {
            let _ = write!(line, ", {restarts} restarts");
        }
        if let Some(error) = channel["error"].as_str() {
            let _ = write!(line, " — {error}");
        }
        let _ = writeln!(out, "{line}");
    }
    for (name, check) in health["checks"].as_object().into_iter().flatten() {
        let state = check["state"].as_str().unwrap_or("?");
        let mark = if state == "ok" { "✓" } else { "✗" };
        let mut line = format!("  {mark} {name}: {state}");
        if let Some(error) = check["error"].as_str() {
            let _ = write!(line, " — {error}");
        }
        let _ = writeln!(out, "{line}");
    }
    let numbers: Vec<String> = health
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, value)| value.is_u64() && *key != "uptime_secs")
        .map(|(key, value)| format!("{} {value}", key.replace('_', " ")))
        .collect();
    if !numbers.is_empty() {
        let _ = writeln!(out, "  {}", numbers.join(" · "));
    }
    out
}

/// Seconds as `3d 4h`, `2h 5m`, `7m 3s`.
fn human(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_report_names_each_channel_and_check_and_what_is_wrong() {
        let text = describe(&json!({
            "status": "degraded", "version": "0.1.0", "uptime_secs": 7300,
            "channels": {
                "telegram": {"state": "failed", "restarts": 3, "error": "getMe: 401 Unauthorized"},
                "websocket": {"state": "running", "restarts": 0}
            },
            "checks": {"store": {"state": "ok"}},
            "active_sessions": 4
        }));
        assert_eq!(
            text,
            "✗ switchboard 0.1.0 — degraded, up 2h 1m\n  \
             ✗ telegram: failed, 3 restarts — getMe: 401 Unauthorized\n  \
             ✓ websocket: running\n  ✓ store: ok\n  active sessions 4\n"
        );
    }
}
