//! Watching processes and files from tests: what a command left behind, waited for with a
//! deadline instead of a sleep.

use std::path::Path;
use std::time::{Duration, Instant};

/// Waits (up to `patience`) until `path` holds a whole line, and returns it trimmed; panics
/// when it does not.
pub async fn wait_for_line(path: &Path, patience: Duration) -> String {
    let deadline = Instant::now() + patience;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether a process runs (a zombie waiting for its reaper does not).
pub fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Waits (up to `patience`) until none of `pids` runs; panics naming those left.
pub async fn wait_gone(pids: &[String], patience: Duration) {
    let deadline = Instant::now() + patience;
    loop {
        let left: Vec<&String> = pids.iter().filter(|pid| alive(pid)).collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left running: {left:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The running processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().into_owned();
            pid.parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains(needle) && alive(&pid)).then_some(pid)
        })
        .collect()
}
