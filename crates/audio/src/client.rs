//! [`Server`]: one OpenAI-compatible audio server — `POST /audio/transcriptions` (a form with
//! the file) and `POST /audio/speech` (JSON in, audio bytes out), as OpenAI, Groq,
//! whisper.cpp's server, faster-whisper-server and Kokoro-FastAPI answer them — each call
//! within a deadline and each answer within a size cap. And [`Chain`]: the configured servers
//! in order, each call retried on what may heal (a timeout, a refused connection, 429, 5xx)
//! and passed to the next server on what does not, every attempt told to the [`Observer`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use switchboard_core::{plain_cause, without_userinfo};
use switchboard_llm::{ApiKey, RetryPolicy};

use crate::error::AudioError;

/// The largest transcription answer read (JSON with the text).
const MAX_TRANSCRIPT_BYTES: usize = 1024 * 1024;
/// The largest spoken answer read.
pub const MAX_SPEECH_BYTES: usize = 20 * 1000 * 1000;

/// Who is told how each attempt went (health, metrics).
pub trait Observer: Send + Sync {
    /// An attempt of `what` (`transcription`, `speech`) on `model` ended.
    fn outcome(&self, what: &'static str, model: &str, outcome: Result<(), &AudioError>);
}

/// One server, as the config names it.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The API root (`https://api.openai.com/v1`).
    pub base_url: String,
    /// The key.
    pub api_key: ApiKey,
    /// The model.
    pub model: String,
    /// The config key of this entry (`transcription`, `speech.fallbacks[0]`), for errors.
    pub key: String,
}

/// One audio server.
#[derive(Clone, Debug)]
pub struct Server {
    config: ServerConfig,
    http: reqwest::Client,
    /// How long one call may take.
    timeout: Duration,
}

impl Server {
    /// A client of `config`, each call within `timeout`.
    pub fn new(config: ServerConfig, timeout: Duration) -> Result<Self, AudioError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .pool_max_idle_per_host(2)
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| AudioError::Connect {
                url: without_userinfo(&config.base_url),
                message: plain_cause(&err),
                key: format!("{}.base_url", config.key),
            })?;
        Ok(Self {
            config,
            http,
            timeout,
        })
    }

    /// Its model.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// The config key of its entry (`transcription`, `speech.fallbacks[0]`).
    pub fn key(&self) -> &str {
        &self.config.key
    }

    /// Asks the server whether it answers and takes the key (`GET /models`, which
    /// OpenAI-compatible servers share), without sending any audio: what it said, or why not.
    /// A server without a model list (some local ones) answers 404: reachable, key unasked.
    pub async fn check(&self) -> Result<String, AudioError> {
        let request = self.authorized(self.http.get(self.url("models")))?;
        let answered = self.call(request, MAX_TRANSCRIPT_BYTES).await;
        match answered {
            Ok(body) => {
                let listed = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|list| list["data"].as_array().cloned())
                    .is_some_and(|models| {
                        models
                            .iter()
                            .any(|model| model["id"].as_str() == Some(self.config.model.as_str()))
                    });
                Ok(if listed {
                    "the server answers, and lists the model".to_owned()
                } else {
                    "the server answers (the model is not in its list: check the name)".to_owned()
                })
            }
            Err(AudioError::Status {
                status: 404 | 405, ..
            }) => {
                Ok("the server answers (it has no model list to check the key against)".to_owned())
            }
            Err(err) => Err(err),
        }
    }

    /// Its model and URL, as errors name it.
    pub fn describe(&self) -> String {
        format!(
            "{} at {}",
            self.config.model,
            without_userinfo(&self.config.base_url)
        )
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.config.base_url.trim_end_matches('/'))
    }

    fn authorized(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, AudioError> {
        match &self.config.api_key {
            ApiKey::None => Ok(request),
            ApiKey::Key(key) => Ok(request.bearer_auth(key)),
            ApiKey::Missing { reason } => Err(AudioError::MissingApiKey {
                reason: reason.clone(),
                key: format!("{}.api_key", self.config.key),
            }),
        }
    }

    /// The text said in `bytes` (a file named `name` of type `mime`), in `language` when
    /// given (an ISO-639-1 code).
    pub async fn transcribe(
        &self,
        bytes: Vec<u8>,
        name: &str,
        mime: &str,
        language: Option<&str>,
    ) -> Result<String, AudioError> {
        let file = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.to_owned())
            .mime_str(mime)
            .or_else(|_| {
                reqwest::multipart::Part::bytes(Vec::new())
                    .file_name(name.to_owned())
                    .mime_str("application/octet-stream")
            })
            .map_err(|err| AudioError::File(err.to_string()))?;
        let mut form = reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", self.config.model.clone())
            .text("response_format", "json");
        if let Some(language) = language {
            form = form.text("language", language.to_owned());
        }
        let request = self
            .authorized(self.http.post(self.url("audio/transcriptions")))?
            .multipart(form);
        let body = self.call(request, MAX_TRANSCRIPT_BYTES).await?;
        let answer: serde_json::Value = serde_json::from_slice(&body).map_err(|err| {
            let start: String = String::from_utf8_lossy(&body).chars().take(120).collect();
            AudioError::Decode(format!("{err} in `{start}`"))
        })?;
        answer["text"]
            .as_str()
            .map(|text| text.trim().to_owned())
            .ok_or_else(|| AudioError::Decode("the answer has no `text`".into()))
    }

    /// `text` spoken in `voice`, as audio of `format` (`opus`: OGG/Opus, `mp3`, `wav`, …).
    pub async fn speak(
        &self,
        text: &str,
        voice: &str,
        format: &str,
    ) -> Result<Vec<u8>, AudioError> {
        let body = json!({
            "model": self.config.model,
            "input": text,
            "voice": voice,
            "response_format": format,
        });
        let request = self
            .authorized(self.http.post(self.url("audio/speech")))?
            .json(&body);
        self.call(request, MAX_SPEECH_BYTES).await
    }

    /// Sends `request` and reads its answer within the deadline and `max_bytes`.
    async fn call(
        &self,
        request: reqwest::RequestBuilder,
        max_bytes: usize,
    ) -> Result<Vec<u8>, AudioError> {
        let timeout = || AudioError::Timeout {
            after: self.timeout,
            key: format!(
                "{}.timeout_secs",
                self.config.key.split('.').next().unwrap_or("")
            ),
        };
        let call = async {
            let response = request.send().await.map_err(|err| {
                if err.is_timeout() {
                    timeout()
                } else {
                    AudioError::Connect {
                        url: without_userinfo(&self.config.base_url),
                        message: plain_cause(&err),
                        key: format!("{}.base_url", self.config.key),
                    }
                }
            })?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|secs| secs.is_finite() && *secs >= 0.0)
                .map(|secs| Duration::from_secs_f64(secs.min(3600.0)));
            let body = read_capped(response, max_bytes).await?;
            if status.is_success() {
                return Ok(body);
            }
            let said = what_it_said(&body);
            Err(match status.as_u16() {
                429 => AudioError::RateLimited { retry_after },
                401 | 403 => AudioError::Unauthorized {
                    status: status.as_u16(),
                    body: said,
                    key: format!("{}.api_key", self.config.key),
                },
                code => AudioError::Status {
                    status: code,
                    body: said,
                },
            })
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| Err(timeout()))
    }
}

/// The body, at most `max_bytes`.
async fn read_capped(response: reqwest::Response, max_bytes: usize) -> Result<Vec<u8>, AudioError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| AudioError::Decode(plain_cause(&err)))?;
        if body.len() + chunk.len() > max_bytes {
            return Err(AudioError::TooLarge { limit: max_bytes });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What an error body says: OpenAI's `{"error": {"message": …}}`, FastAPI's `{"detail": …}`,
/// or its start.
fn what_it_said(body: &[u8]) -> String {
    let value = serde_json::from_slice::<serde_json::Value>(body).ok();
    let said = value.as_ref().and_then(|value| {
        value["error"]["message"]
            .as_str()
            .or_else(|| value["detail"].as_str())
            .or_else(|| value["message"].as_str())
            .map(str::to_owned)
    });
    said.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
        .chars()
        .take(300)
        .collect()
}

/// The configured servers of one kind, tried in order.
#[derive(Clone)]
pub struct Chain {
    /// What they do, for the observer (`transcription`, `speech`).
    what: &'static str,
    servers: Vec<Server>,
    policy: RetryPolicy,
    observer: Option<Arc<dyn Observer>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("what", &self.what)
            .field("servers", &self.servers)
            .finish()
    }
}

impl Chain {
    /// `servers` (at least one), retried by `policy`.
    pub fn new(what: &'static str, servers: Vec<Server>, policy: RetryPolicy) -> Self {
        Self {
            what,
            servers,
            policy,
            observer: None,
        }
    }

    /// Tells `observer` every attempt's outcome.
    pub fn observed(mut self, observer: Option<Arc<dyn Observer>>) -> Self {
        self.observer = observer;
        self
    }

    /// The models, in order.
    pub fn models(&self) -> Vec<&str> {
        self.servers.iter().map(Server::model).collect()
    }

    /// The servers, in order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Runs `call` on each server in turn until one answers: a transient failure is tried
    /// again on the same server (the policy's backoff, the server's `Retry-After`), any
    /// other passes to the next. The error names every server that failed.
    pub async fn run<T, F, Fut>(&self, call: F) -> Result<T, AudioError>
    where
        F: Fn(Server) -> Fut,
        Fut: std::future::Future<Output = Result<T, AudioError>>,
    {
        let mut failures = Vec::new();
        for server in &self.servers {
            let mut retry = 0;
            let error = loop {
                let outcome = call(server.clone()).await;
                if let Some(observer) = &self.observer {
                    observer.outcome(self.what, server.model(), outcome.as_ref().map(|_| ()));
                }
                let err = match outcome {
                    Ok(value) => return Ok(value),
                    Err(err) => err,
                };
                let wait = err
                    .is_transient()
                    .then(|| self.policy.delay(retry, err.retry_after()))
                    .flatten();
                match wait {
                    Some(wait) => {
                        tracing::info!(what = self.what, server = %server.describe(), error = %err,
                            retry = retry + 1, "retrying an audio call");
                        tokio::time::sleep(wait).await;
                        retry += 1;
                    }
                    None if retry > 0 => {
                        break AudioError::Exhausted {
                            attempts: retry + 1,
                            last: Box::new(err),
                        };
                    }
                    None => break err,
                }
            };
            failures.push(AudioError::Server {
                server: server.describe(),
                error: Box::new(error),
            });
        }
        Err(match failures.len() {
            1 => failures.remove(0),
            _ => AudioError::AllFailed(failures),
        })
    }
}
