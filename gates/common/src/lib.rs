//! What the stock gates share: the evaluation context and decision as plain
//! Rust types, params parsing with messages that name the bad param, the
//! decision logic of every stock gate (one module each, tested natively), and
//! [`export_gate!`], which turns a [`Gate`] into a component of the world
//! `gate` in `wit/gate.wit`.

mod context;
mod export;
pub mod number;
pub mod params;

pub mod approve_every;
pub mod backoff;
pub mod budget;
pub mod context_floor;
pub mod max_failures;
pub mod max_ticks;
pub mod no_progress;
pub mod time_window;

pub use context::{Approval, Context, Decision, InZone, Level, LocalTime, Log, Phase, RunResult};

use serde::de::DeserializeOwned;

/// One gate's behaviour, independent of the component model.
pub trait Gate {
    /// The gate's short name, as in `stock = "NAME"`.
    const NAME: &'static str;
    /// One or two sentences for `automaton gate inspect`.
    const DESCRIPTION: &'static str;
    /// A JSON Schema (draft 2020-12) of the params object.
    const PARAMS_SCHEMA: &'static str;

    /// The params object, parsed strictly (`deny_unknown_fields`).
    type Params: DeserializeOwned;

    /// Checks what the types alone cannot (ranges, relations between params).
    /// The message names the param, e.g. `every: must be at least 1, got 0`.
    fn validate(params: &Self::Params) -> Result<(), String>;

    /// Decides for valid params. An error means the gate cannot decide (for
    /// example, a metric that is not a number).
    fn decide(params: &Self::Params, ctx: &Context, log: &mut Log) -> Result<Decision, String>;
}

/// Parses and validates a params object.
pub fn check_params<G: Gate>(json: &str) -> Result<G::Params, String> {
    let params: G::Params = params::from_json(json)?;
    G::validate(&params).map_err(|e| format!("invalid params: {e}"))?;
    Ok(params)
}

/// Evaluates a gate: parses the params carried in `ctx`, then decides.
pub fn evaluate<G: Gate>(ctx: &Context, log: &mut Log) -> Result<Decision, String> {
    let params = check_params::<G>(&ctx.params)?;
    G::decide(&params, ctx, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_schema<G: Gate>() {
        let schema: serde_json::Value = serde_json::from_str(G::PARAMS_SCHEMA)
            .unwrap_or_else(|e| panic!("{}: schema is not JSON: {e}", G::NAME));
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema",
            "{}",
            G::NAME
        );
        assert_eq!(schema["type"], "object", "{}", G::NAME);
        assert_eq!(schema["additionalProperties"], false, "{}", G::NAME);
        assert!(!G::DESCRIPTION.is_empty());
        let mut described: Vec<String> = schema["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        described.sort();
        assert_eq!(
            described,
            fields::<G>(),
            "{}: the schema's properties are not the params' fields",
            G::NAME
        );
    }

    /// The fields `G::Params` takes, as its parser names them when it
    /// refuses one it does not know (`deny_unknown_fields`): the names
    /// the schema must describe, so that neither drifts from the other.
    fn fields<G: Gate>() -> Vec<String> {
        let refused = match serde_json::from_str::<G::Params>(r#"{"no such field": 0}"#) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{}: an unknown field was taken", G::NAME),
        };
        let expected = refused
            .split_once("expected ")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("{}: {refused}", G::NAME));
        let mut names: Vec<String> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_schema_is_a_draft_2020_12_object_schema() {
        check_schema::<approve_every::ApproveEvery>();
        check_schema::<backoff::Backoff>();
        check_schema::<budget::Budget>();
        check_schema::<context_floor::ContextFloor>();
        check_schema::<max_failures::MaxFailures>();
        check_schema::<max_ticks::MaxTicks>();
        check_schema::<no_progress::NoProgress>();
        check_schema::<time_window::TimeWindow>();
    }

    #[test]
    fn evaluate_refuses_bad_params() {
        let ctx = Context {
            params: String::from(r#"{"every": 0}"#),
            ..Context::default()
        };
        assert_eq!(
            evaluate::<approve_every::ApproveEvery>(&ctx, &mut Log::default()),
            Err(String::from(
                "invalid params: every: must be at least 1, got 0"
            ))
        );
    }
}
