//! signal-cli's JSON-RPC (`POST /api/v1/rpc`) as the channel calls it: [`Rpc`] is the
//! channel's [`Surface`] — `send` (quoting the person's message it answers), `sendTyping`,
//! `sendReceipt`, files as data URIs in `send`'s attachments — and fetches the files people
//! send (`getAttachment`, base64).
//!
//! Errors are mapped for delivery: signal-cli unreachable or failing is `Unavailable`; a rate
//! limit Signal's servers set (signal-cli says "rate limit") is `RateLimited`, so the chat
//! waits; the rest are final, with signal-cli's reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{Value, json};
use switchboard_adapter::{
    Arrival, Chunks, Fetch, FileRef, Form, Measure, Remembered, Said, Surface, Upload, plain_text,
};
use switchboard_core::{ChatId, CoreError, MediaLimits, MessageId};
use url::Url;

use crate::convert::GROUP_PREFIX;

/// The channel's name: the prefix of its session keys.
pub const CHANNEL_NAME: &str = "signal";

/// The longest message part sent (Signal sends longer texts as a file).
pub const MESSAGE_LIMIT: usize = 2000;

/// What Signal takes of files (its attachment limit is 100 MiB).
pub(crate) const MEDIA: MediaLimits = MediaLimits {
    image: 100 * 1024 * 1024,
    voice: 100 * 1024 * 1024,
    document: 100 * 1024 * 1024,
    caption: MESSAGE_LIMIT,
};

/// How long a call may take (a send with a file takes longer).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const FILE_TIMEOUT: Duration = Duration::from_secs(120);
/// Authors remembered of the messages being answered (a quote names its author).
const MAX_KNOWN_AUTHORS: usize = 10_000;

/// signal-cli's RPC endpoint.
pub(crate) struct Rpc {
    client: reqwest::Client,
    endpoint: Url,
    account: Option<String>,
    read_receipts: bool,
    next: AtomicU64,
    /// The author of each message taken in, by its timestamp: a reply (a pairing code too)
    /// quotes it.
    pub(crate) authors: Remembered<String, String>,
    /// Each chat's latest message (its author and timestamp): the read receipt names it.
    pub(crate) latest: Remembered<String, (String, u64)>,
}

/// Where a chat's messages go.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    Person(String),
    Group(String),
}

impl Rpc {
    pub(crate) fn new(settings: &crate::SignalSettings) -> Result<Self, CoreError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| channel_error(format!("cannot start the HTTP client: {err}")))?;
        let endpoint = settings
            .url
            .join("api/v1/rpc")
            .map_err(|err| channel_error(format!("channels.signal.url: {err}")))?;
        Ok(Self {
            client,
            endpoint,
            account: settings.account.clone(),
            read_receipts: settings.read_receipts,
            next: AtomicU64::new(1),
            authors: Remembered::new(MAX_KNOWN_AUTHORS),
            latest: Remembered::new(MAX_KNOWN_AUTHORS),
        })
    }

    /// Calls `method` with `params` (the account added when one is configured).
    pub(crate) async fn call(
        &self,
        method: &str,
        mut params: Value,
        timeout: Duration,
    ) -> Result<Value, CoreError> {
        if let (Some(account), Some(fields)) = (&self.account, params.as_object_mut()) {
            fields.insert("account".into(), json!(account));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        let response = self
            .client
            .post(self.endpoint.clone())
            .timeout(timeout)
            .json(&request)
            .send()
            .await
            .map_err(|err| {
                unavailable(format!(
                    "signal-cli: {}",
                    switchboard_core::error_chain(&err)
                ))
            })?;
        let status = response.status();
        let answer: Value = response.json().await.map_err(|err| {
            unavailable(format!(
                "signal-cli's answer ({status}) cannot be read: {err}"
            ))
        })?;
        if let Some(error) = answer.get("error").filter(|error| !error.is_null()) {
            return Err(mapped(method, error));
        }
        Ok(answer["result"].clone())
    }

    /// The params naming `place`.
    fn to(place: &Place) -> Value {
        match place {
            Place::Person(who) => json!({"recipient": [who]}),
            Place::Group(group) => json!({"groupId": group}),
        }
    }

    /// `params` with the quote of `answering`, when it is shown as a reply to it.
    fn quoting(&self, mut params: Value, answering: Option<&MessageId>, as_reply: bool) -> Value {
        let quoted = answering.filter(|_| as_reply).and_then(|message| {
            let author = self.authors.get(message.as_str())?;
            let timestamp: u64 = message.as_str().parse().ok()?;
            Some((timestamp, author))
        });
        if let Some((timestamp, author)) = quoted {
            params["quoteTimestamp"] = json!(timestamp);
            params["quoteAuthor"] = json!(author);
        }
        params
    }

    /// A sent message's id: its timestamp.
    fn sent(result: &Value) -> Result<String, CoreError> {
        result["timestamp"]
            .as_u64()
            .map(|timestamp| timestamp.to_string())
            .ok_or_else(|| unavailable("signal-cli's answer named no timestamp".into()))
    }

    /// The identity signal-cli runs as: its account (`listAccounts`), checked against the
    /// configured one.
    pub(crate) async fn whoami(&self) -> Result<String, CoreError> {
        let accounts = self.call("listAccounts", json!({}), CALL_TIMEOUT).await?;
        let numbers: Vec<String> = accounts
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|account| account["number"].as_str().map(str::to_owned))
            .collect();
        match &self.account {
            Some(account) if numbers.contains(account) => Ok(account.clone()),
            Some(account) => Err(channel_error(format!(
                "signal-cli has no account {account} (it has {}); register it with signal-cli, or fix channels.signal.account",
                if numbers.is_empty() {
                    "none".to_owned()
                } else {
                    numbers.join(", ")
                }
            ))),
            None if numbers.len() == 1 => Ok(numbers[0].clone()),
            None => Err(channel_error(format!(
                "signal-cli has {} accounts: name the bot's in channels.signal.account",
                numbers.len()
            ))),
        }
    }
}

#[async_trait]
impl Surface for Rpc {
    type Place = Place;
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "Signal";

    fn place(&self, chat: &ChatId) -> Result<Place, CoreError> {
        let chat = chat.as_str();
        match chat.strip_prefix(GROUP_PREFIX) {
            Some(group) if !group.is_empty() => Ok(Place::Group(group.to_owned())),
            // A number's digits, or a Signal id.
            None if !chat.is_empty() && chat.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(Place::Person(format!("+{chat}")))
            }
            None if !chat.is_empty()
                && chat.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') =>
            {
                Ok(Place::Person(chat.to_owned()))
            }
            _ => Err(channel_error(format!("`{chat}` is not a Signal chat"))),
        }
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        // Signal's apps show it for 15 s.
        Duration::from_secs(10)
    }

    async fn send(&self, place: &Place, said: Said<'_>) -> Result<String, CoreError> {
        // Signal has no markup a bot can send as text: what the person reads.
        let text = match said.form {
            Form::Reply => plain_text(said.text),
            Form::Draft | Form::Notice => said.text.to_owned(),
        };
        let mut params = self.quoting(Self::to(place), said.answering, said.as_reply);
        params["message"] = json!(text);
        Self::sent(&self.call("send", params, CALL_TIMEOUT).await?)
    }

    async fn edit(&self, _place: &Place, _message: &str, _said: Said<'_>) -> Result<(), CoreError> {
        // Not reached: the channel does not stream (Signal caps a message's edits).
        Err(channel_error("Signal messages are not edited here".into()))
    }

    async fn typing(&self, place: &Place) -> Result<(), CoreError> {
        if !self.read_receipts {
            return Ok(());
        }
        if let Place::Person(who) = place
            && let Some((author, timestamp)) = self.latest.get(who.trim_start_matches('+'))
        {
            let receipt =
                json!({"recipient": author, "targetTimestamp": [timestamp], "type": "read"});
            self.call("sendReceipt", receipt, CALL_TIMEOUT).await?;
        }
        self.call("sendTyping", Self::to(place), CALL_TIMEOUT)
            .await
            .map(drop)
    }

    fn media(&self) -> MediaLimits {
        MEDIA
    }

    async fn send_file(&self, place: &Place, upload: Upload<'_>) -> Result<String, CoreError> {
        let name = &upload.file.name;
        let bytes = tokio::fs::read(upload.path)
            .await
            .map_err(|err| channel_error(format!("cannot read {name}: {err}")))?;
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        // signal-cli takes a file as a data URI; `;` and `,` would end its name.
        let safe: String = name.chars().filter(|c| !matches!(c, ';' | ',')).collect();
        let uri = format!("data:{};filename={safe};base64,{data}", upload.file.mime);
        let mut params = self.quoting(Self::to(place), upload.answering, upload.as_reply);
        params["attachments"] = json!([uri]);
        params["message"] = json!(upload.caption.map(plain_text).unwrap_or_default());
        Self::sent(&self.call("send", params, FILE_TIMEOUT).await?)
    }
}

/// The files people send, from signal-cli (`getAttachment`).
pub(crate) struct Files {
    pub(crate) rpc: Arc<Rpc>,
}

#[async_trait]
impl Fetch for Files {
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String> {
        let answer = self
            .rpc
            .call("getAttachment", json!({"id": file.url}), FILE_TIMEOUT)
            .await
            .map_err(|err| format!("signal-cli did not give it: {err}"))?;
        let data = answer
            .as_str()
            .or(answer["data"].as_str())
            .ok_or("signal-cli's answer held no file")?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|err| format!("signal-cli's file cannot be read: {err}"))?;
        Ok(Box::pin(futures::stream::once(async move {
            Ok(axum::body::Bytes::from(bytes))
        })))
    }

    /// A message let in — one the inbox held at a start too — is quoted by its reply.
    fn admitted(&self, arrival: &Arrival) {
        self.rpc
            .authors
            .note(arrival.message.clone(), arrival.sender.clone());
    }
}

/// A JSON-RPC error of `method`, mapped for delivery.
fn mapped(method: &str, error: &Value) -> CoreError {
    let message = error["message"].as_str().unwrap_or("no reason given");
    let lower = message.to_ascii_lowercase();
    if lower.contains("rate limit") || lower.contains("ratelimit") {
        let wait = error["data"]["response"]["retryAfterSeconds"]
            .as_u64()
            .or(error["data"]["retryAfterSeconds"].as_u64())
            .unwrap_or(5);
        return CoreError::RateLimited {
            retry_after: Some(Duration::from_secs(wait)),
        };
    }
    channel_error(format!("signal-cli refused {method}: {message}"))
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

pub(crate) fn unavailable(message: String) -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_holds_the_chat_and_the_rest_is_final() {
        let limited = json!({"code": -5, "message": "Failed to send message due to rate limiting: Rate limit exceeded", "data": {"retryAfterSeconds": 3}});
        assert!(matches!(
            mapped("send", &limited),
            CoreError::RateLimited { retry_after: Some(wait) } if wait == Duration::from_secs(3)
        ));
        let unknown = json!({"code": -1, "message": "Unregistered user"});
        let err = mapped("send", &unknown);
        assert!(!err.is_transient());
        assert!(err.to_string().contains("Unregistered user"), "{err}");
    }
}
