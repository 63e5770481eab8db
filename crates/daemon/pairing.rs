//! `switchboard pairing list | approve CODE | revoke SENDER`: who may talk, on the state
//! directory of the config's daemon. A running daemon sees the change at its next message.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use switchboard_adapter::Pairing;

use crate::cli::{PairingAction, resolve_config};
use crate::config::{Config, Secrets};

/// Runs a pairing command.
pub async fn run(config: Option<&Path>, action: &PairingAction) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    // Only the state directory is needed: no secret is resolved (the operator's shell has
    // neither the service's environment nor its credentials) — but a cluster's.
    let config = Config::load_with(&path, Secrets::Skip)?;
    let pairing = Pairing::new(crate::cluster::Stores::open(&config).await?.state().clone());
    let mut out = std::io::stdout().lock();
    match action {
        PairingAction::List => {
            let file = pairing
                .list()
                .await
                .context("cannot read the pairing file")?;
            let now = unix_now();
            writeln!(out, "Waiting for approval ({}):", file.pending.len())?;
            for pending in &file.pending {
                let age = now.saturating_sub(pending.created_at) / 60;
                writeln!(
                    out,
                    "  {}  {}:{}  {}  ({age} min ago)",
                    pending.code,
                    pending.channel,
                    pending.sender,
                    pending.name.as_deref().unwrap_or("")
                )?;
            }
            writeln!(out, "Approved ({}):", file.approved.len())?;
            for approved in &file.approved {
                writeln!(
                    out,
                    "  {}:{}  {}",
                    approved.channel,
                    approved.sender,
                    approved.name.as_deref().unwrap_or("")
                )?;
            }
        }
        PairingAction::Approve { code } => {
            let approved = pairing.approve(code).await?;
            writeln!(
                out,
                "Approved {}:{} {}",
                approved.channel,
                approved.sender,
                approved.name.as_deref().unwrap_or("")
            )?;
        }
        PairingAction::Deny { code } => {
            let denied = pairing.deny(code).await?;
            writeln!(
                out,
                "Denied {} ({}:{} {})",
                denied.code,
                denied.channel,
                denied.sender,
                denied.name.as_deref().unwrap_or("")
            )?;
        }
        PairingAction::Revoke { sender } => {
            for revoked in pairing.revoke(sender).await? {
                writeln!(out, "Revoked {}:{}", revoked.channel, revoked.sender)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
