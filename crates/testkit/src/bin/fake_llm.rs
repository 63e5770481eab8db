//! `fake-llm`: the scripted OpenAI-compatible server as a program, for trying the daemon
//! by hand and for benchmarks. With no script it echoes every message at once.
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
    #[allow(clippy::print_stdout)]
    {
        println!(
            "fake-llm listening; set llm.base_url = \"{}\"",
            llm.base_url()
        );
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}
