//! Meta's side of the webhook, as an HTTP client: a notification signed as Meta signs it
//! (`X-Hub-Signature-256`), posted to the daemon over one HTTP/1.1 exchange.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `sha256=<hex>` of `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

pub(super) async fn post_webhook(addr: SocketAddr, body: &[u8], signature: &str) -> Option<u16> {
    let mut request = format!(
        "POST /whatsapp/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         X-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    status_of(&exchange(addr, &request).await?)
}

/// One HTTP/1.1 exchange, the connection closed after it: the whole answer.
pub(super) async fn exchange(addr: SocketAddr, request: &[u8]) -> Option<String> {
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(30), talk)
        .await
        .ok()?
}

pub(super) fn status_of(answer: &str) -> Option<u16> {
    answer.split_whitespace().nth(1)?.parse().ok()
}
