//! Files of whole records, as sessions are kept: a record is
//! appended whole or not at all — a write that fails part-way (a full disk) is cut back to
//! the file's length before it —, a file found ending in a partial record is cut after its
//! last newline, and a file is replaced atomically (a temporary beside it, fsynced, renamed
//! over it, the directory fsynced). So a file always ends with a whole record, and is
//! always either its old or its new self.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// What an append needs of a file. A trait so tests can make writes fail part-way.
#[allow(clippy::len_without_is_empty)]
pub trait AppendTarget {
    /// The current length.
    fn len(&self) -> std::io::Result<u64>;
    /// Writes all of `buf` at the end.
    fn append(&self, buf: &[u8]) -> std::io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn cut(&self, len: u64) -> std::io::Result<()>;
}

impl AppendTarget for std::fs::File {
    fn len(&self) -> std::io::Result<u64> {
        self.metadata().map(|m| m.len())
    }
    fn append(&self, buf: &[u8]) -> std::io::Result<()> {
        let mut file = self;
        file.write_all(buf)
    }
    fn cut(&self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// A failed append: why, and whether the file was cut back to its length before.
pub struct AppendFailure {
    /// Why the write failed.
    pub error: std::io::Error,
    /// Whether the file was cut back to its length before (else it may end in a partial
    /// record, which [`cut_partial_tail`] removes).
    pub cut_back: bool,
}

/// Appends `buf` whole or not at all: when the write fails part-way (a full disk), the
/// file is cut back to the length it had before, so it still ends with a whole record.
/// Only one writer appends to a file at a time (a session's worker; the scheduler under its
/// lock), so nothing else moves the end meanwhile.
pub fn append_whole(file: &impl AppendTarget, buf: &[u8]) -> Result<(), AppendFailure> {
    let before = file.len().map_err(|error| AppendFailure {
        error,
        cut_back: true,
    })?;
    file.append(buf).map_err(|error| {
        let cut_back = match file.cut(before) {
            Ok(()) => true,
            Err(cut) => {
                tracing::warn!(error = %cut, "could not cut a failed append back");
                false
            }
        };
        AppendFailure { error, cut_back }
    })
}

/// Cuts a file after its last newline, dropping a partial record at its end.
pub fn cut_partial_tail(path: &Path) -> std::io::Result<()> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        // Moved or removed since: nothing left to cut.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let piece = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(piece)?;
        if let Some(at) = piece.iter().rposition(|&b| b == b'\n') {
            let keep = start + at as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(());
        }
        end = start;
    }
    file.set_len(0)
}

/// Replaces the file at `path` with `bytes` atomically: written to a temporary beside it,
/// fsynced, renamed over it, and the directory fsynced.
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = swap_in(path, bytes, true)?;
    sync_dir(dir)
}

/// Replaces the file at `path` with `bytes` atomically against a crash of the process (a
/// temporary beside it renamed over it), without waiting for the disk: a power cut may
/// leave the old content. For files rewritten at every model call.
pub fn replace_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    swap_in(path, bytes, false).map(drop)
}

/// Writes `bytes` to a temporary beside `path` (fsynced when `sync`) and renames it over
/// `path`; returns the directory.
fn swap_in<'p>(path: &'p Path, bytes: &[u8], sync: bool) -> std::io::Result<&'p Path> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    if sync {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(&tmp, path)?;
    Ok(dir)
}

/// Makes `dir` (and what is missing above it) readable by its owner only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Fsyncs a directory, so a rename in it survives a power cut.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes `room` more bytes, then fails like a full disk.
    struct FullDisk {
        data: std::cell::RefCell<Vec<u8>>,
        room: usize,
        cut_fails: bool,
    }

    impl AppendTarget for FullDisk {
        fn len(&self) -> std::io::Result<u64> {
            Ok(self.data.borrow().len() as u64)
        }
        fn append(&self, buf: &[u8]) -> std::io::Result<()> {
            let mut data = self.data.borrow_mut();
            let fits = buf.len().min(self.room.saturating_sub(data.len()));
            data.extend_from_slice(&buf[..fits]);
            if fits < buf.len() {
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            Ok(())
        }
        fn cut(&self, len: u64) -> std::io::Result<()> {
            if self.cut_fails {
                return Err(std::io::Error::other("cannot cut"));
            }
            self.data.borrow_mut().truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_failed_append_is_cut_back_to_the_last_whole_record() {
        let disk = FullDisk {
            data: std::cell::RefCell::new(b"{\"role\":\"user\",\"content\":\"q\"}\n".to_vec()),
            room: 50,
            cut_fails: false,
        };
        let before = disk.data.borrow().clone();
        let record = b"{\"role\":\"assistant\",\"content\":\"a long answer\"}\n";
        let failure = append_whole(&disk, record).expect_err("the disk is full");
        assert!(failure.cut_back);
        assert_eq!(failure.error.raw_os_error(), Some(28));
        assert_eq!(*disk.data.borrow(), before, "no partial record is left");

        let stuck = FullDisk {
            cut_fails: true,
            ..disk
        };
        let failure = append_whole(&stuck, record).expect_err("still full");
        assert!(
            !failure.cut_back,
            "the caller must learn the file is damaged"
        );
    }
}
