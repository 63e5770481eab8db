//! What a value in the config may say beyond its type: `${ENV}` and `${credential:NAME}`
//! references (resolved in the parsed document, spans kept, before the sections are read)
//! and a bind address given by host name.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use switchboard_core::expand_env;
use toml::Spanned;

/// `http.bind`: an IP address and port, or a host name and port (`localhost:8080`), which is
/// resolved when the config is read (an IPv4 address preferred: loopback names resolve to
/// both, and the page's default URL is 127.0.0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindAddress(pub SocketAddr);

impl<'de> Deserialize<'de> for BindAddress {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        resolve_bind(&text)
            .map(BindAddress)
            .map_err(serde::de::Error::custom)
    }
}

fn resolve_bind(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let unresolved = |why: String| {
        format!(
            "`{text}` is not an address and port that resolves ({why}); write an IP address \
             and port, e.g. \"127.0.0.1:8080\""
        )
    };
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|err| unresolved(err.to_string()))?
        .collect();
    addrs
        .iter()
        .find(|addr| addr.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| unresolved("no addresses".into()))
}

/// Whether a key's value is a secret (`api_key`, `[cluster]`'s `credentials`, `nkey` and
/// `password`, and every `…token` and `…_secret`: a channel's `token`, Slack's `bot_token`
/// and `app_token`, Telegram's `webhook_secret`, `[http]`'s `metrics_token` and
/// `admin_token`): its `${…}` references are resolved where
/// they are used (an unresolvable LLM key is reported per message, a disabled channel's
/// token not at all), so they are left as written here.
fn is_secret_key(key: &str) -> bool {
    key == "api_key"
        || key == "credentials"
        || key == "nkey"
        || key == "password"
        || key.ends_with("token")
        || key.ends_with("_secret")
}

/// Config `text` with every secret written in it replaced by `"********"`: the values of the
/// secret keys, of keys that look like one (`…token`, `…secret`, `…password`, `…key`), of
/// `env` and `headers` tables (an MCP server's), and a URL with a user in it
/// (`nats://user:password@…`, `nats://token@…`) — and in comments too (a key commented out
/// keeps its secret: `# api_key = "sk-…"`; see [`masked_comment`]). A `${NAME}` reference
/// only names where the secret is, and is kept. Layout is kept. Text that does not parse is
/// not shown at all.
pub(crate) fn masked(text: &str) -> String {
    use toml::de::DeValue;
    fn walk(
        value: &toml::Spanned<DeValue<'_>>,
        secret: bool,
        out: &mut Vec<std::ops::Range<usize>>,
    ) {
        match value.get_ref() {
            DeValue::String(text) if secret || has_password(text) => {
                let reference_only = text.starts_with("${")
                    && text.ends_with('}')
                    && text.matches("${").count() == 1;
                if !reference_only {
                    out.push(value.span());
                }
            }
            DeValue::Table(table) => {
                for (key, item) in table.iter() {
                    let name = key.get_ref();
                    let hidden =
                        secret || secret_name(name) || *name == "env" || *name == "headers";
                    walk(item, hidden, out);
                }
            }
            DeValue::Array(items) => {
                for item in items {
                    walk(item, secret, out);
                }
            }
            _ => {}
        }
    }
    let Ok(table) = toml::de::DeTable::parse(text) else {
        return "(the config does not parse; `switchboard doctor` names the problem)".into();
    };
    let mut spans = Vec::new();
    for (key, value) in table.get_ref().iter() {
        walk(value, secret_name(key.get_ref()), &mut spans);
    }
    spans.sort_by_key(|span| std::cmp::Reverse(span.start));
    let mut masked = text.to_owned();
    for span in spans {
        if masked.is_char_boundary(span.start) && masked.is_char_boundary(span.end) {
            masked.replace_range(span, "\"********\"");
        }
    }
    let mut out = String::with_capacity(masked.len());
    for line in masked.split_inclusive('\n') {
        match comment_start(line) {
            Some(at) => {
                out.push_str(&line[..at]);
                out.push_str(&masked_comment(&line[at..]));
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Where the comment of a config line begins (its `#` outside any quoted string), if it
/// has one. A line inside a multi-line string is read like any: at worst it is masked more.
fn comment_start(line: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (at, c) in line.char_indices() {
        match quote {
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' => return Some(at),
            None => {}
        }
    }
    None
}

/// A comment with what looks like a secret in it masked: the value of a secret-named key
/// written in it (`# api_key = "sk-…"`), a URL's user, and words that start like a
/// provider's key or a platform's token (`sk-`, `xoxb-`, `ghp_`, a Telegram bot token …).
fn masked_comment(comment: &str) -> String {
    let comment = switchboard_core::without_userinfo(comment);
    let mut hidden: Vec<std::ops::Range<usize>> = commented_out_secret(&comment)
        .into_iter()
        .chain(key_shaped_words(&comment))
        .collect();
    // A key's value that is also shaped like a key is found twice: the ranges merged.
    hidden.sort_by_key(|range| range.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::new();
    for range in hidden {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    let mut out = comment.clone();
    for range in merged.into_iter().rev() {
        out.replace_range(range, "\"********\"");
    }
    out
}

/// The value of a line of config commented out, `# key = "value"` (or `= value`), whose key
/// is named like a secret — unless it is a `${VAR}` reference.
fn commented_out_secret(comment: &str) -> Option<std::ops::Range<usize>> {
    let eq = comment.find('=')?;
    let before = comment[..eq].trim_end();
    let key_start = before
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .map_or(0, |at| at + 1);
    let commented_out = before[..key_start]
        .chars()
        .all(|c| c == '#' || c.is_whitespace());
    let key = before[key_start..].rsplit('.').next().unwrap_or_default();
    if !commented_out || key.is_empty() || !secret_name(key) {
        return None;
    }
    let value_start = eq + 1 + (comment[eq + 1..].len() - comment[eq + 1..].trim_start().len());
    let value = &comment[value_start..];
    let len = match value.chars().next() {
        Some(quote @ ('"' | '\'')) => value[1..].find(quote).map_or(value.len(), |end| end + 2),
        Some(_) => value.find(char::is_whitespace).unwrap_or(value.len()),
        None => 0,
    };
    (len > 0 && !value[..len].trim_matches(['"', '\'']).starts_with("${"))
        .then_some(value_start..value_start + len)
}

/// Words shaped like a provider's key or a platform's token.
fn key_shaped_words(comment: &str) -> Vec<std::ops::Range<usize>> {
    const PREFIXES: [&str; 9] = [
        "sk-",
        "xoxb-",
        "xoxp-",
        "xapp-",
        "ghp_",
        "gsk_",
        "AIza",
        "SUA",
        "github_pat_",
    ];
    let mut found = Vec::new();
    let mut at = 0;
    for word in comment.split_inclusive(char::is_whitespace) {
        let bare = word.trim_end().trim_matches(|c| "\"',;()#".contains(c));
        let offset = word.find(bare).unwrap_or(0);
        if bare.len() >= 12
            && (PREFIXES.iter().any(|prefix| bare.starts_with(prefix)) || is_bot_token(bare))
        {
            found.push(at + offset..at + offset + bare.len());
        }
        at += word.len();
    }
    found
}

/// Whether `word` is shaped like a Telegram bot token (`123456:AA…`).
fn is_bot_token(word: &str) -> bool {
    word.split_once(':').is_some_and(|(id, secret)| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
            && secret.len() >= 30
            && secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// Whether a key's name says its value is a secret (a secret key, or one named like one).
fn secret_name(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    is_secret_key(&key)
        || ["token", "secret", "password", "key"]
            .iter()
            .any(|word| key.ends_with(word))
}

/// Whether `text` holds a URL with a user (`scheme://user:password@host`,
/// `scheme://token@host`).
fn has_password(text: &str) -> bool {
    text.split(',').any(|url| {
        url.split_once("://").is_some_and(|(_, rest)| {
            let authority = rest.split('/').next().unwrap_or_default();
            authority.contains('@')
        })
    })
}

/// The environment variables the secret keys of config `text` refer to (`${NAME}`, not
/// credentials), wherever they are; none if the text does not parse (its errors are
/// reported when the config is loaded).
pub(crate) fn secret_references(text: &str) -> Vec<String> {
    secret_keys(text)
        .into_iter()
        .filter(|(_, reference)| !reference.starts_with("credential:"))
        .map(|(_, reference)| reference)
        .collect()
}

/// Every `${…}` reference in a secret key of config `text`, with the key's dotted path
/// (`llm.fallbacks[0].api_key`, `channels.telegram.token`) and the reference's inside
/// (`OPENAI_API_KEY`, `credential:openai-key`); none if the text does not parse.
pub(crate) fn secret_keys(text: &str) -> Vec<(String, String)> {
    // Read with the parser the config is loaded with (not `toml::Table`'s): one parser's
    // code in memory, not two.
    use toml::de::DeValue;
    fn walk(value: &DeValue<'_>, path: &str, key: &str, out: &mut Vec<(String, String)>) {
        match value {
            DeValue::String(text) if is_secret_key(key) => {
                let mut rest: &str = text;
                while let Some(start) = rest.find("${") {
                    let after = &rest[start + 2..];
                    let Some(end) = after.find('}') else { break };
                    out.push((path.to_owned(), after[..end].to_owned()));
                    rest = &after[end + 1..];
                }
            }
            DeValue::Table(table) => {
                for (key, value) in table.iter() {
                    let key = key.get_ref();
                    walk(value.get_ref(), &format!("{path}.{key}"), key, out);
                }
            }
            DeValue::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item.get_ref(), &format!("{path}[{index}]"), key, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(table) = toml::de::DeTable::parse(text) {
        for (key, value) in table.get_ref().iter() {
            let key = key.get_ref();
            walk(value.get_ref(), key, key, &mut out);
        }
    }
    out.sort();
    out
}

/// A located problem with one value: its span, dotted key and message.
pub(crate) type ValueProblem = (std::ops::Range<usize>, String, String);

/// Replaces `${ENV}` and `${credential:NAME}` in every string value but the secrets, in
/// place (spans kept, so later errors still point into the file); an unresolvable
/// reference is an error at its value.
pub(crate) fn expand_strings(
    table: &mut toml::de::DeTable<'_>,
    path: &mut Vec<String>,
) -> Result<(), ValueProblem> {
    for (key, value) in table.iter_mut() {
        path.push(key.get_ref().to_string());
        let result = expand_value(value, path);
        path.pop();
        result?;
    }
    Ok(())
}

fn expand_value(
    value: &mut toml::Spanned<toml::de::DeValue<'_>>,
    path: &mut Vec<String>,
) -> Result<(), ValueProblem> {
    let span = value.span();
    match value.get_mut() {
        toml::de::DeValue::String(text) => {
            let secret = path.last().is_some_and(|key| is_secret_key(key));
            if !secret && text.contains("${") {
                let expanded = expand_env(text)
                    .map_err(|unresolved| (span, path.join("."), unresolved.to_string()))?;
                *text = std::borrow::Cow::Owned(expanded);
            }
            Ok(())
        }
        toml::de::DeValue::Table(table) => expand_strings(table, path),
        toml::de::DeValue::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                path.push(index.to_string());
                let result = expand_value(item, path);
                path.pop();
                result?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A duration from a validated seconds field.
pub fn duration(value: &Spanned<f64>) -> Duration {
    Duration::from_secs_f64(*value.get_ref())
}

/// Checks a seconds field: positive, finite, at most a year.
pub(crate) fn seconds(value: &Spanned<f64>) -> Result<(), String> {
    switchboard_core::positive_seconds(*value.get_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::parse_for_test as parse;

    #[test]
    fn a_bind_host_name_is_resolved_and_one_without_a_port_says_to_write_an_ip() {
        let config =
            parse("[http]\nbind = \"localhost:8080\"\n[channels.websocket]\nauth = \"none\"\n")
                .expect("a host name and port parse");
        assert_eq!(
            config.http.bind.get_ref().0,
            SocketAddr::from(([127, 0, 0, 1], 8080))
        );
        let err = parse("[http]\nbind = \"localhost\"\n[channels.websocket]\nauth = \"none\"\n")
            .expect_err("no port");
        assert_eq!(err.key, "http.bind");
        assert_eq!(err.line, Some(2));
        assert!(
            err.message.contains("write an IP address and port"),
            "{err}"
        );
    }

    #[test]
    fn secrets_written_in_the_config_are_masked_and_references_kept() {
        let text = "# keep this comment\n[llm]\nbase_url = \"http://x\"\napi_key = \"sk-live-123\"\n\
                    [channels.telegram]\ntoken = \"${TELEGRAM_TOKEN}\"\n\
                    [mcp.servers.gh]\ncommand = \"gh\"\nenv = { GITHUB_PAT = \"ghp_secret\" }\n\
                    [http]\nadmin_token = 'admin-token-0123456789'\n\
                    [cluster]\nnats_url = \"nats://gw:pw-in-url@10.0.0.5:4222\"\n\
                    nkey = \"SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU\"\n";
        let masked = masked(text);
        for secret in [
            "sk-live-123",
            "ghp_secret",
            "admin-token-0123456789",
            "pw-in-url",
            "SUAMLK2Z",
        ] {
            assert!(!masked.contains(secret), "{masked}");
        }
        for kept in [
            "# keep this comment",
            "${TELEGRAM_TOKEN}",
            "http://x",
            "command = \"gh\"",
        ] {
            assert!(masked.contains(kept), "{kept}: {masked}");
        }
        assert!(masked.contains("api_key = \"********\""), "{masked}");
    }

    #[test]
    fn secrets_in_comments_and_url_users_are_masked_too() {
        let text = "[llm]\nbase_url = \"https://ada:llm-pass@llm.example/v1\" # was sk-proj-0123456789abcdef\n\
                    # api_key = \"sk-old-commented-out\"\n\
                    #api_key='not-prefixed-but-a-key'\n\
                    # token = ${TELEGRAM_TOKEN}  # a reference is kept\n\
                    # telegram: 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0\n\
                    # nats_url = \"nats://s3cr3t-token@10.0.0.5:4222\"\n\
                    # a comment about the key = value form, nothing secret\n\
                    model = \"gpt # not a comment\"\n";
        let masked = masked(text);
        for secret in [
            "llm-pass",
            "sk-proj-0123456789abcdef",
            "sk-old-commented-out",
            "not-prefixed-but-a-key",
            "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0",
            "s3cr3t-token",
        ] {
            assert!(!masked.contains(secret), "{secret}: {masked}");
        }
        for kept in [
            "# token = ${TELEGRAM_TOKEN}  # a reference is kept",
            "# a comment about the key = value form, nothing secret",
            "model = \"gpt # not a comment\"",
        ] {
            assert!(masked.contains(kept), "{kept}: {masked}");
        }
    }

    #[test]
    fn the_secret_keys_references_are_found_in_every_section() {
        let text = "[llm]\napi_key = \"${MY_LLM}\"\nbase_url = \"${NOT_A_SECRET}\"\n\
                    [[llm.fallbacks]]\napi_key = \"Bearer ${FALLBACK}x\"\n\
                    [channels.telegram]\ntoken = \"${credential:tg}\"\n\
                    [channels.discord]\ntoken = \"${DISCORD_BOT}\"\n";
        let mut found = secret_references(text);
        found.sort();
        assert_eq!(found, ["DISCORD_BOT", "FALLBACK", "MY_LLM"]);
        let keys: Vec<String> = secret_keys(text)
            .into_iter()
            .map(|(key, reference)| format!("{key}={reference}"))
            .collect();
        assert_eq!(
            keys,
            [
                "channels.discord.token=DISCORD_BOT",
                "channels.telegram.token=credential:tg",
                "llm.api_key=MY_LLM",
                "llm.fallbacks[0].api_key=FALLBACK"
            ]
        );
        assert!(secret_references("not [ toml").is_empty());
    }

    #[test]
    fn env_references_expand_in_every_string_but_secrets_wait_for_their_use() {
        let home = std::env::var("HOME").expect("HOME is set in tests");
        let config = parse(
            "[agent]\nworkspace = \"${HOME}/agent\"\n[llm]\napi_key = \"${SURELY_UNSET_KEY_9}\"\n\
             [channels.websocket]\nauth = \"none\"\n",
        )
        .expect("a secret's unset variable is not a config error");
        assert_eq!(config.agent.workspace, format!("{home}/agent"));
        assert_eq!(
            config.llm.api_key.as_ref().map(|k| k.get_ref().as_str()),
            Some("${SURELY_UNSET_KEY_9}")
        );
        let err = parse("[agent]\nstate_dir = \"${SURELY_UNSET_DIR_9}/state\"\n")
            .expect_err("an unset variable elsewhere");
        assert_eq!(err.key, "agent.state_dir");
        assert_eq!(err.line, Some(2));
        assert!(
            err.message.contains("SURELY_UNSET_DIR_9 is not set"),
            "{err}"
        );
    }
}
