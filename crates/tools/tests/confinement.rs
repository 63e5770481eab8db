//! Every way out of the workspace, tried through the file tools as the model would call
//! them: each is refused with an error the model reads, and nothing outside is read or
//! written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use switchboard_core::ImagePart;
use switchboard_tools::builtin::{EditFile, FindFiles, Grep, ListDir, ReadFile, WriteFile};
use switchboard_tools::{Tool, ToolContext, ToolError, Workspace};

/// A workspace with a secret outside it, a state directory and a config file.
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    state: PathBuf,
    config: PathBuf,
    ctx: ToolContext,
}

fn setup_with(state_inside: bool) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    std::fs::create_dir_all(root.join("outside")).expect("mkdir");
    std::fs::write(root.join("outside/secret.txt"), "OUTSIDE SECRET").expect("write");
    let state = if state_inside {
        ws.join("state")
    } else {
        root.join("state")
    };
    std::fs::create_dir_all(state.join("sessions")).expect("mkdir");
    std::fs::write(state.join("sessions/ws_1.jsonl"), "SESSION DATA").expect("write");
    let config = ws.join("config.toml");
    std::fs::write(&config, "api_key = \"CONFIG SECRET\"").expect("write");
    let workspace = Workspace::new(&ws, &[state.clone(), config.clone()], true).expect("workspace");
    let ctx = ToolContext::new(Arc::new(workspace), "test_1".into());
    Setup {
        _dir: dir,
        root,
        ws,
        state,
        config,
        ctx,
    }
}

fn setup() -> Setup {
    setup_with(false)
}

async fn call(
    tool: &dyn Tool,
    args: serde_json::Value,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    tool.call(args, ctx).await.map(|output| output.text)
}

fn assert_denied(result: Result<String, ToolError>, what: &str) {
    match result {
        Err(ToolError::Denied(message)) => {
            assert!(!message.contains("SECRET"), "{what}: {message}");
        }
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn paths_out_of_the_workspace_are_refused() {
    let s = setup();
    for path in [
        "../outside/secret.txt",
        "../../etc/passwd",
        "a/../../outside/secret.txt",
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "~",
    ] {
        assert_denied(call(&ReadFile, json!({"path": path}), &s.ctx).await, path);
    }
    let outside = s.root.join("outside/secret.txt");
    assert_denied(
        call(&ReadFile, json!({"path": outside}), &s.ctx).await,
        "absolute outside",
    );
    // An absolute path inside the workspace is just a path.
    std::fs::write(s.ws.join("note.txt"), "inside").expect("write");
    let inside = call(&ReadFile, json!({"path": s.ws.join("note.txt")}), &s.ctx).await;
    assert_eq!(inside.expect("read"), "inside\n");
}

#[tokio::test]
async fn an_image_is_read_as_an_image_and_saved_only_inside() {
    let s = setup();
    let png = b"\x89PNG\r\n\x1a\n rest of a picture".to_vec();
    std::fs::write(s.ws.join("shot.png"), &png).expect("write");
    let read = ReadFile
        .call(json!({"path": "shot.png"}), &s.ctx)
        .await
        .expect("read");
    assert_eq!(
        read.images,
        [ImagePart {
            path: "shot.png".into(),
            mime: "image/png".into()
        }]
    );
    assert!(
        read.text.contains("is an image (image/png"),
        "{}",
        read.text
    );
    // A name is not a type: text called .png is read as text.
    std::fs::write(s.ws.join("fake.png"), "just text").expect("write");
    let text = ReadFile
        .call(json!({"path": "fake.png"}), &s.ctx)
        .await
        .expect("read");
    assert_eq!((text.text.as_str(), text.images.len()), ("just text\n", 0));

    let saved = s
        .ctx
        .save_image("image/png", png.clone())
        .await
        .expect("save");
    assert!(saved.path.starts_with("media/tools/test_1-"), "{saved:?}");
    assert!(saved.path.ends_with(".png"), "{saved:?}");
    assert_eq!(std::fs::read(s.ws.join(&saved.path)).expect("saved"), png);
    let svg = s.ctx.save_image("image/svg+xml", b"<svg/>".to_vec()).await;
    assert!(
        matches!(&svg, Err(ToolError::Failed(m)) if m.contains("image/svg+xml")),
        "{svg:?}"
    );
    let huge = vec![0u8; ImagePart::MAX_BYTES as usize + 1];
    assert!(s.ctx.save_image("image/png", huge).await.is_err());

    // The media folder turned into a link out of the workspace: nothing is written there.
    std::fs::remove_dir_all(s.ws.join("media")).expect("rm");
    std::os::unix::fs::symlink(s.root.join("outside"), s.ws.join("media")).expect("symlink");
    let escaped = s.ctx.save_image("image/png", png).await;
    assert!(matches!(escaped, Err(ToolError::Denied(_))), "{escaped:?}");
    assert!(!s.root.join("outside/tools").exists());
}

#[tokio::test]
async fn symlinks_are_followed_inside_and_refused_when_they_leave() {
    let s = setup();
    std::os::unix::fs::symlink("/etc", s.ws.join("etc")).expect("symlink");
    std::os::unix::fs::symlink(s.root.join("outside"), s.ws.join("out")).expect("symlink");
    std::os::unix::fs::symlink("../outside/secret.txt", s.ws.join("rel")).expect("symlink");
    std::fs::create_dir_all(s.ws.join("real")).expect("mkdir");
    std::fs::write(s.ws.join("real/file.txt"), "fine").expect("write");
    std::os::unix::fs::symlink("real", s.ws.join("alias")).expect("symlink");

    assert_denied(
        call(&ReadFile, json!({"path": "etc/passwd"}), &s.ctx).await,
        "etc/passwd",
    );
    assert_denied(
        call(&ReadFile, json!({"path": "out/secret.txt"}), &s.ctx).await,
        "out/",
    );
    assert_denied(
        call(&ReadFile, json!({"path": "rel"}), &s.ctx).await,
        "relative link",
    );
    assert_denied(
        call(&ListDir, json!({"path": "etc"}), &s.ctx).await,
        "list etc",
    );
    assert_denied(
        call(
            &WriteFile,
            json!({"path": "out/new.txt", "content": "x"}),
            &s.ctx,
        )
        .await,
        "write through a link",
    );
    assert!(!s.root.join("outside/new.txt").exists());
    assert_denied(
        call(&WriteFile, json!({"path": "rel", "content": "x"}), &s.ctx).await,
        "write to a link leaving",
    );
    assert_eq!(
        std::fs::read_to_string(s.root.join("outside/secret.txt")).expect("read"),
        "OUTSIDE SECRET"
    );
    let inside = call(&ReadFile, json!({"path": "alias/file.txt"}), &s.ctx).await;
    assert_eq!(inside.expect("a link inside is followed"), "fine\n");

    // The walkers neither follow the links nor show what is behind them.
    let found = call(&FindFiles, json!({"pattern": "**/*.txt"}), &s.ctx)
        .await
        .expect("find");
    assert!(found.contains("real/file.txt"), "{found}");
    assert!(!found.contains("secret"), "{found}");
    let grep = call(&Grep, json!({"pattern": "SECRET"}), &s.ctx)
        .await
        .expect("grep");
    assert!(
        grep.starts_with("no match"),
        "config and links stay hidden: {grep}"
    );
}

#[tokio::test]
async fn the_state_directory_and_the_config_file_are_never_reachable() {
    let s = setup_with(true);
    for path in [
        "state/sessions/ws_1.jsonl",
        "config.toml",
        "state",
        "./state/../state/sessions",
    ] {
        let read = call(&ReadFile, json!({"path": path}), &s.ctx).await;
        let list = call(&ListDir, json!({"path": path}), &s.ctx).await;
        assert!(
            matches!(read, Err(ToolError::Denied(_))) || matches!(list, Err(ToolError::Denied(_))),
            "{path}: {read:?} / {list:?}"
        );
        assert!(!format!("{read:?}{list:?}").contains("SESSION DATA"));
    }
    // Also through a link, and by writing or editing.
    std::os::unix::fs::symlink("state/sessions", s.ws.join("sneaky")).expect("symlink");
    assert_denied(
        call(&ReadFile, json!({"path": "sneaky/ws_1.jsonl"}), &s.ctx).await,
        "link",
    );
    assert_denied(
        call(
            &WriteFile,
            json!({"path": "state/sessions/evil.jsonl", "content": "x"}),
            &s.ctx,
        )
        .await,
        "write into state",
    );
    assert!(!s.state.join("sessions/evil.jsonl").exists());
    assert_denied(
        call(
            &EditFile,
            json!({"path": "config.toml", "old_string": "CONFIG", "new_string": "x"}),
            &s.ctx,
        )
        .await,
        "edit the config",
    );
    assert!(
        std::fs::read_to_string(&s.config)
            .expect("read")
            .contains("CONFIG SECRET")
    );
    let found = call(&FindFiles, json!({"pattern": "**/*"}), &s.ctx)
        .await
        .expect("find");
    assert!(
        !found.contains("state/") && !found.contains("config.toml"),
        "{found}"
    );
    let grep = call(&Grep, json!({"pattern": "SESSION|CONFIG"}), &s.ctx)
        .await
        .expect("grep");
    assert!(grep.starts_with("no match"), "{grep}");
}

/// A directory of the workspace is swapped, again and again, for a link to a directory
/// outside holding a file of the same name. Reads race the swaps: the outside file must
/// never be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_after_the_check_never_wins() {
    let s = setup();
    let dir = s.ws.join("docs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("secret.txt"), "inside").expect("write");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let ws = s.ws.clone();
        let outside = s.root.join("outside");
        std::thread::spawn(move || swap_until(&stop, &ws, &outside))
    };
    let mut inside = 0;
    let mut refused = 0;
    for _ in 0..2000 {
        match call(&ReadFile, json!({"path": "docs/secret.txt"}), &s.ctx).await {
            Ok(text) => {
                assert_eq!(text, "inside\n", "read outside the workspace");
                inside += 1;
            }
            Err(ToolError::Denied(_)) => refused += 1,
            Err(ToolError::Failed(message)) => assert!(!message.contains("SECRET")),
            Err(other) => panic!("{other:?}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let swaps = swapper.join().expect("swapper");
    assert!(swaps > 10, "the swapper ran ({swaps} swaps)");
    assert!(inside + refused > 0);
}

/// Swaps `ws/docs` between the real directory and a link to `outside` until told to stop;
/// returns how many swaps it made.
fn swap_until(stop: &AtomicBool, ws: &Path, outside: &Path) -> usize {
    let real = ws.join("docs");
    let parked = ws.join(".docs-real");
    let link = ws.join(".docs-link");
    let mut swaps = 0;
    while !stop.load(Ordering::SeqCst) {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(outside, &link).expect("symlink");
        std::fs::rename(&real, &parked).expect("park");
        std::fs::rename(&link, &real).expect("link in");
        std::thread::yield_now();
        std::fs::remove_file(&real).expect("link out");
        std::fs::rename(&parked, &real).expect("unpark");
        swaps += 1;
    }
    swaps
}

#[tokio::test]
async fn an_edit_that_does_not_match_once_changes_nothing() {
    let s = setup();
    let path = s.ws.join("notes.md");
    std::fs::write(&path, "tea\ncoffee\ntea\n").expect("write");
    for (old, why) in [("water", "not found"), ("tea", "2 times")] {
        let result = call(
            &EditFile,
            json!({"path": "notes.md", "old_string": old, "new_string": "juice"}),
            &s.ctx,
        )
        .await;
        match result {
            Err(ToolError::Failed(message)) => {
                assert!(
                    message.contains(why) && message.contains("not changed"),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "tea\ncoffee\ntea\n"
        );
    }
    let done = call(
        &EditFile,
        json!({"path": "notes.md", "old_string": "coffee", "new_string": "cocoa"}),
        &s.ctx,
    )
    .await;
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "tea\ncocoa\ntea\n"
    );
}

#[tokio::test]
async fn files_are_written_read_by_lines_listed_found_and_grepped() {
    let s = setup();
    let text: String = (1..=30).map(|n| format!("line {n}\n")).collect();
    let wrote = call(
        &WriteFile,
        json!({"path": "a/b/c.txt", "content": text}),
        &s.ctx,
    )
    .await;
    assert!(wrote.expect("write").contains("a/b/c.txt"));
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a/b/c.txt")).expect("read"),
        text
    );

    let part = call(
        &ReadFile,
        json!({"path": "a/b/c.txt", "offset": 10, "limit": 2}),
        &s.ctx,
    )
    .await
    .expect("read");
    assert_eq!(
        part,
        "line 10\nline 11\n[… more lines follow; read on with offset=12]\n"
    );

    let listing = call(&ListDir, json!({"path": "a"}), &s.ctx)
        .await
        .expect("list");
    assert_eq!(listing, "b/\n");
    let found = call(&FindFiles, json!({"pattern": "**/*.txt"}), &s.ctx)
        .await
        .expect("find");
    assert_eq!(found, "a/b/c.txt\n");
    let grep = call(&Grep, json!({"pattern": "^line 2[0-1]$"}), &s.ctx)
        .await
        .expect("grep");
    assert_eq!(grep, "a/b/c.txt:20: line 20\na/b/c.txt:21: line 21\n");

    // A write through a link inside the workspace replaces its target, not the link.
    std::os::unix::fs::symlink("a/b/c.txt", s.ws.join("short")).expect("symlink");
    call(
        &WriteFile,
        json!({"path": "short", "content": "new"}),
        &s.ctx,
    )
    .await
    .expect("write");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a/b/c.txt")).expect("read"),
        "new"
    );
    assert!(
        std::fs::symlink_metadata(s.ws.join("short"))
            .expect("meta")
            .file_type()
            .is_symlink()
    );
}
