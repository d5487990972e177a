//! Params checked against the JSON Schema a gate gives in `describe`
//! (`params-schema`), by the host: the first rule broken, said as the
//! param it is about and the keyword of the rule.

/// The first way `params` breaks `schema`, as `start_hour: 25 is greater
/// than the maximum of 23 (params-schema: maximum)`. A gate whose schema
/// is empty, `{}`, not JSON, or not a schema this host can compile alone
/// (a `$ref` to elsewhere) is not checked: its own `check-params` is the
/// only judge.
pub(crate) fn violation(schema: &str, params: &serde_json::Value) -> Option<String> {
    let schema: serde_json::Value = serde_json::from_str(schema).ok()?;
    if schema.as_object().is_none_or(serde_json::Map::is_empty) {
        return None;
    }
    let validator = jsonschema::validator_for(&schema).ok()?;
    let error = validator.iter_errors(params).next()?;
    let rule = error.kind().keyword().to_owned();
    Some(match param(error.instance_path().as_str()) {
        Some(p) => format!("{p}: {error} (params-schema: {rule})"),
        None => format!("{error} (params-schema: {rule})"),
    })
}

/// The param a JSON pointer into the params points at, dotted
/// (`/window/start` is `window.start`); `None` for the params themselves.
fn param(pointer: &str) -> Option<String> {
    let path = pointer.strip_prefix('/')?;
    let segments: Vec<String> = path
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    Some(segments.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCHEMA: &str = r#"{"type": "object",
        "properties": {"start_hour": {"type": "integer", "minimum": 0, "maximum": 23}},
        "required": ["start_hour"], "additionalProperties": false}"#;

    #[test]
    fn a_broken_rule_names_the_param_and_the_rule() {
        let v = violation(SCHEMA, &json!({"start_hour": 25})).unwrap();
        assert!(
            v.starts_with("start_hour: 25 is greater than the maximum of 23"),
            "{v}"
        );
        assert!(v.ends_with("(params-schema: maximum)"), "{v}");
        let v = violation(SCHEMA, &json!({"start_hour": "9"})).unwrap();
        assert!(
            v.starts_with("start_hour: ") && v.ends_with("(params-schema: type)"),
            "{v}"
        );
        let v = violation(SCHEMA, &json!({})).unwrap();
        assert!(
            v.contains("start_hour") && v.ends_with("(params-schema: required)"),
            "{v}"
        );
        let v = violation(SCHEMA, &json!({"start_hour": 9, "evry": 1})).unwrap();
        assert!(v.contains("evry"), "{v}");
        assert_eq!(violation(SCHEMA, &json!({"start_hour": 9})), None);
    }

    #[test]
    fn a_gate_without_a_usable_schema_is_not_checked() {
        for schema in ["", "{}", "not json", r#"{"$ref": "https://example.com/s.json"}"#] {
            assert_eq!(violation(schema, &json!({"x": 1})), None, "{schema}");
        }
        assert_eq!(param("/a~1b/c"), Some("a/b.c".to_owned()));
        assert_eq!(param(""), None);
    }
}
