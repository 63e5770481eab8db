//! Splitting a reply into messages no longer than a platform allows (Telegram 4096, Discord
//! 2000): at a paragraph break if one falls in the second half of the room, else at a line
//! break, else between words, else anywhere (on a character boundary). A code fence is
//! never left open: a message that ends inside one closes it, and the next reopens it with
//! the same info string, so every message renders on its own.

/// How a platform counts a message's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Unicode scalar values (Discord).
    Chars,
    /// UTF-16 code units (Telegram counts entities and limits this way).
    Utf16,
}

impl Measure {
    /// The length of `text`.
    pub fn len(self, text: &str) -> usize {
        match self {
            Self::Chars => text.chars().count(),
            Self::Utf16 => text.encode_utf16().count(),
        }
    }

    fn char_len(self, c: char) -> usize {
        match self {
            Self::Chars => 1,
            Self::Utf16 => c.len_utf16(),
        }
    }
}

/// What closes a fence that a message ends inside.
const CLOSE: &str = "\n```";

/// Splits `text` into pieces of at most `limit` (as `measure` counts; at least 64). Each
/// piece has its code fences balanced. Whitespace at the cuts is dropped.
pub fn split(text: &str, limit: usize, measure: Measure) -> Vec<String> {
    let limit = limit.max(64);
    let mut pieces = Vec::new();
    // The fence the next piece starts inside of (its opening line), if any.
    let mut open: Option<String> = None;
    let mut rest = text.trim_matches('\n');
    while !rest.is_empty() {
        let reopen = open
            .as_ref()
            .map(|line| format!("{line}\n"))
            .unwrap_or_default();
        let whole = format!("{reopen}{rest}");
        if measure.len(&whole) <= limit && fence_after(rest, open.clone()).is_none() {
            pieces.push(whole);
            break;
        }
        // Room for the text of this piece, keeping space to reopen and to close a fence.
        let budget = limit
            .saturating_sub(measure.len(&reopen))
            .saturating_sub(measure.len(CLOSE))
            .max(16);
        let window = prefix_within(rest, budget, measure);
        let cut = best_cut(window);
        let (piece, next) = rest.split_at(cut);
        let piece = piece.trim_end();
        let after = fence_after(piece, open.clone());
        let mut out = format!("{reopen}{piece}");
        if after.is_some() {
            out.push_str(CLOSE);
        }
        pieces.push(out);
        open = after;
        rest = next.trim_start_matches([' ', '\n']);
    }
    pieces
}

/// The longest prefix of `text` that measures at most `budget`.
fn prefix_within(text: &str, budget: usize, measure: Measure) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += measure.char_len(c);
        if used > budget {
            return &text[..at];
        }
    }
    text
}

/// Where to cut `window` (a byte index, at least 1 unless the window is empty): the last
/// paragraph break in its second half, else the last line break there, else the last space
/// there; failing those, the last of any; else the whole window.
fn best_cut(window: &str) -> usize {
    let half = window.len() / 2;
    let candidates = [
        window.rfind("\n\n").map(|at| at + 1),
        window.rfind('\n'),
        window.rfind(' '),
    ];
    candidates
        .iter()
        .flatten()
        .find(|at| **at >= half && **at > 0)
        .or_else(|| candidates.iter().flatten().find(|at| **at > 0))
        .copied()
        .unwrap_or(window.len())
        .max(window.chars().next().map_or(0, char::len_utf8))
}

/// Whether a line opens or closes a code fence.
fn is_fence(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("```") || line.starts_with("~~~")
}

/// The fence `text` ends inside of (its opening line), given the one it starts inside of.
fn fence_after(text: &str, mut open: Option<String>) -> Option<String> {
    for line in text.lines() {
        if is_fence(line) {
            open = match open {
                Some(_) => None,
                None => Some(line.trim().to_owned()),
            };
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Every piece fits, has balanced fences, and together they hold the whole text.
    fn assert_valid(text: &str, limit: usize, measure: Measure, pieces: &[String]) {
        for piece in pieces {
            assert!(
                measure.len(piece) <= limit,
                "{} > {limit}: {piece:?}",
                measure.len(piece)
            );
            assert!(
                fence_after(piece, None).is_none(),
                "an open fence in {piece:?}"
            );
        }
        // Nothing lost: apart from fence lines (which splitting adds) and whitespace, the
        // pieces hold the text.
        let content = |text: &str| -> String {
            text.lines()
                .filter(|line| !is_fence(line))
                .flat_map(|line| line.chars().filter(|c| !c.is_whitespace()))
                .collect()
        };
        let joined: String = pieces.iter().map(|p| content(p)).collect();
        assert_eq!(joined, content(text));
    }

    #[test]
    fn short_text_is_one_piece() {
        assert_eq!(split("hello", 100, Measure::Chars), ["hello"]);
        assert!(split("", 100, Measure::Chars).is_empty());
    }

    #[test]
    fn paragraphs_are_kept_whole_when_they_fit() {
        let text = format!("{}\n\n{}", "a".repeat(60), "b".repeat(60));
        assert_eq!(
            split(&text, 100, Measure::Chars),
            ["a".repeat(60), "b".repeat(60)]
        );
    }

    #[test]
    fn a_long_code_block_is_closed_and_reopened() {
        let code: String = (0..40).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n\n```rust\n{code}```\n\nDone.");
        let pieces = split(&text, 120, Measure::Chars);
        assert!(pieces.len() >= 4, "{pieces:?}");
        assert!(pieces[1].starts_with("```rust\n"), "{}", pieces[1]);
        assert!(pieces[1].ends_with("\n```"), "{}", pieces[1]);
        assert_valid(&text, 120, Measure::Chars, &pieces);
    }

    #[test]
    fn utf16_counts_what_telegram_counts() {
        let text = "😀".repeat(100); // 2 UTF-16 units each, no spaces at all
        let pieces = split(&text, 64, Measure::Utf16);
        assert!(pieces.iter().all(|p| Measure::Utf16.len(p) <= 64));
        assert_valid(&text, 64, Measure::Utf16, &pieces);
    }

    fn text() -> impl Strategy<Value = String> {
        let word = prop_oneof!["[a-z]{1,12}", "[é€😀]{1,3}", Just("x".repeat(150))];
        let line = prop::collection::vec(word, 0..12).prop_map(|words| words.join(" "));
        let block = prop_oneof![
            line.clone(),
            Just(String::new()),
            (
                prop_oneof![Just("```"), Just("```python"), Just("~~~")],
                prop::collection::vec(line.clone(), 0..8)
            )
                .prop_map(|(fence, lines)| {
                    let close = if fence.starts_with('~') { "~~~" } else { "```" };
                    format!("{fence}\n{}\n{close}", lines.join("\n"))
                }),
        ];
        prop::collection::vec(block, 0..20).prop_map(|blocks| blocks.join("\n"))
    }

    proptest! {
        #[test]
        fn any_text_splits_into_fitting_balanced_pieces_that_lose_nothing(
            text in text(),
            limit in 64usize..400,
            utf16 in any::<bool>(),
        ) {
            let measure = if utf16 { Measure::Utf16 } else { Measure::Chars };
            let pieces = split(&text, limit, measure);
            assert_valid(&text, limit, measure, &pieces);
        }
    }
}
