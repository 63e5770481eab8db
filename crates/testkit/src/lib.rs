//! switchboard-testkit: fake upstreams over real sockets on 127.0.0.1, for tests,
//! benchmarks and trying the daemon by hand. Never a dependency of the daemon itself.
//!
//! # Layout
//! - `llm`: [`ScriptedLlm`], an OpenAI-compatible chat-completions server (whole and SSE
//!   responses, scripted tool calls, injected errors, recorded requests).
//! - `tools`: tools for tests: [`EchoTool`], [`FailTool`], [`SleepTool`], [`BarrierTool`].
//! - `bin/fake_llm`: the scripted server as a program that echoes every message.

mod llm;
mod tools;

pub use llm::{Reply, ScriptedLlm};
pub use tools::{BarrierTool, EchoTool, FailTool, SleepTool};
