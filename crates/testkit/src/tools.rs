//! Tools for tests: each does one observable thing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_tools::{Tool, ToolContext, ToolError, ToolOutput};
use tokio::sync::Barrier;

fn object_schema(properties: Value) -> Value {
    json!({"type": "object", "properties": properties})
}

/// `echo {text}`: returns the text.
#[derive(Debug, Default)]
pub struct EchoTool;

#[async_trait]
impl Tool for EchoTool {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Returns the given text."
    }
    fn parameters(&self) -> Value {
        object_schema(json!({"text": {"type": "string"}}))
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        args["text"]
            .as_str()
            .map(ToolOutput::from)
            .ok_or_else(|| ToolError::InvalidArguments("`text` must be a string".into()))
    }
}

/// `fail`: always fails.
#[derive(Debug, Default)]
pub struct FailTool;

#[async_trait]
impl Tool for FailTool {
    fn name(&self) -> &str {
        "fail"
    }
    fn description(&self) -> &str {
        "Always fails."
    }
    fn parameters(&self) -> Value {
        object_schema(json!({}))
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed("this tool always fails".into()))
    }
}

/// A tool that does nothing, named `name`: an embedder's tool whose name may clash with a
/// built-in one.
#[derive(Debug)]
pub struct NamedTool(pub &'static str);

#[async_trait]
impl Tool for NamedTool {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "An embedder's tool."
    }
    fn parameters(&self) -> Value {
        object_schema(json!({}))
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(String::new().into())
    }
}

/// `sleep {ms}`: waits, or returns early when the turn is cancelled.
#[derive(Debug, Default)]
pub struct SleepTool;

#[async_trait]
impl Tool for SleepTool {
    fn name(&self) -> &str {
        "sleep"
    }
    fn description(&self) -> &str {
        "Waits the given milliseconds."
    }
    fn parameters(&self) -> Value {
        object_schema(json!({"ms": {"type": "integer"}}))
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let ms = args["ms"].as_u64().unwrap_or(1000);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(format!("slept {ms} ms").into()),
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }
}

/// `barrier`: waits until `parties` calls are waiting at once, so a test can prove calls
/// ran concurrently. Gives up after `patience` with an error result.
#[derive(Debug)]
pub struct BarrierTool {
    barrier: Arc<Barrier>,
    patience: Duration,
}

impl BarrierTool {
    /// A barrier for `parties` concurrent calls.
    pub fn new(parties: usize, patience: Duration) -> Self {
        Self {
            barrier: Arc::new(Barrier::new(parties)),
            patience,
        }
    }
}

#[async_trait]
impl Tool for BarrierTool {
    fn name(&self) -> &str {
        "barrier"
    }
    fn description(&self) -> &str {
        "Waits for the other calls of the same batch."
    }
    fn parameters(&self) -> Value {
        object_schema(json!({}))
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::time::timeout(self.patience, self.barrier.wait())
            .await
            .map(|_| "all parties arrived".into())
            .map_err(|_| ToolError::Failed("the other calls never arrived".into()))
    }
}
