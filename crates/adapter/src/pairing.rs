//! Who may talk to the agent: each channel's allow list, and pairing for everyone else.
//!
//! A sender not on the allow list gets a one-time code instead of an answer, and never
//! reaches the agent. The operator approves it with `switchboard pairing approve CODE`,
//! which changes the pairing document (`pairing.json` in the state directory, or the
//! cluster's state bucket: see [`StateStore`]); the running daemon reads that small document
//! for every message from a sender not on the allow list, so an approval — or a `revoke` —
//! takes effect at once, on every host, without a restart. A code expires after an hour; it
//! is sent to the same sender at most once a minute; and at most [`MAX_PENDING`] codes wait
//! at once, so strangers cannot fill the document. The daemon and the CLI change it with
//! [`StateStore::update`], so neither undoes the other's change.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use switchboard_core::{Change, StateError, StateStore};

/// How long a code may be approved.
pub const CODE_TTL: Duration = Duration::from_secs(3600);
/// A sender is sent its code again at most this often.
pub const RESEND_AFTER: Duration = Duration::from_secs(60);
/// Codes waiting for approval at once, all channels together.
pub const MAX_PENDING: usize = 32;

/// The pairing document's key.
pub const PAIRING_KEY: &str = "pairing.json";

/// Letters and digits that cannot be mistaken for one another.
const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// What can go wrong with the pairing document.
#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    /// It could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// It is not valid JSON of the expected shape.
    #[error("the pairing document {place} is damaged: {message}")]
    Damaged {
        /// Where it is.
        place: String,
        /// What the parser said.
        message: String,
    },
    /// No code waiting for approval is this one (it may have expired).
    #[error(
        "no pairing code {0} is waiting (codes expire after an hour); `switchboard pairing list` shows those that are"
    )]
    UnknownCode(String),
    /// No approved sender matches.
    #[error("no approved sender matches `{0}`; `switchboard pairing list` shows them")]
    UnknownSender(String),
}

/// A channel's allow list: platform user ids, and `@usernames` where the platform has them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList {
    ids: HashSet<String>,
    usernames: HashSet<String>,
}

impl AllowList {
    /// From the config's entries (`"123456"`, `"@alice"`).
    pub fn new<S: AsRef<str>>(entries: &[S]) -> Self {
        let mut list = Self::default();
        for entry in entries {
            let entry = entry.as_ref().trim();
            match entry.strip_prefix('@') {
                Some(name) => list.usernames.insert(name.to_lowercase()),
                None => list.ids.insert(entry.to_owned()),
            };
        }
        list
    }

    /// Whether a sender (by id, or by username) is on the list.
    pub fn allows(&self, sender: &str, username: Option<&str>) -> bool {
        self.ids.contains(sender)
            || username.is_some_and(|name| {
                self.usernames
                    .contains(&name.trim_start_matches('@').to_lowercase())
            })
    }
}

/// A code waiting for approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCode {
    /// The code, e.g. `K7QX-9M2P`.
    pub code: String,
    /// The channel the sender wrote on.
    pub channel: String,
    /// The sender's platform id.
    pub sender: String,
    /// How the sender calls themselves, for the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
    /// When the code was last sent to the sender, unix seconds.
    pub last_sent_at: u64,
}

/// A sender the operator approved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approved {
    /// The channel.
    pub channel: String,
    /// The sender's platform id.
    pub sender: String,
    /// How the sender called themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unix seconds.
    pub approved_at: u64,
}

/// The pairing file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairingFile {
    /// Codes waiting for approval.
    #[serde(default)]
    pub pending: Vec<PendingCode>,
    /// Senders approved.
    #[serde(default)]
    pub approved: Vec<Approved>,
}

/// What to do with a message from a sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The sender may talk to the agent.
    Allowed,
    /// Send the sender this text (their pairing code); the message goes no further.
    Pair(String),
    /// Drop the message without a word (a code was sent less than a minute ago, or too
    /// many codes wait).
    Ignore,
}

/// The pairing state of a daemon (or of the CLI): the document, read when needed.
#[derive(Debug)]
pub struct Pairing {
    state: Arc<dyn StateStore>,
}

impl Pairing {
    /// Pairing kept in `state` under [`PAIRING_KEY`].
    pub fn new(state: Arc<dyn StateStore>) -> Self {
        Self { state }
    }

    /// Where the document is, for messages.
    pub fn place(&self) -> String {
        format!("{}/{PAIRING_KEY}", self.state.place())
    }

    /// Decides on a message from `sender` on `channel`. Errors reading or writing the
    /// document are logged and count as "not approved": a broken one never lets a stranger
    /// in.
    pub async fn check(
        &self,
        channel: &str,
        sender: &str,
        name: Option<&str>,
        allow: &AllowList,
        now: SystemTime,
    ) -> Verdict {
        if allow.allows(sender, name) {
            return Verdict::Allowed;
        }
        match self.decide(channel, sender, name, now).await {
            Ok(verdict) => verdict,
            Err(err) => {
                tracing::error!(error = %err, "pairing: could not use the pairing document");
                Verdict::Ignore
            }
        }
    }

    async fn decide(
        &self,
        channel: &str,
        sender: &str,
        name: Option<&str>,
        now: SystemTime,
    ) -> Result<Verdict, PairingError> {
        let approved = |file: &PairingFile| {
            file.approved
                .iter()
                .any(|a| a.channel == channel && a.sender == sender)
        };
        if approved(&self.read().await?) {
            return Ok(Verdict::Allowed);
        }
        let now_secs = unix(now);
        self.change(|file| {
            if approved(file) {
                return Ok(Verdict::Allowed);
            }
            if let Some(pending) = file
                .pending
                .iter_mut()
                .find(|p| p.channel == channel && p.sender == sender)
            {
                if now_secs.saturating_sub(pending.last_sent_at) < RESEND_AFTER.as_secs() {
                    return Ok(Verdict::Ignore);
                }
                pending.last_sent_at = now_secs;
                return Ok(Verdict::Pair(pairing_text(&pending.code)));
            }
            if file.pending.len() >= MAX_PENDING {
                tracing::warn!(channel, sender, "pairing: too many codes are waiting; a stranger gets none");
                return Ok(Verdict::Ignore);
            }
            let code = new_code(file);
            tracing::info!(channel, sender, name, %code,
                "pairing: an unknown sender got a code; approve it with `switchboard pairing approve`");
            file.pending.push(PendingCode {
                code: code.clone(),
                channel: channel.to_owned(),
                sender: sender.to_owned(),
                name: name.map(str::to_owned),
                created_at: now_secs,
                last_sent_at: now_secs,
            });
            Ok(Verdict::Pair(pairing_text(&code)))
        })
        .await
    }

    /// Whether a sender was approved on a channel (no code is made): for places where a
    /// code must not be posted, such as a group chat.
    pub async fn approved(&self, channel: &str, sender: &str) -> bool {
        match self.read().await {
            Ok(file) => file
                .approved
                .iter()
                .any(|a| a.channel == channel && a.sender == sender),
            Err(err) => {
                tracing::error!(error = %err, "pairing: could not read the pairing document");
                false
            }
        }
    }

    /// The codes waiting (expired ones dropped) and the approved senders.
    pub async fn list(&self) -> Result<PairingFile, PairingError> {
        self.change(|file| Ok(file.clone())).await
    }

    /// Approves a waiting code: its sender may talk from now on.
    pub async fn approve(&self, code: &str) -> Result<Approved, PairingError> {
        self.change(|file| {
            let pending = take_pending(file, code)?;
            let approved = Approved {
                channel: pending.channel,
                sender: pending.sender,
                name: pending.name,
                approved_at: unix(SystemTime::now()),
            };
            file.approved
                .retain(|a| !(a.channel == approved.channel && a.sender == approved.sender));
            file.approved.push(approved.clone());
            Ok(approved)
        })
        .await
    }

    /// Turns a waiting code down: it is forgotten (the sender is not approved; a later
    /// message of theirs gets a new code, as a stranger's would).
    pub async fn deny(&self, code: &str) -> Result<PendingCode, PairingError> {
        self.change(|file| take_pending(file, code)).await
    }

    /// Revokes an approved sender (`12345`, or `telegram:12345` for one channel only).
    pub async fn revoke(&self, sender: &str) -> Result<Vec<Approved>, PairingError> {
        let (channel, id) = match sender.split_once(':') {
            Some((channel, id)) => (Some(channel), id),
            None => (None, sender),
        };
        self.change(|file| {
            let (gone, kept) = file
                .approved
                .drain(..)
                .partition(|a: &Approved| a.sender == id && channel.is_none_or(|c| c == a.channel));
            file.approved = kept;
            if gone.is_empty() {
                Err(PairingError::UnknownSender(sender.to_owned()))
            } else {
                Ok(gone)
            }
        })
        .await
    }

    async fn read(&self) -> Result<PairingFile, PairingError> {
        match self.state.get(PAIRING_KEY).await? {
            Some(stored) => self.parse(&stored.bytes),
            None => Ok(PairingFile::default()),
        }
    }

    fn parse(&self, bytes: &[u8]) -> Result<PairingFile, PairingError> {
        serde_json::from_slice(bytes).map_err(|err| PairingError::Damaged {
            place: self.place(),
            message: err.to_string(),
        })
    }

    /// Reads the document, drops expired codes, applies `change`, and writes the result
    /// back if anything changed — in one step against other writers (`change` runs again
    /// when another wrote in between).
    async fn change<T: Send>(
        &self,
        mut change: impl FnMut(&mut PairingFile) -> Result<T, PairingError> + Send,
    ) -> Result<T, PairingError> {
        let mut result = None;
        let mut changer = |bytes: Option<&[u8]>| {
            let before = match bytes.map(|bytes| self.parse(bytes)).transpose() {
                Ok(before) => before.unwrap_or_default(),
                Err(err) => {
                    result = Some(Err(err));
                    return Change::Keep;
                }
            };
            let mut file = before.clone();
            let now = unix(SystemTime::now());
            file.pending
                .retain(|p| now.saturating_sub(p.created_at) < CODE_TTL.as_secs());
            let outcome = change(&mut file);
            let write = file != before;
            result = Some(outcome);
            if !write {
                return Change::Keep;
            }
            match serde_json::to_vec_pretty(&file) {
                Ok(bytes) => Change::Put(bytes),
                Err(err) => {
                    result = Some(Err(PairingError::Damaged {
                        place: self.place(),
                        message: err.to_string(),
                    }));
                    Change::Keep
                }
            }
        };
        self.state.update(PAIRING_KEY, &mut changer).await?;
        result.unwrap_or_else(|| {
            Err(PairingError::Damaged {
                place: self.place(),
                message: "the change was not made".to_owned(),
            })
        })
    }
}

/// What an unknown sender is told.
fn pairing_text(code: &str) -> String {
    format!(
        "I don't know you yet. To talk to me, ask my owner to approve this code:\n\n{code}\n\n\
         (On the server: switchboard pairing approve {code} — the code expires in an hour.)"
    )
}

/// A code no waiting code has.
fn new_code(file: &PairingFile) -> String {
    loop {
        let code: String = (0..8)
            .map(|i| {
                let c = char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]);
                if i == 4 {
                    format!("-{c}")
                } else {
                    c.to_string()
                }
            })
            .collect();
        if !file.pending.iter().any(|p| p.code == code) {
            return code;
        }
    }
}

/// A code as typed: case and dashes ignored.
/// Takes the waiting code `code` (in any case, with or without its dash) out of `file`.
fn take_pending(file: &mut PairingFile, code: &str) -> Result<PendingCode, PairingError> {
    let wanted = normalize_code(code);
    let at = file
        .pending
        .iter()
        .position(|p| normalize_code(&p.code) == wanted)
        .ok_or_else(|| PairingError::UnknownCode(code.to_owned()))?;
    Ok(file.pending.remove(at))
}

fn normalize_code(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_sessions::FileState;

    fn opened(dir: &std::path::Path) -> Pairing {
        Pairing::new(Arc::new(FileState::new(dir)))
    }

    fn code_of(verdict: &Verdict) -> String {
        let Verdict::Pair(text) = verdict else {
            panic!("expected a code, got {verdict:?}");
        };
        text.lines().nth(2).expect("the code line").to_owned()
    }

    #[test]
    fn allow_lists_match_ids_and_usernames() {
        let allow = AllowList::new(&["12345", "@Alice"]);
        assert!(allow.allows("12345", None));
        assert!(allow.allows("999", Some("alice")));
        assert!(allow.allows("999", Some("@ALICE")));
        assert!(!allow.allows("999", Some("bob")));
        assert!(!allow.allows("1234", None));
    }

    #[tokio::test]
    async fn a_denied_code_is_forgotten_and_its_sender_not_let_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pairing = opened(dir.path());
        let allow = AllowList::default();
        let now = SystemTime::now();
        let code = code_of(&pairing.check("telegram", "7", None, &allow, now).await);
        let denied = pairing.deny(&code).await.expect("denied");
        assert_eq!(denied.sender, "7");
        assert!(pairing.list().await.expect("list").pending.is_empty());
        assert!(matches!(
            pairing.approve(&code).await,
            Err(PairingError::UnknownCode(_))
        ));
        assert!(!pairing.approved("telegram", "7").await);
        assert!(matches!(
            pairing.deny("NOPE-NOPE").await,
            Err(PairingError::UnknownCode(_))
        ));
    }

    #[tokio::test]
    async fn a_stranger_gets_one_code_a_minute_and_is_let_in_once_approved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pairing = opened(dir.path());
        let allow = AllowList::default();
        let now = SystemTime::now();
        let first = pairing
            .check("telegram", "42", Some("eve"), &allow, now)
            .await;
        let code = code_of(&first);
        assert_eq!(
            pairing
                .check(
                    "telegram",
                    "42",
                    None,
                    &allow,
                    now + Duration::from_secs(30)
                )
                .await,
            Verdict::Ignore,
            "not twice in a minute"
        );
        let again = pairing
            .check(
                "telegram",
                "42",
                None,
                &allow,
                now + Duration::from_secs(61),
            )
            .await;
        assert_eq!(code_of(&again), code, "the same code again");

        // The CLI, in another process, approves it: the daemon's instance sees it.
        let cli = opened(dir.path());
        let approved = cli
            .approve(&code.to_lowercase().replace('-', ""))
            .await
            .expect("approve");
        assert_eq!(approved.sender, "42");
        assert_eq!(approved.name.as_deref(), Some("eve"));
        assert_eq!(
            pairing.check("telegram", "42", None, &allow, now).await,
            Verdict::Allowed
        );
        assert!(
            matches!(
                pairing.check("discord", "42", None, &allow, now).await,
                Verdict::Pair(_)
            ),
            "approval is per channel"
        );
        assert!(
            cli.list()
                .await
                .expect("list")
                .pending
                .iter()
                .all(|p| p.code != code)
        );

        cli.revoke("telegram:42").await.expect("revoke");
        assert!(matches!(
            pairing
                .check(
                    "telegram",
                    "42",
                    None,
                    &allow,
                    now + Duration::from_secs(120)
                )
                .await,
            Verdict::Pair(_)
        ));
        assert!(matches!(
            cli.approve("NOPE-NOPE").await,
            Err(PairingError::UnknownCode(_))
        ));
    }

    #[tokio::test]
    async fn codes_expire_and_strangers_cannot_fill_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pairing = opened(dir.path());
        let allow = AllowList::default();
        let now = SystemTime::now();
        for sender in 0..MAX_PENDING {
            let verdict = pairing
                .check("telegram", &sender.to_string(), None, &allow, now)
                .await;
            assert!(matches!(verdict, Verdict::Pair(_)));
        }
        assert_eq!(
            pairing
                .check("telegram", "one-too-many", None, &allow, now)
                .await,
            Verdict::Ignore
        );
        // Codes older than an hour are dropped the next time the file changes.
        let mut file = pairing.list().await.expect("list");
        for pending in &mut file.pending {
            pending.created_at -= CODE_TTL.as_secs() + 1;
        }
        let state = FileState::new(dir.path());
        let bytes = serde_json::to_vec(&file).expect("json");
        state.put(PAIRING_KEY, bytes).await.expect("write");
        assert!(pairing.list().await.expect("list").pending.is_empty());
    }

    #[tokio::test]
    async fn a_damaged_file_lets_no_one_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("pairing.json"), "{not json").expect("write");
        let pairing = opened(dir.path());
        assert_eq!(
            pairing
                .check(
                    "telegram",
                    "1",
                    None,
                    &AllowList::default(),
                    SystemTime::now()
                )
                .await,
            Verdict::Ignore
        );
        assert!(matches!(
            pairing.list().await,
            Err(PairingError::Damaged { .. })
        ));
    }
}
