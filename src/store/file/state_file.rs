//! `.state.loop`: the state as bytes, and parsed back with the schema checked
//! before the shape.

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::state::{SCHEMA, State};

pub(super) fn state_bytes(state: &State) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(state).expect("state serialises");
    bytes.push(b'\n');
    bytes
}

/// Parses state text, checking the schema before the shape. A state of this
/// build's schema is parsed once; anything else is parsed again to say
/// what is wrong with it.
pub fn parse_state(text: &[u8], path: &Path) -> Result<State> {
    match serde_json::from_slice::<State>(text) {
        Ok(state) if state.schema == SCHEMA => Ok(state),
        _ => state_error(text, path),
    }
}

/// Why `text` is not a state of this build's schema: the schema first, then
/// the shape.
fn state_error(text: &[u8], path: &Path) -> Result<State> {
    #[derive(Deserialize)]
    struct Probe {
        schema: Option<serde_json::Value>,
    }
    let corrupt = |reason: String| Error::CorruptState {
        path: path.to_owned(),
        reason,
    };
    let probe: Probe = serde_json::from_slice(text).map_err(|e| corrupt(format!("not valid JSON ({e})")))?;
    match probe.schema {
        None => return Err(corrupt("it has no `schema` number".into())),
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(SCHEMA)) => {}
        Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => {
            return Err(Error::UnknownSchema {
                path: path.to_owned(),
                found: n.as_u64().unwrap_or_default(),
                expected: SCHEMA,
            });
        }
        Some(other) => return Err(corrupt(format!("`schema` is {other}, not a number"))),
    }
    serde_json::from_slice(text).map_err(|e| corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_checked_before_shape() {
        let p = Path::new("s");
        assert!(matches!(
            parse_state(b"{\"schema\": 2}", p),
            Err(Error::UnknownSchema { found: 2, .. })
        ));
        assert!(matches!(
            parse_state(b"{\"schema\": 1}", p),
            Err(Error::CorruptState { .. })
        ));
        assert!(matches!(
            parse_state(b"{\"sche", p),
            Err(Error::CorruptState { .. })
        ));
        assert!(matches!(parse_state(b"[]", p), Err(Error::CorruptState { .. })));
        assert!(matches!(parse_state(b"{}", p), Err(Error::CorruptState { .. })));
        let good = state_bytes(&State::new(crate::clock::now()));
        assert!(parse_state(&good, p).is_ok());
    }
}
