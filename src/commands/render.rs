//! Small pieces of human-facing output shared by the commands.

use std::borrow::Cow;
use std::time::Duration;

use jiff::{Timestamp, tz::TimeZone};
use unicode_width::UnicodeWidthStr;

pub use crate::term::{quoted, safe};

/// `3m ago`, `just now`, `in 2h`, to the coarsest unit.
pub fn ago(then: Timestamp) -> String {
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
pub fn coarse(d: Duration) -> String {
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
pub fn local(t: Timestamp) -> String {
    t.to_zoned_datetime(TimeZone::system())
        .strftime("%Y-%m-%d %H:%M:%S %:z")
        .to_string()
}

/// Time left until `t`: `in 4m12s`, or `now` when it has come.
pub fn left(t: Timestamp) -> String {
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
pub fn table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<Cow<'_, str>>> = rows.iter().map(|r| r.iter().map(|c| safe(c)).collect()).collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line += cell;
            if c + 1 < row.len() {
                line.extend(std::iter::repeat_n(' ', widths[c] - cell.width() + 2));
            }
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_durations() {
        assert_eq!(coarse(Duration::from_secs(45)), "45s");
        assert_eq!(coarse(Duration::from_secs(192)), "3m12s");
        assert_eq!(coarse(Duration::from_secs(180)), "3m");
        assert_eq!(coarse(Duration::from_secs(7500)), "2h5m");
        assert_eq!(coarse(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d4h");
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
            vec!["aaa".into(), "b".into(), "".into()],
        ]);
        assert_eq!(t, "A    BB  C\naaa  b\n");
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
