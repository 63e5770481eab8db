//! Properties of config parsing, over random files: no text panics the parser or the
//! checks after it; an error points inside the file and names a key the file holds; a
//! config that is accepted yields durations and limits that can be used as they are.
//!
//! Case counts: proptest's default (256), or `PROPTEST_CASES`.

use std::path::Path;

use proptest::prelude::*;

use crate::config::Config;
use crate::config_values::duration;

/// Keys of the real schema, a few misspelt ones, and a section that does not exist.
const KEYS: &[(&str, &str)] = &[
    ("agent", "history_limit"),
    ("agent", "max_iterations"),
    ("agent", "tool_timeout_secs"),
    ("agent", "idle_timeout_secs"),
    ("agent", "max_queued_messages"),
    ("agent", "stream"),
    ("agent", "histroy_limit"),
    ("llm", "base_url"),
    ("llm", "provider"),
    ("llm", "timeout_secs"),
    ("llm", "idle_timeout_secs"),
    ("llm", "request_timeout_secs"),
    ("llm", "max_reply_bytes"),
    ("llm", "max_retries"),
    ("llm", "temperature"),
    ("llm", "images"),
    ("http", "bind"),
    ("http", "max_connections"),
    ("http", "header_timeout_secs"),
    ("http", "allowed_hosts"),
    ("channels.websocket", "auth"),
    ("channels.websocket", "max_frame_bytes"),
    ("channels.websocket", "token"),
    ("daemon", "shutdown_grace_secs"),
    ("daemon", "inbound_queue"),
    ("nowhere", "thing"),
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (0i64..100_000).prop_map(|n| n.to_string()),
        prop_oneof![
            Just("nan"),
            Just("inf"),
            Just("-inf"),
            Just("-1.5"),
            Just("1e300"),
            Just("0.0"),
            Just("0.25")
        ]
        .prop_map(str::to_owned),
        any::<bool>().prop_map(|b| b.to_string()),
        "[ -!#-\\[\\]-~]{0,12}".prop_map(|s| format!("\"{s}\"")),
        prop_oneof![
            Just("\"none\""),
            Just("\"token\""),
            Just("\"openai\""),
            Just("\"anthropic\""),
            Just("\"127.0.0.1:0\""),
            Just("\"0.0.0.0:80\""),
            Just("\"http://127.0.0.1:1/v1\""),
            Just("[\"a\", 1]"),
            Just("[]"),
        ]
        .prop_map(str::to_owned),
    ]
}

/// A TOML file: each chosen key once, under its section, with a random value.
fn document() -> impl Strategy<Value = String> {
    prop::collection::btree_map(0..KEYS.len(), value(), 0..8).prop_map(|entries| {
        let mut sections: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for (index, value) in entries {
            let (section, key) = KEYS[index];
            sections
                .entry(section)
                .or_default()
                .push(format!("{key} = {value}"));
        }
        sections
            .into_iter()
            .map(|(section, lines)| format!("[{section}]\n{}\n", lines.join("\n")))
            .collect()
    })
}

fn check(text: &str) -> Result<(), TestCaseError> {
    match Config::parse(text, Path::new("/etc/switchboard/config.toml")) {
        Ok(config) => {
            // What the daemon does with an accepted config must not panic either.
            for seconds in [
                &config.agent.tool_timeout_secs,
                &config.agent.idle_timeout_secs,
                &config.llm.timeout_secs,
                &config.llm.idle_timeout_secs,
                &config.llm.request_timeout_secs,
                &config.llm.slow_notice_secs,
                &config.http.header_timeout_secs,
                &config.daemon.shutdown_grace_secs,
            ] {
                let _ = duration(seconds);
            }
            prop_assert!(*config.channels.websocket.max_frame_bytes.get_ref() >= 1);
        }
        Err(err) => {
            let lines = text.lines().count() + 1;
            prop_assert!(err.line.is_none_or(|line| line <= lines), "{err}");
            prop_assert!(!err.message.is_empty(), "{err}");
            // An error at a line is about a key written there (one about a missing key
            // has no line).
            if err.line.is_some()
                && let Some(last) = err
                    .key
                    .rsplit('.')
                    .next()
                    .map(|k| k.split('[').next().unwrap_or(k))
                    .filter(|k| !k.is_empty())
            {
                prop_assert!(text.contains(last), "{err} names a key not in {text}");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_text_is_a_config_or_a_located_error(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn random_documents_of_real_keys_are_accepted_or_refused_with_their_key(text in document()) {
        check(&text)?;
    }
}
