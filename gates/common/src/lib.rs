//! What the stock gates share: the evaluation context and decision as plain
//! Rust types, params parsing with messages that name the bad param, the
//! decision logic of every stock gate (one module each, tested natively), and
//! [`export_gate!`], which turns a [`Gate`] into a component of the world
//! `gate` in `wit/gate.wit`.

mod context;
mod export;
pub mod params;

pub mod approve_every;
pub mod max_failures;

pub use context::{Approval, Context, Decision, Level, Log, Phase, RunResult};

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
