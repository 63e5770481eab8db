//! What an operator reaches for: `/metrics` in Prometheus text, `/readyz`, `/healthz`'s
//! checks, `switchboard doctor`.

use std::collections::BTreeMap;

use serde_json::json;
use switchboard_testkit::Reply;

use crate::chat::http_get;
use crate::util::{Extra, Harness};

/// Parses Prometheus text exposition: every line is a comment or `name{labels} value`;
/// returns the samples by their full series (`name{labels}`).
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim_start();
            assert!(
                comment.starts_with("HELP ") || comment.starts_with("TYPE "),
                "an unknown comment: {line}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !name.starts_with(|c: char| c.is_ascii_digit()),
            "a bad metric name: {line}"
        );
        if name_end < series.len() {
            let labels = &series[name_end..];
            assert!(labels.ends_with('}'), "unclosed labels: {line}");
            for pair in labels[1..labels.len() - 1]
                .split("\",")
                .filter(|p| !p.is_empty())
            {
                let (key, value) = pair.split_once('=').unwrap_or_else(|| panic!("{line}"));
                assert!(
                    key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{line}"
                );
                assert!(value.starts_with('"'), "{line}");
            }
        }
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("a bad value: {line}")),
        };
        samples.insert(series.to_owned(), value);
    }
    samples
}

async fn scrape(h: &Harness) -> BTreeMap<String, f64> {
    let response = http_get(h.daemon.addr(), "/metrics").await;
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{head}"
    );
    parse_prometheus(body)
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or_default()
}

/// 3. `/metrics` parses as Prometheus text, and its counters move after a conversation with
/// a tool. (The recorder is the process's: other tests in this binary add to the same
/// counters, so each is checked to have grown by at least this conversation's share.)
#[tokio::test]
async fn metrics_parse_and_move_after_a_conversation_with_a_tool() {
    let mut h = Harness::start("").await;
    let before = scrape(&h).await;
    for outcome in ["answered", "quiet", "stopped", "failed", "skipped"] {
        let series = format!(r#"switchboard_scheduled_runs_total{{outcome="{outcome}"}}"#);
        assert!(
            before.contains_key(&series),
            "{series} from the first scrape"
        );
    }
    h.llm.push(Reply::tool("echo", json!({"text": "x"})));
    h.llm.push(Reply::text("done"));
    assert_eq!(h.client.say("c", "use a tool").await.reply(), "done");
    let after = scrape(&h).await;
    for (series, at_least) in [
        (
            r#"switchboard_tool_calls_total{tool="echo",outcome="ok"}"#,
            1.0,
        ),
        (r#"switchboard_turns_finished_total{end="answered"}"#, 1.0),
        ("switchboard_turns_started_total", 1.0),
        (r#"switchboard_messages_in_total{channel="websocket"}"#, 1.0),
        (
            r#"switchboard_messages_out_total{channel="websocket"}"#,
            1.0,
        ),
        (
            r#"switchboard_llm_tokens_total{provider="openai",model="scripted",direction="in"}"#,
            20.0,
        ),
        (
            r#"switchboard_llm_call_seconds_count{provider="openai",model="scripted"}"#,
            2.0,
        ),
        ("switchboard_turn_seconds_count", 1.0),
    ] {
        let grown = value(&after, series) - value(&before, series);
        assert!(
            grown >= at_least,
            "{series} grew by {grown}, expected ≥ {at_least}"
        );
    }
    assert!(
        after.contains_key(r#"switchboard_channel_up{channel="websocket"}"#),
        "{after:?}"
    );
    assert!(
        after.contains_key("switchboard_active_sessions"),
        "{after:?}"
    );
    h.daemon.shutdown().await;
}

/// `[http] metrics = false` serves no `/metrics`; `/readyz` says ready while serving and
/// not once stopping.
#[tokio::test]
async fn metrics_can_be_turned_off_and_readyz_says_ready() {
    let h = Harness::with_config(Extra {
        http: "metrics = false",
        ..Extra::default()
    })
    .await;
    let response = http_get(h.daemon.addr(), "/metrics").await;
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    let ready = http_get(h.daemon.addr(), "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.ends_with(r#"{"status":"ready"}"#), "{ready}");
    // Once shutdown begins, it is not ready any more (and says why).
    h.daemon.health().set_stopping();
    let stopping = http_get(h.daemon.addr(), "/readyz").await;
    assert!(stopping.starts_with("HTTP/1.1 503"), "{stopping}");
    assert!(stopping.contains(r#""reason":"stopping""#), "{stopping}");
    h.daemon.shutdown().await;
}

/// 4. `doctor` against the testkit's fakes: a ✓ for the directories, the model and each
/// channel's token; a wrong Discord token and a dead model URL are ✗ lines naming them,
/// and the binary exits non-zero.
#[tokio::test]
async fn doctor_checks_dirs_models_and_tokens_against_the_fakes() {
    use switchboard_testkit::{FakeDiscord, FakeTelegram, ScriptedLlm};
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let telegram = FakeTelegram::start().await.expect("fake Telegram");
    let discord = FakeDiscord::start().await.expect("fake Discord");
    let tables = |discord_token: &str| {
        format!(
            "[channels.telegram]\nenabled = true\ntoken = \"{}\"\napi_url = \"{}\"\n\n\
             [channels.discord]\nenabled = true\ntoken = \"{discord_token}\"\napi_url = \"{}\"\n",
            switchboard_testkit::telegram::TEST_TOKEN,
            telegram.api_url(),
            discord.api_url()
        )
    };
    let good = tables(switchboard_testkit::discord::TEST_TOKEN);
    let text = crate::util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            tables: &good,
            ..Extra::default()
        },
    );
    let config = crate::util::config(&text, dir.path());
    let lines = switchboard::doctor::report(&config, &[]).await;
    let shown: Vec<String> = lines.iter().map(ToString::to_string).collect();
    assert!(
        lines
            .iter()
            .all(|line| line.mark == switchboard::doctor::Mark::Ok),
        "{shown:#?}"
    );
    for expected in [
        "✓ agent.workspace ",
        "✓ agent.state_dir ",
        "✓ llm (openai scripted) answered",
        "✓ channels.telegram: its credentials are accepted (bot @",
        "✓ channels.discord: its credentials are accepted (bot switchboard)",
    ] {
        assert!(
            shown.iter().any(|l| l.starts_with(expected)),
            "{expected} in {shown:#?}"
        );
    }

    // A wrong Discord token and a model nobody serves.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}/v1", closed.local_addr().expect("addr"));
    drop(closed);
    let bad = tables("MTAwMDAwMDAwMDAwMDAwMDAw.wrong.token-for-test");
    let text = crate::util::config_text_with(
        &dead,
        dir.path(),
        Extra {
            tables: &bad,
            llm: "max_retries = 0",
            ..Extra::default()
        },
    );
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, &text).expect("config");
    let output = tokio::process::Command::new(crate::util::BINARY)
        .args(["doctor", "--config"])
        .arg(&path)
        .output()
        .await
        .expect("doctor runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("✗ llm (openai scripted): "), "{stdout}");
    assert!(stdout.contains("llm.base_url"), "{stdout}");
    assert!(stdout.contains("✗ channels.discord: "), "{stdout}");
    assert!(stdout.contains("✓ channels.telegram"), "{stdout}");
}

/// `doctor` against the test server (as `fake-llm` runs it) with a mistyped model fails on
/// that model, as against a provider — it no longer passes any name.
#[tokio::test]
async fn doctor_refuses_a_model_the_test_server_does_not_serve() {
    use switchboard_testkit::ScriptedLlm;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.serve_only("scripted");
    let doctor = async |model: &str| {
        let text = crate::util::config_text(&llm.base_url(), dir.path(), "")
            .replace("model = \"scripted\"", &format!("model = \"{model}\""));
        let config = crate::util::config(&text, dir.path());
        switchboard::doctor::report(&config, &[])
            .await
            .iter()
            .map(ToString::to_string)
            .filter(|line| line.contains("llm ("))
            .collect::<Vec<_>>()
    };
    let served = doctor("scripted").await;
    assert!(
        served[0].starts_with("✓ llm (openai scripted) answered"),
        "{served:?}"
    );
    let mistyped = doctor("scriptd").await;
    assert!(
        mistyped[0].starts_with("✗ llm (openai scriptd)"),
        "{mistyped:?}"
    );
    assert!(mistyped[0].contains("scriptd"), "{mistyped:?}");
}

/// `/metrics` names chats and models: with a token on the socket it asks for that token —
/// or for `http.metrics_token`, when set —, and without one it answers only a loopback Host
/// (a re-pointed web site's name is refused, as for the page).
#[tokio::test]
async fn metrics_follow_the_sockets_authentication() {
    const WS_TOKEN: &str = "socket-token-0123456789";
    const METRICS_TOKEN: &str = "scrape-token-9876543210";
    let scrape = |addr: std::net::SocketAddr, host: &'static str, token: Option<&'static str>| async move {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let request =
            format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
        let response = crate::util::raw_http(addr, &request, crate::util::PATIENCE).await;
        response.split(' ').nth(1).unwrap_or_default().to_owned()
    };
    for (http, expect) in [
        (
            "",
            [
                ("127.0.0.1", None, "401"),
                ("127.0.0.1", Some(WS_TOKEN), "200"),
                ("127.0.0.1", Some(METRICS_TOKEN), "401"),
            ],
        ),
        (
            "metrics_token = \"scrape-token-9876543210\"",
            [
                ("127.0.0.1", Some(WS_TOKEN), "401"),
                ("127.0.0.1", Some(METRICS_TOKEN), "200"),
                ("evil.example", Some(METRICS_TOKEN), "200"),
            ],
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = switchboard_testkit::ScriptedLlm::start()
            .await
            .expect("llm");
        let text = crate::util::config_text_with(
            &llm.base_url(),
            dir.path(),
            Extra {
                http,
                ..Extra::default()
            },
        )
        .replace(
            "auth = \"none\"",
            &format!("auth = \"token\"\ntoken = \"{WS_TOKEN}\""),
        );
        let daemon = switchboard::app::start(
            crate::util::config(&text, dir.path()),
            crate::util::test_tools(),
        )
        .await
        .expect("daemon");
        for (host, token, status) in expect {
            assert_eq!(
                scrape(daemon.addr(), host, token).await,
                status,
                "{http:?} {host} {token:?}"
            );
        }
        daemon.shutdown().await;
    }
    // No token anywhere: a loopback Host only.
    let h = Harness::with_config(Extra::default()).await;
    assert_eq!(scrape(h.daemon.addr(), "127.0.0.1", None).await, "200");
    assert_eq!(scrape(h.daemon.addr(), "evil.example", None).await, "403");
    h.daemon.shutdown().await;
}

/// 6. A model that fails makes the daemon `degraded`, naming the model and why — at once
/// for a refused key, after three failed attempts for a server error — until it answers
/// again; `/readyz` stays ready (messages are still taken), and the failures are counted by
/// kind.
#[tokio::test]
async fn a_failing_model_makes_health_degraded_until_it_answers_again() {
    use switchboard_testkit::Reply;
    let mut h = Harness::with_config(Extra {
        llm: "max_retries = 2",
        ..Extra::default()
    })
    .await;
    let addr = h.daemon.addr();
    let status_of = |response: &str| response.split(' ').nth(1).unwrap_or_default().to_owned();
    assert_eq!(status_of(&http_get(addr, "/healthz").await), "200");
    let errors = |samples: &BTreeMap<String, f64>, kind: &str| {
        value(
            samples,
            &format!(
                r#"switchboard_llm_errors_total{{provider="openai",model="scripted",kind="{kind}"}}"#
            ),
        )
    };
    let before = scrape(&h).await;

    // A refused key: not retried, degraded at once.
    h.llm.push(Reply::Error {
        status: 401,
        retry_after: None,
    });
    assert!(h.client.say("c", "hello?").await.error().is_some());
    let health = crate::util::health(addr).await;
    assert_eq!(health["status"], "degraded", "{health}");
    let problem = health["checks"]["llm"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        problem.starts_with("openai scripted: 1 failed attempt in a row")
            && problem.contains("401"),
        "{health}"
    );
    assert_eq!(status_of(&http_get(addr, "/healthz").await), "503");
    assert_eq!(status_of(&http_get(addr, "/readyz").await), "200");
    let described = switchboard::status::describe(&health);
    assert!(
        described.contains("✗ llm: degraded — openai scripted"),
        "{described}"
    );

    // It answers again: healthy.
    h.llm.push(Reply::text("here"));
    assert_eq!(h.client.say("c", "now?").await.reply(), "here");
    assert_eq!(status_of(&http_get(addr, "/healthz").await), "200");

    // A server error retried twice: three failed attempts, degraded; then it recovers.
    for _ in 0..3 {
        h.llm.push(Reply::Error {
            status: 503,
            retry_after: Some(0),
        });
    }
    assert!(h.client.say("c", "again?").await.error().is_some());
    let health = crate::util::health(addr).await;
    let problem = health["checks"]["llm"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(problem.contains("3 failed attempts in a row"), "{health}");
    h.llm.push(Reply::text("fine"));
    assert_eq!(h.client.say("c", "and now?").await.reply(), "fine");
    assert_eq!(status_of(&http_get(addr, "/healthz").await), "200");

    let after = scrape(&h).await;
    assert!(errors(&after, "unauthorized") - errors(&before, "unauthorized") >= 1.0);
    assert!(errors(&after, "status_5xx") - errors(&before, "status_5xx") >= 3.0);
    h.daemon.shutdown().await;
}

/// 6. Every metric has `# HELP` and `# TYPE`, and the series a dashboard needs are there at
/// zero before anything happened (a fresh process: the binary).
#[tokio::test]
async fn every_metric_is_described_and_published_at_zero_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        crate::util::config_text(&llm.base_url(), dir.path(), ""),
    )
    .expect("write");
    let (mut child, addr) = crate::util::spawn_daemon(&config).await;
    let response = http_get(addr, "/metrics").await;
    let body = response.split_once("\r\n\r\n").expect("a response").1;
    let samples = parse_prometheus(body);
    let mut helped = std::collections::BTreeSet::new();
    let mut typed = std::collections::BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap_or_default().to_owned());
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.insert(rest.split(' ').next().unwrap_or_default().to_owned());
        }
    }
    for series in samples.keys() {
        let name = series.split('{').next().unwrap_or_default();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(helped.contains(family), "no HELP for {family}:\n{body}");
        assert!(typed.contains(family), "no TYPE for {family}:\n{body}");
    }
    for series in [
        "switchboard_turns_started_total",
        r#"switchboard_turns_finished_total{end="answered"}"#,
        r#"switchboard_turns_finished_total{end="failed"}"#,
        r#"switchboard_llm_errors_total{provider="openai",model="scripted",kind="unauthorized"}"#,
        r#"switchboard_llm_errors_total{provider="openai",model="scripted",kind="connect"}"#,
        r#"switchboard_llm_tokens_total{provider="openai",model="scripted",direction="out"}"#,
        r#"switchboard_tool_calls_total{tool="read_file",outcome="error"}"#,
        r#"switchboard_messages_in_total{channel="websocket"}"#,
        r#"switchboard_messages_out_total{channel="websocket"}"#,
    ] {
        assert_eq!(samples.get(series), Some(&0.0), "{series}:\n{body}");
    }
    crate::util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

/// A tool an embedder adds with the name of a built-in one is refused at start, naming both —
/// never silently shadowing it.
#[tokio::test]
async fn a_tool_with_a_built_in_tools_name_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let text = crate::util::config_text_with(&llm.base_url(), dir.path(), Extra::default());
    let tools = switchboard_tools::ToolRegistry::new()
        .with(std::sync::Arc::new(switchboard_testkit::NamedTool("grep")));
    let err = match switchboard::app::start(crate::util::config(&text, dir.path()), tools).await {
        Ok(_) => panic!("started with two tools named grep"),
        Err(err) => format!("{err:#}"),
    };
    assert!(
        err.contains("the tool `grep` of extra has the name of a tool of builtin"),
        "{err}"
    );
}
