//! Gates: policy plugins that are WebAssembly components, evaluated
//! in-process in a sandbox. This folder is the only code that imports
//! wasmtime. The vocabulary it evaluates in (phases, decisions, the
//! context, limits) is the floor's, `crate::domain`; the rest of the
//! program sees the host's types re-exported here (and `scaffold`, the gate
//! projects `gate new` writes).

mod cache;
mod error;
mod fault;
mod host;
mod pool;
mod returned;
mod sandbox;
pub(crate) mod scaffold;
mod schema;
mod seal;
mod spare;
mod stock;
mod ticker;
pub mod trust;
mod verdict;
mod world;
mod world_diff;
mod zone;

pub use cache::{CacheStats, sha256_hex};
pub(crate) use error::decide_on_error;
pub use error::{GateError, GateErrorKind};
pub use host::{Evaluation, Gate, GateHost, GateInfo, GateInterface};
pub use sandbox::{GateLog, LogLevel, LogSource, OUTPUT_LIMIT};
pub use spare::SpareStats;
pub use stock::{StockGate, stock_gates};
pub(crate) use verdict::kept_logs;
