//! `switchboard onboard --workspace DIR`: a workspace with starter files — the context files
//! (SOUL.md, AGENTS.md, USER.md, TOOLS.md, MEMORY.md) and a sample skill. An existing file is
//! never replaced without `--force`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

/// The starter files, by path in the workspace.
pub const STARTER_FILES: [(&str, &str); 6] = [
    ("SOUL.md", include_str!("starter/SOUL.md")),
    ("AGENTS.md", include_str!("starter/AGENTS.md")),
    ("USER.md", include_str!("starter/USER.md")),
    ("TOOLS.md", include_str!("starter/TOOLS.md")),
    ("MEMORY.md", include_str!("starter/MEMORY.md")),
    (
        "skills/daily-note/SKILL.md",
        include_str!("starter/skills/daily-note/SKILL.md"),
    ),
];

/// Writes the starter files into `workspace`, keeping those that exist unless `force`.
/// Prints a line per file.
pub fn run(workspace: &Path, force: bool) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(workspace)
        .with_context(|| format!("cannot create {}", workspace.display()))?;
    let mut kept = 0;
    for (name, text) in STARTER_FILES {
        let path = workspace.join(name);
        if path.exists() && !force {
            say(&format!(
                "kept    {} (it exists; --force replaces it)",
                path.display()
            ));
            kept += 1;
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        say(&format!("wrote   {}", path.display()));
    }
    if kept == STARTER_FILES.len() {
        say("nothing to do: every starter file is there");
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}
