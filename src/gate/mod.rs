//! Gates: policy plugins that are WebAssembly components, evaluated
//! in-process in a sandbox. This folder is the only code that imports
//! wasmtime; the rest of the program sees the types re-exported here.

mod types;

pub use types::{Context, Decision, GateSource, Limits, OnError, Phase, RunResult};
