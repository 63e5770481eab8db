//! The examples the repository ships read as the daemon reads them: the commented example
//! config, the fake-llm config of the README's quick start, the one-machine cluster and the
//! container recipe's configs.

use std::path::Path;

use switchboard::config::Config;

#[tokio::test]
async fn the_example_config_parses() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let config = Config::load(&example).expect("config.example.toml parses");
    assert_eq!(*config.agent.history_limit.get_ref(), 50);
    assert_eq!(*config.agent.max_iterations.get_ref(), 40);
    assert_eq!(config.http.bind.get_ref().0.to_string(), "127.0.0.1:8080");
    assert!(
        !config.transcription.enabled && !config.speech.enabled,
        "voice is off unless asked for"
    );
}

/// The README's "try it without a key" config: it parses, points at `fake-llm`'s default
/// address, and keeps its files under `target/try`.
#[tokio::test]
async fn the_fake_llm_example_config_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = Config::load(&root.join("examples/fake-llm.toml")).expect("it parses");
    assert_eq!(config.llm.base_url(), "http://127.0.0.1:8081/v1");
    let state = config.path(&config.agent.state_dir);
    let root = root.canonicalize().expect("the repository");
    assert_eq!(state, root.join("target/try/state"));
}

/// examples/cluster/config.toml (run.sh's one-machine cluster, every member) reads.
#[cfg(feature = "cluster")]
#[test]
fn the_one_machine_cluster_example_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("examples/cluster/config.toml");
    let config = Config::load(&path).expect("it reads");
    assert_eq!(config.http.bind.get_ref().0.port(), 8080);
    assert_eq!(config.worker_bind().port(), 0, "workers take a free port");
}

/// The container recipe's configs (examples/container/) read once their variables are set,
/// and listen where a container must (every address, with a token).
#[cfg(feature = "cluster")]
#[test]
fn the_container_configs_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in ["config.toml", "cluster.toml"] {
        let path = root.join("examples/container").join(name);
        let text = std::fs::read_to_string(&path)
            .expect("the example")
            .replace("${LLM_BASE_URL}", "https://llm.example/v1")
            .replace("${LLM_MODEL}", "some-model")
            .replace("${OPENAI_API_KEY}", "sk-test")
            .replace("${SWITCHBOARD_WS_TOKEN}", "0123456789abcdef01234567")
            .replace("${NATS_TOKEN}", "nats-token-0123456789");
        let config = Config::parse(&text, &path).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(config.http.bind.get_ref().0.ip().is_unspecified(), "{name}");
        assert_eq!(config.llm.model, "some-model", "{name}");
    }
}
