//! [`FileMedia`]: the media store of one process — files waiting for their channel under the
//! state directory's `media/out/`, one folder per day.
//!
//! A file is written to a temporary name, hashed as it is copied, and renamed into place,
//! so a key always names a whole file. Files are kept [`KEEP_DAYS`] days, long enough for a
//! delivery retried after a restart and for a web page's download link; then their day's
//! folder is removed — looked at, at most once an hour, when a file is kept (no task runs
//! for it at idle).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use switchboard_core::{KeptFile, MAX_MEDIA_BYTES, MediaError, MediaStore};

use crate::media::safe;

/// How many days a file waits for delivery (and its web link works).
pub const KEEP_DAYS: u64 = 2;

/// How often old days are looked for, at most.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// Files waiting for delivery, in `<state_dir>/media/out/<day>/<random>-<name>`.
#[derive(Debug)]
pub struct FileMedia {
    root: PathBuf,
    /// The largest file kept ([`MAX_MEDIA_BYTES`]).
    max_bytes: u64,
    /// When old days were last looked for (`None`: not since start).
    swept: Mutex<Option<Instant>>,
}

impl FileMedia {
    /// The store of the state directory `state_dir` (nothing is touched until a file is kept).
    pub fn new(state_dir: &Path) -> Self {
        Self {
            root: state_dir.join("media").join("out"),
            max_bytes: MAX_MEDIA_BYTES,
            swept: Mutex::new(None),
        }
    }

    fn failed(&self, what: &str, err: impl std::fmt::Display) -> MediaError {
        MediaError::Failed {
            place: self.root.display().to_string(),
            what: what.to_owned(),
            why: err.to_string(),
        }
    }

    /// Whether old days are due to be looked for (noting that they are being).
    fn sweep_due(&self) -> bool {
        let mut swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
        let due = swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY);
        if due {
            *swept = Some(Instant::now());
        }
        due
    }

    /// Copies `source` into the store (on a blocking thread), sweeping old days first when due.
    async fn write(
        &self,
        name: &str,
        source: impl Read + Send + 'static,
    ) -> Result<KeptFile, MediaError> {
        let sweep = self.sweep_due();
        let root = self.root.clone();
        let name = safe(name);
        let place = self.root.display().to_string();
        let max = self.max_bytes;
        let written = tokio::task::spawn_blocking(move || {
            if sweep {
                sweep_old_days(&root, today());
            }
            write_file(&root, &name, source.take(max + 1), max)
        })
        .await
        .map_err(|err| self.failed("keep a file", err))?;
        written.map_err(|err| match err {
            Written::TooLarge => MediaError::TooLarge {
                max: self.max_bytes,
            },
            Written::Io(what, err) => MediaError::Failed {
                place,
                what,
                why: err.to_string(),
            },
        })
    }
}

impl FileMedia {
    /// Where the file of `key` is (or would be) kept on this host; `None` for a key that is
    /// not one of this store's.
    pub fn path_of(&self, key: &str) -> Option<PathBuf> {
        valid_key(key).then(|| self.root.join(key))
    }

    /// Keeps under `key` the bytes `source` reads (a file kept on another host, fetched):
    /// written to a temporary name and renamed into place, so the key names a whole file
    /// or none. Returns its path.
    pub async fn receive(
        &self,
        key: &str,
        source: &mut (impl tokio::io::AsyncRead + Unpin),
    ) -> Result<PathBuf, MediaError> {
        let path = self
            .path_of(key)
            .ok_or_else(|| MediaError::Gone(key.to_owned()))?;
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|err| self.failed(&format!("create {}", dir.display()), err))?;
        let temp = dir.join(format!(".{:016x}.part", fastrand::u64(..)));
        let written = async {
            let mut out = tokio::fs::File::create(&temp).await?;
            let mut limited = tokio::io::AsyncReadExt::take(source, self.max_bytes + 1);
            let bytes = tokio::io::copy(&mut limited, &mut out).await?;
            tokio::io::AsyncWriteExt::flush(&mut out).await?;
            Ok::<u64, std::io::Error>(bytes)
        }
        .await;
        let result = match written {
            Ok(bytes) if bytes > self.max_bytes => Err(MediaError::TooLarge {
                max: self.max_bytes,
            }),
            Ok(_) => tokio::fs::rename(&temp, &path)
                .await
                .map_err(|err| self.failed("keep a file", err)),
            Err(err) => Err(self.failed("fetch a file", err)),
        };
        if result.is_err() {
            let _ = tokio::fs::remove_file(&temp).await;
        }
        result.map(|()| path)
    }
}

#[async_trait]
impl MediaStore for FileMedia {
    async fn keep(&self, source: std::fs::File, name: &str) -> Result<KeptFile, MediaError> {
        self.write(name, source).await
    }

    async fn keep_bytes(&self, bytes: Vec<u8>, name: &str) -> Result<KeptFile, MediaError> {
        self.write(name, std::io::Cursor::new(bytes)).await
    }

    async fn local(&self, key: &str) -> Result<PathBuf, MediaError> {
        if !valid_key(key) {
            return Err(MediaError::Gone(key.to_owned()));
        }
        let path = self.root.join(key);
        match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_file() => Ok(path),
            _ => Err(MediaError::Gone(key.to_owned())),
        }
    }
}

/// Why a file was not written.
enum Written {
    TooLarge,
    Io(String, std::io::Error),
}

/// Today, as days since the Unix epoch: the folder a file goes in.
fn today() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        / 86_400
}

/// A key names a file of a day: `<digits>/<safe name>`, nothing else (no path can leave the
/// store).
fn valid_key(key: &str) -> bool {
    let Some((day, file)) = key.split_once('/') else {
        return false;
    };
    !day.is_empty()
        && day.bytes().all(|b| b.is_ascii_digit())
        && !file.is_empty()
        && !file.starts_with('.')
        && file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

fn write_file(
    root: &Path,
    name: &str,
    mut source: impl Read,
    max_bytes: u64,
) -> Result<KeptFile, Written> {
    let day = today().to_string();
    let dir = root.join(&day);
    std::fs::create_dir_all(&dir)
        .map_err(|err| Written::Io(format!("create {}", dir.display()), err))?;
    let file = format!("{:016x}-{name}", fastrand::u64(..));
    let temp = dir.join(format!(".{file}.part"));
    let io = |what: &str| {
        let what = what.to_owned();
        move |err| Written::Io(what, err)
    };
    let mut out = std::fs::File::create(&temp).map_err(io("write a file"))?;
    let mut hash = Sha256::new();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    let copied = loop {
        let read = match source.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => break Err(Written::Io("read the file".into(), err)),
        };
        bytes += read as u64;
        if bytes > max_bytes {
            break Err(Written::TooLarge);
        }
        hash.update(&buf[..read]);
        if let Err(err) = out.write_all(&buf[..read]) {
            break Err(Written::Io("write a file".into(), err));
        }
    };
    let renamed =
        copied.and_then(|()| std::fs::rename(&temp, dir.join(&file)).map_err(io("write a file")));
    if let Err(err) = renamed {
        drop(out);
        let _ = std::fs::remove_file(&temp);
        return Err(err);
    }
    let sha256 = hash
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(KeptFile {
        key: format!("{day}/{file}"),
        bytes,
        sha256,
    })
}

/// Removes the folders of days more than [`KEEP_DAYS`] before `today`.
fn sweep_old_days(root: &Path, today: u64) {
    let Ok(days) = std::fs::read_dir(root) else {
        return;
    };
    for entry in days.flatten() {
        let name = entry.file_name();
        let Some(day) = name.to_str().and_then(|day| day.parse::<u64>().ok()) else {
            continue;
        };
        if day + KEEP_DAYS < today
            && let Err(err) = std::fs::remove_dir_all(entry.path())
        {
            tracing::warn!(path = %entry.path().display(), error = %err,
                "could not remove files kept for delivery");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kept_file_is_found_again_by_its_key_with_its_hash() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileMedia::new(dir.path());
        let kept = store
            .keep_bytes(b"abc".to_vec(), "../../report 1.pdf")
            .await
            .expect("kept");
        assert_eq!(kept.bytes, 3);
        assert_eq!(
            kept.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(kept.key.ends_with("-_.._report_1.pdf"), "{}", kept.key);
        let path = store.local(&kept.key).await.expect("found");
        assert_eq!(std::fs::read(path).expect("read"), b"abc");
        assert!(path_inside(&store, &kept.key));
    }

    fn path_inside(store: &FileMedia, key: &str) -> bool {
        store.root.join(key).starts_with(&store.root)
    }

    #[tokio::test]
    async fn a_key_cannot_name_a_path_outside_the_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("secret"), "x").expect("write");
        let store = FileMedia::new(dir.path());
        for key in [
            "../../secret",
            "1/../../../secret",
            "/etc/passwd",
            "1/.hidden",
            "x/y",
        ] {
            assert!(
                matches!(store.local(key).await, Err(MediaError::Gone(_))),
                "{key}"
            );
        }
    }

    #[test]
    fn days_past_the_keep_are_swept_and_the_others_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        for day in [100, 103, 104, 105] {
            std::fs::create_dir_all(dir.path().join(day.to_string())).expect("dir");
        }
        std::fs::create_dir_all(dir.path().join("notes")).expect("dir");
        sweep_old_days(dir.path(), 105);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["103", "104", "105", "notes"]);
    }

    #[tokio::test]
    async fn a_file_over_the_cap_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileMedia {
            max_bytes: 100_000,
            ..FileMedia::new(dir.path())
        };
        let endless = std::io::repeat(7);
        let err = store.write("big.bin", endless).await.expect_err("refused");
        assert!(matches!(err, MediaError::TooLarge { .. }), "{err}");
        let day = dir.path().join("media/out").join(today().to_string());
        assert_eq!(std::fs::read_dir(day).map(|d| d.count()).unwrap_or(0), 0);
    }
}
