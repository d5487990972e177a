//! Text from a loop as a terminal shows it. Reasons, notes, user and host
//! names, gate logs and errors, descriptions, lock holders: anything a gate,
//! a step, a person or a file handed in may hold control characters, and a
//! terminal obeys those (ESC starts a command, `\r` and `\n` let a reason
//! write a line of its own). Every human-readable output passes such text
//! through [`safe`] (or [`quoted`]), which shows each of them as a visible
//! escape: `\n`, `\x1b`, `\u{202e}`. JSON output keeps the text exact.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is shown as an escape: C0 controls (tab and newline too),
/// DEL, C1 controls, and the marks that reorder or break lines (bidi
/// embeddings, overrides and isolates, the line and paragraph separators).
fn escaped(c: char) -> bool {
    matches!(c,
        '\0'..='\x1f' | '\x7f'..='\u{9f}'
        | '\u{061c}' | '\u{200e}' | '\u{200f}'
        | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character shown as an escape (`\n`, `\r`,
/// `\t`, `\0`, `\x1b`, `\u{9b}`, `\u{202e}`); everything else, backslashes
/// included, as it is. Showing shown text again changes nothing.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_into(&mut out, text, false);
    Cow::Owned(out)
}

/// `"text"`, escaped as [`safe`] does and with `"` and `\` escaped too: a
/// value among others on one line (`reason="…" by="…"`) that cannot be
/// mistaken for the next one.
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    escape_into(&mut out, text, true);
    out.push('"');
    out
}

fn escape_into(out: &mut String, text: &str, quoting: bool) {
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            '"' | '\\' if quoting => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_ascii() && escaped(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if escaped(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert_eq!(safe("\x1b[2J\r\n\x07\0\tend"), "\\x1b[2J\\r\\n\\x07\\0\\tend");
        assert_eq!(safe("del\x7f c1\u{9b}31m"), "del\\x7f c1\\u{9b}31m");
        assert_eq!(
            safe("a\u{202e}b\u{2066}c\u{2069}d\u{2028}"),
            "a\\u{202e}b\\u{2066}c\\u{2069}d\\u{2028}"
        );
    }

    #[test]
    fn plain_text_is_borrowed_and_kept() {
        let text = "halt: disk at 93 % — café 名前 C:\\path \"q\"";
        assert!(matches!(safe(text), Cow::Borrowed(_)));
        assert_eq!(safe(text), text);
    }

    #[test]
    fn showing_twice_is_showing_once() {
        let once = safe("x\ny\x1b\u{202e}").into_owned();
        assert_eq!(safe(&once), once);
    }

    #[test]
    fn quoted_text_escapes_its_quotes_and_backslashes() {
        assert_eq!(quoted("a \"b\" \\ c\nd"), "\"a \\\"b\\\" \\\\ c\\nd\"");
        assert_eq!(quoted("plain"), "\"plain\"");
    }

    #[test]
    fn no_escape_holds_a_control_character() {
        for c in (0..0x3000u32).filter_map(char::from_u32) {
            let shown = safe(&c.to_string()).into_owned();
            assert!(!shown.chars().any(escaped), "{c:?} shown as {shown:?}");
        }
    }
}
