//! `fake-llm`: the scripted OpenAI-compatible server as a program, for trying the daemon
//! by hand and for benchmarks. It serves one model, `scripted`, echoing every message at
//! once; another model is refused as a provider refuses it (404), so `doctor` and a mistyped
//! `llm.model` fail against it as they would against a real server.
//!
//! Usage: `fake-llm [ADDR]` (default 127.0.0.1:8081). Point `llm.base_url` at the printed URL.

use switchboard_testkit::ScriptedLlm;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".to_owned())
        .parse()
        .map_err(std::io::Error::other)?;
    let llm = ScriptedLlm::start_on(addr).await?;
    llm.stop_recording();
    llm.serve_only("scripted");
    #[allow(clippy::print_stdout)]
    {
        println!(
            "fake-llm listening; set llm.base_url = \"{}\" and llm.model = \"scripted\"",
            llm.base_url()
        );
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}
