//! 7. The web chat page in headless Chromium, as a person uses it: streamed Markdown (a
//! table, a code block with its copy button), history after a reload, conversations,
//! approving with the button, stopping a turn, a phone's screen, and XSS payloads that must
//! not run (what a person sends: `web_sending.rs`). Skipped, with the reason printed, where
//! no Chromium is installed (`.ci/run` installs it).

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::Reply;

use crate::browser::{Chat, LOG_TEXT};
use crate::util;

/// The Markdown of a reply with a table and a code block.
const RICH: &str = "## Plan\n\nHere is **the plan**:\n\n| step | who |\n|---|---|\n| pack | me |\n| drive | you |\n\n```sh\necho ready\n```\n\nSee [the docs](https://example.org/docs).";

#[tokio::test]
async fn a_streamed_markdown_reply_renders_and_the_history_comes_back_after_a_reload() {
    let Some(t) = Chat::start("web_page::markdown", "").await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);

    llm.push(Reply::tool("echo", json!({"text": "looked it up"})));
    llm.push(Reply::paced(RICH, Duration::from_millis(5)));
    page.say("make a plan").await;
    // The answer streams into one bubble, which stays the same element to the end.
    page.wait_until(
        "document.querySelector('.msg.agent') && document.querySelector('.msg.agent').innerText.includes('Plan')",
        "the answer streaming",
    )
    .await;
    let _: bool = page
        .eval("(window.__bubble = document.querySelector('.turn .msg.agent'), true)")
        .await;
    page.wait_until("document.querySelector('.msg.agent table')", "a table")
        .await;
    page.wait_until("document.getElementById('stop').hidden", "the turn to end")
        .await;
    assert!(
        page.eval::<bool>("window.__bubble === document.querySelector('.turn .msg.agent')")
            .await,
        "the streamed bubble was replaced instead of updated"
    );
    let cells: Vec<String> = page
        .eval("[...document.querySelectorAll('.msg.agent td')].map(td => td.textContent)")
        .await;
    assert_eq!(cells, ["pack", "me", "drive", "you"]);
    assert_eq!(
        page.eval::<String>("document.querySelector('.msg.agent .code pre').textContent")
            .await,
        "echo ready\n"
    );
    assert!(
        page.eval::<bool>("!!document.querySelector('.code button.copy')")
            .await
    );
    assert_eq!(
        page.eval::<String>("document.querySelector('.msg.agent strong').textContent")
            .await,
        "the plan"
    );
    let link: Vec<String> = page
        .eval("(a => [a.target, a.rel])(document.querySelector('.msg.agent a'))")
        .await;
    assert_eq!(link, ["_blank", "noopener noreferrer"]);
    assert!(
        !page.eval::<String>(LOG_TEXT).await.contains("**"),
        "Markdown shows rendered, not as typed"
    );
    // The tool call shows as one line with its arguments, result and duration.
    let tool: Vec<String> = page
        .eval("(d => [d.dataset.state, d.querySelector('.name').textContent, d.querySelector('.args').textContent])(document.querySelector('details.tool'))")
        .await;
    assert_eq!(tool, ["finished", "echo", r#"{"text":"looked it up"}"#]);
    page.screenshot("chat-desktop").await;

    page.reload().await;
    page.wait_until(
        "document.querySelector('.msg.agent table')",
        "the history after a reload",
    )
    .await;
    let text = page.eval::<String>(LOG_TEXT).await;
    assert_eq!(text.matches("make a plan").count(), 1, "{text}");
    assert!(
        page.eval::<bool>("document.querySelector('details.tool').dataset.state === 'finished'")
            .await
    );
    assert_eq!(
        page.eval::<String>("document.getElementById('title').textContent")
            .await,
        "make a plan"
    );
    t.end().await;
}

/// A long pasted message grows the composer; once sent, the page still follows the log to
/// its end: the message and the whole reply are in view, not pushed off-screen.
#[tokio::test]
async fn after_a_long_paste_the_reply_is_followed_to_the_end() {
    let Some(t) = Chat::start("web_page::long_paste", "").await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);
    // A phone's screen, where the composer's growth takes most from the log.
    page.phone(390, 700).await;
    page.wait_until("innerWidth === 390", "the screen size")
        .await;
    // Typed (or pasted) into the composer and sent with the send button.
    let send = async |text: &str| {
        let _: bool = page
            .eval(&format!(
                "(() => {{ const i = document.getElementById('input'); i.value = {}; \
                 i.dispatchEvent(new Event('input')); document.getElementById('send').click(); \
                 return true; }})()",
                serde_json::Value::String(text.to_owned())
            ))
            .await;
    };
    let long = (1..=40)
        .map(|n| format!("line {n}"))
        .collect::<Vec<_>>()
        .join("\n");
    // A full log first, so that it scrolls.
    for n in 1..=2 {
        llm.push(Reply::text(long.clone()));
        send("fill").await;
        page.wait_until(
            &format!(
                "[...document.querySelectorAll('.msg.agent')].filter(m => m.innerText.includes('line 40')).length === {n} \
                 && document.getElementById('stop').hidden"
            ),
            "the turn to end",
        )
        .await;
    }
    // The paste grows the composer; the person reads it over, then sends it.
    let _: bool = page
        .eval(&format!(
            "(() => {{ const i = document.getElementById('input'); i.focus(); i.value = {}; \
             i.dispatchEvent(new Event('input')); return true; }})()",
            serde_json::Value::String(long.clone())
        ))
        .await;
    page.wait_until(
        "document.getElementById('input').clientHeight > 150",
        "the composer grown",
    )
    .await;
    llm.push(Reply::paced(
        format!("{long}\nthe end"),
        Duration::from_millis(2),
    ));
    let _: bool = page
        .eval("(document.getElementById('send').click(), true)")
        .await;
    page.wait_until(
        "[...document.querySelectorAll('.msg.agent')].some(m => m.innerText.includes('the end'))",
        "the reply",
    )
    .await;
    page.wait_until("document.getElementById('stop').hidden", "the turn to end")
        .await;
    let below: f64 = page
        .eval("(() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight; })()")
        .await;
    assert!(below < 2.0, "the log is {below}px above its end");
    t.end().await;
}

/// A conversation's title is its first message that is not a command, and two of the same
/// title are told apart by when they were last written to.
#[tokio::test]
async fn a_command_names_no_conversation_and_like_named_ones_differ() {
    let Some(t) = Chat::start("web_page::titles", "").await else {
        return;
    };
    let page = &t.page;
    let titles = async || -> Vec<String> {
        page.eval("[...document.querySelectorAll('#list li .open')].map(b => b.textContent)")
            .await
    };
    page.say("/help").await;
    page.wait_until(
        "document.querySelectorAll('#list li').length === 1",
        "listed",
    )
    .await;
    page.wait_until("document.getElementById('stop').hidden", "the answer")
        .await;
    assert_eq!(titles().await, ["New chat"]);
    page.say("plan the trip").await;
    page.wait_until(
        "document.querySelector('#list li .open').textContent === 'plan the trip'",
        "the title from the first real message",
    )
    .await;
    page.click("#new").await;
    page.say("plan the trip").await;
    page.wait_until("document.querySelectorAll('#list li').length === 2", "two")
        .await;
    page.wait_until(
        "[...document.querySelectorAll('#list li .open')].every(b => b.querySelector('.when'))",
        "like-named conversations show when they were written to",
    )
    .await;
    t.end().await;
}

/// A page reloaded while an answer streams shows what was said before the reload, then the
/// rest — each word once, in order.
#[tokio::test]
async fn a_reload_mid_answer_shows_what_was_said_then_the_rest() {
    let Some(t) = Chat::start("web_page::reload_mid_answer", "").await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);
    let words: Vec<String> = (0..60).map(|n| format!("w{n}")).collect();
    llm.push(Reply::paced(words.join(" "), Duration::from_millis(100)));
    page.say("count").await;
    page.wait_until(
        "document.querySelector('.msg.agent') && document.querySelector('.msg.agent').innerText.includes('w5')",
        "the answer streaming",
    )
    .await;
    page.reload().await;
    // Right after the reload: the start of the answer is back, not only what comes next.
    page.wait_until(
        "document.querySelector('.msg.agent') && document.querySelector('.msg.agent').innerText.includes('w0') \
         && !document.getElementById('stop').hidden",
        "the answer so far after the reload, while it still streams",
    )
    .await;
    page.wait_until(
        "document.getElementById('stop').hidden",
        "the answer to end",
    )
    .await;
    let shown: String = page
        .eval("[...document.querySelectorAll('.msg.agent')].map(m => m.innerText).join(' ')")
        .await;
    let seen: Vec<&str> = shown.split_whitespace().collect();
    assert_eq!(seen, words, "each word once, in order");
    t.end().await;
}

#[tokio::test]
async fn conversations_are_listed_switched_and_renamed() {
    let Some(t) = Chat::start("web_page::conversations", "").await else {
        return;
    };
    let page = &t.page;

    page.say("first topic").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: first topic')"),
        "the first answer",
    )
    .await;
    page.click("#new").await;
    page.wait_until(
        &format!("!{LOG_TEXT}.includes('first topic')"),
        "an empty chat",
    )
    .await;
    page.say("second topic").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: second topic')"),
        "the second answer",
    )
    .await;
    page.wait_until(
        "document.querySelectorAll('#list li').length === 2",
        "two conversations",
    )
    .await;
    let titles: Vec<String> = page
        .eval("[...document.querySelectorAll('#list li .open')].map(b => b.textContent)")
        .await;
    assert_eq!(titles, ["second topic", "first topic"]);

    // Back to the first: its history, not the second's.
    page.click("#list li:nth-child(2) .open").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: first topic')"),
        "the first chat again",
    )
    .await;
    assert!(!page.eval::<String>(LOG_TEXT).await.contains("second topic"));

    // Renamed, on the server: another browser sees the name.
    page.click("#list li:nth-child(2) .act").await;
    page.wait_until("document.querySelector('#list li input')", "the rename box")
        .await;
    page.submit("#list li input", "Holidays").await;
    let other = t
        .browser
        .open(&format!("http://{}/", t.daemon.addr()))
        .await;
    other
        .wait_until(
            "[...document.querySelectorAll('#list li .open')].some(b => b.textContent === 'Holidays')",
            "the new name on another page",
        )
        .await;
    t.end().await;
}

#[tokio::test]
async fn a_tool_call_is_approved_with_the_button_and_a_turn_stopped_with_stop() {
    let approvals = "[agent.approvals]\ntools = [\"echo\"]\ntimeout_secs = 120";
    let Some(t) = Chat::start("web_page::approve", approvals).await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);

    llm.push(Reply::tool("echo", json!({"text": "secret plan"})));
    llm.push(Reply::text("Done: the plan is echoed."));
    page.say("echo the plan").await;
    page.wait_until(
        "document.querySelector('.ask button.primary')",
        "the approval buttons",
    )
    .await;
    assert!(
        page.eval::<bool>("!document.querySelector('details.tool')")
            .await,
        "the tool shows as running before it was approved"
    );
    assert!(
        page.eval::<String>("document.querySelector('.ask').innerText")
            .await
            .contains("echo")
    );
    assert!(
        page.eval::<bool>("!document.getElementById('stop').hidden")
            .await
    );
    page.screenshot("chat-approval").await;
    // Reloaded while it waits: the question and the stop button come back.
    page.reload().await;
    page.wait_until(
        "document.querySelector('.ask button.primary')",
        "the question after a reload",
    )
    .await;
    assert!(
        page.eval::<bool>("!document.getElementById('stop').hidden")
            .await
    );
    page.click(".ask button.primary").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('Done: the plan is echoed.')"),
        "the answer after approval",
    )
    .await;
    assert!(
        page.eval::<bool>("document.querySelector('details.tool').dataset.state === 'finished'")
            .await
    );
    assert!(
        page.eval::<bool>("document.querySelector('.ask').classList.contains('answered')")
            .await
    );

    // A long answer, stopped with the button.
    llm.push(Reply::paced("word ".repeat(400), Duration::from_millis(25)));
    page.say("tell me a long story").await;
    page.wait_until(
        "!document.getElementById('stop').hidden && document.querySelectorAll('.turn')[1]?.innerText.includes('word')",
        "the story streaming",
    )
    .await;
    page.click("#stop").await;
    page.wait_until(
        "document.getElementById('stop').hidden",
        "the stop button to go",
    )
    .await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('(stopped)')"),
        "the answer marked stopped",
    )
    .await;
    let words = page.eval::<String>(LOG_TEXT).await.matches("word").count();
    assert!(words < 400, "the whole story arrived: {words} words");

    // Esc stops too.
    llm.push(Reply::paced("more ".repeat(400), Duration::from_millis(25)));
    page.say("another").await;
    page.wait_until(
        "!document.getElementById('stop').hidden",
        "the next answer running",
    )
    .await;
    page.press("#input", "Escape").await;
    page.wait_until("document.getElementById('stop').hidden", "Esc to stop it")
        .await;
    t.end().await;
}

/// A message typed while a command waits for approval: the page says what it will do; it
/// denies the command, and is kept — answered next, and in the history after a reload.
#[tokio::test]
async fn a_message_typed_during_an_approval_denies_it_and_is_answered_next() {
    let approvals = "[agent.approvals]\ntools = [\"echo\"]\ntimeout_secs = 120";
    let Some(t) = Chat::start("web_page::typed_during_approval", approvals).await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);
    llm.push(Reply::tool("echo", json!({"text": "secret plan"})));
    llm.push(Reply::text("Not run, as you said."));
    llm.push(Reply::text("Here is the other thing."));
    page.say("echo the plan").await;
    page.wait_until(
        "document.querySelector('.ask button.primary')",
        "the approval",
    )
    .await;
    assert!(
        page.eval::<String>("document.getElementById('input').placeholder")
            .await
            .contains("denies"),
        "the composer says what a message does now"
    );
    page.say("do the other thing instead").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('Here is the other thing.')"),
        "the new message answered",
    )
    .await;
    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        3,
        "the tool call, its denial, the new message"
    );
    assert!(
        util::tool_results(&requests[1])
            .iter()
            .any(|result| result.contains("denied")),
        "{:?}",
        util::tool_results(&requests[1])
    );
    let asked = util::conversation(&requests[2]);
    assert_eq!(
        asked.last().map(|m| m["content"].clone()),
        Some(json!("do the other thing instead"))
    );
    page.reload().await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('do the other thing instead')"),
        "the message in the history",
    )
    .await;
    t.end().await;
}

#[tokio::test]
async fn a_phone_screen_shows_every_control_in_light_and_dark() {
    let Some(t) = Chat::start("web_page::phone", "").await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);
    llm.push(Reply::text(RICH));
    page.say("a long first message that makes a long title for the header")
        .await;
    page.wait_until("document.querySelector('.msg.agent table')", "the answer")
        .await;

    let inside = "(id => { const r = document.getElementById(id).getBoundingClientRect(); \
         return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= innerWidth && r.top >= 0 && r.bottom <= innerHeight; })";
    // The smallest phones, then the 390×844 most are.
    for (width, height) in [(360, 740), (390, 844)] {
        page.phone(width, height).await;
        page.wait_until(&format!("innerWidth === {width}"), "the screen size")
            .await;
        for control in [
            "menu", "title", "conn", "new-top", "attach", "input", "send",
        ] {
            assert!(
                page.eval::<bool>(&format!("{inside}('{control}')")).await,
                "#{control} is not fully on a {width}×{height} screen"
            );
        }
        assert!(
            page.eval::<bool>("document.documentElement.scrollWidth <= innerWidth")
                .await,
            "the page scrolls sideways at {width} px"
        );
        assert!(
            page.eval::<bool>(
                "document.getElementById('title').getBoundingClientRect().height < 40"
            )
            .await,
            "the title wraps at {width} px"
        );
    }
    let labels: Vec<String> = page
        .eval("[...document.querySelectorAll('button')].filter(b => !b.textContent.trim() && !b.getAttribute('aria-label')).map(b => b.outerHTML)")
        .await;
    assert!(labels.is_empty(), "buttons without a name: {labels:?}");
    page.screenshot("chat-phone").await;

    // The list slides away as the screen narrows: the button is tapped once nothing covers it.
    page.wait_until(
        "(m => { const r = m.getBoundingClientRect(); \
         return m.contains(document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2)); })\
         (document.getElementById('menu'))",
        "the menu button uncovered",
    )
    .await;
    page.click("#menu").await;
    page.wait_until(
        &format!("{inside}('new') && {inside}('list')"),
        "the conversations on a phone",
    )
    .await;
    page.press("#input", "Escape").await;
    page.wait_until(
        "document.getElementById('backdrop').hidden",
        "the list to close on Esc",
    )
    .await;

    page.dark().await;
    let background: String = page
        .eval("getComputedStyle(document.body).backgroundColor")
        .await;
    assert_eq!(
        background, "rgb(21, 23, 28)",
        "dark mode follows the system"
    );
    page.screenshot("chat-phone-dark").await;
    t.end().await;
}

#[tokio::test]
async fn html_in_a_reply_or_a_message_never_runs() {
    let Some(t) = Chat::start("web_page::xss", "").await else {
        return;
    };
    let (page, llm) = (&t.page, &t.llm);
    let payload = "Hi <img src=x onerror=\"window.__xss=1\"> <script>window.__xss=2</script>\n\n\
         [click](javascript:window.__xss=3) <a href=\"javascript:window.__xss=4\">x</a>\n\n\
         <iframe srcdoc=\"<script>parent.__xss=5</script>\"></iframe>\n\n\
         <svg onload=\"window.__xss=6\"></svg> <div class=\"ask\" style=\"color:red\">fake approval</div>\n\n\
         <details open ontoggle=\"window.__xss=7\">x</details>";
    llm.push(Reply::paced(payload, Duration::from_millis(2)));
    page.say("<img src=x onerror=window.__xss=8><b onmouseover=window.__xss=9>hover</b>")
        .await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('fake approval')"),
        "the reply",
    )
    .await;
    page.wait_until("document.getElementById('stop').hidden", "the turn to end")
        .await;
    // Give anything that slipped through a chance to run (a hover, a click), then read the
    // flag; again once the same text comes back as history.
    page.click(".msg.user").await;
    let flag = "String(window.__xss)";
    assert_eq!(
        page.eval::<String>(flag).await,
        "undefined",
        "a payload ran"
    );
    page.reload().await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('fake approval')"),
        "the history",
    )
    .await;
    page.click(".msg.user").await;
    assert_eq!(
        page.eval::<String>(flag).await,
        "undefined",
        "a payload ran from the history"
    );
    let found: Vec<String> = page
        .eval("[...document.querySelectorAll('#log script, #log iframe, #log svg, #log [onerror], #log [onload], #log [ontoggle], #log [onmouseover], #log a[href^=\"javascript\"], #log .msg.agent .ask, #log .msg.agent [style]')].map(e => e.outerHTML)")
        .await;
    assert!(found.is_empty(), "left in the page: {found:?}");
    // The person's message shows as the text they typed.
    assert!(
        page.eval::<String>("document.querySelector('.msg.user').textContent")
            .await
            .starts_with("<img src=x onerror=window.__xss=8>")
    );
    t.end().await;
}

#[tokio::test]
async fn the_search_box_finds_a_conversation_by_what_was_said_and_opens_it() {
    let Some(t) = Chat::start("web_page::search", "[memory]\nenabled = true\n").await else {
        return;
    };
    let page = &t.page;
    page.say("the boat is called Aurora").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: the boat is called Aurora')"),
        "the first answer",
    )
    .await;
    page.click("#new").await;
    page.say("something else entirely").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: something else entirely')"),
        "the second answer",
    )
    .await;

    // Typed into the search box: the hits replace the list, the match marked.
    page.submit("#search", "aurora").await;
    page.wait_until(
        "!document.querySelector('#results').hidden && document.querySelectorAll('#results li .open').length === 2",
        "the question and its echo found",
    )
    .await;
    let marked: Vec<String> = page
        .eval("[...document.querySelectorAll('#results mark')].map(m => m.textContent)")
        .await;
    assert_eq!(marked, ["Aurora", "Aurora"]);
    assert!(
        page.eval::<bool>("document.querySelector('#list').hidden")
            .await
    );
    let title: String = page
        .eval("document.querySelector('#results li strong').textContent")
        .await;
    assert_eq!(title, "the boat is called Aurora");
    // Opening a hit opens its conversation.
    page.click("#results li .open").await;
    page.wait_until(
        &format!("{LOG_TEXT}.includes('echo: the boat is called Aurora') && !{LOG_TEXT}.includes('something else')"),
        "the found conversation",
    )
    .await;
    // Nothing found is said; an empty box brings the list back.
    page.submit("#search", "zeppelin").await;
    page.wait_until(
        "document.querySelector('#results .none')?.textContent === 'Nothing found.'",
        "nothing found",
    )
    .await;
    page.submit("#search", "").await;
    page.wait_until(
        "!document.querySelector('#list').hidden && document.querySelector('#results').hidden",
        "the list again",
    )
    .await;
    t.end().await;
}
