//! A gate's verdict: what one gate answered in one phase, as a tick's
//! `--json`, `check-gate` and history show it.

use serde::{Deserialize, Serialize};

use super::{Decision, Phase};

/// One gate's answer in one phase, as `--json` and history show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// `stock:NAME` or the component's path, as written in loop.toml.
    pub gate: String,
    /// The version the gate says it is, when it could be loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub phase: Phase,
    #[serde(flatten)]
    pub decision: Decision,
    /// How long the evaluation took, in microseconds.
    pub micros: u64,
    /// The gate's error, when it failed and its `on_error` policy decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the gate logged and printed in this evaluation (`info: ...`,
    /// `stderr: ...`): its first [`LOG_LINES`] lines, each bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
}

/// The most log lines of one evaluation a verdict keeps.
pub const LOG_LINES: usize = 20;
