//! What the config refuses, and how each refusal names its file, line and key.

use super::*;

use super::parse_for_test as parse;

pub(super) const MINIMAL: &str = "[channels.websocket]\nauth = \"none\"\n";

#[test]
fn a_huge_number_is_reported_in_scientific_notation() {
    for (text, key) in [
        (
            "[agent]\ntool_timeout_secs = 1e300\n",
            "agent.tool_timeout_secs",
        ),
        ("[http]\nmax_connections = 1e300\n", "http.max_connections"),
        ("[agent]\nhistory_limit = -1.5e300\n", "agent.history_limit"),
    ] {
        let err = parse(&format!("{MINIMAL}{text}")).expect_err("out of range");
        assert_eq!(err.key, key);
        let shown = err.to_string();
        assert!(shown.contains("e300"), "{shown}");
        assert!(shown.len() < 200, "{shown}");
    }
}

#[test]
fn a_weak_metrics_token_or_websocket_token_is_refused_at_its_line() {
    let err = parse(&format!("{MINIMAL}[http]\nmetrics_token = \"short\"\n")).expect_err("short");
    assert_eq!(
        (err.key.as_str(), err.line),
        ("http.metrics_token", Some(4))
    );
    let err = parse("[channels.websocket]\nauth = \"token\"\ntoken = \"                    \"\n")
        .expect_err("blank");
    assert_eq!(
        (err.key.as_str(), err.line),
        ("channels.websocket.token", Some(3))
    );
    assert!(err.message.contains("whitespace"), "{err}");
}

#[test]
fn defaults_fill_an_almost_empty_file() {
    let config = parse(MINIMAL).expect("parse");
    assert_eq!(*config.agent.history_limit.get_ref(), 50);
    assert_eq!(*config.agent.max_iterations.get_ref(), 40);
    assert_eq!(config.http.bind.get_ref().0.to_string(), "127.0.0.1:8080");
}

#[test]
fn an_unknown_key_names_file_line_and_key() {
    let err = parse("[channels.websocket]\nauth = \"none\"\n\n[agent]\nhistory_limt = 5\n")
        .expect_err("unknown key");
    assert_eq!(err.file, "/etc/switchboard/config.toml");
    assert_eq!(err.line, Some(5), "{err}");
    assert_eq!(err.key, "agent.history_limt", "{err}");
    assert!(err.message.contains("unknown field"), "{err}");
    assert!(
        err.to_string()
            .starts_with("/etc/switchboard/config.toml:5:"),
        "{err}"
    );
}

#[test]
fn a_bad_value_names_its_key() {
    let err = parse("[agent]\nmax_iterations = \"many\"\n").expect_err("bad type");
    assert_eq!(err.line, Some(2), "{err}");
    assert_eq!(err.key, "agent.max_iterations", "{err}");
}

#[test]
fn out_of_range_values_are_refused_with_their_line() {
    let err = parse("[channels.websocket]\nauth = \"none\"\n[agent]\nhistory_limit = 1\n")
        .expect_err("range");
    assert_eq!(err.line, Some(4), "{err}");
    assert_eq!(err.key, "agent.history_limit");
}

#[test]
fn auth_none_needs_a_loopback_bind() {
    let err = parse("[http]\nbind = \"0.0.0.0:8080\"\n[channels.websocket]\nauth = \"none\"\n")
        .expect_err("public bind");
    assert_eq!(err.key, "channels.websocket.auth");
    assert!(err.message.contains("loopback"));
}

#[test]
fn a_missing_token_variable_is_named() {
    let err =
        parse("[channels.websocket]\ntoken = \"${SWITCHBOARD_TEST_SURELY_UNSET_VARIABLE}\"\n")
            .expect_err("unset");
    assert!(
        err.message
            .contains("SWITCHBOARD_TEST_SURELY_UNSET_VARIABLE"),
        "{err}"
    );
    assert_eq!(err.line, Some(2));
}

#[test]
fn a_base_url_without_scheme_is_refused_with_its_line() {
    let err =
        parse("[channels.websocket]\nauth = \"none\"\n[llm]\nbase_url = \"localhost:11434\"\n")
            .expect_err("no scheme");
    assert_eq!(err.key, "llm.base_url");
    assert_eq!(err.line, Some(4), "{err}");
}

#[test]
fn a_frame_limit_of_zero_or_above_the_hard_cap_is_refused_with_its_line() {
    for bad in ["0", "2097152"] {
        let text = format!("[channels.websocket]\nauth = \"none\"\nmax_frame_bytes = {bad}\n");
        let err = parse(&text).expect_err(bad);
        assert_eq!(err.key, "channels.websocket.max_frame_bytes", "{err}");
        assert_eq!(err.line, Some(3), "{err}");
        assert!(err.message.contains("1048576"), "{err}");
    }
    let fine = parse("[channels.websocket]\nauth = \"none\"\nmax_frame_bytes = 1048576\n")
        .expect("the hard cap itself is allowed");
    assert_eq!(
        *fine.channels.websocket.max_frame_bytes.get_ref(),
        1024 * 1024
    );
}

#[test]
fn response_limits_below_a_kibibyte_are_refused() {
    let err = parse("[channels.websocket]\nauth = \"none\"\n[llm]\nmax_reply_bytes = 10\n")
        .expect_err("tiny");
    assert_eq!(err.key, "llm.max_reply_bytes");
    assert_eq!(err.line, Some(4), "{err}");
}

#[test]
fn syntax_errors_have_a_line() {
    let err = parse("[agent\nx = 1\n").expect_err("syntax");
    assert_eq!(err.line, Some(1), "{err}");
}

#[test]
fn relative_paths_follow_the_config_file() {
    let config = parse(MINIMAL).expect("parse");
    assert_eq!(
        config.path("state"),
        PathBuf::from("/etc/switchboard/state")
    );
    assert_eq!(config.path("/abs"), PathBuf::from("/abs"));
    // A `..` is resolved, not shown (`examples/../target/try` reads as `target/try`).
    assert_eq!(
        config.path("../target/./try"),
        PathBuf::from("/etc/target/try")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("examples")).expect("dir");
    let config = Config::parse(MINIMAL, &dir.path().join("examples/c.toml")).expect("parse");
    let real = std::fs::canonicalize(dir.path()).expect("canonical");
    assert_eq!(config.path("../target/try"), real.join("target/try"));
}

#[test]
fn a_token_that_auth_none_would_ignore_is_refused() {
    let err = parse("[channels.websocket]\nauth = \"none\"\ntoken = \"0123456789abcdef0123\"\n")
        .expect_err("refused");
    assert_eq!(err.key, "channels.websocket.token");
    assert!(err.message.contains("set auth = \"token\""), "{err}");
}
