//! Files sent to a web chat. A `file` frame names each with a download link that works
//! under the socket's credentials and expires: the link is signed (HMAC-SHA-256) with a key
//! made from the channel's token — so it is good on every gateway of a cluster, and void once
//! the token changes — or, without a token (loopback only), with a key of this process's
//! start. `GET /files/<key>` serves it from the daemon's media store: pictures the page shows
//! and audio it plays inline, everything else as a download, each with a policy that runs
//! nothing (an HTML file the agent sent cannot act as the page).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use ring::hmac;
use serde::Deserialize;
use switchboard_core::{ImagePart, OutboundFile};
use switchboard_http::Auth;

use crate::subscribers::Shared;

/// How long a download link works.
pub const LINK_TTL: Duration = Duration::from_secs(24 * 3600);

/// Signs and checks download links.
pub(crate) struct Links {
    key: hmac::Key,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Links")
    }
}

impl Links {
    /// Links signed with a key made from `auth`'s token, or a key of this start's own.
    pub(crate) fn new(auth: &Auth) -> Self {
        let secret = match auth {
            Auth::Token(token) => {
                let mut seed = b"switchboard file links\n".to_vec();
                seed.extend_from_slice(token.as_bytes());
                ring::digest::digest(&ring::digest::SHA256, &seed)
                    .as_ref()
                    .to_vec()
            }
            Auth::None => {
                let mut bytes = [0u8; 32];
                use ring::rand::SecureRandom;
                if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
                    // No randomness from the system: the links still expire, and no token
                    // guards this loopback-only page anyway.
                    bytes = fallback_bytes();
                }
                bytes.to_vec()
            }
        };
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
        }
    }

    /// The link to `file`, good until `LINK_TTL` after `now` (seconds since the epoch).
    pub(crate) fn url(&self, file: &OutboundFile, now: u64) -> String {
        let expires = now + LINK_TTL.as_secs();
        let sig = self.sign(&file.key, &file.name, &file.mime, expires);
        format!(
            "/files/{}?name={}&type={}&expires={expires}&sig={sig}",
            file.key,
            encode(&file.name),
            encode(&file.mime)
        )
    }

    fn sign(&self, key: &str, name: &str, mime: &str, expires: u64) -> String {
        let message = format!("{key}\n{name}\n{mime}\n{expires}");
        hmac::sign(&self.key, message.as_bytes())
            .as_ref()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// Whether a link's signature is this channel's and it has not expired.
    fn valid(&self, key: &str, query: &FileQuery, now: u64) -> bool {
        let Some(sig) = decode_hex(&query.sig) else {
            return false;
        };
        let message = format!("{key}\n{}\n{}\n{}", query.name, query.r#type, query.expires);
        query.expires >= now && hmac::verify(&self.key, message.as_bytes(), &sig).is_ok()
    }
}

/// Bytes from the standard library's randomly seeded hasher.
fn fallback_bytes() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(now());
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    bytes
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 128 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[derive(Deserialize)]
pub(crate) struct FileQuery {
    name: String,
    r#type: String,
    expires: u64,
    sig: String,
}

/// Whether the page shows (or plays) a file of `mime` itself, rather than offering it to
/// download.
fn inline(mime: &str) -> bool {
    ImagePart::shown_type(mime)
        || matches!(
            mime,
            "audio/ogg" | "audio/mpeg" | "audio/wav" | "audio/webm" | "audio/mp4" | "audio/aac"
        )
}

/// `GET /files/<key>?name&type&expires&sig`.
pub(crate) async fn serve(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    query: Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let (Some(files), Ok(Query(query))) = (&shared.files, query) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    if !files.links.valid(&key, &query, now()) {
        return (
            StatusCode::FORBIDDEN,
            "this link is not valid or has expired; the file can be asked for again",
        )
            .into_response();
    }
    let path = match files.media.local(&key).await {
        Ok(path) => path,
        Err(err) => return (StatusCode::GONE, err.to_string()).into_response(),
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(_) => return (StatusCode::GONE, "the file is no longer kept").into_response(),
    };
    let length = file.metadata().await.map(|meta| meta.len()).ok();
    let disposition = if inline(&query.r#type) {
        "inline".to_owned()
    } else {
        format!(
            "attachment; filename=\"{}\"",
            switchboard_adapter::media::safe(&query.name)
        )
    };
    let mut response = Response::new(Body::from_stream(tokio_util::io::ReaderStream::new(file)));
    let headers = response.headers_mut();
    let set = |value: &str| header::HeaderValue::from_str(value).ok();
    if let Some(value) = set(&query.r#type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    if let Some(value) = set(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Some(length) = length.and_then(|length| set(&length.to_string())) {
        headers.insert(header::CONTENT_LENGTH, length);
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("private, max-age=3600"),
    );
    response
}

/// What serving files needs: the signer, and where the bytes are.
pub(crate) struct Files {
    pub(crate) links: Links,
    pub(crate) media: Arc<dyn switchboard_core::MediaStore>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_core::MediaKind;

    fn file() -> OutboundFile {
        OutboundFile {
            key: "20423/00ab-chart.png".into(),
            name: "chart (final).png".into(),
            mime: "image/png".into(),
            bytes: 10,
            kind: MediaKind::Image,
            caption: None,
        }
    }

    fn query_of(url: &str) -> (String, FileQuery) {
        let (path, query) = url.split_once('?').expect("a query");
        let key = path
            .strip_prefix("/files/")
            .expect("a files path")
            .to_owned();
        let query: FileQuery = serde_urlencoded_like(query);
        (key, query)
    }

    fn serde_urlencoded_like(query: &str) -> FileQuery {
        let mut fields = std::collections::HashMap::new();
        for pair in query.split('&') {
            let (name, value) = pair.split_once('=').expect("name=value");
            let mut bytes = Vec::new();
            let raw = value.as_bytes();
            let mut at = 0;
            while at < raw.len() {
                if raw[at] == b'%' {
                    let hex = std::str::from_utf8(&raw[at + 1..at + 3]).expect("hex");
                    bytes.push(u8::from_str_radix(hex, 16).expect("hex"));
                    at += 3;
                } else {
                    bytes.push(raw[at]);
                    at += 1;
                }
            }
            fields.insert(name.to_owned(), String::from_utf8(bytes).expect("utf-8"));
        }
        FileQuery {
            name: fields["name"].clone(),
            r#type: fields["type"].clone(),
            expires: fields["expires"].parse().expect("number"),
            sig: fields["sig"].clone(),
        }
    }

    #[test]
    fn a_link_is_good_until_it_expires_and_only_for_what_it_names() {
        let links = Links::new(&Auth::Token("a-token-of-the-page-0123".into()));
        let url = links.url(&file(), 1_000);
        let (key, query) = query_of(&url);
        assert_eq!(key, "20423/00ab-chart.png");
        assert_eq!(query.name, "chart (final).png");
        assert!(links.valid(&key, &query, 1_000 + LINK_TTL.as_secs()));
        assert!(
            !links.valid(&key, &query, 1_001 + LINK_TTL.as_secs()),
            "expired"
        );
        assert!(
            !links.valid("20423/00ab-other.png", &query, 1_000),
            "another file"
        );
        let html = FileQuery {
            r#type: "text/html".into(),
            ..serde_urlencoded_like(url.split_once('?').expect("query").1)
        };
        assert!(!links.valid(&key, &html, 1_000), "another type");
        let other_token = Links::new(&Auth::Token("another-token-0123456789".into()));
        assert!(!other_token.valid(&key, &query, 1_000), "another token's");
    }
}
