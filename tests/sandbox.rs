//! What a command run by `exec` cannot do: read the daemon's secrets (its environment, its
//! memory, its credentials), keep root's privileges, or outlive its call. Tried through
//! the daemon binary as the model would, and through the sandbox helper itself.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use switchboard_testkit::process::{processes_mentioning, wait_for_line};
use switchboard_testkit::{Reply, ScriptedLlm};
use switchboard_tools::sandbox::{Confinement, Isolation};

use crate::util::{self, Extra, WsClient};

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The one tool result the model was sent in the second request.
fn exec_result(llm: &ScriptedLlm) -> String {
    let requests = llm.requests();
    util::conversation(&requests[1])
        .into_iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .expect("a tool result")
}

/// Writes the config of a daemon in `dir` whose key is `${OPENAI_API_KEY}`.
fn write_config(dir: &Path, llm: &ScriptedLlm) -> std::path::PathBuf {
    let config = dir.join("config.toml");
    let text = util::config_text_with(
        &llm.base_url(),
        dir,
        Extra {
            llm: "api_key = \"${OPENAI_API_KEY}\"",
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");
    config
}

/// The environment a process started with, as `/proc/<pid>/environ` shows it; `None` if
/// it cannot be read.
fn environ_of(pid: u32) -> Option<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .ok()
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', "\n"))
}

/// What a command finds of the daemon's secrets and its own privileges.
const LOOK_AROUND: &str = "echo \"found=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c 471)\"; \
     echo \"uid=$(id -u) groups=$(id -G)\"; \
     grep -E '^(CapPrm|CapEff|CapAmb|NoNewPrivs):' /proc/self/status; \
     echo \"shell_pid=$$\"";

#[tokio::test]
async fn secrets_leave_the_daemons_environment_and_commands_run_without_privilege() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // A credential systemd would have copied for the service, readable to everyone here, so
    // only the sandbox keeps the command from it.
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).expect("mkdir");
    std::fs::write(credentials.join("ws-token"), "cred-4713\n").expect("write");
    for (path, mode) in [(dir.path(), 0o755), (credentials.as_path(), 0o755)] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    }
    let command = format!(
        "{LOOK_AROUND}; cat {}/ws-token >/dev/null 2>&1 && echo creds=read || echo creds=refused",
        credentials.display()
    );
    llm.push(Reply::tools([("exec", json!({"command": command}))]));
    llm.push(Reply::text("looked"));
    let config = write_config(dir.path(), &llm);
    let prelude = format!(
        "export OPENAI_API_KEY=sk-daemon-secret-4711 MY_SERVICE_TOKEN=tok-4712 \
         PLAIN_SETTING=visible CREDENTIALS_DIRECTORY={}",
        credentials.display()
    );
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], &prelude).await;
    let pid = child.id().expect("pid");

    // The process image the daemon runs in started without them (the same pid: it started
    // itself again), and what is not a secret is still there.
    let environ = environ_of(pid).expect("root, or the test's own user, reads it");
    assert!(environ.contains("PLAIN_SETTING=visible"), "{environ}");
    assert!(!environ.contains("471"), "{environ}");

    let mut client = WsClient::connect(addr).await;
    assert_eq!(client.say("c", "look around").await.reply(), "looked");
    let result = exec_result(&llm);
    assert!(result.contains("found=0"), "{result}");
    assert!(
        !result.contains("4711") && !result.contains("4712"),
        "{result}"
    );
    if Confinement::probe() != Confinement::None {
        assert!(result.contains("creds=refused"), "{result}");
    }
    if root() {
        // Dropped to `nobody`: no groups, no capabilities, no way back through set-uid.
        assert!(result.contains("uid=65534 groups=65534"), "{result}");
        for line in ["CapPrm:\t0000000000000000", "CapEff:\t0000000000000000"] {
            assert!(result.contains(line), "{result}");
        }
    } else {
        eprintln!("not root: the drop to an unprivileged user was not tried");
    }
    assert!(result.contains("CapAmb:\t0000000000000000"), "{result}");
    assert!(result.contains("NoNewPrivs:\t1"), "{result}");
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

/// Runs `program args…` as `nobody` (through util-linux's `setpriv`).
fn as_nobody(program: &str) -> std::process::Command {
    let mut command = std::process::Command::new("setpriv");
    command.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        program,
    ]);
    command
}

#[tokio::test]
async fn a_daemon_of_an_ordinary_user_cannot_be_read_by_that_user_or_its_commands() {
    if !root() {
        eprintln!("skipped: the test starts the daemon as `nobody`, which needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::tools([("exec", json!({"command": LOOK_AROUND}))]));
    llm.push(Reply::text("looked"));
    let config = write_config(dir.path(), &llm);
    let wrapper = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let (mut child, addr) =
        util::spawn_daemon_with(&config, &wrapper, "export OPENAI_API_KEY=sk-4711").await;
    let pid = child.id().expect("pid");

    // Another process of the same user may not read the daemon's environment (or memory):
    // the daemon is not dumpable.
    let read = as_nobody("cat")
        .arg(format!("/proc/{pid}/environ"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("cat runs");
    assert!(!read.status.success(), "the environment was read");
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );

    let mut client = WsClient::connect(addr).await;
    assert_eq!(client.say("c", "look around").await.reply(), "looked");
    let result = exec_result(&llm);
    assert!(result.contains("found=0"), "{result}");
    assert!(result.contains("uid=65534"), "{result}");
    // Where this user may have a user namespace, the command is a PID namespace's first
    // process.
    let userns = as_nobody("unshare")
        .args(["--user", "--map-current-user", "--pid", "--fork", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if userns {
        assert!(result.contains("shell_pid=1\n"), "{result}");
    } else {
        eprintln!("no user namespaces for `nobody` here: the subreaper was used");
    }
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

/// A command that starts four processes meant to outlive it — one in a new session, one
/// by double fork, one under `nohup`, one ignoring SIGTERM and SIGHUP — each running
/// `sleep <mark><n>`, waits until all four run, and prints `all started`. `then` runs after.
fn escapees(mark: &str, then: &str) -> String {
    format!(
        "setsid sh -c 'touch s1; exec sleep {mark}1' & \
         sh -c '(sh -c \"touch s2; exec sleep {mark}2\" &)'; \
         nohup sh -c 'touch s3; exec sleep {mark}3' >/dev/null 2>&1 & \
         sh -c 'trap \"\" TERM HUP; touch s4; exec sleep {mark}4' & \
         until [ -e s1 ] && [ -e s2 ] && [ -e s3 ] && [ -e s4 ]; do sleep 0.01; done; \
         echo all started; {then}"
    )
}

/// A mark no other test's processes carry.
fn mark(n: u32) -> String {
    format!("{}{n}", 600 + std::process::id() % 300)
}

/// Waits until no process mentions `mark`; panics naming those left.
async fn wait_none_left(mark: &str) {
    switchboard_testkit::process::wait_gone(
        &processes_mentioning(&format!("sleep {mark}")),
        Duration::from_secs(8),
    )
    .await;
    assert!(
        processes_mentioning(&format!("sleep {mark}")).is_empty(),
        "left running: {:?}",
        processes_mentioning(&format!("sleep {mark}"))
    );
}

#[tokio::test]
async fn nothing_a_command_starts_outlives_its_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let mark = mark(1);
    llm.push(Reply::tools([(
        "exec",
        json!({"command": escapees(&mark, "echo done")}),
    )]));
    llm.push(Reply::text("ran"));
    let config = write_config(dir.path(), &llm);
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], "export OPENAI_API_KEY=k").await;
    let mut client = WsClient::connect(addr).await;
    assert_eq!(client.say("c", "start things").await.reply(), "ran");
    let result = exec_result(&llm);
    assert!(result.contains("all started\ndone"), "{result}");
    wait_none_left(&mark).await;
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

/// The helper, started by hand as the daemon starts it: its stdin is the lifeline.
fn helper(dir: &Path, isolation: Isolation, command: &str) -> tokio::process::Child {
    let workspace = dir.join("workspace");
    let tmp = dir.join("tmp");
    for path in [&workspace, &tmp] {
        std::fs::create_dir_all(path).expect("mkdir");
    }
    tokio::process::Command::new(util::BINARY)
        .args(["sandbox-exec", "--workspace"])
        .arg(&workspace)
        .arg("--tmp")
        .arg(&tmp)
        .args(["--isolation", isolation.as_str(), "--", command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("helper starts")
}

/// The isolations this machine offers the helper.
async fn isolations() -> Vec<Isolation> {
    let probed = Isolation::probe(Path::new(util::BINARY), &["sandbox-exec".into()]).await;
    if probed == Isolation::PidNamespace {
        vec![Isolation::PidNamespace, Isolation::Subreaper]
    } else {
        eprintln!("no PID namespace here: only the subreaper is tried");
        vec![Isolation::Subreaper]
    }
}

#[tokio::test]
async fn the_helper_ends_every_process_when_the_command_exits_or_the_lifeline_closes() {
    for (n, isolation) in isolations().await.into_iter().enumerate() {
        let n = n as u32 * 10;
        // The shell exits on its own, leaving its escapees behind.
        let dir = tempfile::tempdir().expect("tempdir");
        let mark_exit = mark(20 + n);
        let mut child = helper(dir.path(), isolation, &escapees(&mark_exit, "exit 3"));
        // Held while waiting (tokio's wait closes a child's stdin, which is the lifeline).
        let _lifeline = child.stdin.take();
        let output = tokio::time::timeout(util::PATIENCE, child.wait_with_output())
            .await
            .expect("the helper exits")
            .expect("wait");
        assert_eq!(
            output.status.code(),
            Some(3),
            "{isolation:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        wait_none_left(&mark_exit).await;

        // The daemon lets go (a timeout, /stop, or the daemon gone) while the shell runs.
        let dir = tempfile::tempdir().expect("tempdir");
        let mark_cut = mark(21 + n);
        let mut child = helper(
            dir.path(),
            isolation,
            &escapees(
                &mark_cut,
                &format!("echo all started > started; sleep {mark_cut}9"),
            ),
        );
        wait_for_line(&dir.path().join("workspace/started"), util::PATIENCE).await;
        assert!(
            processes_mentioning(&format!("sleep {mark_cut}")).len() >= 5,
            "{isolation:?}: the escapees and the shell's sleep run"
        );
        drop(child.stdin.take());
        tokio::time::timeout(util::PATIENCE, child.wait())
            .await
            .expect("the helper exits once the lifeline closes")
            .expect("wait");
        wait_none_left(&mark_cut).await;
    }
}

#[tokio::test]
async fn kill_9_of_the_daemon_leaves_no_escaped_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let mark = mark(40);
    let command = escapees(&mark, &format!("echo x > started; sleep {mark}9"));
    llm.push(Reply::tools([("exec", json!({"command": command}))]));
    let config = write_config(dir.path(), &llm);
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], "export OPENAI_API_KEY=k").await;
    let mut client = WsClient::connect(addr).await;
    client.send("c", "start things").await;
    wait_for_line(&dir.path().join("workspace/started"), util::PATIENCE).await;
    util::signal(&child, "-KILL");
    child.wait().await.expect("wait");
    wait_none_left(&mark).await;
}

#[tokio::test]
async fn as_root_what_the_file_tools_write_the_commands_can_change() {
    if !root() {
        eprintln!("skipped: commands run as another user only when the daemon is root");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::tools([(
        "write_file",
        json!({"path": "notes/todo.txt", "content": "tea\n"}),
    )]));
    llm.push(Reply::tools([(
        "exec",
        json!({"command": "echo milk >> notes/todo.txt && touch notes/new && echo appended"}),
    )]));
    llm.push(Reply::text("done"));
    let config = write_config(dir.path(), &llm);
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], "export OPENAI_API_KEY=k").await;
    let mut client = WsClient::connect(addr).await;
    assert_eq!(client.say("c", "note it").await.reply(), "done");
    let result = util::conversation(&llm.requests()[2])
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .next_back()
        .expect("exec's result");
    assert!(result.contains("appended"), "{result}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("workspace/notes/todo.txt")).expect("read"),
        "tea\nmilk\n"
    );
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}
