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
    /// The name the gate says it has, when it could be loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The sha256 of the component that decided (the embedded one for a
    /// stock gate), when it could be read: which build decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
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

/// A shadow gate's answer (`mode = "shadow"`), recorded beside the live
/// verdict it is compared with and never enforced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowVerdict {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Whether its decision is the one the live side took: the live gate
    /// it would replace (same name), or, when it replaces none, the phase's
    /// combined decision with it added.
    pub agrees: bool,
}

/// One evaluation where a shadow gate and the live side decided apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disagreement {
    pub tick: u64,
    pub at: jiff::Timestamp,
    pub phase: Phase,
    /// The live gate it was recorded with.
    pub live_gate: String,
    pub live: Decision,
    pub shadow: Decision,
}

impl Verdict {
    /// The name a shadow gate is paired by: the one the gate says, else
    /// a stock gate's name or a component file's stem.
    pub(crate) fn pairing_name(&self) -> &str {
        if let Some(n) = &self.name {
            return n;
        }
        let label = self.gate.strip_prefix("stock:").unwrap_or(&self.gate);
        let file = label.rsplit('/').next().unwrap_or(label);
        file.strip_suffix(".wasm").unwrap_or(file)
    }
}

/// The most log lines of one evaluation a verdict keeps.
pub(crate) const LOG_LINES: usize = 20;
