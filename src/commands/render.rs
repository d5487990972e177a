//! Small pieces of human-facing output shared by the commands.

use std::borrow::Cow;
use std::time::Duration;

use jiff::Timestamp;
use unicode_width::UnicodeWidthStr;

pub(super) use crate::term::{quoted, safe};

/// `3m ago`, `just now`, `in 2h`, to the coarsest unit.
pub(super) fn ago(then: Timestamp) -> String {
    let secs = crate::clock::now().duration_since(then).as_secs();
    let (n, future) = (secs.unsigned_abs(), secs < 0);
    if n < 5 {
        return "just now".into();
    }
    let text = coarse(Duration::from_secs(n));
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// One or two units: `45s`, `3m12s`, `2h5m`, `3d4h`.
pub(super) fn coarse(d: Duration) -> String {
    let s = d.as_secs();
    let (d_, h, m, s_) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d_, h, m) {
        (0, 0, 0) => format!("{s_}s"),
        (0, 0, _) if s_ == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m{s_}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h{m}m"),
        (_, 0, _) => format!("{d_}d"),
        _ => format!("{d_}d{h}h"),
    }
}

/// A timestamp in the local time zone, to the second, with its offset:
/// `2026-11-30 19:07:19 +01:00`.
pub(super) fn local(t: Timestamp) -> String {
    crate::clock::local(t)
}

/// A number as people read it: rounded to 10 significant digits, then
/// written the shortest way that reads back (`1.11`, not
/// `1.1099999999999999`, the sum of 0.37 three times). JSON keeps the
/// number exact.
pub(super) fn number(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return v.to_string();
    }
    let rounded: f64 = format!("{v:.9e}").parse().unwrap_or(v);
    rounded.to_string()
}

/// Time left until `t`: `in 4m12s`, or `now` when it has come.
pub(super) fn left(t: Timestamp) -> String {
    let secs = t.duration_since(crate::clock::now()).as_secs();
    if secs <= 0 {
        return "now".into();
    }
    format!("in {}", coarse(Duration::from_secs(secs.unsigned_abs())))
}

/// Left-aligned columns separated by two spaces; the last column is not
/// padded. Columns are measured in terminal cells, so wide characters (CJK,
/// most emoji) and combining marks line up. Each cell is shown as
/// [`safe`] shows text: one line, no control character.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    fitted_table(rows, None, &[])
}

/// The gap between two columns.
const GAP: usize = 2;

/// [`table`], narrowed to `width` terminal cells when that is given: the
/// columns in `shrink`, in its order, are cut (each cell that is longer
/// ends in `…`) down to their minimum width until the table fits; a column
/// whose minimum is 0 is left out when it would have to be cut below the
/// narrowest that still says something. Columns not listed are never cut,
/// so a table may still be wider than a very narrow terminal.
pub(super) fn fitted_table(rows: &[Vec<String>], width: Option<usize>, shrink: &[(usize, usize)]) -> String {
    let mut rows: Vec<Vec<Cow<'_, str>>> = rows.iter().map(|r| r.iter().map(|c| safe(c)).collect()).collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut shown = vec![true; cols];
    if let Some(width) = width {
        let total = |widths: &[usize], shown: &[bool]| {
            let n = shown.iter().filter(|s| **s).count();
            let cells: usize = widths
                .iter()
                .zip(shown)
                .filter(|(_, s)| **s)
                .map(|(w, _)| w)
                .sum();
            cells + GAP * n.saturating_sub(1)
        };
        for &(col, min) in shrink {
            let over = total(&widths, &shown).saturating_sub(width);
            if over == 0 || col >= cols {
                break;
            }
            let narrowed = widths[col].saturating_sub(over).max(min);
            // Below a few cells a column says nothing: left out instead.
            if min == 0 && narrowed < MEANINGFUL {
                shown[col] = false;
            } else {
                widths[col] = narrowed.min(widths[col]);
            }
        }
        for row in &mut rows {
            for (c, cell) in row.iter_mut().enumerate() {
                if shown[c] && cell.width() > widths[c] {
                    *cell = Cow::Owned(cut(cell, widths[c]));
                }
            }
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        let last = (0..row.len()).rev().find(|c| shown[*c]);
        for (c, cell) in row.iter().enumerate().filter(|(c, _)| shown[*c]) {
            line += cell;
            if Some(c) < last {
                line.extend(std::iter::repeat_n(' ', widths[c] - cell.width() + GAP));
            }
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// The narrowest a column that may be left out is shown.
const MEANINGFUL: usize = 8;

/// `text` cut to `width` cells, its last one `…`.
fn cut(text: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

/// The width, in terminal cells, a table on stdout should fit: `$COLUMNS`
/// when it is set to a number, else the terminal's when stdout is one;
/// `None` when stdout is a pipe or a file, whose reader gets every cell
/// whole.
pub(super) fn output_width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        && n > 0
    {
        return Some(n);
    }
    terminal_size::terminal_size_of(std::io::stdout()).map(|(w, _)| usize::from(w.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_durations() {
        assert_eq!(coarse(Duration::from_secs(45)), "45s");
        assert_eq!(coarse(Duration::from_secs(192)), "3m12s");
        assert_eq!(coarse(Duration::from_mins(3)), "3m");
        assert_eq!(coarse(Duration::from_mins(125)), "2h5m");
        assert_eq!(coarse(Duration::from_hours(76)), "3d4h");
    }

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

    #[test]
    fn times_at_either_end_of_the_range_are_shown() {
        for t in [Timestamp::MAX, Timestamp::MIN] {
            assert!(!ago(t).is_empty());
            assert!(!left(t).is_empty());
            assert!(local(t).len() >= 19);
        }
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&[
            vec!["A".into(), "BB".into(), "C".into()],
            vec!["aaa".into(), "b".into(), String::new()],
        ]);
        assert_eq!(t, "A    BB  C\naaa  b\n");
    }

    #[test]
    fn a_fitted_table_cuts_its_shrinkable_columns_with_an_ellipsis() {
        let rows = vec![
            vec!["NAME".into(), "DESCRIPTION".into()],
            vec!["a".into(), "a long description of it".into()],
        ];
        let t = fitted_table(&rows, Some(16), &[(1, 0)]);
        assert_eq!(t, "NAME  DESCRIPTI…\na     a long de…\n");
        assert!(t.lines().all(|l| l.width() <= 16));
        // Too narrow for the column to say anything: it is left out.
        assert_eq!(fitted_table(&rows, Some(8), &[(1, 0)]), "NAME\na\n");
        // Wide enough: nothing is cut.
        assert_eq!(fitted_table(&rows, Some(80), &[(1, 0)]), table(&rows));
    }

    #[test]
    fn cutting_counts_terminal_cells() {
        assert_eq!(cut("名前名前", 5), "名前…");
        assert_eq!(cut("abc", 1), "…");
    }

    #[test]
    fn table_cells_show_control_characters_as_escapes() {
        let t = table(&[
            vec!["a\nb".into(), "x".into()],
            vec!["\x1b[2J".into(), "y".into()],
        ]);
        assert_eq!(t, "a\\nb     x\n\\x1b[2J  y\n");
    }

    #[test]
    fn tables_line_up_by_display_width() {
        let rows = vec![
            vec!["名前".to_owned(), "x".to_owned()],
            vec!["ab".to_owned(), "y".to_owned()],
            vec!["e\u{301}".to_owned(), "z".to_owned()],
        ];
        assert_eq!(table(&rows), "名前  x\nab    y\ne\u{301}     z\n");
    }
}
