//! The files that earlier builds kept beside the state store in one process — the
//! chats' choices (`choices.json`), spending (`usage/YYYY-MM.jsonl`) and the scheduler's
//! jobs (`scheduler/jobs.jsonl`) — moved into it at the daemon's first start, each renamed
//! `….migrated` once its content is in (left for the operator to remove). Each move writes
//! whole documents, so a start killed half-way moves the same again at the next.
//!
//! The operator's commands do not move them (a daemon of the earlier version may still be
//! running on them); they say that the daemon's next start will.

use std::path::{Path, PathBuf};

use crate::cluster::Stores;

/// Moves what earlier versions left in `state_dir` into `stores`.
pub(crate) async fn move_in(state_dir: &Path, stores: &Stores) -> anyhow::Result<()> {
    if left_behind(state_dir).is_empty() {
        return Ok(());
    }
    let chats = switchboard_agent::migrate_choices(state_dir, stores.state()).await?;
    let months = switchboard_usage::migrate_files(state_dir, &stores.usage_store()).await?;
    let jobs = switchboard_scheduler::migrate_file(state_dir, &stores.job_store()).await?;
    tracing::info!(
        state_dir = %state_dir.display(),
        chats_with_choices = chats,
        months_of_usage = months,
        jobs = jobs.unwrap_or(0),
        "the files of an earlier version moved into the state store"
    );
    Ok(())
}

/// Tells the person running an operator's command (whose log shows only errors) what the
/// daemon's next start will move: until then the command does not see it.
pub(crate) fn tell_left_behind(state_dir: &Path) {
    let left = left_behind(state_dir);
    if !left.is_empty() {
        let files: Vec<String> = left.iter().map(|path| path.display().to_string()).collect();
        eprintln!(
            "switchboard: {} of an earlier build are not read here; they move into the state \
             store at the daemon's next start (restart it)",
            files.join(", ")
        );
    }
}

/// The files of earlier versions still in `state_dir`.
fn left_behind(state_dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![
        state_dir.join("choices.json"),
        state_dir.join("scheduler").join("jobs.jsonl"),
    ];
    found.extend(files_in(&state_dir.join("agents"), |path| {
        Some(path.join("choices.json"))
    }));
    found.extend(files_in(&state_dir.join("usage"), |path| {
        let name = path.file_name()?.to_str()?;
        (name.ends_with(".jsonl") && name.len() == "YYYY-MM.jsonl".len()).then(|| path.to_owned())
    }));
    found.retain(|path| path.is_file());
    found
}

fn files_in(dir: &Path, pick: impl Fn(&Path) -> Option<PathBuf>) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|entry| pick(&entry.path()))
                .collect()
        })
        .unwrap_or_default()
}
