//! The bot's Matrix session: the [`Client`] built on a store in the state directory (its
//! room state and its end-to-end encryption keys, in SQLite), logged in once and restored
//! from then on.
//!
//! A device is what other people's clients encrypt for, so the channel keeps one: the first
//! start logs in (with the password, as a new device named `device_name`, its cross-signing
//! set up) or takes the configured access token's device, and writes the session to
//! `matrix/session.json` (mode 0600) beside the store. Every later start restores that
//! session with the same store, so the keys people's clients already shared stay usable.
//! A store that belongs to another session (the account changed, the session file was
//! removed) is moved aside, never mixed with a new device's keys.

use std::path::{Path, PathBuf};
use std::time::Duration;

use matrix_sdk::config::RequestConfig;
use matrix_sdk::encryption::EncryptionSettings;
use matrix_sdk::{Client, authentication::matrix::MatrixSession};
use serde_json::json;
use switchboard_core::CoreError;

use crate::config::{Login, MatrixSettings};
use crate::surface::{CHANNEL_NAME, channel_error, mapped};

/// How long one request may take (a sync's long poll is added to it).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the channel keeps its session and store.
pub(crate) struct Paths {
    pub session: PathBuf,
    pub store: PathBuf,
}

impl Paths {
    pub(crate) fn under(state_dir: &Path) -> Self {
        let dir = state_dir.join(CHANNEL_NAME);
        Self {
            session: dir.join("session.json"),
            store: dir.join("store"),
        }
    }
}

/// A client of `settings`' homeserver on the store at `store`. Requests are not retried by
/// the SDK: a rate limit reaches the channel, which holds the chat it was for.
async fn client(settings: &MatrixSettings, store: Option<&Path>) -> Result<Client, CoreError> {
    let mut builder = Client::builder()
        .homeserver_url(settings.homeserver.as_str())
        .request_config(
            RequestConfig::new()
                .disable_retry()
                .timeout(REQUEST_TIMEOUT),
        )
        .with_encryption_settings(EncryptionSettings {
            auto_enable_cross_signing: true,
            ..EncryptionSettings::default()
        });
    if let Some(store) = store {
        builder = builder.sqlite_store(store, None);
    }
    builder.build().await.map_err(|err| {
        channel_error(format!(
            "cannot start a Matrix client of {}: {err}",
            settings.homeserver
        ))
    })
}

/// The bot's client, logged in: the kept session restored, else a new one made.
pub(crate) async fn open(settings: &MatrixSettings, paths: &Paths) -> Result<Client, CoreError> {
    if let Some(session) = kept(paths, &settings.user).await {
        let client = client(settings, Some(&paths.store)).await?;
        client
            .matrix_auth()
            .restore_session(session, Default::default())
            .await
            .map_err(|err| channel_error(format!("cannot restore the Matrix session: {err}")))?;
        return Ok(client);
    }
    set_aside(&paths.store).await?;
    let client = client(settings, Some(&paths.store)).await?;
    match &settings.login {
        Login::Password(password) => {
            client
                .matrix_auth()
                .login_username(&settings.user, password)
                .initial_device_display_name(&settings.device_name)
                .send()
                .await
                .map_err(|err| match err.client_api_error_kind() {
                    Some(matrix_sdk::ruma::api::client::error::ErrorKind::Forbidden { .. }) => {
                        channel_error(format!(
                            "the homeserver refused {}'s password (channels.matrix.password)",
                            settings.user
                        ))
                    }
                    _ => mapped(&err, "logging in"),
                })?;
        }
        Login::Token(token) => {
            let device = device_of(settings, token).await?;
            let session: MatrixSession = serde_json::from_value(json!({
                "user_id": settings.user, "device_id": device, "access_token": token,
            }))
            .map_err(|err| channel_error(format!("a Matrix session cannot be made: {err}")))?;
            client
                .matrix_auth()
                .restore_session(session, Default::default())
                .await
                .map_err(|err| channel_error(format!("cannot use the access token: {err}")))?;
        }
    }
    let session = client
        .matrix_auth()
        .session()
        .ok_or_else(|| channel_error("logged in, but the client holds no session".into()))?;
    if session.meta.user_id.as_str() != settings.user {
        return Err(channel_error(format!(
            "the credentials are {}'s, not {}'s (channels.matrix.user)",
            session.meta.user_id, settings.user
        )));
    }
    keep(paths, &session).await?;
    tracing::info!(user = %settings.user, device = %session.meta.device_id, "Matrix: logged in as a new device");
    Ok(client)
}

/// The device an access token belongs to (`/account/whoami`), asked by a client with no
/// store, so nothing of a placeholder device is kept.
async fn device_of(settings: &MatrixSettings, token: &str) -> Result<String, CoreError> {
    let probe = client(settings, None).await?;
    let session: MatrixSession = serde_json::from_value(json!({
        "user_id": settings.user, "device_id": "SWITCHBOARDPROBE", "access_token": token,
    }))
    .map_err(|err| channel_error(format!("a Matrix session cannot be made: {err}")))?;
    probe
        .matrix_auth()
        .restore_session(session, Default::default())
        .await
        .map_err(|err| channel_error(format!("cannot use the access token: {err}")))?;
    let whoami = probe.whoami().await.map_err(|err| {
        channel_error(format!(
            "the homeserver did not accept the access token (channels.matrix.access_token): {err}"
        ))
    })?;
    if whoami.user_id.as_str() != settings.user {
        return Err(channel_error(format!(
            "the access token is {}'s, not {}'s (channels.matrix.user)",
            whoami.user_id, settings.user
        )));
    }
    whoami
        .device_id
        .map(|device| device.to_string())
        .ok_or_else(|| {
            channel_error(
                "the access token belongs to no device; make one by logging in (see the README)"
                    .into(),
            )
        })
}

/// The session kept by an earlier start, if it is `user`'s.
async fn kept(paths: &Paths, user: &str) -> Option<MatrixSession> {
    let text = tokio::fs::read_to_string(&paths.session).await.ok()?;
    match serde_json::from_str::<MatrixSession>(&text) {
        Ok(session) if session.meta.user_id.as_str() == user => Some(session),
        Ok(session) => {
            tracing::warn!(kept = %session.meta.user_id, user, "Matrix: the kept session is another account's; logging in anew");
            None
        }
        Err(err) => {
            tracing::warn!(error = %err, path = %paths.session.display(), "Matrix: the kept session cannot be read; logging in anew");
            None
        }
    }
}

/// Writes `session` where the next start finds it, readable by the daemon's user only.
async fn keep(paths: &Paths, session: &MatrixSession) -> Result<(), CoreError> {
    let text = serde_json::to_vec_pretty(session)
        .map_err(|err| channel_error(format!("the session cannot be written: {err}")))?;
    let path = paths.session.clone();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let fresh = path.with_extension("json.new");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&fresh)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&fresh, &path)
    })
    .await
    .map_err(|err| channel_error(format!("the session cannot be written: {err}")))?
    .map_err(|err| {
        channel_error(format!(
            "the session cannot be written to {}: {err}",
            paths.session.display()
        ))
    })
}

/// Moves a store of an earlier session aside (`store.old-<secs>`), so a new device starts
/// with a store of its own and the old keys are still there to export.
async fn set_aside(store: &Path) -> Result<(), CoreError> {
    if tokio::fs::metadata(store).await.is_err() {
        return Ok(());
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or_default();
    let aside = store.with_file_name(format!("store.old-{secs}"));
    tracing::warn!(store = %store.display(), aside = %aside.display(), "Matrix: a store without its session was moved aside");
    tokio::fs::rename(store, &aside).await.map_err(|err| {
        channel_error(format!(
            "cannot move the old store {} aside: {err}",
            store.display()
        ))
    })
}

/// Whether the homeserver takes the bot's credentials, without touching the channel's
/// store (the daemon may be running on it): the kept session's token, the configured
/// token, or — before the first start — a password login whose device is removed again.
/// Returns the device.
pub(crate) async fn check(settings: &MatrixSettings, paths: &Paths) -> Result<String, CoreError> {
    let token = match (kept(paths, &settings.user).await, &settings.login) {
        (Some(session), _) => session.tokens.access_token,
        (None, Login::Token(token)) => token.clone(),
        (None, Login::Password(password)) => {
            let probe = client(settings, None).await?;
            probe
                .matrix_auth()
                .login_username(&settings.user, password)
                .initial_device_display_name("switchboard doctor")
                .send()
                .await
                .map_err(|err| mapped(&err, "logging in"))?;
            if let Err(err) = probe.logout().await {
                tracing::debug!(error = %err, "Matrix: the doctor's device was not logged out");
            }
            return Ok("the password is accepted; the device is made at the first start".into());
        }
    };
    let device = device_of(settings, &token).await?;
    Ok(format!("device {device}"))
}
