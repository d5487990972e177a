//! The floor: the vocabulary every layer speaks (phases, decisions,
//! verdicts, approvals, the evaluation context) and the pure rules over it.
//! It imports nothing of the program above it: the stores, the gate host,
//! the operations and the front-ends build on it.

mod types;
mod verdict;

pub use types::{
    Approval, Asker, Commits, Context, Decision, GateBudget, GateHistory, GateSource, HistoryRequest, Limits,
    Mode, OnError, PastRun, PendingAwait, Phase, RunResult, WindowSums,
};
pub(crate) use verdict::LOG_LINES;
pub use verdict::{Disagreement, ShadowVerdict, Verdict};
