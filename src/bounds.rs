//! Bounds on the text a loop keeps: gate reasons and errors, operators'
//! notes and reasons. Whatever a gate or a person hands in, what lands in
//! the state and the history stays small, and says how much was cut.

/// The most bytes of one piece of text that is kept.
pub const MAX_TEXT: usize = 4096;

/// `text`, cut to at most [`MAX_TEXT`] bytes (at a character boundary) with
/// a marker saying how much was cut.
pub fn text(text: String) -> String {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let marker_room = 40;
    let mut end = MAX_TEXT - marker_room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    format!("{}… [{cut} more bytes cut]", &text[..end])
}

/// [`text`] of an optional piece of text.
pub fn opt_text(text: Option<String>) -> Option<String> {
    text.map(self::text)
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
}
