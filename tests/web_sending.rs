//! What a person sends from the web chat page gets through, in headless Chromium: a message
//! typed while the daemon is down is sent once when it is back, one over the limit is kept
//! in the box, a file picked or pasted reaches the model, and the token prompt.
//! Skipped, with the reason printed, where no Chromium is installed.

use switchboard::app;
use switchboard_testkit::ScriptedLlm;

use crate::browser::{Browser, Chat, LOG_TEXT, daemon};
use crate::util;

const TOKEN: &str = "web-page-token-0123456789";

#[tokio::test]
async fn a_message_typed_while_the_daemon_is_down_is_sent_once_when_it_is_back() {
    let Some(browser) = Browser::launch("web_sending::offline").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let first = daemon(dir.path(), &llm, "").await;
    let addr = first.addr();
    let page = browser.open(&format!("http://{addr}/")).await;
    page.wait_connected().await;
    page.say("hello").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: hello')"),
        "the first answer",
    )
    .await;
    first.shutdown().await;
    page.wait_until(
        "document.getElementById('conn').dataset.state !== 'connected'",
        "the page to see the daemon gone",
    )
    .await;

    // A new conversation, begun while the daemon is down.
    page.click("#new").await;
    page.say("are you there?").await;
    page.wait_until(
        "document.querySelector('.msg.user.pending')",
        "the message shown as waiting",
    )
    .await;
    assert_eq!(
        page.eval::<String>("document.getElementById('input').value")
            .await,
        ""
    );
    assert!(
        page.eval::<String>("localStorage.getItem('switchboard.outbox')")
            .await
            .contains("are you there?")
    );

    // Back on the same address: the page reconnects and sends it, once.
    let text = util::config_text(&llm.base_url(), dir.path(), "")
        .replace("bind = \"127.0.0.1:0\"", &format!("bind = \"{addr}\""));
    let second = app::start(util::config(&text, dir.path()), util::test_tools())
        .await
        .expect("the daemon again");
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: are you there?')"),
        "the answer after the reconnect",
    )
    .await;
    page.wait_until(
        "localStorage.getItem('switchboard.outbox') === '[]'",
        "the outbox emptied",
    )
    .await;
    page.wait_until(
        "[...document.querySelectorAll('#list li .open')].map(b => b.textContent).join('|') === 'are you there?|hello'",
        "the conversation begun offline listed first, named by its message",
    )
    .await;
    assert!(
        page.eval::<bool>("!document.querySelector('.msg.user.pending')")
            .await
    );
    page.reload().await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: are you there?')"),
        "the history",
    )
    .await;
    let asked = llm
        .requests()
        .iter()
        .filter(|request| switchboard_testkit::last_user_text(request) == "are you there?")
        .count();
    assert_eq!(asked, 1, "sent once");
    assert_eq!(
        page.eval::<String>(LOG_TEXT)
            .await
            .matches("are you there?")
            .count(),
        2,
        "the message and its echo"
    );

    // Over the frame limit: refused before sending, the limit named, the text kept.
    let _: bool = page
        .eval("(document.getElementById('input').value = 'x'.repeat(70000), true)")
        .await;
    page.press("#input", "Enter").await;
    page.wait_until(
        "document.getElementById('hint').textContent.includes('max_frame_bytes')",
        "the limit named",
    )
    .await;
    assert_eq!(
        page.eval::<usize>("document.getElementById('input').value.length")
            .await,
        70000
    );
    assert!(
        page.eval::<String>("document.getElementById('hint').textContent")
            .await
            .contains("64 KB")
    );
    browser.close().await;
    second.shutdown().await;
}

#[tokio::test]
async fn a_file_picked_or_pasted_in_the_page_reaches_the_agent() {
    let Some(t) = Chat::start("web_sending::attach", "").await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);
    let file = t.dir.path().join("notes.txt");
    std::fs::write(&file, "buy milk").expect("file");
    page.pick_file("#file", &file).await;
    page.wait_until(
        "document.querySelector('#files .chip.ready')",
        "the file uploaded",
    )
    .await;
    page.say("what is in it?").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('Attached: notes.txt')"),
        "the message with its file",
    )
    .await;
    page.wait_until(
        "document.getElementById('stop').hidden && document.querySelector('.msg.agent')",
        "the answer",
    )
    .await;
    let request = llm.requests().pop().expect("a request");
    let said = util::conversation(&request)
        .into_iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("the message")["content"]
        .to_string();
    assert!(
        said.contains("notes.txt") && said.contains("media/websocket/"),
        "{said}"
    );

    // A screenshot pasted into the message box is attached the same way, and shown to the
    // model as an image.
    let _: bool = page
        .eval(
            "(() => { const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0]); \
             const data = new DataTransfer(); data.items.add(new File([png], 'shot.png', {type: 'image/png'})); \
             document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true})); \
             return true; })()",
        )
        .await;
    page.wait_until(
        "document.querySelector('#files .chip.ready')",
        "the pasted image uploaded",
    )
    .await;
    page.say("and this?").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('Attached: shot.png')"),
        "the message with the pasted image",
    )
    .await;
    let requests = llm.wait_for_requests(2, util::PATIENCE).await;
    let last = util::conversation(requests.last().expect("a request"))
        .pop()
        .expect("the message");
    assert!(
        last["content"].to_string().contains("image_url"),
        "the pasted image is shown as one: {last}"
    );
    t.end().await;
}

#[tokio::test]
async fn the_page_asks_for_a_token_says_when_it_is_wrong_and_shows_history() {
    let Some(browser) = Browser::launch("web_sending::token").await else {
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

    let page = browser.open(&format!("http://{addr}/")).await;
    page.wait_until("!document.getElementById('auth').hidden", "the token form")
        .await;
    assert_eq!(
        page.eval::<String>("document.getElementById('auth-label').textContent")
            .await,
        "This switchboard needs a token:"
    );
    assert_eq!(
        page.eval::<String>("document.getElementById('conn').textContent")
            .await,
        "not connected"
    );

    page.submit("#token", "not-the-right-token-at-all").await;
    page.wait_until(
        "document.getElementById('auth-label').textContent.includes('The token was refused')",
        "the wrong token refused",
    )
    .await;

    page.submit("#token", TOKEN).await;
    page.wait_until(
        "document.getElementById('conn').dataset.state === 'connected'",
        "connected with the token",
    )
    .await;
    page.say("hello page").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: hello page')"),
        "the answer",
    )
    .await;
    page.reload().await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: hello page')"),
        "the history, with the stored token",
    )
    .await;
    assert!(
        page.eval::<bool>("document.getElementById('auth').hidden")
            .await
    );
    browser.close().await;
    daemon.shutdown().await;
}
