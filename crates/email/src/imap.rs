//! The mailbox over IMAP (async-imap): a connection secured as configured ([`connect`]),
//! the mails after a UID ([`Mailbox::after`]), one mail's bytes within a cap, the `\Seen`
//! flag, and waiting for new mail with IDLE ([`Mailbox::wait`]).

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use switchboard_core::CoreError;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::{EmailSettings, Security, Server};
use crate::surface::{channel_error, unavailable};

/// How long connecting, and each command, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one IDLE lasts before it is renewed (servers end it after 30 minutes).
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(25 * 60);

/// A connection's bytes, TLS or not.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Debug> Io for T {}

type Session = async_imap::Session<Box<dyn Io>>;

/// A logged-in connection with a folder selected.
pub(crate) struct Mailbox {
    session: Session,
    /// The folder's UIDVALIDITY: UIDs mean the same mails while it is unchanged.
    pub(crate) validity: u32,
    /// How many mails it holds.
    pub(crate) exists: u32,
}

/// A mail's head, as a search lists it.
pub(crate) struct Head {
    pub(crate) uid: u32,
    pub(crate) seen: bool,
    pub(crate) size: u32,
    pub(crate) header: Vec<u8>,
}

/// Connects to the IMAP server, logs in and selects `folder` (read-only with `examine`).
pub(crate) async fn connect(
    settings: &EmailSettings,
    folder: &str,
    examine: bool,
) -> Result<Mailbox, CoreError> {
    let server = &settings.imap;
    let io = timed("connect", CONNECT_TIMEOUT, open(server)).await??;
    let login = timed(
        "log in",
        COMMAND_TIMEOUT,
        async_imap::Client::new(io).login(&settings.username, &settings.password),
    )
    .await?;
    let mut session = login.map_err(|(err, _)| {
        channel_error(format!(
            "the IMAP server {} refused the login of {}: {err}",
            server.host, settings.username
        ))
    })?;
    let selected = if examine {
        timed("examine", COMMAND_TIMEOUT, session.examine(folder)).await?
    } else {
        timed("select", COMMAND_TIMEOUT, session.select(folder)).await?
    }
    .map_err(|err| {
        channel_error(format!(
            "the IMAP folder {folder:?} cannot be opened: {err}"
        ))
    })?;
    Ok(Mailbox {
        session,
        validity: selected.uid_validity.unwrap_or(0),
        exists: selected.exists,
    })
}

/// The connection to `server`, secured as configured, its greeting read.
async fn open(server: &Server) -> Result<Box<dyn Io>, CoreError> {
    let tcp = TcpStream::connect((server.host.as_str(), server.port))
        .await
        .map_err(|err| unavailable(format!("IMAP {}:{}: {err}", server.host, server.port)))?;
    match server.security {
        Security::Tls => {
            let mut client =
                async_imap::Client::new(Box::new(tls(server, tcp).await?) as Box<dyn Io>);
            greeting(&mut client, server).await?;
            Ok(client.into_inner())
        }
        Security::StartTls { loopback } => {
            let mut client = async_imap::Client::new(Box::new(tcp) as Box<dyn Io>);
            greeting(&mut client, server).await?;
            match client.run_command_and_check_ok("STARTTLS", None).await {
                Ok(()) => Ok(Box::new(tls(server, client.into_inner()).await?)),
                // A server on this host (a bridge, a test server): plain text never leaves it.
                Err(_) if loopback => Ok(client.into_inner()),
                Err(err) => Err(channel_error(format!(
                    "the IMAP server {} offers no STARTTLS ({err}); use imaps:// or a server that does",
                    server.host
                ))),
            }
        }
    }
}

async fn greeting(
    client: &mut async_imap::Client<Box<dyn Io>>,
    server: &Server,
) -> Result<(), CoreError> {
    match timed("read the greeting", CONNECT_TIMEOUT, client.read_response()).await? {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(unavailable(format!(
            "the IMAP server {} closed the connection",
            server.host
        ))),
        Err(err) => Err(unavailable(format!("IMAP {}: {err}", server.host))),
    }
}

/// TLS over `io` to `server`, checked against the web's roots.
pub(crate) async fn tls<S: AsyncRead + AsyncWrite + Unpin>(
    server: &Server,
    io: S,
) -> Result<tokio_rustls::client::TlsStream<S>, CoreError> {
    let roots = tokio_rustls::rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|err| channel_error(format!("TLS: {err}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(server.host.clone())
        .map_err(|err| channel_error(format!("`{}` is not a host name: {err}", server.host)))?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, io)
        .await
        .map_err(|err| unavailable(format!("TLS with {}: {err}", server.host)))
}

impl Mailbox {
    /// The UIDs of the mails after `after` (all unread ones without it), oldest first.
    pub(crate) async fn after(&mut self, after: Option<u32>) -> Result<Vec<u32>, CoreError> {
        let query = match after {
            // `n:*` always holds the newest mail, even one before n.
            Some(uid) => format!("UID {}:*", uid.saturating_add(1)),
            None => "UNSEEN".to_owned(),
        };
        let found = timed("search", COMMAND_TIMEOUT, self.session.uid_search(&query))
            .await?
            .map_err(|err| unavailable(format!("IMAP search: {err}")))?;
        let mut uids: Vec<u32> = found
            .into_iter()
            .filter(|uid| after.is_none_or(|after| *uid > after))
            .collect();
        uids.sort_unstable();
        Ok(uids)
    }

    /// The UIDs of the mails `query` (IMAP SEARCH criteria) finds, oldest first.
    pub(crate) async fn search(&mut self, query: &str) -> Result<Vec<u32>, CoreError> {
        let found = timed("search", COMMAND_TIMEOUT, self.session.uid_search(query))
            .await?
            .map_err(|err| channel_error(format!("IMAP search {query:?}: {err}")))?;
        let mut uids: Vec<u32> = found.into_iter().collect();
        uids.sort_unstable();
        Ok(uids)
    }

    /// The heads of the mails `uids` (at most a few dozen): each with whether it was read
    /// and its size.
    pub(crate) async fn heads(&mut self, uids: &[u32]) -> Result<Vec<Head>, CoreError> {
        if uids.is_empty() {
            return Ok(Vec::new());
        }
        let fetched = self
            .items(uids, "(UID FLAGS RFC822.SIZE BODY.PEEK[HEADER])")
            .await?;
        Ok(fetched
            .into_iter()
            .filter_map(|fetch| {
                Some(Head {
                    uid: fetch.uid?,
                    seen: fetch
                        .flags()
                        .any(|flag| matches!(flag, async_imap::types::Flag::Seen)),
                    size: fetch.size.unwrap_or(0),
                    header: fetch.header().unwrap_or_default().to_vec(),
                })
            })
            .collect())
    }

    /// The mail `uid`'s bytes, unread; `Err(size)` when it is larger than `max` (then it is
    /// not fetched), `Ok(None)` when it is gone.
    pub(crate) async fn fetch(
        &mut self,
        uid: u32,
        max: u64,
    ) -> Result<Result<Option<Vec<u8>>, u64>, CoreError> {
        let sizes = self.items(&[uid], "(UID RFC822.SIZE)").await?;
        let Some(size) = sizes.first().and_then(|fetch| fetch.size) else {
            return Ok(Ok(None));
        };
        if u64::from(size) > max {
            return Ok(Err(u64::from(size)));
        }
        let bodies = self.items(&[uid], "(UID BODY.PEEK[])").await?;
        Ok(Ok(bodies
            .first()
            .and_then(|fetch| fetch.body())
            .map(<[u8]>::to_vec)))
    }

    /// The head of the mail `uid` (its header fields), unread.
    pub(crate) async fn header(&mut self, uid: u32) -> Result<Option<Vec<u8>>, CoreError> {
        let heads = self.items(&[uid], "(UID BODY.PEEK[HEADER])").await?;
        Ok(heads
            .first()
            .and_then(|fetch| fetch.header().or(fetch.body()))
            .map(<[u8]>::to_vec))
    }

    /// `items` of the mails `uids` (only theirs: a server may add others' flag changes).
    async fn items(
        &mut self,
        uids: &[u32],
        items: &str,
    ) -> Result<Vec<async_imap::types::Fetch>, CoreError> {
        let set: Vec<String> = uids.iter().map(u32::to_string).collect();
        let fetched = async {
            self.session
                .uid_fetch(set.join(","), items)
                .await?
                .try_collect::<Vec<_>>()
                .await
        };
        let fetched = timed("fetch", COMMAND_TIMEOUT, fetched)
            .await?
            .map_err(|err| unavailable(format!("IMAP fetch: {err}")))?;
        Ok(fetched
            .into_iter()
            .filter(|fetch| fetch.uid.is_some_and(|uid| uids.contains(&uid)))
            .collect())
    }

    /// Marks the mail `uid` read (as a mail client shows it).
    pub(crate) async fn mark_seen(&mut self, uid: u32) -> Result<(), CoreError> {
        let stored = async {
            self.session
                .uid_store(uid.to_string(), "+FLAGS.SILENT (\\Seen)")
                .await?
                .try_collect::<Vec<_>>()
                .await
        };
        timed("store", COMMAND_TIMEOUT, stored)
            .await?
            .map(drop)
            .map_err(|err| unavailable(format!("IMAP store: {err}")))
    }

    /// Whether the server announced new mail during the commands since the last look (it
    /// tells of a mail that came meanwhile in any command's answer, not only in IDLE's).
    pub(crate) fn announced(&mut self) -> bool {
        let mut news = false;
        while let Ok(response) = self.session.unsolicited_responses.try_recv() {
            news |= matches!(
                response,
                async_imap::types::UnsolicitedResponse::Exists(_)
                    | async_imap::types::UnsolicitedResponse::Recent(_)
            );
        }
        news
    }

    /// Waits up to `at_most` for the folder to change (IDLE); either way, the caller searches
    /// again.
    pub(crate) async fn wait(self, at_most: Duration) -> Result<Self, CoreError> {
        let Self {
            session,
            validity,
            exists,
        } = self;
        let mut idle = session.idle();
        timed("idle", COMMAND_TIMEOUT, idle.init())
            .await?
            .map_err(|err| unavailable(format!("IMAP IDLE: {err}")))?;
        {
            let (wait, _interrupt) = idle.wait_with_timeout(at_most);
            wait.await
                .map_err(|err| unavailable(format!("IMAP IDLE: {err}")))?;
        }
        let session = timed("end idle", COMMAND_TIMEOUT, idle.done())
            .await?
            .map_err(|err| unavailable(format!("IMAP IDLE: {err}")))?;
        Ok(Self {
            session,
            validity,
            exists,
        })
    }

    /// Says goodbye (errors do not matter: the connection ends either way).
    pub(crate) async fn logout(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.session.logout()).await;
    }
}

/// `work`, or an error naming `what` when it takes longer than `limit`.
async fn timed<T>(
    what: &str,
    limit: Duration,
    work: impl std::future::Future<Output = T>,
) -> Result<T, CoreError> {
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| unavailable(format!("IMAP: {what} took longer than {limit:?}")))
}
