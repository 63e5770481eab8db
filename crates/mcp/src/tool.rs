//! [`McpTool`]: one tool of an MCP server, as an ordinary [`Tool`] of the agent — the same
//! timeouts, result caps, approvals, hooks and `/stop` as every other.

use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use switchboard_tools::{Tool, ToolContext, ToolError};

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
}

impl McpTool {
    /// The tool `tool` of `server`, called through `peer`; why not, when its name or schema
    /// cannot be offered.
    pub fn new(
        server: &str,
        tool: &rmcp::model::Tool,
        timeout: Option<Duration>,
        peer: Peer<RoleClient>,
    ) -> Result<Self, String> {
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
            server: server.to_owned(),
            remote,
            description,
            schema,
            read_only,
            timeout,
            peer,
        })
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

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
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
        // Dropping the call (a timeout, `/stop`) tells the server it was cancelled.
        let result = tokio::select! {
            result = self.peer.call_tool(params) => result,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let outcome = match result {
            Err(err) => Err(ToolError::Failed(format!("the MCP server failed: {err}"))),
            Ok(result) => {
                let text = text_of(&result.content, result.structured_content.as_ref());
                if result.is_error == Some(true) {
                    Err(ToolError::Failed(text))
                } else {
                    Ok(text)
                }
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

/// What a result says, as text: its text blocks, and a line naming each block of another
/// kind (dropped); the structured content when there is no text.
fn text_of(content: &[ContentBlock], structured: Option<&Value>) -> String {
    let mut parts = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => parts.push(format!(
                "[an image ({}, {} bytes of base64) was left out]",
                image.mime_type,
                image.data.len()
            )),
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
        && let Some(structured) = structured
    {
        parts.push(structured.to_string());
    }
    parts.join("\n")
}
