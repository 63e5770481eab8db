//! [`Workspace`]: the one place where a path the model wrote becomes a file.
//!
//! Every file tool goes through [`Workspace::resolve`] and then opens what it resolved
//! through the workspace, never through a path of its own:
//! - `resolve` is lexical: a path is relative to the workspace; `~` is refused (the model
//!   must not guess at the daemon's home), `..` may not climb above the workspace, and an
//!   absolute path is accepted only when it names something inside it.
//! - opening is done by the kernel, from a descriptor of the workspace directory, with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: every component, every symbolic link
//!   on the way, is resolved at the moment of the open and the open fails (`EXDEV`) if any
//!   of it leaves the workspace. There is no check-then-use gap: a symlink swapped in after
//!   `resolve` is met by the open itself.
//! - what was opened is then located (`/proc/self/fd`) and refused if it lies in the
//!   daemon's state directory or is its config file, wherever those are.
//!
//! With `restrict_to_workspace = false` any path may be named, and only the state directory
//! and config file stay out of reach.
//!
//! When the daemon runs as root its commands run as another user ([`RunAs`]); the files
//! and directories the file tools create are then given to that user, so that what the
//! model writes, its commands can change.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::ToolError;
use crate::sandbox::RunAs;

/// The directory the agent's tools work in, and what they may never reach.
#[derive(Debug)]
pub struct Workspace {
    /// The workspace directory, canonical.
    root: PathBuf,
    /// The workspace directory, opened (`O_PATH`): the base of every confined open.
    dir: OwnedFd,
    /// Canonical paths no tool may reach (the state directory, the config file).
    forbidden: Vec<PathBuf>,
    /// Whether paths are confined to the workspace (`restrict_to_workspace`).
    confined: bool,
    /// Who owns what the file tools create (the commands' user, when the daemon is root).
    owner: Option<RunAs>,
}

/// A path a tool named, checked lexically and ready to be opened through its [`Workspace`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Relative to the workspace (`.` for the workspace itself) or, unconfined, absolute.
    path: PathBuf,
}

impl ResolvedPath {
    /// The path relative to the workspace (or absolute when unconfined), for messages.
    pub fn as_path(&self) -> &Path {
        &self.path
    }

    /// The path as the model should see it.
    pub fn shown(&self) -> String {
        self.path.display().to_string()
    }
}

/// A directory entry, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes (files only).
    pub size: u64,
}

/// The kinds of directory entries a listing tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (not followed when listing).
    Symlink,
    /// Anything else (socket, fifo, device).
    Other,
}

impl Workspace {
    /// Opens the workspace at `root`, creating it if needed. `forbidden` are paths no tool
    /// may reach (they need not exist yet).
    pub fn new(root: &Path, forbidden: &[PathBuf], confined: bool) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        let dir = rustix::fs::open(
            &root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let forbidden = forbidden
            .iter()
            .map(|path| canonical_or_lexical(path))
            .collect();
        Ok(Self {
            root,
            dir,
            forbidden,
            confined,
            owner: None,
        })
    }

    /// Gives what the file tools create from now on to `owner` (`exec`'s user when the
    /// daemon is root).
    pub fn with_owner(mut self, owner: Option<RunAs>) -> Self {
        self.owner = owner;
        self
    }

    /// The workspace directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The places no tool may reach (canonical).
    pub fn forbidden(&self) -> &[PathBuf] {
        &self.forbidden
    }

    /// Whether paths are confined to the workspace.
    pub fn confined(&self) -> bool {
        self.confined
    }

    /// Checks a path the model wrote. Refuses `~`, `..` above the workspace and, when
    /// confined, absolute paths outside it. Symbolic links are judged when opening.
    pub fn resolve(&self, raw: &str) -> Result<ResolvedPath, ToolError> {
        let raw_trimmed = raw.trim();
        if raw_trimmed.is_empty() {
            return Err(ToolError::InvalidArguments("the path is empty".into()));
        }
        if raw_trimmed.contains('\0') {
            return Err(ToolError::InvalidArguments(
                "the path contains a NUL byte".into(),
            ));
        }
        if raw_trimmed.starts_with('~') {
            return Err(ToolError::Denied(format!(
                "`{raw_trimmed}`: `~` is not available; paths are relative to the workspace"
            )));
        }
        let path = Path::new(raw_trimmed);
        let relative = if path.is_absolute() {
            let normal = normalize(path).ok_or_else(|| outside(raw_trimmed))?;
            match normal.strip_prefix(&self.root) {
                Ok(inside) => inside.to_path_buf(),
                Err(_) if !self.confined => {
                    return Ok(ResolvedPath { path: normal });
                }
                Err(_) => return Err(outside(raw_trimmed)),
            }
        } else {
            normalize(path).ok_or_else(|| outside(raw_trimmed))?
        };
        let path = if relative.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            relative
        };
        Ok(ResolvedPath { path })
    }

    /// Opens a file for reading.
    pub fn open_read(&self, path: &ResolvedPath) -> Result<File, ToolError> {
        let fd = self.open_fd(path, OFlags::RDONLY)?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|err| io_error(path, err))?;
        if meta.is_dir() {
            return Err(ToolError::Failed(format!(
                "`{}` is a directory; list it with list_dir",
                path.shown()
            )));
        }
        Ok(file)
    }

    /// The start of a text file (at most `max` bytes, cut on a character boundary) and its
    /// whole size.
    pub fn read_text(&self, raw: &str, max: usize) -> Result<(String, u64), ToolError> {
        use std::io::Read;
        let path = self.resolve(raw)?;
        let file = self.open_read(&path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut bytes = Vec::with_capacity(max.min(size as usize));
        file.take(max as u64)
            .read_to_end(&mut bytes)
            .map_err(|err| io_error(&path, err))?;
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(err) => {
                // A cut may fall inside a character: keep what is whole.
                let valid = err.utf8_error().valid_up_to();
                let mut bytes = err.into_bytes();
                bytes.truncate(valid);
                String::from_utf8(bytes).unwrap_or_default()
            }
        };
        Ok((text, size))
    }

    /// Lists a directory, sorted by name. Symbolic links are listed, not followed.
    pub fn read_dir(&self, path: &ResolvedPath) -> Result<Vec<DirEntry>, ToolError> {
        let fd = self.open_fd(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|err| errno(path, err))?;
        let mut entries = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|err| errno(path, err))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let stat = rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW);
            let (kind, size) = match stat {
                Ok(stat) => {
                    let kind = match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
                        rustix::fs::FileType::Directory => EntryKind::Dir,
                        rustix::fs::FileType::RegularFile => EntryKind::File,
                        rustix::fs::FileType::Symlink => EntryKind::Symlink,
                        _ => EntryKind::Other,
                    };
                    (kind, u64::try_from(stat.st_size).unwrap_or(0))
                }
                Err(_) => (EntryKind::Other, 0),
            };
            entries.push(DirEntry {
                name: String::from_utf8_lossy(name).into_owned(),
                kind,
                size,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Where a directory (or file) to walk really is (an absolute path), after the confined open of
    /// it. Walkers list by path; everything they then read goes through [`Self::open_read`].
    pub fn walk_root(&self, path: &ResolvedPath) -> Result<PathBuf, ToolError> {
        let fd = self.open_fd(path, OFlags::PATH)?;
        Ok(self
            .locate(&fd)
            .unwrap_or_else(|| self.root.join(&path.path)))
    }

    /// Whether a real path lies in the state directory or is the config file.
    pub fn forbids(&self, real: &Path) -> bool {
        self.forbidden.iter().any(|place| real.starts_with(place))
    }

    /// A real path (found by a walk) as the tools show it and [`Self::resolve`] takes it:
    /// relative to the workspace when inside it.
    pub fn relative(&self, real: &Path) -> ResolvedPath {
        match real.strip_prefix(&self.root) {
            Ok(inside) if !inside.as_os_str().is_empty() => ResolvedPath {
                path: inside.to_path_buf(),
            },
            Ok(_) => ResolvedPath {
                path: PathBuf::from("."),
            },
            Err(_) => ResolvedPath {
                path: real.to_path_buf(),
            },
        }
    }

    /// Replaces (or creates) a file with `bytes`, atomically: written beside it under a
    /// temporary name, synced, renamed over it. Missing parent directories are created. A
    /// symbolic link at the path is written through (its target, inside the workspace, is
    /// replaced), never replaced by the file.
    pub fn write(&self, path: &ResolvedPath, bytes: &[u8]) -> Result<(), ToolError> {
        // Write through a link to where it points, as an editor would.
        let target = match self.open_fd(path, OFlags::PATH) {
            Ok(fd) => match self.locate(&fd) {
                Some(real) => self.resolve_real(&real, path)?,
                None => path.clone(),
            },
            Err(ToolError::Failed(_)) => path.clone(),
            Err(err) => return Err(err),
        };
        let (parent, name) = split(&target)?;
        let parent_fd = self.make_dirs(&parent)?;
        let tmp = format!(
            ".{}.switchboard-{}.tmp",
            name.to_string_lossy(),
            fastrand::u64(..)
        );
        let mode = rustix::fs::statat(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|stat| Mode::from_raw_mode(stat.st_mode) & Mode::from_bits_truncate(0o7777))
            .unwrap_or(Mode::from_bits_truncate(0o644));
        let fd = rustix::fs::openat(
            &parent_fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )
        .map_err(|err| errno(&target, err))?;
        if let Some(owner) = &self.owner {
            rustix::fs::fchown(&fd, Some(uid(owner)), Some(gid(owner)))
                .map_err(|err| errno(&target, err))?;
        }
        let mut file = File::from(fd);
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(|err| io_error(&target, err))
            .and_then(|()| {
                rustix::fs::renameat(&parent_fd, tmp.as_str(), &parent_fd, name)
                    .map_err(|err| errno(&target, err))
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&parent_fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }

    /// Opens `path` through the kernel's confined resolution, then refuses it if it lies in
    /// a forbidden place.
    fn open_fd(&self, path: &ResolvedPath, flags: OFlags) -> Result<OwnedFd, ToolError> {
        // openat2 refuses flags O_PATH does not take (O_NOCTTY among them).
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        let opened = if path.path.is_absolute() {
            rustix::fs::open(&path.path, flags, Mode::empty())
        } else if self.confined {
            rustix::fs::openat2(
                &self.dir,
                &path.path,
                flags,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            )
        } else {
            rustix::fs::openat(&self.dir, &path.path, flags, Mode::empty())
        };
        let fd = opened.map_err(|err| errno(path, err))?;
        self.check_allowed(&fd, path)?;
        Ok(fd)
    }

    /// Refuses a descriptor that lies in the state directory or is the config file.
    fn check_allowed(&self, fd: &OwnedFd, path: &ResolvedPath) -> Result<(), ToolError> {
        let real = self
            .locate(fd)
            .unwrap_or_else(|| self.root.join(&path.path));
        if self.forbids(&real) {
            return Err(ToolError::Denied(format!(
                "`{}` belongs to the daemon (its state or its config), which tools may not touch",
                path.shown()
            )));
        }
        Ok(())
    }

    /// Where an open descriptor really is, from `/proc/self/fd`.
    fn locate(&self, fd: &impl AsFd) -> Option<PathBuf> {
        let link = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd.as_fd())
        );
        std::fs::read_link(link).ok().filter(|p| p.is_absolute())
    }

    /// A located path as a [`ResolvedPath`] again (for writing through a link).
    fn resolve_real(&self, real: &Path, asked: &ResolvedPath) -> Result<ResolvedPath, ToolError> {
        match real.strip_prefix(&self.root) {
            Ok(inside) if !inside.as_os_str().is_empty() => Ok(ResolvedPath {
                path: inside.to_path_buf(),
            }),
            _ if !self.confined => Ok(ResolvedPath {
                path: real.to_path_buf(),
            }),
            _ => Err(outside(&asked.shown())),
        }
    }

    /// Opens (creating what is missing) the directory `path`, component by component, each
    /// through the confined open.
    fn make_dirs(&self, path: &ResolvedPath) -> Result<OwnedFd, ToolError> {
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
        match self.open_fd(path, dir_flags) {
            Ok(fd) => return Ok(fd),
            Err(ToolError::Failed(_)) => {}
            Err(err) => return Err(err),
        }
        let mut so_far = if path.path.is_absolute() {
            PathBuf::from("/")
        } else {
            PathBuf::new()
        };
        for component in path.path.components() {
            let parent = ResolvedPath {
                path: if so_far.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    so_far.clone()
                },
            };
            so_far.push(component);
            if matches!(component, Component::RootDir | Component::CurDir) {
                continue;
            }
            let here = ResolvedPath {
                path: so_far.clone(),
            };
            if self.open_fd(&here, dir_flags).is_ok() {
                continue;
            }
            let parent_fd = self.open_fd(&parent, dir_flags)?;
            match rustix::fs::mkdirat(&parent_fd, component.as_os_str(), Mode::from(0o755)) {
                Ok(()) => {
                    if let Some(owner) = &self.owner {
                        rustix::fs::chownat(
                            &parent_fd,
                            component.as_os_str(),
                            Some(uid(owner)),
                            Some(gid(owner)),
                            AtFlags::SYMLINK_NOFOLLOW,
                        )
                        .map_err(|err| errno(&here, err))?;
                    }
                }
                Err(Errno::EXIST) => {}
                Err(err) => return Err(errno(&here, err)),
            }
        }
        self.open_fd(path, dir_flags)
    }
}

fn uid(owner: &RunAs) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(owner.uid)
}

fn gid(owner: &RunAs) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(owner.gid)
}

/// `path` without `.` and with `..` applied; `None` if `..` climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for component in path.components() {
        match component {
            Component::Prefix(_) => return None,
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return None;
                }
                depth -= 1;
                out.pop();
            }
            Component::Normal(name) => {
                depth += 1;
                out.push(name);
            }
        }
    }
    Some(out)
}

/// The parent directory and file name of a path naming a file.
fn split(path: &ResolvedPath) -> Result<(ResolvedPath, &OsStr), ToolError> {
    let name = path.path.file_name().ok_or_else(|| {
        ToolError::InvalidArguments(format!("`{}` does not name a file", path.shown()))
    })?;
    let parent = match path.path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((ResolvedPath { path: parent }, name))
}

/// A path canonicalized as far as it exists (the rest appended), so a forbidden place that
/// does not exist yet is still recognised once it does.
fn canonical_or_lexical(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
            canonical_or_lexical(parent).join(name)
        }
        _ => normalize(path).unwrap_or_else(|| path.to_path_buf()),
    }
}

fn outside(raw: &str) -> ToolError {
    ToolError::Denied(format!(
        "`{raw}` is outside the workspace; use a path relative to it"
    ))
}

/// A failed open or file operation, said so the model knows what to do next.
fn errno(path: &ResolvedPath, err: Errno) -> ToolError {
    let shown = path.shown();
    match err {
        Errno::XDEV | Errno::LOOP if shown != "." => ToolError::Denied(format!(
            "`{shown}` leads outside the workspace (through a symbolic link or `..`)"
        )),
        Errno::NOSYS => ToolError::Failed(
            "this kernel lacks openat2 (Linux 5.6 or later is needed to confine file access)"
                .into(),
        ),
        Errno::NOENT => ToolError::Failed(format!("`{shown}` does not exist")),
        Errno::NOTDIR => ToolError::Failed(format!("a part of `{shown}` is not a directory")),
        Errno::ISDIR => ToolError::Failed(format!("`{shown}` is a directory")),
        Errno::ACCESS | Errno::PERM => ToolError::Failed(format!("`{shown}`: permission denied")),
        Errno::NOSPC => ToolError::Failed(format!("`{shown}`: no space left on the device")),
        other => ToolError::Failed(format!("`{shown}`: {}", io::Error::from(other))),
    }
}

fn io_error(path: &ResolvedPath, err: io::Error) -> ToolError {
    match err.raw_os_error() {
        Some(code) => errno(path, Errno::from_raw_os_error(code)),
        None => ToolError::Failed(format!("`{}`: {err}", path.shown())),
    }
}
