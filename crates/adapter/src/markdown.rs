//! Markdown as models write it, rendered for platforms that do not take Markdown:
//! [`telegram_html`], in Telegram's HTML subset (`b`, `i`, `s`, `code`, `pre`, `a`,
//! `blockquote`): headings become bold lines, list items get bullets, tables and raw HTML
//! become plain (escaped) text. Everything else is escaped, so the output is always HTML
//! Telegram accepts; should it still refuse, adapters resend the plain text.
//! [`slack_mrkdwn`], in Slack's mrkdwn (`*bold*`, `_italic_`, `~strike~`, `<url|text>`,
//! fences and backticks kept), `&`, `<`, `>` escaped as Slack asks.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// Renders Markdown in Telegram's HTML.
pub fn telegram_html(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 32);
    // Numbers of the ordered lists we are in (None for a bulleted one).
    let mut lists: Vec<Option<u64>> = Vec::new();
    let mut in_code_block = false;
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Strong => out.push_str("<b>"),
                Tag::Emphasis => out.push_str("<i>"),
                Tag::Strikethrough => out.push_str("<s>"),
                Tag::Heading { .. } => out.push_str("<b>"),
                Tag::BlockQuote(_) => out.push_str("<blockquote>"),
                Tag::Link { dest_url, .. } => {
                    out.push_str("<a href=\"");
                    escape_into(&mut out, &dest_url, true);
                    out.push_str("\">");
                }
                Tag::CodeBlock(kind) => {
                    in_code_block = true;
                    match kind {
                        CodeBlockKind::Fenced(lang) if !lang.trim().is_empty() => {
                            let lang = lang.split_whitespace().next().unwrap_or_default();
                            out.push_str("<pre><code class=\"language-");
                            escape_into(&mut out, lang, true);
                            out.push_str("\">");
                        }
                        _ => out.push_str("<pre><code>"),
                    }
                }
                Tag::List(start) => lists.push(start),
                Tag::Item => {
                    let depth = lists.len().saturating_sub(1);
                    out.push_str(&"  ".repeat(depth));
                    match lists.last_mut() {
                        Some(Some(number)) => {
                            out.push_str(&format!("{number}. "));
                            *number += 1;
                        }
                        _ => out.push_str("• "),
                    }
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Strong | TagEnd::Heading(_) => {
                    out.push_str("</b>");
                    if matches!(tag, TagEnd::Heading(_)) {
                        out.push_str("\n\n");
                    }
                }
                TagEnd::Emphasis => out.push_str("</i>"),
                TagEnd::Strikethrough => out.push_str("</s>"),
                TagEnd::BlockQuote(_) => {
                    trim_newlines(&mut out);
                    out.push_str("</blockquote>\n\n");
                }
                TagEnd::Link => out.push_str("</a>"),
                TagEnd::CodeBlock => {
                    in_code_block = false;
                    trim_newlines(&mut out);
                    out.push_str("</code></pre>\n\n");
                }
                TagEnd::Paragraph => out.push_str("\n\n"),
                TagEnd::List(_) => {
                    lists.pop();
                    if lists.is_empty() {
                        out.push('\n');
                    }
                }
                TagEnd::Item => {
                    trim_newlines(&mut out);
                    out.push('\n');
                }
                TagEnd::TableCell => out.push_str(" | "),
                TagEnd::TableRow | TagEnd::TableHead => {
                    let trimmed = out.trim_end_matches([' ', '|']).len();
                    out.truncate(trimmed);
                    out.push('\n');
                }
                TagEnd::Table => out.push('\n'),
                _ => {}
            },
            Event::Text(text) => escape_into(&mut out, &text, false),
            Event::Code(code) => {
                if in_code_block {
                    escape_into(&mut out, &code, false);
                } else {
                    out.push_str("<code>");
                    escape_into(&mut out, &code, false);
                    out.push_str("</code>");
                }
            }
            Event::Html(html) | Event::InlineHtml(html) => escape_into(&mut out, &html, false),
            Event::SoftBreak | Event::HardBreak => out.push('\n'),
            Event::Rule => out.push_str("———\n\n"),
            Event::TaskListMarker(done) => out.push_str(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => escape_into(&mut out, &name, false),
            _ => {}
        }
    }
    out.trim().to_owned()
}

/// Renders Markdown in Slack's mrkdwn.
pub fn slack_mrkdwn(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 32);
    let mut lists: Vec<Option<u64>> = Vec::new();
    let mut quote = 0usize;
    // The text of the link being written, and its target.
    let mut link: Option<(String, String)> = None;
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    for event in Parser::new_ext(markdown, options) {
        let target = match &mut link {
            Some((text, _)) => text,
            None => &mut out,
        };
        match event {
            Event::Start(tag) => match tag {
                Tag::Strong | Tag::Heading { .. } => target.push('*'),
                Tag::Emphasis => target.push('_'),
                Tag::Strikethrough => target.push('~'),
                Tag::BlockQuote(_) => {
                    quote += 1;
                    out.push_str("> ");
                }
                Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                    link = Some((String::new(), dest_url.to_string()));
                }
                Tag::CodeBlock(_) => out.push_str("```\n"),
                Tag::List(start) => lists.push(start),
                Tag::Item => {
                    out.push_str(&"    ".repeat(lists.len().saturating_sub(1)));
                    match lists.last_mut() {
                        Some(Some(number)) => {
                            out.push_str(&format!("{number}. "));
                            *number += 1;
                        }
                        _ => out.push_str("• "),
                    }
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Strong => target.push('*'),
                TagEnd::Heading(_) => out.push_str("*\n\n"),
                TagEnd::Emphasis => target.push('_'),
                TagEnd::Strikethrough => target.push('~'),
                TagEnd::BlockQuote(_) => {
                    quote = quote.saturating_sub(1);
                    trim_newlines(&mut out);
                    out.push_str("\n\n");
                }
                TagEnd::Link | TagEnd::Image => {
                    if let Some((text, url)) = link.take() {
                        out.push('<');
                        escape_into(&mut out, &url, false);
                        if !text.is_empty() && text != url {
                            out.push('|');
                            out.push_str(&text);
                        }
                        out.push('>');
                    }
                }
                TagEnd::CodeBlock => {
                    trim_newlines(&mut out);
                    out.push_str("\n```\n\n");
                }
                TagEnd::Paragraph => out.push_str(if quote > 0 { "\n> " } else { "\n\n" }),
                TagEnd::List(_) => {
                    lists.pop();
                    if lists.is_empty() {
                        out.push('\n');
                    }
                }
                TagEnd::Item => {
                    trim_newlines(&mut out);
                    out.push('\n');
                }
                TagEnd::TableCell => out.push_str(" | "),
                TagEnd::TableRow | TagEnd::TableHead => {
                    let trimmed = out.trim_end_matches([' ', '|']).len();
                    out.truncate(trimmed);
                    out.push('\n');
                }
                TagEnd::Table => out.push('\n'),
                _ => {}
            },
            Event::Text(text) => escape_into(target, &text, false),
            Event::Code(code) => {
                target.push('`');
                escape_into(target, &code, false);
                target.push('`');
            }
            Event::Html(html) | Event::InlineHtml(html) => escape_into(target, &html, false),
            Event::SoftBreak | Event::HardBreak => {
                target.push('\n');
                if quote > 0 {
                    target.push_str("> ");
                }
            }
            Event::Rule => out.push_str("———\n\n"),
            Event::TaskListMarker(done) => target.push_str(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => escape_into(target, &name, false),
            _ => {}
        }
    }
    out.trim().trim_end_matches('>').trim_end().to_owned()
}

fn trim_newlines(out: &mut String) {
    let trimmed = out.trim_end_matches('\n').len();
    out.truncate(trimmed);
}

/// Escapes text for Telegram's HTML: `&`, `<`, `>` (and `"` in attributes).
fn escape_into(out: &mut String, text: &str, attribute: bool) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// The text of Telegram HTML as the reader sees it: tags removed, entities decoded. Its
/// length is what Telegram checks against its limit.
pub fn visible_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(at) = rest.find(['<', '&']) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with('<') {
            match rest.find('>') {
                Some(end) => rest = &rest[end + 1..],
                None => {
                    out.push_str(rest);
                    return out;
                }
            }
        } else {
            let entities = [
                ("&amp;", '&'),
                ("&lt;", '<'),
                ("&gt;", '>'),
                ("&quot;", '"'),
            ];
            match entities.iter().find(|(name, _)| rest.starts_with(name)) {
                Some((name, c)) => {
                    out.push(*c);
                    rest = &rest[name.len()..];
                }
                None => {
                    out.push('&');
                    rest = &rest[1..];
                }
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Whether the tags of `html` are ones Telegram knows, properly nested.
    fn well_formed(html: &str) -> bool {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(at) = rest.find('<') {
            rest = &rest[at + 1..];
            let Some(end) = rest.find('>') else {
                return false;
            };
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name) {
                    return false;
                }
            } else {
                let name = tag.split_whitespace().next().unwrap_or_default();
                if !["b", "i", "s", "code", "pre", "a", "blockquote"].contains(&name) {
                    return false;
                }
                stack.push(name.to_owned());
            }
        }
        stack.is_empty()
    }

    #[test]
    fn common_markdown_renders_as_telegram_html() {
        let html = telegram_html(
            "# Title\n\nSome **bold**, *it*, ~~gone~~ and `x < y`.\n\n\
             - one\n- two\n\n1. first\n2. second\n\n\
             [a link](https://example.com/?a=1&b=\"2\")\n\n```rust\nfn main() { 1 < 2 }\n```",
        );
        assert_eq!(
            html,
            "<b>Title</b>\n\nSome <b>bold</b>, <i>it</i>, <s>gone</s> and <code>x &lt; y</code>.\
             \n\n• one\n• two\n\n1. first\n2. second\n\n\
             <a href=\"https://example.com/?a=1&amp;b=&quot;2&quot;\">a link</a>\n\n\
             <pre><code class=\"language-rust\">fn main() { 1 &lt; 2 }</code></pre>"
        );
        assert!(well_formed(&html));
    }

    #[test]
    fn raw_html_and_stray_markup_are_escaped() {
        let html = telegram_html("<script>alert(1)</script> & **unclosed");
        assert!(well_formed(&html), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert_eq!(
            visible_text(&html),
            "<script>alert(1)</script> & **unclosed"
        );
    }

    proptest! {
        #[test]
        fn any_markdown_renders_well_formed_and_no_longer_than_it_reads(
            text in r"[a-z \n*_`~#>\[\]()<>&|-]{0,120}",
        ) {
            let html = telegram_html(&text);
            prop_assert!(well_formed(&html), "{text:?} -> {html:?}");
            // What the reader sees is never much longer than what was written (bullets and
            // rules aside), so a piece split at the limit fits once rendered.
            let visible = visible_text(&html).chars().count();
            prop_assert!(visible <= text.chars().count() + 8, "{text:?} -> {html:?}");
        }
    }
}
