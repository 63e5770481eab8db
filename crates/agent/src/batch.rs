//! Running the tool calls of one model response: all at once on a `FuturesUnordered`
//! (a call to an exclusive tool alone), each with its own timeout; results in call order.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use switchboard_core::{ChatMessage, ImagePart, ToolCall, preview};
use switchboard_tools::{ToolContext, ToolError, ToolOutput, ToolRegistry, cap_result};
use tracing::Instrument;

use crate::agent::Agent;
use crate::events::{AgentEvent, EventSink};
use crate::hooks::{ToolOutcome, TurnInfo};
use crate::input::MAX_IMAGES;

/// The result text of a call that was cancelled before it returned.
pub(crate) const CANCELLED_RESULT: &str = "error: cancelled before the tool returned";

/// The results of one batch.
pub(crate) struct BatchOutcome {
    /// One result per call, in the order of the calls.
    pub results: Vec<ChatMessage>,
    /// Whether the turn was cancelled while the batch ran.
    pub cancelled: bool,
}

/// Runs `calls`; never fails: errors become error results the model can read.
pub(crate) async fn run(
    agent: &Agent,
    tools: &ToolRegistry,
    calls: &[ToolCall],
    ctx: &ToolContext,
    events: &EventSink,
    iteration: usize,
) -> BatchOutcome {
    let mut results: Vec<Option<ChatMessage>> = vec![None; calls.len()];
    let mut started = vec![false; calls.len()];
    let mut cancelled = false;

    for group in groups(tools, calls) {
        let mut running: FuturesUnordered<_> = group
            .map(|index| {
                started[index] = true;
                call_one(agent, tools, &calls[index], ctx, events, iteration)
                    .map(move |result| (index, result))
            })
            .collect();
        while !cancelled {
            tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => cancelled = true,
                next = running.next() => match next {
                    Some((index, result)) => results[index] = Some(result),
                    None => break,
                },
            }
        }
        if cancelled {
            break;
        }
    }

    let results = results
        .into_iter()
        .zip(calls)
        .zip(started)
        .map(|((result, call), started)| {
            result.unwrap_or_else(|| {
                if started {
                    let _ = events.send(AgentEvent::ToolFinished {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        ok: false,
                        result: CANCELLED_RESULT.to_owned(),
                        elapsed: Duration::ZERO,
                    });
                }
                ChatMessage::tool_result(call, CANCELLED_RESULT, true)
            })
        })
        .collect();
    BatchOutcome { results, cancelled }
}

/// Splits the calls into groups that run together: runs of non-exclusive calls, and each
/// exclusive call on its own, in call order.
fn groups(tools: &ToolRegistry, calls: &[ToolCall]) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for (index, call) in calls.iter().enumerate() {
        let exclusive = tools.get(&call.name).is_some_and(|t| t.exclusive());
        if exclusive {
            if start < index {
                groups.push(start..index);
            }
            groups.push(index..index + 1);
            start = index + 1;
        }
    }
    if start < calls.len() {
        groups.push(start..calls.len());
    }
    groups
}

async fn call_one(
    agent: &Agent,
    tools: &ToolRegistry,
    call: &ToolCall,
    ctx: &ToolContext,
    events: &EventSink,
    iteration: usize,
) -> ChatMessage {
    let span = tracing::info_span!("tool", tool = %call.name, call_id = %call.id, iteration,
        input_bytes = call.arguments.len(), output_bytes = tracing::field::Empty);
    let turn = TurnInfo {
        session: &ctx.session,
        iteration,
        user: ctx.user.as_ref(),
    };
    let mut started = None;
    let outcome = invoke(agent, tools, call, ctx, turn, events, &mut started)
        .instrument(span.clone())
        .await;
    let mut outcome = match outcome {
        Ok(output) => ToolOutcome {
            content: output.text,
            is_error: false,
            images: output.images,
        },
        Err(Refused::Hook(outcome)) => outcome,
        Err(Refused::Tool(err)) => ToolOutcome::error(format!("error: {err}")),
    };
    if !agent.hooks.is_empty() {
        agent.hooks.after_tool(turn, call, &mut outcome).await;
    }
    let ToolOutcome {
        content,
        is_error,
        mut images,
    } = outcome;
    let mut content = cap_result(content, agent.config.max_tool_result_bytes);
    name_images(&mut content, &mut images);
    span.record("output_bytes", content.len());
    span.in_scope(|| {
        tracing::debug!(
            ok = !is_error,
            bytes = content.len(),
            images = images.len(),
            "tool call done"
        );
    });
    let _ = events.send(AgentEvent::ToolFinished {
        id: call.id.clone(),
        name: call.name.clone(),
        ok: !is_error,
        result: preview(&content),
        elapsed: started.map_or(Duration::ZERO, |at: Instant| at.elapsed()),
    });
    ChatMessage::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error,
        images,
    }
}

/// Names each image of a result in its text, so the model can refer to the file (and one
/// that is shown no images still learns of it); more than [`MAX_IMAGES`] are left out.
fn name_images(content: &mut String, images: &mut Vec<ImagePart>) {
    let left_out = images.len().saturating_sub(MAX_IMAGES);
    images.truncate(MAX_IMAGES);
    for image in images.iter() {
        content.push_str(&format!(
            "\n[image ({}) saved in the workspace at {}]",
            image.mime, image.path
        ));
    }
    if left_out > 0 {
        content.push_str(&format!(
            "\n[{left_out} more images left out: a result shows at most {MAX_IMAGES}]"
        ));
    }
}

/// Why a call has no result of its tool.
enum Refused {
    /// A hook denied or skipped it; this is its result.
    Hook(ToolOutcome),
    /// The tool (or its arguments) failed.
    Tool(ToolError),
}

impl From<ToolError> for Refused {
    fn from(err: ToolError) -> Self {
        Self::Tool(err)
    }
}

/// Runs one call: its arguments parsed, the approval and hooks asked, then the tool —
/// announced (`ToolStarted`, `started` set) only once it is allowed to run, so a call
/// waiting for approval does not look as if it were running.
async fn invoke(
    agent: &Agent,
    tools: &ToolRegistry,
    call: &ToolCall,
    ctx: &ToolContext,
    turn: TurnInfo<'_>,
    events: &EventSink,
    started: &mut Option<Instant>,
) -> Result<ToolOutput, Refused> {
    let Some(tool) = tools.get(&call.name) else {
        let available: Vec<&str> = tools.names().collect();
        return Err(Refused::Tool(ToolError::Unknown {
            name: call.name.clone(),
            available: if available.is_empty() {
                "none".to_owned()
            } else {
                available.join(", ")
            },
        }));
    };
    let mut args = parse_arguments(&call.arguments)?;
    if !agent.hooks.is_empty() {
        agent
            .hooks
            .before_tool(turn, call, &mut args)
            .await
            .map_err(Refused::Hook)?;
    }
    let timeout = tool.timeout().unwrap_or(agent.config.tool_timeout);
    let _ = events.send(AgentEvent::ToolStarted {
        id: call.id.clone(),
        name: call.name.clone(),
        arguments: preview(&call.arguments),
    });
    *started = Some(Instant::now());
    let call = AssertUnwindSafe(tool.call(args, ctx)).catch_unwind();
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(ToolError::Timeout(timeout).into()),
        Ok(Err(panic)) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            tracing::error!(panic = %message, "tool panicked");
            Err(ToolError::Failed(format!("the tool crashed: {message}")).into())
        }
        Ok(Ok(result)) => result.map_err(Refused::Tool),
    }
}

/// The model's argument text as a JSON object; empty text means no arguments.
fn parse_arguments(text: &str) -> Result<serde_json::Value, ToolError> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(other) => Err(ToolError::InvalidArguments(format!(
            "expected a JSON object, got `{other}`"
        ))),
        Err(err) => Err(ToolError::InvalidArguments(format!(
            "not valid JSON ({err}): `{}`",
            text.chars().take(200).collect::<String>()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_an_object() {
        assert!(parse_arguments("").is_ok());
        assert!(parse_arguments(r#"{"a":1}"#).is_ok());
        assert!(matches!(
            parse_arguments("[1]"),
            Err(ToolError::InvalidArguments(_))
        ));
        assert!(matches!(
            parse_arguments("{oops"),
            Err(ToolError::InvalidArguments(_))
        ));
    }
}
