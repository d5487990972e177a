//! A number as a gate's reason shows it, as the host shows numbers (its
//! `commands::render::number`): rounded to 10 significant digits, then
//! written the shortest way that reads back. A total of 0.37 three times is
//! `1.11`, not `1.1099999999999999`. The host's function cannot be shared
//! (the gates are built apart from it), so it is written again here, with
//! the same tests.

/// `v` rounded to 10 significant digits, in its shortest form.
pub fn number(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return v.to_string();
    }
    let rounded: f64 = format!("{v:.9e}").parse().unwrap_or(v);
    rounded.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_shown_the_short_way() {
        assert_eq!(number(0.37 + 0.37 + 0.37), "1.11");
        assert_eq!(number(1.1099999999999999), "1.11");
        assert_eq!(number(20.0), "20");
        assert_eq!(number(0.1 + 0.2), "0.3");
        assert_eq!(number(123_456_789.5), "123456789.5");
        assert_eq!(number(-2.5e-7), "-0.00000025");
        assert_eq!(number(0.0), "0");
    }
}
