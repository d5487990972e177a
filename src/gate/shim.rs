//! TEMPORARY local stand-in (never committed) with the agreed host API.
use super::{Context, Decision, GateSource, Limits, OnError};
use std::path::PathBuf;
use std::time::Duration;
pub struct GateHost;
pub struct Gate;
pub struct GateLog {
    pub message: String,
}
pub struct Evaluation {
    pub decision: Decision,
    pub logs: Vec<GateLog>,
    pub elapsed: Duration,
}
#[derive(Debug, thiserror::Error)]
#[error("gate host not built")]
pub struct GateError;
impl GateHost {
    pub fn new(_c: Option<PathBuf>) -> Result<GateHost, GateError> {
        Ok(GateHost)
    }
    pub fn load(&self, _s: &GateSource) -> Result<Gate, GateError> {
        Err(GateError)
    }
    pub fn evaluate(&self, _g: &Gate, _c: &Context, _l: &Limits) -> Result<Evaluation, GateError> {
        Err(GateError)
    }
}
pub fn decide_on_error(_p: OnError, e: &GateError) -> Decision {
    Decision::Halt(e.to_string())
}
