//! The process environment as the config sees it. At start the daemon *withdraws* its
//! secrets from the process environment (the binary's `environ.rs`: taken out before any
//! thread runs, and the process image started again without them, so not even
//! `/proc/<pid>/environ` shows them); they are kept here instead, and every `${NAME}` in the
//! config is looked up here first, then in what is left of the environment.
//!
//! Which variables are secrets: every one whose name has a word (between underscores) such
//! as `KEY`, `TOKEN`, `SECRET` or `PASSWORD` ([`is_secret_name`]), and every one the config
//! names in a secret key (`api_key`, `token`, …) whatever its name.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The secrets withdrawn from the environment; set once, at start, by the daemon.
static WITHDRAWN: OnceLock<HashMap<String, String>> = OnceLock::new();

/// Words that make a variable's name a secret's (`OPENAI_API_KEY`, `TELEGRAM_BOT_TOKEN`,
/// `DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, `GITHUB_PAT`…).
const SECRET_WORDS: [&str; 13] = [
    "KEY",
    "APIKEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "COOKIE",
    "PAT",
];

/// Variables whose names have such a word but that hold no secret: systemd's path to the
/// service's credentials (the files are the secrets; the daemon reads them from there).
const NOT_SECRETS: [&str; 1] = ["CREDENTIALS_DIRECTORY"];

/// Whether a variable's name says it holds a secret: one of its words (split at `_`,
/// case-insensitive) is `KEY`, `TOKEN`, `SECRET`, `PASSWORD`, `AUTH`, …
pub fn is_secret_name(name: &str) -> bool {
    !NOT_SECRETS.contains(&name)
        && name
            .split('_')
            .any(|word| SECRET_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word)))
}

/// Keeps `secrets` (name, value) as the withdrawn secrets. Only the first call counts
/// (the daemon makes it once, at start); returns whether this one did.
pub fn keep_withdrawn(secrets: HashMap<String, String>) -> bool {
    WITHDRAWN.set(secrets).is_ok()
}

/// The names of the withdrawn secrets, sorted (never their values).
pub fn withdrawn_names() -> Vec<String> {
    let mut names: Vec<String> = WITHDRAWN
        .get()
        .map(|secrets| secrets.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// A variable's value: a withdrawn secret, else the process environment's. `None` when it
/// is unset or not Unicode.
pub fn var(name: &str) -> Option<String> {
    if let Some(value) = WITHDRAWN.get().and_then(|secrets| secrets.get(name)) {
        return Some(value.clone());
    }
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_told_by_their_words() {
        for name in [
            "OPENAI_API_KEY",
            "TELEGRAM_BOT_TOKEN",
            "SWITCHBOARD_WS_TOKEN",
            "DISCORD_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "anthropic_api_key",
            "GITHUB_PAT",
            "BRAVE_APIKEY",
            "NPM_AUTH",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "HOME",
            "PATH",
            "LANG",
            "KEYBOARD_LAYOUT",
            "MONKEY",
            "TOKENIZERS_PARALLELISM",
            "PASSAGE",
            "AUTHOR",
            "CREDENTIALS_DIRECTORY",
            "XDG_CONFIG_HOME",
            "NOTIFY_SOCKET",
            "SWITCHBOARD_CONFIG",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
