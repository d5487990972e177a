//! The metrics a step reports in the file `AUTOMATON_METRICS` names, as
//! `key=value` lines or one JSON object of numbers, and the running totals
//! they add to. Bad content is a typed error naming the line and the cause.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A metrics file larger than this is refused rather than read into memory.
pub(crate) const MAX_LEN: u64 = 1024 * 1024;
/// At most this many metrics, in one report and in the running totals, so
/// a loop's state stays small whatever its step writes.
pub(crate) const MAX_KEYS: usize = 64;
/// The longest metric name.
pub(crate) const MAX_KEY_LEN: usize = 64;

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("cannot read metrics file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("metrics file {} is larger than {MAX_LEN} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("metrics file {} is not a regular file", path.display())]
    NotRegular { path: PathBuf },
    #[error("metrics file {} reports {count} metrics; at most {MAX_KEYS} are kept", path.display())]
    TooMany { path: PathBuf, count: usize },
    #[error("metrics file {}, line {line}: {cause}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        cause: Invalid,
    },
    #[error("metrics file {}: invalid JSON at line {line}, column {column}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("metrics file {}: {cause}", path.display())]
    JsonValue { path: PathBuf, cause: Invalid },
}

/// Why one metric was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Invalid {
    #[error("expected key=value")]
    NotKeyValue,
    #[error("invalid key {0:?}: use up to {MAX_KEY_LEN} letters, digits, '_', '.' and '-'")]
    Key(String),
    #[error("value {value:?} of {key:?} is not a number")]
    NotANumber { key: String, value: String },
    #[error("value {value:?} of {key:?} is not finite")]
    NotFinite { key: String, value: String },
}

/// Reads the metrics file at `path`. A missing file reports no metrics; when
/// a key appears more than once, the last value wins.
pub fn read_metrics(path: &Path) -> Result<BTreeMap<String, f64>, MetricsError> {
    // The step writes this file: never follow a link out of the run
    // directory, never block on a FIFO.
    read_opened(crate::os::open_no_follow(path), path)
}

/// Reads the metrics file `name` in the run directory `dir`, following no
/// link, as [`read_metrics`] does.
pub(crate) fn read_metrics_in(
    dir: &crate::fsx::Dir,
    name: &str,
) -> Result<BTreeMap<String, f64>, MetricsError> {
    let opened = dir.open_file(name.as_ref());
    read_opened(opened, &dir.join(name))
}

/// Reads the metrics file at `path` that `opened` is the open of.
fn read_opened(
    opened: io::Result<std::fs::File>,
    path: &Path,
) -> Result<BTreeMap<String, f64>, MetricsError> {
    let read_err = |source| MetricsError::Read {
        path: path.to_owned(),
        source,
    };
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) if crate::fsx::is_link(&e) => {
            return Err(MetricsError::NotRegular {
                path: path.to_owned(),
            });
        }
        Err(e) => return Err(read_err(e)),
    };
    if !file.metadata().map_err(read_err)?.is_file() {
        return Err(MetricsError::NotRegular {
            path: path.to_owned(),
        });
    }
    let mut text = String::new();
    file.take(MAX_LEN + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_LEN {
        return Err(MetricsError::TooLarge {
            path: path.to_owned(),
        });
    }
    let metrics = if text.trim_start().starts_with('{') {
        parse_json(&text).map_err(|e| e.at(path))?
    } else {
        parse_lines(&text).map_err(|(line, cause)| MetricsError::Line {
            path: path.to_owned(),
            line,
            cause,
        })?
    };
    if metrics.len() > MAX_KEYS {
        return Err(MetricsError::TooMany {
            path: path.to_owned(),
            count: metrics.len(),
        });
    }
    Ok(metrics)
}

/// Adds each metric to its running total (a new key starts from zero).
/// A sum that would not be a finite number, and a new key past
/// [`MAX_KEYS`] totals, are left out (the totals stay valid JSON and
/// small); their keys are returned so the caller can say so.
pub fn add_totals(totals: &mut BTreeMap<String, f64>, metrics: &BTreeMap<String, f64>) -> Vec<String> {
    let mut left_out = Vec::new();
    for (key, value) in metrics {
        let sum = totals.get(key).copied().unwrap_or(0.0) + value;
        let room = totals.contains_key(key) || totals.len() < MAX_KEYS;
        if sum.is_finite() && room {
            totals.insert(key.clone(), sum);
        } else {
            left_out.push(key.clone());
        }
    }
    left_out
}

fn parse_lines(text: &str) -> Result<BTreeMap<String, f64>, (usize, Invalid)> {
    let mut metrics = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or((i + 1, Invalid::NotKeyValue))?;
        let (key, value) = (key.trim(), value.trim());
        check_key(key).map_err(|e| (i + 1, e))?;
        let number = value.parse::<f64>().map_err(|_| {
            let invalid = Invalid::NotANumber {
                key: key.to_owned(),
                value: value.to_owned(),
            };
            (i + 1, invalid)
        })?;
        if !number.is_finite() {
            let invalid = Invalid::NotFinite {
                key: key.to_owned(),
                value: value.to_owned(),
            };
            return Err((i + 1, invalid));
        }
        metrics.insert(key.to_owned(), number);
    }
    Ok(metrics)
}

enum JsonError {
    Syntax(serde_json::Error),
    Value(Invalid),
}

impl JsonError {
    fn at(self, path: &Path) -> MetricsError {
        let path = path.to_owned();
        match self {
            JsonError::Syntax(source) => MetricsError::Json {
                path,
                line: source.line(),
                column: source.column(),
                source,
            },
            JsonError::Value(cause) => MetricsError::JsonValue { path, cause },
        }
    }
}

fn parse_json(text: &str) -> Result<BTreeMap<String, f64>, JsonError> {
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(JsonError::Syntax)?;
    if let Some(metrics) = claude_result(&object) {
        return Ok(metrics);
    }
    let mut metrics = BTreeMap::new();
    for (key, value) in object {
        check_key(&key).map_err(JsonError::Value)?;
        let number = value.as_f64().ok_or_else(|| {
            JsonError::Value(Invalid::NotANumber {
                key: key.clone(),
                value: value.to_string(),
            })
        })?;
        if !number.is_finite() {
            return Err(JsonError::Value(Invalid::NotFinite {
                key,
                value: value.to_string(),
            }));
        }
        metrics.insert(key, number);
    }
    Ok(metrics)
}

/// The usage counts of Claude Code's JSON result, each a metric.
const CLAUDE_USAGE: [&str; 4] = [
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
];

/// Claude Code's JSON result (`claude -p --output-format json`, or the
/// last line of `stream-json`), as its metrics: `cost_usd` from
/// `total_cost_usd`, each of `usage`'s token counts and their sum
/// `tokens`, `duration_ms` and `num_turns`. `None` when `object` is not
/// one (it has no `"type": "result"` with a `total_cost_usd`).
fn claude_result(object: &serde_json::Map<String, serde_json::Value>) -> Option<BTreeMap<String, f64>> {
    if object.get("type")?.as_str()? != "result" {
        return None;
    }
    let finite = |v: &serde_json::Value| v.as_f64().filter(|n| n.is_finite() && *n >= 0.0);
    let cost = finite(object.get("total_cost_usd")?)?;
    let mut metrics = BTreeMap::from([("cost_usd".to_owned(), cost)]);
    if let Some(usage) = object.get("usage").and_then(serde_json::Value::as_object) {
        let mut tokens = 0.0;
        for key in CLAUDE_USAGE {
            if let Some(n) = usage.get(key).and_then(finite) {
                metrics.insert(key.to_owned(), n);
                tokens += n;
            }
        }
        metrics.insert("tokens".to_owned(), tokens);
    }
    for key in ["duration_ms", "num_turns"] {
        if let Some(n) = object.get(key).and_then(finite) {
            metrics.insert(key.to_owned(), n);
        }
    }
    Some(metrics)
}

fn check_key(key: &str) -> Result<(), Invalid> {
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Invalid::Key(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(content: &str) -> Result<BTreeMap<String, f64>, MetricsError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics");
        std::fs::write(&path, content).unwrap();
        read_metrics(&path)
    }

    fn map(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
    }

    #[test]
    fn claude_codes_json_result_gives_its_cost_and_tokens() {
        let got = read(include_str!("../tests/fixtures/claude/result.json")).unwrap();
        assert_eq!(
            got,
            map(&[
                ("cost_usd", 0.412_765_5),
                ("input_tokens", 23.0),
                ("cache_creation_input_tokens", 18_734.0),
                ("cache_read_input_tokens", 241_507.0),
                ("output_tokens", 3_921.0),
                ("tokens", 23.0 + 18_734.0 + 241_507.0 + 3_921.0),
                ("duration_ms", 48_213.0),
                ("num_turns", 7.0),
            ])
        );
        // Another object with a "type" of its own is read as any other.
        assert!(read(r#"{"type": "result", "cost_usd": 1}"#).is_err());
    }

    /// Claude Code 2.1.197's own output, recorded: an error result that
    /// spent nothing is read as a cost of 0, not as "nothing reported"
    /// (which a budget would count at the tick's reservation).
    #[test]
    fn claude_codes_recorded_result_and_its_streams_last_line_are_read() {
        let expected = map(&[
            ("cost_usd", 0.0),
            ("input_tokens", 0.0),
            ("cache_creation_input_tokens", 0.0),
            ("cache_read_input_tokens", 0.0),
            ("output_tokens", 0.0),
            ("tokens", 0.0),
            ("duration_ms", 151.0),
            ("num_turns", 1.0),
        ]);
        let got = read(include_str!("../tests/fixtures/claude/not-logged-in.json")).unwrap();
        assert_eq!(got, expected);
        let stream = include_str!("../tests/fixtures/claude/not-logged-in.stream.jsonl");
        assert_eq!(stream.lines().count(), 3);
        let got = read(stream.lines().last().unwrap()).unwrap();
        let mut expected = expected;
        expected.insert("duration_ms".to_owned(), 127.0);
        assert_eq!(got, expected);
        // The whole stream is several JSON values, not one: refused,
        // naming the file, rather than read as nothing.
        assert!(read(stream).is_err());
    }

    #[test]
    fn key_value_lines_skip_blanks_and_comments() {
        let got =
            read("# cost so far\ncost_usd=1.25\n\n  tokens = 1200 \nerr.rate-x=-3e-2\ncost_usd=2\n").unwrap();
        assert_eq!(
            got,
            map(&[("cost_usd", 2.0), ("tokens", 1200.0), ("err.rate-x", -0.03)])
        );
    }

    #[test]
    fn a_json_object_of_numbers() {
        let got = read("\n {\"cost_usd\": 0.5, \"tokens\": 12}\n").unwrap();
        assert_eq!(got, map(&[("cost_usd", 0.5), ("tokens", 12.0)]));
    }

    #[test]
    fn a_missing_or_empty_file_has_no_metrics() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_metrics(&dir.path().join("nothing")).unwrap().is_empty());
        assert!(read("").unwrap().is_empty());
        assert!(read("# nothing yet\n\n").unwrap().is_empty());
    }

    #[test]
    fn bad_lines_name_the_line_and_the_cause() {
        let cases = [
            ("a=1\njunk\n", 2, Invalid::NotKeyValue),
            ("a b=1", 1, Invalid::Key("a b".into())),
            ("=1", 1, Invalid::Key(String::new())),
            (
                "\n\na=one",
                3,
                Invalid::NotANumber {
                    key: "a".into(),
                    value: "one".into(),
                },
            ),
            (
                "a=",
                1,
                Invalid::NotANumber {
                    key: "a".into(),
                    value: String::new(),
                },
            ),
            (
                "a=NaN",
                1,
                Invalid::NotFinite {
                    key: "a".into(),
                    value: "NaN".into(),
                },
            ),
            (
                "a=inf",
                1,
                Invalid::NotFinite {
                    key: "a".into(),
                    value: "inf".into(),
                },
            ),
        ];
        for (content, want_line, want_cause) in cases {
            match read(content) {
                Err(MetricsError::Line { line, cause, .. }) => {
                    assert_eq!((line, cause), (want_line, want_cause), "{content:?}");
                }
                other => panic!("{content:?}: {other:?}"),
            }
        }
        let message = read("a=1\nb=x\n").unwrap_err().to_string();
        assert!(
            message.contains("line 2") && message.contains("\"x\""),
            "{message}"
        );
    }

    #[test]
    fn bad_json_names_the_position_or_the_key() {
        match read("{\"a\": 1,\n \"b\": }") {
            Err(MetricsError::Json { line, column, .. }) => assert_eq!((line, column), (2, 7)),
            other => panic!("{other:?}"),
        }
        for (content, want) in [
            (
                "{\"a\": \"1\"}",
                Invalid::NotANumber {
                    key: "a".into(),
                    value: "\"1\"".into(),
                },
            ),
            (
                "{\"a\": [1]}",
                Invalid::NotANumber {
                    key: "a".into(),
                    value: "[1]".into(),
                },
            ),
            ("{\"a/b\": 1}", Invalid::Key("a/b".into())),
        ] {
            match read(content) {
                Err(MetricsError::JsonValue { cause, .. }) => assert_eq!(cause, want),
                other => panic!("{content:?}: {other:?}"),
            }
        }
        assert!(matches!(read("{\"a\": 1e999}"), Err(MetricsError::Json { .. })));
    }

    #[test]
    fn an_oversized_file_is_refused() {
        let big = "a=1\n".repeat(MAX_LEN as usize / 4 + 1);
        assert!(matches!(read(&big), Err(MetricsError::TooLarge { .. })));
    }

    #[test]
    fn totals_add_up_and_start_new_keys_at_zero() {
        let mut totals = map(&[("cost", 1.5), ("old", 7.0)]);
        add_totals(&mut totals, &map(&[("cost", 2.0), ("tokens", 10.0)]));
        assert_eq!(totals, map(&[("cost", 3.5), ("old", 7.0), ("tokens", 10.0)]));
    }
}
