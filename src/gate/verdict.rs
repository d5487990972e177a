//! A gate's verdict: what one gate answered in one phase, as a tick's
//! `--json`, `check-gate` and history show it.

use serde::{Deserialize, Serialize};

use super::{Decision, Phase};

/// One gate's answer in one phase, as `--json` and history show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// `stock:NAME` or the component's path, as written in loop.toml.
    pub gate: String,
    pub phase: Phase,
    #[serde(flatten)]
    pub decision: Decision,
    /// How long the evaluation took, in microseconds.
    pub micros: u64,
    /// The gate's error, when it failed and its `on_error` policy decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
