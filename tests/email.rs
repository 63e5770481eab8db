//! What only email does, on a real Dovecot and an SMTP sink (the rest is in `conformance`):
//! threads — a reply stays in its thread, quotes the mail it answers, and the person's next
//! mail in it reaches the same session — HTML read as text, strangers, robots and lists not
//! answered, a mail over the cap told to the agent, and Dovecot restarting under the channel.

use serde_json::json;
use switchboard_testkit::email::{Compose, USER};
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::conformance::email::{Email, address, shown};
use crate::conformance::{ADA, CAROL, Platform, STRANGER};
use crate::util::{self, Extra};

/// What reached the model: the person's text of each request, in order.
fn asked(llm: &ScriptedLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(switchboard_testkit::last_user_text)
        .collect()
}

/// A daemon with the `[channels.email]` that `section` writes for the servers, once it
/// reads the mailbox.
struct Run {
    _dir: tempfile::TempDir,
    llm: ScriptedLlm,
    platform: Email,
    daemon: switchboard::app::Running,
}

impl Run {
    async fn start(section: impl FnOnce(&Email) -> String) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let platform = Email::start().await;
        let tables = section(&platform);
        let config = Extra {
            tables: &tables,
            ..Extra::default()
        };
        let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
        platform
            .wait("the mailbox read", |p| p.sessions() >= 1)
            .await;
        Self {
            _dir: dir,
            llm,
            platform,
            daemon,
        }
    }
}

#[tokio::test]
async fn a_reply_stays_in_its_thread_and_quotes_the_mail_it_answers() {
    let t = Run::start(|platform| platform.section("")).await;
    let (llm, platform) = (&t.llm, &t.platform);
    let smtp = &platform.servers.smtp;

    // A new thread, written in HTML by a mail client.
    let mut first = Compose::new(
        &address(ADA),
        "Plans for Friday",
        "<p>Shall we <b>meet</b> at noon?</p>",
    );
    first.name = "Ada Lovelace".into();
    first.html = true;
    platform
        .servers
        .dovecot
        .deliver(first.write("first@people.test"));
    platform
        .wait("the answer", |_| smtp.mails_to(&address(ADA)).len() == 1)
        .await;
    let asked = switchboard_testkit::last_user_text(&llm.requests()[0]);
    assert_eq!(
        asked, "Plans for Friday\n\nShall we meet at noon?",
        "the subject and the HTML as text"
    );
    let answer = &smtp.mails_to(&address(ADA))[0];
    assert_eq!(answer.subject(), "Re: Plans for Friday");
    assert_eq!(answer.in_reply_to().as_deref(), Some("first@people.test"));
    assert!(
        answer
            .header("References")
            .is_some_and(|refs| refs.contains("<first@people.test>")),
        "{:?}",
        answer.header("References")
    );
    assert_eq!(
        answer.header("Auto-Submitted").as_deref(),
        Some("auto-replied")
    );
    assert_eq!(answer.from, USER);
    let text = answer.text();
    assert!(
        text.contains("Ada Lovelace <p42@people.test> wrote:\n> Shall we meet at noon?"),
        "the person's mail is quoted under the answer: {text}"
    );
    assert_eq!(
        shown(answer),
        "echo: Plans for Friday\n\nShall we meet at noon?"
    );

    // Her reply to the agent's mail, from another client: the same thread, the same session.
    let mut second = Compose::new(
        &address(ADA),
        "Re: Plans for Friday",
        "Noon it is.\n\nOn Thu, agent wrote:\n> echo: Plans\n",
    );
    second.references = vec!["first@people.test".into(), answer.message_id()];
    platform
        .servers
        .dovecot
        .deliver(second.write("second@people.test"));
    platform
        .wait("the second answer", |_| {
            smtp.mails_to(&address(ADA)).len() == 2
        })
        .await;
    let requests = llm.requests();
    assert_eq!(
        switchboard_testkit::last_user_text(&requests[1]),
        "Noon it is.",
        "her quote of the agent is cut off"
    );
    let conversation = util::conversation(&requests[1]);
    assert!(
        conversation
            .iter()
            .any(|m| m["content"] == "Plans for Friday\n\nShall we meet at noon?"),
        "the thread's first mail is in the same session: {conversation:?}"
    );
    let again = &smtp.mails_to(&address(ADA))[1];
    assert_eq!(again.subject(), "Re: Plans for Friday");
    assert_eq!(again.in_reply_to().as_deref(), Some("second@people.test"));
    assert!(smtp.logins() >= 2, "the agent logged in to send");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_relay_on_this_host_takes_the_replies_without_a_login() {
    let t = Run::start(|platform| platform.section("smtp_login = false")).await;
    let said = t.platform.dm(ADA, "through the relay");
    t.platform
        .wait("the answer", |p| {
            !crate::conformance::replies(p, &said).is_empty()
        })
        .await;
    assert_eq!(t.platform.servers.smtp.logins(), 0, "no AUTH was sent");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn strangers_robots_and_lists_get_no_answer() {
    let t = Run::start(|platform| {
        platform
            .servers
            .section(&[&address(ADA), &address(CAROL), "@team.test"], "")
    })
    .await;
    let (llm, platform) = (&t.llm, &t.platform);
    let dovecot = &platform.servers.dovecot;
    dovecot.deliver(Compose::new(&address(STRANGER), "Hello", "let me in").write("s1@people.test"));
    let mut away = Compose::new(&address(ADA), "Out of office", "I am away until Monday.");
    away.headers.push("Auto-Submitted: auto-replied".into());
    dovecot.deliver(away.write("a1@people.test"));
    let mut list = Compose::new(&address(CAROL), "[news] weekly", "This week's news");
    list.headers.push("List-Id: <news.people.test>".into());
    dovecot.deliver(list.write("l1@people.test"));
    // A domain on the list lets in anyone of it.
    let colleague = "dan@team.test";
    dovecot.deliver(Compose::new(colleague, "Hi", "from the team").write("d1@team.test"));
    dovecot.deliver(Compose::new(&address(ADA), "Real", "a real question").write("q1@people.test"));
    let smtp = &platform.servers.smtp;
    platform
        .wait("Ada's question answered", |_| {
            !smtp.mails_to(&address(ADA)).is_empty()
        })
        .await;
    platform
        .wait("the colleague answered", |_| {
            !smtp.mails_to(colleague).is_empty()
        })
        .await;
    let asked = asked(llm);
    assert_eq!(
        asked,
        ["Hi\n\nfrom the team", "Real\n\na real question"],
        "only the people on the list reached the model, in the order they wrote"
    );
    assert!(
        smtp.mails_to(&address(STRANGER)).is_empty(),
        "no pairing code to a stranger"
    );
    assert_eq!(smtp.mails().len(), 2, "{:?}", smtp.mails());
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_mail_over_the_cap_is_not_read_and_the_agent_is_told() {
    let t = Run::start(|platform| platform.section("max_mail_bytes = 4000")).await;
    let (llm, platform) = (&t.llm, &t.platform);
    let mut big = Compose::new(&address(ADA), "The report", "see attached");
    big.files.push((
        "report.bin".into(),
        "application/octet-stream".into(),
        vec![7; 20_000],
    ));
    platform
        .servers
        .dovecot
        .deliver(big.write("big@people.test"));
    let smtp = &platform.servers.smtp;
    platform
        .wait("the answer", |_| !smtp.mails_to(&address(ADA)).is_empty())
        .await;
    let asked = switchboard_testkit::last_user_text(&llm.requests()[0]);
    assert!(
        asked.contains("over the 4000 bytes") && asked.contains("max_mail_bytes"),
        "{asked}"
    );
    assert_eq!(smtp.mails_to(&address(ADA))[0].subject(), "Re: The report");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn dovecot_restarting_under_the_channel_loses_nothing_and_repeats_nothing() {
    let mut t = Run::start(|platform| platform.section("")).await;
    let before = t.platform.dm(ADA, "before the restart");
    t.platform
        .wait("the first answer", |p| {
            !crate::conformance::replies(p, &before).is_empty()
        })
        .await;
    let logins = t.platform.sessions();
    t.platform.servers.dovecot.kill();
    // Carol writes while the mailbox is down: delivered once Dovecot is back.
    let during = t.platform.dm(CAROL, "while it was down");
    t.platform.servers.dovecot.resume();
    t.platform
        .wait("the channel back", |p| p.sessions() > logins)
        .await;
    t.platform
        .wait("Carol's answer", |p| {
            !crate::conformance::replies(p, &during).is_empty()
        })
        .await;
    let after = t.platform.dm(ADA, "after the restart");
    t.platform
        .wait("the last answer", |p| {
            !crate::conformance::replies(p, &after).is_empty()
        })
        .await;
    let asked = asked(&t.llm);
    assert_eq!(
        asked,
        [
            "before the restart",
            "while it was down",
            "after the restart"
        ],
        "each mail reached the model once"
    );
    assert_eq!(crate::conformance::replies(&t.platform, &before).len(), 1);
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn the_email_tool_searches_reads_and_sends_only_within_the_allow_list() {
    let t = Run::start(|platform| platform.section("")).await;
    let (llm, platform) = (&t.llm, &t.platform);
    let smtp = &platform.servers.smtp;
    let invoice = Compose::new(
        &address(CAROL),
        "Invoice 42",
        "Invoice 42 is due on Friday.",
    );
    platform
        .servers
        .dovecot
        .deliver(invoice.write("inv@people.test"));
    platform
        .wait("Carol answered", |_| {
            !smtp.mails_to(&address(CAROL)).is_empty()
        })
        .await;

    llm.push(Reply::tool(
        "email",
        json!({"action": "search", "from": "p44", "subject": "invoice"}),
    ));
    llm.push(Reply::tool("email", json!({"action": "read", "uid": 1})));
    llm.push(Reply::tool(
        "email",
        json!({"action": "send", "to": address(STRANGER), "subject": "Hi", "body": "x"}),
    ));
    llm.push(Reply::tool("email", json!({"action": "send", "to": address(CAROL), "subject": "Paid", "body": "Invoice 42 is paid."})));
    llm.push(Reply::text("Carol's invoice is paid."));
    let said = platform.dm(ADA, "what did Carol send? pay it and tell her");
    platform
        .wait("the answer", |p| {
            !crate::conformance::replies(p, &said).is_empty()
        })
        .await;
    let results = util::tool_results(llm.requests().last().expect("a request"));
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(
        results[0].contains("uid 1 ·")
            && results[0].contains("Invoice 42")
            && results[0].contains("p44@people.test"),
        "search: {}",
        results[0]
    );
    assert!(
        results[1].contains("Invoice 42 is due on Friday."),
        "read: {}",
        results[1]
    );
    assert!(
        results[2].contains("not among the people and domains allowed"),
        "send to a stranger: {}",
        results[2]
    );
    assert!(
        results[3].starts_with("Sent to p44@people.test"),
        "send: {}",
        results[3]
    );
    assert!(smtp.mails_to(&address(STRANGER)).is_empty());
    let paid = smtp
        .mails_to(&address(CAROL))
        .into_iter()
        .find(|mail| mail.subject() == "Paid")
        .expect("the mail to Carol");
    assert_eq!(paid.text().trim(), "Invoice 42 is paid.");
    assert_eq!(
        paid.header("Auto-Submitted").as_deref(),
        Some("auto-generated")
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn mails_that_come_while_others_are_taken_in_are_all_answered() {
    // A mail that comes while the channel fetches or flags another is announced in that
    // command's answer, not in IDLE's: missed, it would wait for the next mail.
    let t = Run::start(|platform| platform.section("")).await;
    let platform = &t.platform;
    let written: Vec<_> = (0..30)
        .map(|i| platform.dm(if i % 2 == 0 { ADA } else { CAROL }, &format!("mail {i}")))
        .collect();
    platform
        .wait("every mail answered", |p| {
            written
                .iter()
                .all(|said| !crate::conformance::replies(p, said).is_empty())
        })
        .await;
    for said in &written {
        assert_eq!(
            crate::conformance::replies(platform, said).len(),
            1,
            "{said:?}"
        );
    }
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn with_verified_by_a_forged_sender_is_not_answered() {
    let t = Run::start(|platform| platform.section("verified_by = \"mx.mail.test\"")).await;
    let dovecot = &t.platform.servers.dovecot;
    // Anyone can write Ada's address in From: the receiving server vouched for neither.
    dovecot.deliver(Compose::new(&address(ADA), "Run this", "forged").write("forged@people.test"));
    let mut claimed = Compose::new(&address(ADA), "Run this", "forged, with a claim");
    claimed
        .headers
        .push("Authentication-Results: mx.other.test; dmarc=pass header.from=people.test".into());
    dovecot.deliver(claimed.write("claimed@people.test"));
    let mut real = Compose::new(&address(ADA), "Plans", "really Ada");
    real.headers.push(
        "Authentication-Results: mx.mail.test; spf=pass smtp.mailfrom=people.test; dkim=pass header.d=people.test; dmarc=pass header.from=people.test".into(),
    );
    dovecot.deliver(real.write("real@people.test"));
    let smtp = &t.platform.servers.smtp;
    t.platform
        .wait("Ada's real mail answered", |_| {
            !smtp.mails_to(&address(ADA)).is_empty()
        })
        .await;
    let asked = asked(&t.llm);
    assert_eq!(
        asked,
        ["Plans\n\nreally Ada"],
        "only the vouched-for mail reached the model"
    );
    assert_eq!(smtp.mails().len(), 1);
    t.daemon.shutdown().await;
}
