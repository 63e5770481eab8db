//! `exec` as the model calls it: its process group dies on timeout and on `/stop`, its
//! output is capped, its environment holds nothing of the daemon's, and the deny list stops
//! the obvious without blocking ordinary commands. (Landlock and the lifeline need the
//! daemon's binary as the helper: tests/tools.rs runs them end to end.)

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_testkit::process::{wait_for_line, wait_gone};

use serde_json::json;
use switchboard_tools::builtin::{DEFAULT_DENY, Exec, ExecOptions};
use switchboard_tools::{Tool, ToolContext, ToolError, Workspace};

/// How long a test waits for what it expects.
const PATIENCE: Duration = Duration::from_secs(10);

fn exec(max_output_bytes: usize) -> Exec {
    Exec::new(ExecOptions {
        default_timeout: Duration::from_secs(30),
        max_timeout: Duration::from_secs(60),
        deny: DEFAULT_DENY.iter().map(|s| (*s).to_owned()).collect(),
        max_output_bytes,
        sandbox: None,
        run_as: None,
    })
}

fn context(dir: &Path) -> ToolContext {
    ToolContext::new(
        Arc::new(Workspace::new(dir, &[], true).expect("workspace")),
        "test_1".into(),
    )
}

#[tokio::test]
async fn the_timeout_kills_the_whole_group_even_a_child_that_ignores_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(dir.path());
    let command = "sh -c 'trap \"\" TERM; sleep 300' & echo $! > child.pid; sleep 300";
    let started = Instant::now();
    let result = exec(4096)
        .call(json!({"command": command, "timeout_secs": 1}), &ctx)
        .await;
    match result {
        Err(ToolError::Failed(message)) => {
            assert!(message.contains("killed after 1 s"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid = wait_for_line(&dir.path().join("child.pid"), PATIENCE).await;
    wait_gone(&[pid], PATIENCE).await;
}

#[tokio::test]
async fn stop_ends_a_long_command_within_a_second_and_its_processes_are_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(dir.path());
    let cancel = ctx.cancel.clone();
    let tool = Arc::new(exec(4096));
    let call = {
        let ctx = ctx.clone();
        let tool = tool.clone();
        tokio::spawn(async move {
            tool.call(
                json!({"command": "sleep 20 & echo $! > bg.pid; sleep 20"}),
                &ctx,
            )
            .await
        })
    };
    let pid = wait_for_line(&dir.path().join("bg.pid"), PATIENCE).await;
    let stopped = Instant::now();
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends")
        .expect("no panic");
    assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(1),
        "{:?}",
        stopped.elapsed()
    );
    wait_gone(&[pid], PATIENCE).await;
}

#[tokio::test]
async fn ten_megabytes_of_output_are_capped_keeping_head_and_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(dir.path());
    let command = "echo FIRST; head -c 10000000 /dev/zero | tr '\\0' a; echo; echo LAST";
    let result = exec(4096)
        .call(json!({"command": command}), &ctx)
        .await
        .expect("runs")
        .text;
    assert!(result.len() < 10_000, "{} bytes", result.len());
    assert!(
        result.contains("exit code 0\n--- stdout ---\nFIRST\n"),
        "{}",
        &result[..200]
    );
    assert!(result.trim_end().ends_with("LAST"));
    assert!(
        result.contains("bytes left out of the middle of 10000012"),
        "{result}"
    );
}

#[tokio::test]
async fn the_environment_holds_nothing_of_the_daemons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(dir.path());
    let result = exec(16 * 1024)
        .call(json!({"command": "env"}), &ctx)
        .await
        .expect("runs")
        .text;
    let names: Vec<&str> = result
        .lines()
        .skip_while(|line| *line != "--- stdout ---")
        .skip(1)
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    for name in &names {
        assert!(
            [
                "PATH", "HOME", "TMPDIR", "LANG", "PWD", "SHLVL", "_", "OLDPWD"
            ]
            .contains(name),
            "unexpected variable {name} in {result}"
        );
    }
    let home = format!("HOME={}", ctx.workspace.root().display());
    assert!(result.contains(&home), "{result}");
}

#[tokio::test]
async fn a_command_starts_in_the_workspace_and_reports_its_exit_code_and_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(dir.path());
    let result = exec(4096)
        .call(json!({"command": "pwd; echo oops >&2; exit 3"}), &ctx)
        .await
        .expect("runs")
        .text;
    let root = ctx.workspace.root().display().to_string();
    assert_eq!(
        result,
        format!(
            "note: commands run without a sandbox (no helper configured).\nexit code 3\n\
             --- stdout ---\n{root}\n--- stderr ---\noops\n"
        )
    );
}

#[test]
fn the_deny_list_stops_the_obvious_and_nothing_ordinary() {
    let tool = exec(4096);
    for command in [
        "rm -rf /",
        "rm -rf /*",
        "rm -fr ~",
        "sudo rm -r -f /",
        "cd x && rm -rf $HOME",
        "mkfs.ext4 /dev/sda1",
        "shutdown -h now",
        "echo hi; reboot",
        ":(){ :|:& };:",
        "dd if=/dev/zero of=/dev/sda bs=1M",
        "cat x > /dev/nvme0n1",
    ] {
        assert!(tool.denied_by(command).is_some(), "not denied: {command}");
    }
    for command in [
        "curl -s https://example.com",
        "rm -rf ./build",
        "rm -rf build/ target",
        "rm notes/old.txt",
        "cat shutdown-notes.md",
        "grep -r reboot docs/",
        "ls /",
        "dd if=in.img of=out.img",
    ] {
        assert_eq!(tool.denied_by(command), None, "denied: {command}");
    }
}
