//! Landlock (Linux ≥ 5.13; the `landlock` crate, best effort for older ABIs): a command
//! writes only beneath the workspace and its private temp directory (and `/dev/null`);
//! reads and executes only beneath the system's directories (`/usr`, `/etc`, `/bin`, …),
//! the workspace and the temp directory — minus the branches that hold the daemon's state
//! directory, its config file and its credentials. Home directories and everything else
//! are neither read nor written.

use std::path::{Path, PathBuf};

use super::SandboxArgs;
use landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus,
};

/// The newest Landlock ABI the ruleset asks for (older kernels get what they support).
const LANDLOCK_ABI: ABI = ABI::V5;

/// Directories a command may read and execute from (those that exist).
pub const SYSTEM_READ_PATHS: [&str; 12] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/dev", "/proc", "/sys",
    "/run",
];

/// How far Landlock confines commands on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// Every access right the ruleset asks for is enforced.
    Full,
    /// An older kernel: some rights (e.g. truncation, renames across directories) are not.
    Partial,
    /// The kernel has no Landlock (or it is disabled): only the workspace as working
    /// directory, the minimal environment and the process group.
    None,
}

impl Confinement {
    /// Asks the kernel, from a thread that confines itself and exits, how far a ruleset
    /// like the one of commands would be enforced.
    pub fn probe() -> Self {
        let probe = std::thread::spawn(|| -> Result<RulesetStatus, String> {
            let all = AccessFs::from_all(LANDLOCK_ABI);
            let root = PathFd::new("/").map_err(|e| e.to_string())?;
            let status = Ruleset::default()
                .handle_access(all)
                .and_then(|ruleset| ruleset.create())
                .and_then(|ruleset| ruleset.add_rule(PathBeneath::new(root, all)))
                .and_then(|ruleset| ruleset.restrict_self())
                .map_err(|e| e.to_string())?;
            Ok(status.ruleset)
        });
        match probe.join() {
            Ok(Ok(RulesetStatus::FullyEnforced)) => Self::Full,
            Ok(Ok(RulesetStatus::PartiallyEnforced)) => Self::Partial,
            _ => Self::None,
        }
    }
}

/// Applies the Landlock ruleset to the calling thread (and what it starts from now on).
pub(crate) fn confine(args: &SandboxArgs) -> Result<RulesetStatus, String> {
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let text = |err: landlock::RulesetError| err.to_string();
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .and_then(|ruleset| ruleset.create())
        .map_err(text)?;
    let system: Vec<PathBuf> = SYSTEM_READ_PATHS.iter().map(PathBuf::from).collect();
    for path in readable(&system, &args.forbidden) {
        if let Ok(fd) = PathFd::new(&path) {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, read)).map_err(text)?;
        }
    }
    let open = |path: &Path| PathFd::new(path).map_err(|err| format!("{}: {err}", path.display()));
    for path in [&args.workspace, &args.tmp] {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(path)?, all))
            .map_err(text)?;
    }
    let file = AccessFs::from_file(LANDLOCK_ABI);
    let null = open(Path::new("/dev/null"))?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(null, file))
        .map_err(text)?;
    Ok(ruleset.restrict_self().map_err(text)?.ruleset)
}

/// The paths to allow reading beneath so that everything under `roots` is readable except
/// what lies under a `forbidden` path: a root with nothing forbidden below it is kept whole;
/// one with a forbidden path below it is replaced by its entries, each judged the same way.
pub fn readable(roots: &[PathBuf], forbidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots {
        split_around(root, forbidden, &mut out, 0);
    }
    out
}

fn split_around(path: &Path, forbidden: &[PathBuf], out: &mut Vec<PathBuf>, depth: usize) {
    if forbidden.iter().any(|place| path.starts_with(place)) {
        return;
    }
    if !forbidden.iter().any(|place| place.starts_with(path)) {
        out.push(path.to_path_buf());
        return;
    }
    // A forbidden place lies below: allow its siblings on the way down, never it. (Links
    // are not followed: a listed link is allowed as what it points to, like any rule.)
    if depth > 32 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
    children.sort();
    for child in children {
        split_around(&child, forbidden, out, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forbidden_branch_is_cut_out_and_its_siblings_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        for sub in ["etc/ssl", "etc/switchboard", "usr/bin"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        std::fs::write(root.join("etc/hosts"), "").expect("write");
        std::fs::write(root.join("etc/switchboard/config.toml"), "").expect("write");
        std::fs::write(root.join("etc/switchboard/other"), "").expect("write");
        let roots = [root.join("etc"), root.join("usr")];
        let forbidden = [root.join("etc/switchboard/config.toml")];
        let got = readable(&roots, &forbidden);
        assert_eq!(
            got,
            [
                root.join("etc/hosts"),
                root.join("etc/ssl"),
                root.join("etc/switchboard/other"),
                root.join("usr"),
            ]
        );
        // Nothing forbidden below: the roots whole. A forbidden root: nothing of it.
        assert_eq!(readable(&roots, &[]), roots);
        assert_eq!(readable(&roots, &[root.join("etc")]), [root.join("usr")]);
    }
}
