//! Mails in switchboard's terms, pure: which are for the agent ([`read`]), each an
//! [`Arrival`] in its thread's chat, with what a reply needs to stay in that thread
//! ([`Thread`]).
//!
//! A thread is a chat: its root is the first Message-ID of `References` (else
//! `In-Reply-To`, else the mail's own), and its chat id a hash of that ([`thread_chat`]), so
//! every reply in the thread lands in the same session whichever client wrote it. A person
//! is their address (lower case); their domain is the "username" an `@domain` entry of
//! `allow_from` matches. HTML-only mails are read as text; the quoted tail of a reply (the
//! conversation so far, which the session already has) is cut off. Mails no person wrote to
//! the agent are ignored: the bot's own, auto-replies (`Auto-Submitted`), bulk and list
//! mail — so two robots never answer each other for ever.

use mail_parser::{Message, MessageParser, MimeHeaders};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use switchboard_adapter::{Arrival, FileRef};

use crate::config::address_of;

/// The longest quote of the person's mail under a reply, in characters.
pub const QUOTE_CHARS: usize = 4000;
/// Message-IDs a reply's `References` carries at most (the root and the latest ones).
pub const MAX_REFERENCES: usize = 20;

/// What a reply in a thread needs: whom to, its subject, the chain it continues, and the mail
/// it quotes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// The person's address.
    pub to: String,
    /// Their name, when their mail gave one.
    #[serde(default)]
    pub name: String,
    /// The thread's subject, without `Re:`.
    pub subject: String,
    /// The Message-IDs of the thread (root first), without angle brackets.
    pub references: Vec<String>,
    /// The person's latest mail: its Message-ID, when it was written, and its text.
    pub last: String,
    #[serde(default)]
    pub date: String,
    #[serde(default)]
    pub quote: String,
}

/// Where an attachment is: the mail (its mailbox's UIDVALIDITY and its UID) and its place
/// among the mail's attachments, as [`FileRef::url`] carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartAt {
    pub validity: u32,
    pub uid: u32,
    pub index: u32,
}

impl PartAt {
    pub fn encode(self) -> String {
        format!("{}/{}/{}", self.validity, self.uid, self.index)
    }

    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split('/').map(str::parse::<u32>);
        let (Some(Ok(validity)), Some(Ok(uid)), Some(Ok(index)), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        Some(Self {
            validity,
            uid,
            index,
        })
    }
}

/// A mail for the agent: its arrival and its thread.
#[derive(Debug)]
pub struct Mail {
    pub arrival: Arrival,
    pub thread: Thread,
}

/// The chat of the thread whose root is the Message-ID `root` (without angle brackets).
pub fn thread_chat(root: &str) -> String {
    let digest = Sha256::digest(root.trim().to_lowercase().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Who reads: the bot's address, and the server whose `Authentication-Results` must vouch
/// for a sender (none: the `From` address is taken as it says).
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    pub me: &'a str,
    pub verified_by: Option<&'a str>,
}

/// Reads the mail `raw` (the mailbox's `validity` and its `uid`).
pub fn read(reader: Reader<'_>, raw: &[u8], validity: u32, uid: u32) -> Result<Mail, &'static str> {
    read_with(reader, raw, validity, uid, None)
}

/// Reads the head of a mail that was not read whole (`header`), with `notice` as its text
/// for the agent: why it was not.
pub fn read_header(
    reader: Reader<'_>,
    header: &[u8],
    validity: u32,
    uid: u32,
    notice: String,
) -> Result<Mail, &'static str> {
    read_with(reader, header, validity, uid, Some(notice))
}

fn read_with(
    reader: Reader<'_>,
    raw: &[u8],
    validity: u32,
    uid: u32,
    notice: Option<String>,
) -> Result<Mail, &'static str> {
    let me = reader.me;
    let message = MessageParser::default()
        .parse(raw)
        .ok_or("not a mail that can be read")?;
    let from = message
        .from()
        .and_then(|from| from.first())
        .ok_or("no sender")?;
    let sender = from
        .address()
        .and_then(address_of)
        .ok_or("no sender address")?;
    if sender == me {
        return Err("the bot's own mail");
    }
    if let Some(why) = not_from_a_person(&message) {
        return Err(why);
    }
    if let Some(server) = reader.verified_by
        && !vouched(&message, server, domain_of(&sender))
    {
        return Err(
            "its sender is not vouched for (Authentication-Results: no DMARC or DKIM pass for the From domain)",
        );
    }
    let id = message
        .message_id()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("uid.{validity}.{uid}@{}", domain_of(me)));
    let in_reply_to = ids(
        message.in_reply_to().as_text_list(),
        message.in_reply_to().as_text(),
    );
    let mut references = ids(
        message.references().as_text_list(),
        message.references().as_text(),
    );
    if references.is_empty() {
        references.clone_from(&in_reply_to);
    }
    let root = references.first().cloned().unwrap_or_else(|| id.clone());
    let subject = message.subject().map(without_re).unwrap_or_default();
    let body = message
        .body_text(0)
        .map(|text| without_quoted_tail(&text).trim().to_owned())
        .unwrap_or_default();
    let starts_thread = in_reply_to.is_empty() && references.is_empty();
    let text = if let Some(notice) = notice {
        notice
    } else if body.is_empty() {
        subject.clone()
    } else if starts_thread && !subject.is_empty() && !body.starts_with('/') {
        format!("{subject}\n\n{body}")
    } else {
        body.clone()
    };
    let files: Vec<FileRef> = message
        .attachments()
        .enumerate()
        .map(|(index, part)| FileRef {
            name: part
                .attachment_name()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("attachment-{}", index + 1)),
            url: PartAt {
                validity,
                uid,
                index: u32::try_from(index).unwrap_or(u32::MAX),
            }
            .encode(),
            size: part.contents().len() as u64,
            mime: part.content_type().map(|ct| match ct.subtype() {
                Some(sub) => format!("{}/{sub}", ct.ctype()),
                None => ct.ctype().to_owned(),
            }),
            voice: false,
            duration_ms: None,
        })
        .collect();
    if text.trim().is_empty() && files.is_empty() {
        return Err("nothing to read");
    }
    let mut chain = references.clone();
    chain.push(id.clone());
    let name = from.name().map(str::trim).unwrap_or_default().to_owned();
    let thread = Thread {
        to: sender.clone(),
        name: name.clone(),
        subject,
        references: bounded(chain),
        last: id.clone(),
        date: message
            .date()
            .map(|date| date.to_rfc822())
            .unwrap_or_default(),
        quote: body.chars().take(QUOTE_CHARS).collect(),
    };
    let arrival = Arrival {
        chat: thread_chat(&root),
        // Strangers get no pairing code by mail: their address may be forged.
        private: false,
        username: Some(domain_of(&sender).to_owned()),
        name: if name.is_empty() {
            sender.clone()
        } else {
            format!("{name} <{sender}>")
        },
        sender,
        message: id,
        text,
        reply_to: in_reply_to.last().cloned(),
        files,
    };
    Ok(Mail { arrival, thread })
}

/// Reads it again for its attachment at `index`: its bytes.
pub fn attachment(raw: &[u8], index: u32) -> Option<Vec<u8>> {
    let message = MessageParser::default().parse(raw)?;
    let part = message.attachments().nth(index as usize)?;
    Some(part.contents().to_vec())
}

/// Whether the receiving server `server` vouches for mail from `domain`: its own (the first)
/// `Authentication-Results` says DMARC passed for it, or a DKIM signature of that domain did
/// (RFC 8601). Results another server wrote — a sender can write any header — do not count.
fn vouched(message: &Message<'_>, server: &str, domain: &str) -> bool {
    let Some((_, results)) = message.headers_raw().find(|(name, value)| {
        name.eq_ignore_ascii_case("Authentication-Results")
            && value
                .split(';')
                .next()
                .and_then(|id| id.split_whitespace().next())
                .is_some_and(|id| id.eq_ignore_ascii_case(server))
    }) else {
        return false;
    };
    let results = without_comments(results).to_ascii_lowercase();
    let domain = domain.to_ascii_lowercase();
    results.split(';').skip(1).any(|result| {
        let mut words = result.split_whitespace();
        let verdict = words.next().unwrap_or_default();
        let props: Vec<(&str, &str)> = words.filter_map(|word| word.split_once('=')).collect();
        let prop = |key: &str| {
            props
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.trim_matches('"'))
        };
        match verdict {
            "dmarc=pass" => prop("header.from").is_none_or(|from| from == domain),
            "dkim=pass" => {
                prop("header.d").is_some_and(|d| d == domain)
                    || prop("header.i")
                        .is_some_and(|i| i.rsplit('@').next() == Some(domain.as_str()))
            }
            _ => false,
        }
    })
}

/// `text` without its `(comments)`.
fn without_comments(text: &str) -> String {
    let mut depth = 0usize;
    text.chars()
        .filter(|c| match c {
            '(' => {
                depth += 1;
                false
            }
            ')' => {
                depth = depth.saturating_sub(1);
                false
            }
            _ => depth == 0,
        })
        .collect()
}

/// Why `message` was written by no person, if it was not.
fn not_from_a_person(message: &Message<'_>) -> Option<&'static str> {
    let header = |name: &str| {
        message
            .header_raw(name)
            .map(|value| value.trim().to_ascii_lowercase())
    };
    if header("Auto-Submitted").is_some_and(|value| value != "no") {
        return Some("an automatic mail (Auto-Submitted)");
    }
    if header("Precedence").is_some_and(|value| matches!(value.as_str(), "bulk" | "junk" | "list"))
    {
        return Some("bulk mail (Precedence)");
    }
    if header("List-Id").is_some() {
        return Some("a mailing list's mail");
    }
    None
}

/// Message-IDs of a header, without angle brackets.
fn ids(list: Option<&[std::borrow::Cow<'_, str>]>, one: Option<&str>) -> Vec<String> {
    let all: Vec<&str> = match (list, one) {
        (Some(list), _) => list.iter().map(AsRef::as_ref).collect(),
        (None, Some(one)) => vec![one],
        (None, None) => Vec::new(),
    };
    all.into_iter()
        .flat_map(|text| text.split_whitespace())
        .map(|id| id.trim_matches(['<', '>']).to_owned())
        .filter(|id| !id.is_empty())
        .collect()
}

/// The root and the latest Message-IDs of `chain`, at most [`MAX_REFERENCES`].
fn bounded(mut chain: Vec<String>) -> Vec<String> {
    chain.dedup();
    if chain.len() > MAX_REFERENCES {
        let keep_from = chain.len() - (MAX_REFERENCES - 1);
        let root = chain[0].clone();
        chain = std::iter::once(root)
            .chain(chain.drain(keep_from..))
            .collect();
    }
    chain
}

/// The domain of an address.
pub(crate) fn domain_of(address: &str) -> &str {
    address.rsplit_once('@').map_or("", |(_, domain)| domain)
}

/// A subject without its `Re:`s (and `Aw:`, `Fwd:`…).
pub fn without_re(subject: &str) -> String {
    let mut rest = subject.trim();
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(prefix) = ["re:", "aw:", "sv:", "fw:", "fwd:", "wg:"]
            .iter()
            .find(|prefix| lower.starts_with(*prefix))
        else {
            return rest.to_owned();
        };
        rest = rest[prefix.len()..].trim_start();
    }
}

/// `text` without the quoted mail at its end: the trailing `>` lines and the line that
/// introduces them ("On … wrote:"), or all from Outlook's "-----Original Message-----".
pub fn without_quoted_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if let Some(at) = lines.iter().position(|line| {
        line.trim()
            .eq_ignore_ascii_case("-----original message-----")
    }) {
        return lines[..at].join("\n");
    }
    let mut end = lines.len();
    while end > 0 && {
        let line = lines[end - 1].trim_start();
        line.starts_with('>') || line.is_empty()
    } {
        end -= 1;
    }
    if end == lines.len() {
        return text.to_owned();
    }
    // Only a block of quoted lines counts (not a blank line at the end).
    if !lines[end..]
        .iter()
        .any(|line| line.trim_start().starts_with('>'))
    {
        return text.to_owned();
    }
    if end > 0 && lines[end - 1].trim_end().ends_with("wrote:") {
        end -= 1;
    }
    lines[..end].join("\n")
}

/// The body of a reply: `text`, then the person's mail quoted under who wrote it and when.
pub fn quoted(text: &str, thread: &Thread) -> String {
    if thread.quote.trim().is_empty() {
        return text.to_owned();
    }
    let who = if thread.name.is_empty() {
        thread.to.clone()
    } else {
        format!("{} <{}>", thread.name, thread.to)
    };
    let said = if thread.date.is_empty() {
        format!("{who} wrote:")
    } else {
        format!("On {}, {who} wrote:", thread.date)
    };
    let mut body = format!("{text}\n\n{said}\n");
    for line in thread.quote.lines() {
        body.push('>');
        if !line.is_empty() {
            body.push(' ');
            body.push_str(line);
        }
        body.push('\n');
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "agent@example.com";
    const READER: Reader<'static> = Reader {
        me: ME,
        verified_by: None,
    };

    fn mail(headers: &str, body: &str) -> String {
        format!(
            "From: Ada Lovelace <Ada@People.test>\r\nTo: {ME}\r\nDate: Thu, 3 Dec 2026 10:00:00 +0000\r\n{headers}\r\n\r\n{body}"
        )
    }

    #[test]
    fn a_reply_joins_its_threads_chat_and_loses_its_quoted_tail() {
        let first = mail(
            "Message-ID: <root@people.test>\r\nSubject: Plans",
            "What next?",
        );
        let first = read(READER, first.as_bytes(), 7, 1).expect("a mail");
        assert_eq!(first.arrival.chat, thread_chat("root@people.test"));
        assert_eq!(first.arrival.text, "Plans\n\nWhat next?");
        assert_eq!(first.arrival.sender, "ada@people.test");
        assert_eq!(first.arrival.username.as_deref(), Some("people.test"));
        assert!(first.arrival.reply_to.is_none());

        let reply = mail(
            "Message-ID: <r2@people.test>\r\nSubject: Re: Plans\r\nIn-Reply-To: <bot1@example.com>\r\nReferences: <root@people.test> <bot1@example.com>",
            "Yes, do it.\r\n\r\nOn Thu, 3 Dec 2026, agent wrote:\r\n> Shall I?\r\n> \r\n",
        );
        let reply = read(READER, reply.as_bytes(), 7, 2).expect("a mail");
        assert_eq!(reply.arrival.chat, first.arrival.chat);
        assert_eq!(reply.arrival.text, "Yes, do it.");
        assert_eq!(reply.arrival.reply_to.as_deref(), Some("bot1@example.com"));
        assert_eq!(reply.thread.subject, "Plans");
        assert_eq!(
            reply.thread.references,
            ["root@people.test", "bot1@example.com", "r2@people.test"]
        );
    }

    #[test]
    fn html_is_read_as_text_and_attachments_are_named_by_their_place() {
        let raw = mail(
            "Message-ID: <h@people.test>\r\nIn-Reply-To: <x@people.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"",
            "--b\r\nContent-Type: text/html\r\n\r\n<p>Hello <b>there</b></p>\r\n--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=\"a.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n--b--\r\n",
        );
        let mail = read(READER, raw.as_bytes(), 7, 9).expect("a mail");
        assert!(
            mail.arrival.text.contains("Hello there"),
            "{}",
            mail.arrival.text
        );
        assert_eq!(mail.arrival.files.len(), 1);
        assert_eq!(mail.arrival.files[0].name, "a.pdf");
        let at = PartAt::decode(&mail.arrival.files[0].url).expect("a place");
        assert_eq!((at.validity, at.uid, at.index), (7, 9, 0));
        assert_eq!(
            attachment(raw.as_bytes(), 0).as_deref(),
            Some(&b"%PDF-"[..])
        );
    }

    #[test]
    fn robots_lists_and_the_bots_own_mail_are_not_answered() {
        for headers in [
            "Auto-Submitted: auto-replied",
            "Precedence: bulk",
            "List-Id: <news.example.com>",
        ] {
            let raw = mail(&format!("Message-ID: <a@b>\r\n{headers}"), "Out of office");
            assert!(read(READER, raw.as_bytes(), 1, 1).is_err(), "{headers}");
        }
        let own = "From: agent@example.com\r\nMessage-ID: <o@x>\r\n\r\nhi";
        assert_eq!(
            read(READER, own.as_bytes(), 1, 1).err(),
            Some("the bot's own mail")
        );
    }

    #[test]
    fn with_a_verifying_server_only_mail_it_vouches_for_is_read() {
        let strict = Reader {
            me: ME,
            verified_by: Some("mx.example.com"),
        };
        let with = |results: &str| mail(&format!("Message-ID: <v@x>\r\n{results}"), "hi");
        let passing = [
            "Authentication-Results: mx.example.com; spf=pass smtp.mailfrom=people.test;\r\n dkim=pass (2048-bit key) header.d=people.test header.s=s1; dmarc=pass (p=REJECT) header.from=people.test",
            "Authentication-Results: MX.example.com; dmarc=pass header.from=People.test",
            "Authentication-Results: mx.example.com; dkim=pass header.i=@people.test",
        ];
        for results in passing {
            assert!(
                read(strict, with(results).as_bytes(), 1, 1).is_ok(),
                "{results}"
            );
        }
        let failing = [
            // No results at all: a forged From.
            "X-Nothing: 1",
            "Authentication-Results: mx.example.com; dmarc=fail header.from=people.test; dkim=none",
            // Another domain's signature.
            "Authentication-Results: mx.example.com; dkim=pass header.d=evil.test",
            // A sender's own header claiming another server's word.
            "Authentication-Results: mx.other.test; dmarc=pass header.from=people.test",
        ];
        for results in failing {
            assert!(
                read(strict, with(results).as_bytes(), 1, 1).is_err(),
                "{results}"
            );
        }
        // The receiving server's header is the first of its name: one below it does not count.
        let forged_below = mail(
            "Message-ID: <v@x>\r\nAuthentication-Results: mx.example.com; dmarc=fail header.from=people.test\r\nAuthentication-Results: mx.example.com; dmarc=pass header.from=people.test",
            "hi",
        );
        assert!(read(strict, forged_below.as_bytes(), 1, 1).is_err());
    }

    #[test]
    fn a_reply_quotes_the_mail_it_answers() {
        let thread = Thread {
            to: "ada@people.test".into(),
            name: "Ada".into(),
            date: "Thu, 3 Dec 2026 10:00:00 +0000".into(),
            quote: "line one\n\nline two".into(),
            ..Thread::default()
        };
        assert_eq!(
            quoted("Sure.", &thread),
            "Sure.\n\nOn Thu, 3 Dec 2026 10:00:00 +0000, Ada <ada@people.test> wrote:\n> line one\n>\n> line two\n"
        );
        assert_eq!(without_re("Re: AW: Fwd: Plans"), "Plans");
    }
}
