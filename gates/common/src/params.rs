//! Params parsing shared by the gates: strict JSON with errors that name the
//! param, human durations ("90s", "1h 30m"), and reading one metric out of
//! the `metrics`/`totals` JSON objects.

use serde::Deserialize;
use serde::de::{
    DeserializeOwned, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use std::fmt;
use std::time::Duration;

/// Parses a params object. The message names the param at fault
/// (`every: invalid type: string "5", expected u64`), without the position
/// in the JSON text, which the operator never wrote (it came from loop.toml).
pub fn from_json<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    // serde's derive also takes a struct from a JSON array (`[5]`); only an
    // object is a params object.
    if !json.trim_start().starts_with('{') {
        return Err(String::from("invalid params: expected a JSON object"));
    }
    let de = &mut serde_json::Deserializer::from_str(json);
    let parsed = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = strip_position(e.into_inner().to_string());
        // An unknown field's path is the field itself, which the message names.
        if path == "." || path == "?" || path.is_empty() || inner.starts_with("unknown field") {
            format!("invalid params: {inner}")
        } else {
            format!("invalid params: {path}: {inner}")
        }
    })?;
    Ok(parsed)
}

fn strip_position(message: String) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    }
}

/// A duration written the human way: "90s", "1m", "1h 30m".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text)
            .map(HumanDuration)
            .map_err(|e| D::Error::custom(format!("invalid duration \"{text}\": {e}")))
    }
}

/// Formats a duration for a reason, to the second: "4m 10s".
pub fn format_duration(d: Duration) -> String {
    let secs = Duration::from_secs(d.as_secs());
    if secs.is_zero() {
        return String::from("0s");
    }
    humantime::format_duration(secs).to_string()
}

/// Reads metric `name` from a JSON object of numbers (`metrics` or `totals`).
/// `Ok(None)` when the object does not have it; an error when the text is not
/// a JSON object or the value is not a number. Only the one value is kept (no
/// JSON tree is built), which keeps the components small.
pub fn metric(json: &str, what: &str, name: &str) -> Result<Option<f64>, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    let found = de
        .deserialize_map(FindMetric { name })
        .and_then(|found| de.end().map(|()| found))
        .map_err(|e| {
            format!(
                "{what} are not a JSON object: {}",
                strip_position(e.to_string())
            )
        })?;
    match found {
        None | Some(MetricValue::Null) => Ok(None),
        Some(MetricValue::Number(n)) => Ok(Some(n)),
        Some(MetricValue::Other(kind)) => Err(format!("{what} {name} is not a number but {kind}")),
    }
}

struct FindMetric<'a> {
    name: &'a str,
}

impl<'de> Visitor<'de> for FindMetric<'_> {
    type Value = Option<MetricValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of numbers")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                found = Some(map.next_value::<MetricValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// One metric's value: a number, null, or something else (named for the error).
enum MetricValue {
    Number(f64),
    Null,
    Other(&'static str),
}

impl<'de> Deserialize<'de> for MetricValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MetricValueVisitor)
    }
}

struct MetricValueVisitor;

impl<'de> Visitor<'de> for MetricValueVisitor {
    type Value = MetricValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_f64<E>(self, v: f64) -> Result<MetricValue, E> {
        Ok(MetricValue::Number(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<MetricValue, E> {
        Ok(MetricValue::Number(v as f64))
    }
    fn visit_i64<E>(self, v: i64) -> Result<MetricValue, E> {
        Ok(MetricValue::Number(v as f64))
    }
    fn visit_unit<E>(self) -> Result<MetricValue, E> {
        Ok(MetricValue::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<MetricValue, E> {
        Ok(MetricValue::Other("a boolean"))
    }
    fn visit_str<E>(self, _: &str) -> Result<MetricValue, E> {
        Ok(MetricValue::Other("a string"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MetricValue, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(MetricValue::Other("a list"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetricValue, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(MetricValue::Other("an object"))
    }
}

/// Checks that a number param is finite.
pub fn finite(name: &str, value: f64) -> Result<(), String> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(format!("{name}: must be a finite number, got {value}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct P {
        every: u64,
        wait: Option<HumanDuration>,
    }

    #[test]
    fn errors_name_the_param_and_drop_the_position() {
        let e = from_json::<P>(r#"{"every": "5"}"#).unwrap_err();
        assert_eq!(
            e,
            r#"invalid params: every: invalid type: string "5", expected u64"#
        );
        let e = from_json::<P>(r#"{"every": 5, "evry": 1}"#).unwrap_err();
        assert!(e.starts_with("invalid params: unknown field `evry`"), "{e}");
        let e = from_json::<P>(r#"{}"#).unwrap_err();
        assert_eq!(e, "invalid params: missing field `every`");
        let e = from_json::<P>(r#"{"every": 1, "wait": "1x"}"#).unwrap_err();
        assert!(
            e.starts_with(r#"invalid params: wait: invalid duration "1x""#),
            "{e}"
        );
        let e = from_json::<P>("[1, null]").unwrap_err();
        assert_eq!(e, "invalid params: expected a JSON object");
        let e = from_json::<P>("{").unwrap_err();
        assert_eq!(e, "invalid params: EOF while parsing an object");
    }

    #[test]
    fn durations_parse_the_human_way() {
        let p: P = from_json(r#"{"every": 1, "wait": "1h 30m"}"#).unwrap();
        assert_eq!(p.wait, Some(HumanDuration(Duration::from_secs(5400))));
        assert_eq!(format_duration(Duration::from_millis(250_900)), "4m 10s");
        assert_eq!(format_duration(Duration::from_millis(900)), "0s");
    }

    #[test]
    fn metrics_are_read_by_name() {
        assert_eq!(metric(r#"{"a": 1.5}"#, "metrics", "a"), Ok(Some(1.5)));
        assert_eq!(metric(r#"{"a": 2}"#, "metrics", "a"), Ok(Some(2.0)));
        assert_eq!(metric(r#"{"a": 1}"#, "metrics", "b"), Ok(None));
        assert_eq!(metric(r#"{"a": null}"#, "metrics", "a"), Ok(None));
        assert_eq!(
            metric(r#"{"a": -3, "b": [1, {"c": 2}]}"#, "metrics", "a"),
            Ok(Some(-3.0))
        );
        assert_eq!(
            metric(r#"{"a": "x"}"#, "totals", "a"),
            Err(String::from("totals a is not a number but a string"))
        );
        assert_eq!(
            metric(r#"{"a": {"b": 1}, "c": 2}"#, "totals", "a"),
            Err(String::from("totals a is not a number but an object"))
        );
        assert!(metric(r#"{"a": 1} x"#, "metrics", "a").is_err());
        assert!(
            metric("[]", "metrics", "a")
                .unwrap_err()
                .starts_with("metrics are not a JSON object")
        );
    }
}
