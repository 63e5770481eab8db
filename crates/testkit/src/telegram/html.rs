//! Texts as Telegram takes them: its HTML subset checked as strictly as Telegram does, the
//! length limit counted on what the reader sees, and that visible text.

/// Checks HTML as Telegram does: known tags, properly nested, `&` only in entities.
pub(super) fn check_html(text: &str) -> Result<(), String> {
    const TAGS: &[&str] = &[
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
        "tg-emoji",
    ];
    let mut stack: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(['<', '&']) {
        if rest[at..].starts_with('&') {
            let entity = rest[at..].split(';').next().unwrap_or_default();
            let known = ["&lt", "&gt", "&amp", "&quot"].contains(&entity)
                || entity
                    .strip_prefix("&#")
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
            if !known || !rest[at..].contains(';') {
                return Err(format!(
                    "Character '&' is reserved and must be escaped with the preceding '\\' at byte offset {at}"
                ));
            }
            rest = &rest[at + entity.len() + 1..];
            continue;
        }
        let Some(end) = rest[at..].find('>') else {
            return Err(format!("Unsupported start tag at byte offset {at}"));
        };
        let tag = &rest[at + 1..at + end];
        rest = &rest[at + end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop().as_deref() != Some(name.trim()) {
                return Err(format!("Unmatched end tag \"{name}\""));
            }
        } else {
            let name = tag.split_whitespace().next().unwrap_or_default();
            if !TAGS.contains(&name) {
                return Err(format!("Unsupported start tag \"{name}\""));
            }
            stack.push(name.to_owned());
        }
    }
    match stack.pop() {
        Some(open) => Err(format!(
            "Can't find end tag corresponding to start tag \"{open}\""
        )),
        None => Ok(()),
    }
}

/// The text as the reader sees it (HTML parsed when `html`).
fn visible(text: &str, html: bool) -> String {
    if !html {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(['<', '&']) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with('<') {
            let end = rest.find('>').unwrap_or(rest.len() - 1);
            rest = &rest[end + 1..];
        } else {
            let end = rest.find(';').unwrap_or(0);
            out.push(match &rest[..end] {
                "&lt" => '<',
                "&gt" => '>',
                "&amp" => '&',
                "&quot" => '"',
                _ => '?',
            });
            rest = &rest[end + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// Checks a text for sending; the error is Telegram's 400 description.
pub(super) fn check_text(text: &str, html: bool) -> Result<String, String> {
    if html && let Err(why) = check_html(text) {
        return Err(format!("Bad Request: can't parse entities: {why}"));
    }
    let visible = visible(text, html);
    if visible.trim().is_empty() {
        return Err("Bad Request: message text is empty".into());
    }
    if visible.encode_utf16().count() > 4096 {
        return Err("Bad Request: message is too long".into());
    }
    Ok(visible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_checked_as_telegram_does() {
        assert!(check_html("<b>bold</b> &amp; <a href=\"x\">link</a>").is_ok());
        assert!(check_html("<b>unclosed").is_err());
        assert!(check_html("<script>").is_err());
        assert!(check_html("a & b").is_err());
        assert!(check_html("<b><i>x</b></i>").is_err());
        assert_eq!(visible("<b>1 &lt; 2</b>", true), "1 < 2");
    }
}
