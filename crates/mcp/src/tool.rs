//! [`McpTool`]: one tool of an MCP server, as an ordinary [`Tool`] of the agent — the same
//! timeouts, result caps, approvals, hooks and `/stop` as every other.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use rmcp::model::{CallToolRequestParams, ContentBlock, ImageContent};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use switchboard_core::ImagePart;
use switchboard_tools::{Tool, ToolContext, ToolError, ToolOutput};
use tokio::sync::Notify;

/// The longest description passed on to the model.
pub const MAX_DESCRIPTION: usize = 2 * 1024;

/// The largest input schema passed on (bytes of JSON).
pub const MAX_SCHEMA: usize = 16 * 1024;

/// The longest name a model accepts for a tool.
pub const MAX_TOOL_NAME: usize = 64;

/// A tool of an MCP server.
pub struct McpTool {
    /// `server__tool`, as the model sees it.
    name: String,
    /// The server's name (for metrics).
    server: String,
    /// The server's own name for it.
    remote: String,
    description: String,
    schema: Value,
    read_only: bool,
    timeout: Option<Duration>,
    peer: Peer<RoleClient>,
    /// Told when a call is given up before it returned (timed out, stopped): its server is
    /// then asked whether it still answers.
    abandoned: Arc<Notify>,
}

/// A server's tool as it will be offered, once checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// `server__tool`.
    pub name: String,
    /// The server's own name for it.
    pub remote: String,
    /// Its description, cut to [`MAX_DESCRIPTION`].
    pub description: String,
    /// Its input schema.
    pub schema: Value,
    /// Whether the server marks it read-only (it then runs beside other calls).
    pub read_only: bool,
}

impl Checked {
    /// The tool `tool` of `server`, as offered; why not, when its name or schema cannot be.
    pub fn new(server: &str, tool: &rmcp::model::Tool) -> Result<Self, String> {
        let remote = tool.name.to_string();
        if remote.is_empty()
            || !remote
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "its name `{remote}` is not letters, digits, `-` and `_`"
            ));
        }
        let name = format!("{server}__{remote}");
        if name.len() > MAX_TOOL_NAME {
            return Err(format!(
                "`{name}` is longer than the {MAX_TOOL_NAME} characters a model accepts"
            ));
        }
        let schema = Value::Object((*tool.input_schema).clone());
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("its input schema is not of type object".into());
        }
        if schema
            .get("properties")
            .is_some_and(|properties| !properties.is_object())
        {
            return Err("its input schema's `properties` is not an object".into());
        }
        let size = schema.to_string().len();
        if size > MAX_SCHEMA {
            return Err(format!(
                "its input schema is {size} bytes, more than {MAX_SCHEMA}"
            ));
        }
        let mut description = tool
            .description
            .as_deref()
            .unwrap_or(tool.title.as_deref().unwrap_or_default())
            .to_owned();
        if description.len() > MAX_DESCRIPTION {
            let mut end = MAX_DESCRIPTION;
            while !description.is_char_boundary(end) {
                end -= 1;
            }
            description.truncate(end);
            description.push('…');
        }
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.read_only_hint)
            == Some(true);
        Ok(Self {
            name,
            remote,
            description,
            schema,
            read_only,
        })
    }

    /// Bytes its definition adds to every request.
    pub fn size(&self) -> usize {
        self.name.len() + self.description.len() + self.schema.to_string().len()
    }
}

impl McpTool {
    /// `checked`, called through `peer`, each call within `timeout` (else the agent's); a
    /// call given up before it returned notifies `abandoned`.
    pub fn new(
        checked: Checked,
        timeout: Option<Duration>,
        peer: Peer<RoleClient>,
        abandoned: Arc<Notify>,
    ) -> Self {
        let server = checked
            .name
            .split_once("__")
            .map_or_else(String::new, |(server, _)| server.to_owned());
        Self {
            name: checked.name,
            server,
            remote: checked.remote,
            description: checked.description,
            schema: checked.schema,
            read_only: checked.read_only,
            timeout,
            peer,
            abandoned,
        }
    }
}

/// Notifies its server's supervisor when dropped before [`Outstanding::returned`]: the call
/// was given up (its timeout passed, the turn was stopped) and the server may be hung.
struct Outstanding<'a>(Option<&'a Notify>);

impl Outstanding<'_> {
    fn returned(mut self) {
        self.0 = None;
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        if let Some(abandoned) = self.0 {
            abandoned.notify_one();
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    /// Runs beside other calls only when the server says it only reads.
    fn exclusive(&self) -> bool {
        !self.read_only
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "the arguments are an object, not {other}"
                )));
            }
        };
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = arguments;
        let started = std::time::Instant::now();
        // Dropping the call (a timeout, `/stop`) tells the server it was cancelled — and its
        // supervisor, which asks the server whether it still answers.
        let outstanding = Outstanding(Some(&self.abandoned));
        let result = tokio::select! {
            result = self.peer.call_tool(params) => result,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        outstanding.returned();
        let outcome = match result {
            Err(err) => Err(ToolError::Failed(format!("the MCP server failed: {err}"))),
            Ok(result) if result.is_error == Some(true) => Err(ToolError::Failed(
                Content::of(&result.content, result.structured_content.as_ref()).text,
            )),
            Ok(result) => {
                let content = Content::of(&result.content, result.structured_content.as_ref());
                Ok(content.save(ctx).await)
            }
        };
        let server = self.server.clone();
        metrics::histogram!("switchboard_mcp_call_seconds", "server" => server.clone())
            .record(started.elapsed().as_secs_f64());
        let counted = if outcome.is_ok() { "ok" } else { "error" };
        metrics::counter!("switchboard_mcp_calls_total", "server" => server, "outcome" => counted)
            .increment(1);
        outcome
    }
}

/// What a result says: its text blocks and a line naming each block of another kind
/// (dropped), the structured content when there is no text; and its images, to save.
#[derive(Debug, Default)]
struct Content<'a> {
    text: String,
    images: Vec<&'a ImageContent>,
}

impl<'a> Content<'a> {
    fn of(content: &'a [ContentBlock], structured: Option<&Value>) -> Self {
        let mut parts = Vec::new();
        let mut images = Vec::new();
        for block in content {
            match block {
                ContentBlock::Text(text) => parts.push(text.text.clone()),
                ContentBlock::Image(image) => images.push(image),
                ContentBlock::Audio(_) => parts.push("[audio was left out]".to_owned()),
                ContentBlock::Resource(_) => {
                    parts.push("[an embedded resource was left out]".to_owned())
                }
                ContentBlock::ResourceLink(link) => {
                    parts.push(format!("[a resource: {}]", link.uri));
                }
                _ => parts.push("[content of a kind not known here was left out]".to_owned()),
            }
        }
        if parts.is_empty()
            && images.is_empty()
            && let Some(structured) = structured
        {
            parts.push(structured.to_string());
        }
        Self {
            text: parts.join("\n"),
            images,
        }
    }

    /// The result, its images saved in the workspace (the agent shows them to a model that
    /// takes images); one that cannot be is named in the text and left out.
    async fn save(self, ctx: &ToolContext) -> ToolOutput {
        let mut output = ToolOutput::from(self.text);
        for image in self.images {
            let saved = match decode(image) {
                Ok(bytes) => ctx.save_image(&image.mime_type, bytes).await,
                Err(err) => Err(err),
            };
            match saved {
                Ok(part) => output.images.push(part),
                Err(err) => {
                    if !output.text.is_empty() {
                        output.text.push('\n');
                    }
                    output.text.push_str(&format!(
                        "[an image ({}, {} bytes of base64) was left out: {}]",
                        image.mime_type,
                        image.data.len(),
                        err
                    ));
                }
            }
        }
        output
    }
}

/// An image's bytes, within the size a model is shown (checked before decoding).
fn decode(image: &ImageContent) -> Result<Vec<u8>, ToolError> {
    let most = ImagePart::MAX_BYTES.div_ceil(3) * 4 + 4;
    if image.data.len() as u64 > most {
        return Err(ToolError::Failed(format!(
            "it is larger than the {} bytes shown to models",
            ImagePart::MAX_BYTES
        )));
    }
    base64::engine::general_purpose::STANDARD
        .decode(image.data.trim())
        .map_err(|err| ToolError::Failed(format!("its data is not base64: {err}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::ToolAnnotations;
    use serde_json::json;

    use super::*;

    fn tool(name: &'static str, schema: Value) -> rmcp::model::Tool {
        let Value::Object(schema) = schema else {
            panic!("an object")
        };
        rmcp::model::Tool::new(name, "does things", Arc::new(schema))
    }

    #[test]
    fn a_tool_is_named_for_its_server_and_read_only_when_marked() {
        let plain = Checked::new("gh", &tool("search", json!({"type": "object"}))).expect("ok");
        assert_eq!(plain.name, "gh__search");
        assert_eq!(plain.remote, "search");
        assert!(!plain.read_only, "exclusive unless marked");
        let marked = tool("search", json!({"type": "object"}))
            .with_annotations(ToolAnnotations::new().read_only(true));
        assert!(Checked::new("gh", &marked).expect("ok").read_only);
    }

    #[test]
    fn bad_names_and_schemas_are_refused_and_long_descriptions_cut() {
        for (name, schema, why) in [
            ("has space", json!({"type": "object"}), "not letters"),
            ("x", json!({"type": "string"}), "not of type object"),
            (
                "x",
                json!({"type": "object", "properties": []}),
                "`properties` is not an object",
            ),
            (
                "x",
                json!({"type": "object", "description": "y".repeat(MAX_SCHEMA)}),
                "more than 16384",
            ),
        ] {
            let err = Checked::new("s", &tool(name, schema)).expect_err(name);
            assert!(err.contains(why), "{name}: {err}");
        }
        let long = "n".repeat(60);
        let err = Checked::new(
            "server",
            &rmcp::model::Tool::new(long, "", Arc::new(serde_json::Map::new())),
        )
        .expect_err("too long");
        assert!(err.contains("longer than the 64"), "{err}");
        let mut wordy = tool("x", json!({"type": "object"}));
        wordy.description = Some("é".repeat(MAX_DESCRIPTION).into());
        let cut = Checked::new("s", &wordy).expect("cut, not refused");
        assert!(cut.description.len() <= MAX_DESCRIPTION + '…'.len_utf8());
        assert!(cut.description.ends_with('…'));
    }
}
