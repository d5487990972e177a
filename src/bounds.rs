//! Bounds on the text a loop keeps: gate reasons and errors, operators'
//! notes and reasons, a tick's reason and warnings, the names of the user
//! and host acting, gate labels. Whatever a gate, a step, a person or the
//! environment hands in, what lands in the state, the history and the lock
//! file stays small, and says how much was cut.

/// The most bytes of one piece of text (a reason, a note, an error, a
/// message, a gate's label) that is kept.
pub(crate) const MAX_TEXT: usize = 4096;

/// The most bytes of a name (the acting user, a host) that is kept.
pub(crate) const MAX_NAME: usize = 256;

/// Room kept at the end of a cut text for its marker.
const MARKER_ROOM: usize = 40;

/// `text`, cut to at most [`MAX_TEXT`] bytes (at a character boundary) with
/// a marker saying how much was cut.
pub(crate) fn text(text: String) -> String {
    cut(text, MAX_TEXT)
}

/// [`text`] of an optional piece of text.
pub(crate) fn opt_text(text: Option<String>) -> Option<String> {
    text.map(self::text)
}

/// A name, cut as [`text`] is, to at most [`MAX_NAME`] bytes.
pub(crate) fn name(name: String) -> String {
    cut(name, MAX_NAME)
}

/// `text` cut to at most `max` bytes, marker included: `…… [N more bytes
/// cut]`.
fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - MARKER_ROOM;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    format!("{}… [{cut} more bytes cut]", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_and_long_text_is_cut_with_a_marker() {
        assert_eq!(text("fine".into()), "fine");
        let long = "é".repeat(10_000);
        let cut = text(long);
        assert!(cut.len() <= MAX_TEXT, "{}", cut.len());
        assert!(cut.ends_with("more bytes cut]"), "{cut}");
        let exact = "x".repeat(MAX_TEXT);
        assert_eq!(text(exact.clone()), exact);
    }

    #[test]
    fn a_long_name_is_cut_to_its_bound() {
        assert_eq!(name("ann".into()), "ann");
        let long = name("u".repeat(100_000));
        assert!(long.len() <= MAX_NAME, "{}", long.len());
        assert!(
            long.starts_with("uuu") && long.ends_with("99784 more bytes cut]"),
            "{long}"
        );
        let exact = "n".repeat(MAX_NAME);
        assert_eq!(name(exact.clone()), exact);
    }
}
