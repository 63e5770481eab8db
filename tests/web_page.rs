//! 7. The web chat page in headless Chromium, as a person opens it: without a token it asks
//! for one, with a wrong one it says so, and after a reload it shows the conversation.
//! Skipped, with the reason printed, where no Chromium is installed (`.ci/run` installs it).

use std::path::PathBuf;
use std::time::Duration;

use switchboard::app;
use switchboard_testkit::ScriptedLlm;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::util::{self, WsClient};

const TOKEN: &str = "web-page-token-0123456789";

/// The Chromium binary, if there is one.
fn chromium() -> Option<PathBuf> {
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .filter_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|path| path.is_file())
        })
    })
    .next()
}

/// The page at `url` after its scripts ran (a fresh profile each time: no stored token).
async fn dom(chromium: &PathBuf, url: &str) -> String {
    let profile = tempfile::tempdir().expect("profile");
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--virtual-time-budget=5000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--dump-dom")
            .arg(url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("Chromium rendered the page in time")
    .expect("Chromium runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The page at `url` once it shows `expected` — rendered again (up to five times) when a
/// loaded machine let Chromium's time budget run out before the socket answered.
async fn dom_showing(chromium: &PathBuf, url: &str, expected: &str) -> String {
    let mut page = String::new();
    for _ in 0..5 {
        page = dom(chromium, url).await;
        if page.contains(expected) {
            break;
        }
    }
    page
}

#[tokio::test]
async fn the_page_asks_for_a_token_says_when_it_is_wrong_and_shows_history() {
    let Some(chromium) = chromium() else {
        eprintln!("SKIPPED web_page: no Chromium on PATH (install the `chromium` package)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text(&llm.base_url(), dir.path(), "").replace(
        "auth = \"none\"",
        &format!("auth = \"token\"\ntoken = \"{TOKEN}\""),
    );
    let daemon = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("daemon");
    let addr = daemon.addr();

    // A conversation, as another client had it.
    let mut request = format!("ws://{addr}/ws")
        .into_client_request()
        .expect("request");
    let bearer = HeaderValue::from_str(&format!("Bearer {TOKEN}")).expect("header");
    request.headers_mut().insert("authorization", bearer);
    let mut client = WsClient::connect_request(request).await.expect("connects");
    assert_eq!(
        client.say("c", "hello page").await.reply(),
        "echo: hello page"
    );

    let page = dom_showing(
        &chromium,
        &format!("http://{addr}/"),
        "This switchboard needs a token:",
    )
    .await;
    assert!(
        page.contains("<form id=\"auth\">"),
        "the token form shows: {page}"
    );
    assert!(page.contains("This switchboard needs a token:"), "{page}");
    assert!(
        page.contains(r#"<span id="status">not connected</span>"#),
        "not retrying for ever: {page}"
    );

    let page = dom_showing(
        &chromium,
        &format!("http://{addr}/?token=not-the-right-token-at-all"),
        "The token was refused",
    )
    .await;
    assert!(
        page.contains("The token was refused; enter the right one:"),
        "{page}"
    );

    let page = dom_showing(
        &chromium,
        &format!("http://{addr}/?token={TOKEN}&chat=c"),
        "echo: hello page</div>",
    )
    .await;
    assert!(
        page.contains("<form id=\"auth\" hidden=\"\">"),
        "no token form: {page}"
    );
    assert!(
        page.contains(r#"<div class="msg user">hello page</div>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<div class="msg agent">echo: hello page</div>"#),
        "{page}"
    );
    daemon.shutdown().await;
}
