//! The gate host: one wasmtime engine and linker per process, loading gates
//! (read, verify, compile or load from cache, pre-instantiate, memoise) and
//! calling them, each call in a fresh store and instance under a timeout and
//! a memory cap. A call that fails leaves nothing behind: the next one works.
//! A long-lived host makes each gate's next instance ahead, off the call's
//! path, and drops spent ones there too (see `spare`); the instance pool
//! and the store a call runs in are in `pool`. This file builds the host
//! and makes the calls; `host/load.rs` loads the gates, `host/verify.rs`
//! checks their signatures.

mod load;
mod verify;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::Serialize;
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store, Trap, WasmBacktrace};

use super::cache::{Cache, CacheStats};
use super::error::{GateError, GateErrorKind};
use super::fault::{self, Fault};
use super::pool::{Instance, Slots, config};
use super::returned;
use super::sandbox::{GateLog, HostState};
use super::seal::Fingerprint;
use super::spare::{Make, SpareKey, SpareStats, Spares, Taken};
use super::ticker::{self, Ticker};
use super::world::{self, Pre, World};
use crate::domain::{Context, Decision, HistoryRequest, Limits};

/// The version of the `automaton:gate` package (wit/gate.wit) this host
/// offers; it also calls gates built against the earlier versions of
/// [`GATE_WIT_VERSIONS`], each in its own world.
pub(super) const GATE_WIT_VERSION: &str = "0.3.0";

/// Every `automaton:gate` version this host calls gates of, oldest first.
pub(super) const GATE_WIT_VERSIONS: &[&str] = world::VERSIONS;

/// What a gate says about itself (`describe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateInfo {
    pub name: String,
    pub version: String,
    pub description: String,
    /// A JSON Schema of the params object, as the gate gave it (shown as
    /// JSON in JSON output; as a string only if the gate's is not JSON).
    #[serde(serialize_with = "as_json")]
    pub params_schema: String,
    /// The runs and windows of history it asks for in its context (shown
    /// only when it asks for any: gates before 0.3.0 cannot).
    #[serde(skip_serializing_if = "HistoryRequest::is_empty")]
    pub history: HistoryRequest,
}

fn as_json<S: serde::Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => serde::Serialize::serialize(&v, s),
        Err(_) => s.serialize_str(text),
    }
}

/// One evaluation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub decision: Decision,
    /// What the gate logged and printed, in that order.
    pub logs: Vec<GateLog>,
    /// The call, and the instantiation unless the instance was made ahead
    /// (see [`GateHost::resident`]), as measured by the host.
    pub elapsed: Duration,
}

/// The names a component imports and exports, for `gate inspect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateInterface {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// A loaded gate, ready to be called. Cheap to clone.
#[derive(Clone)]
pub struct Gate {
    meta: Arc<GateMeta>,
    compiled: Arc<Compiled>,
}

struct GateMeta {
    label: String,
    sha256: String,
    size: u64,
}

/// A compiled component, shared by every load of the same content.
struct Compiled {
    component: Component,
    pre: Pre,
    /// What the gate said about itself, once asked.
    info: OnceLock<GateInfo>,
}

impl Gate {
    /// `stock:NAME` or the component's path.
    pub fn label(&self) -> &str {
        &self.meta.label
    }

    /// The component's sha256, lower-case hex.
    pub fn sha256(&self) -> &str {
        &self.meta.sha256
    }

    /// The component's size in bytes.
    pub fn size(&self) -> u64 {
        self.meta.size
    }

    /// The `automaton:gate` version the gate was built against, and is
    /// called in (one of [`GATE_WIT_VERSIONS`]).
    pub fn wit_version(&self) -> &'static str {
        self.compiled.pre.version()
    }

    /// What the gate said about itself, once `describe` has been called.
    pub fn info(&self) -> Option<&GateInfo> {
        self.compiled.info.get()
    }

    pub fn name(&self) -> Option<&str> {
        self.info().map(|i| i.name.as_str())
    }

    pub fn version(&self) -> Option<&str> {
        self.info().map(|i| i.version.as_str())
    }

    fn error(&self, kind: GateErrorKind) -> GateError {
        let version = self.info().map(|i| format!("{} {}", i.name, i.version));
        GateError::new(self.label(), kind).with_version(version)
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("label", &self.meta.label)
            .field("sha256", &self.meta.sha256)
            .field("size", &self.meta.size)
            .field("info", &self.compiled.info.get())
            .finish()
    }
}

/// The process's gate host: build one and share it.
pub struct GateHost {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Cache,
    loaded: Mutex<HashMap<String, Arc<Compiled>>>,
    /// Component files hashed in this process, by path: a daemon's ticks
    /// then load an unchanged gate without reading it.
    seen: Mutex<HashMap<PathBuf, (Fingerprint, String)>>,
    /// In a host with spares, what each gate file held when last loaded.
    held: Mutex<HashMap<PathBuf, String>>,
    /// Signatures verified in this process (component and signature), with
    /// the name and version the component said (see `host/verify.rs`).
    verified: Mutex<HashMap<String, (String, String)>>,
    ticker: Ticker,
    /// In a long-lived host, the instance pool's slots: every live instance
    /// (called, spare, or spent and not yet dropped) holds one. A call
    /// waits for a free slot rather than fail.
    slots: Option<Arc<Slots>>,
    /// In a long-lived host, instances made ahead.
    spares: Option<Spares<Instance>>,
}

/// Which export a call is, for what an error says it should have returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Export {
    Describe,
    CheckParams,
    Evaluate,
}

impl Export {
    /// The export's name in the WIT.
    fn name(self) -> &'static str {
        match self {
            Export::Describe => "describe",
            Export::CheckParams => "check-params",
            Export::Evaluate => "evaluate",
        }
    }

    /// What it returns, as "returned a value that is not ..." says it.
    fn returns(self) -> &'static str {
        match self {
            Export::Describe => "a gate-info record",
            Export::CheckParams => "an error message",
            Export::Evaluate => "a decision",
        }
    }

    fn expects(self) -> &'static str {
        match self {
            Export::Describe => "a gate-info record: name, version, description, params-schema",
            Export::CheckParams => "ok, or an error message saying what is wrong with the params",
            Export::Evaluate => {
                "a decision: proceed | skip(reason) | await-approval(reason) | halt(reason) | complete(reason), or an error message (a refusal)"
            }
        }
    }
}

/// Whether a call uses (and makes) instances made ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ahead {
    Yes,
    No,
}

/// The text of a wasmtime error: its causes, without the wasm backtrace
/// wasmtime attaches as context.
pub(crate) fn error_text(e: &wasmtime::Error) -> String {
    // The backtrace is a context layer of the chain; leave it out.
    let backtrace = e
        .downcast_ref::<WasmBacktrace>()
        .map(std::string::ToString::to_string);
    let parts: Vec<String> = e
        .chain()
        .map(std::string::ToString::to_string)
        .filter(|c| Some(c) != backtrace.as_ref())
        .collect();
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

fn host_error(label: &str, message: impl Into<String>) -> GateError {
    GateError::new(
        label,
        GateErrorKind::Host {
            message: message.into(),
        },
    )
}

impl GateHost {
    /// The engine (epoch interruption on), the linker (WASI with nothing
    /// granted, plus `host.log`) and the epoch thread. `cache_dir` is the
    /// root's `cache/`; `None` compiles every gate in memory.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<GateHost, GateError> {
        let engine = Engine::new(&config(None)).map_err(|e| host_error("host", error_text(&e)))?;
        GateHost::with_engine(engine, cache_dir, None)
    }

    /// A host for a long-lived process (the daemon) that runs at most
    /// `concurrent` calls at once: instances come from a pool whose slots
    /// keep their memory mapped between calls, so a gate's fresh instance
    /// costs resetting the pages the last call dirtied rather than mapping
    /// and faulting in its memory image again. Each call is still a fresh
    /// instance with the same limits. Falls back to [`GateHost::new`] when
    /// the pool cannot be reserved.
    ///
    /// Each gate (and set of limits) it evaluates gets one spare instance,
    /// made by a background thread after the call and taken by the next
    /// call, which then pays only for the call itself; the same thread drops
    /// spent instances. At most `concurrent` spares are kept (the pool holds
    /// room for them and for the calls).
    pub fn resident(cache_dir: Option<PathBuf>, concurrent: usize) -> Result<GateHost, GateError> {
        let calls = u32::try_from(concurrent.clamp(1, 256)).unwrap_or(256);
        let slots = calls * 2;
        match Engine::new(&config(Some(slots))) {
            Ok(engine) => {
                let mut host = GateHost::with_engine(engine, cache_dir, Some(slots as usize))?;
                match Spares::start(calls as usize) {
                    Ok(spares) => host.spares = Some(spares),
                    Err(e) => tracing::warn!("cannot start the thread that prepares gate instances ({e})"),
                }
                Ok(host)
            }
            Err(e) => {
                tracing::warn!(
                    "cannot reserve the gate instance pool ({}); instances are allocated per call",
                    error_text(&e)
                );
                GateHost::new(cache_dir)
            }
        }
    }

    fn with_engine(
        engine: Engine,
        cache_dir: Option<PathBuf>,
        slots: Option<usize>,
    ) -> Result<GateHost, GateError> {
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| host_error("host", error_text(&e)))?;
        world::add_to_linker(&mut linker).map_err(|e| host_error("host", error_text(&e)))?;
        let epoch = engine.clone();
        let ticker =
            Ticker::start(move || epoch.increment_epoch()).map_err(|e| host_error("host", e.to_string()))?;
        Ok(GateHost {
            cache: Cache::new(cache_dir, &engine),
            engine,
            linker,
            loaded: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            ticker,
            slots: slots.map(Slots::new),
            spares: None,
        })
    }

    /// What the compiled-gate cache did so far in this process.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// In a host with spares: gates whose instances take less than `took`
    /// to make make them in the call instead (250 µs unless set; zero
    /// makes every gate's ahead).
    pub fn set_ahead_from(&self, took: Duration) {
        if let Some(s) = &self.spares {
            s.set_ahead_from(took);
        }
    }

    /// What the instances made ahead did so far (a long-lived host's; all
    /// zero in a one-shot host, which makes none).
    pub fn spare_stats(&self) -> SpareStats {
        self.spares.as_ref().map(Spares::stats).unwrap_or_default()
    }

    /// The names the component imports and exports.
    pub fn interface(&self, gate: &Gate) -> GateInterface {
        let ty = gate.compiled.component.component_type();
        GateInterface {
            imports: ty.imports(&self.engine).map(|(n, _)| n.to_owned()).collect(),
            exports: ty.exports(&self.engine).map(|(n, _)| n.to_owned()).collect(),
        }
    }

    /// Asks the gate what it is; remembered on the gate, so later errors
    /// name its version.
    pub fn describe(&self, gate: &Gate) -> Result<GateInfo, GateError> {
        if let Some(info) = gate.info() {
            return Ok(info.clone());
        }
        let (info, _, _) = self.call(
            gate,
            &Limits::default(),
            crate::clock::now(),
            (Export::Describe, Ahead::No),
            |store, g| g.call_describe(store),
        )?;
        let info = GateInfo {
            name: info.name,
            version: info.version,
            description: info.description,
            params_schema: info.params_schema,
            history: info.history,
        };
        let _ = gate.compiled.info.set(info.clone());
        Ok(info)
    }

    /// Asks the gate whether these params are acceptable, then holds them
    /// to the `params-schema` its `describe` gives: the gate's own words
    /// come first; the schema catches what its `check-params` lets through,
    /// naming the param and the rule.
    pub fn check_params(&self, gate: &Gate, params: &serde_json::Value) -> Result<(), GateError> {
        self.gate_check_params(gate, params)?;
        let info = self.describe(gate)?;
        match super::schema::violation(&info.params_schema, params) {
            Some(message) => Err(gate.error(GateErrorKind::ParamsRejected { message, line: None })),
            None => Ok(()),
        }
    }

    /// The gate's own `check-params`.
    fn gate_check_params(&self, gate: &Gate, params: &serde_json::Value) -> Result<(), GateError> {
        let json = params.to_string();
        let (answer, _, _) = self.call(
            gate,
            &Limits::default(),
            crate::clock::now(),
            (Export::CheckParams, Ahead::No),
            |store, g| g.call_check_params(store, &json),
        )?;
        answer.map_err(|message| {
            // A gate that parses its params with serde names a mistyped one
            // as loop.toml's own keys are named.
            let message = super::error::params_message(&message);
            gate.error(GateErrorKind::ParamsRejected {
                message: format!("{message}{}", crate::suggest::serde_hint(message)),
                line: None,
            })
        })
    }

    /// Evaluates the gate against a context, in a fresh instance, under the
    /// limits.
    pub fn evaluate(&self, gate: &Gate, ctx: &Context, limits: &Limits) -> Result<Evaluation, GateError> {
        let wit_ctx = gate.compiled.pre.context(ctx);
        let (answer, logs, elapsed) = self
            .call(
                gate,
                limits,
                ctx.now,
                (Export::Evaluate, Ahead::Yes),
                |store, g| g.call_evaluate(store, &wit_ctx),
            )
            .map_err(|e| self.named(gate, e))?;
        match answer {
            Ok(decision) => Ok(Evaluation {
                decision,
                logs,
                elapsed,
            }),
            Err(message) => {
                let err = gate.error(GateErrorKind::Refused { message }).with_logs(logs);
                Err(self.named(gate, err))
            }
        }
    }

    /// An error of a gate not yet described, with its name and version
    /// when it can say them (a tick evaluates without describing first), so
    /// a tick and `gate test` name a gate the same way.
    fn named(&self, gate: &Gate, err: GateError) -> GateError {
        if gate.info().is_some() {
            return err;
        }
        match self.describe(gate) {
            Ok(info) => err.with_version(Some(format!("{} {}", info.name, info.version))),
            Err(_) => err,
        }
    }

    /// One call in a fresh store, with the deadline and the memory cap in
    /// force: the spare instance made ahead for this gate and these limits
    /// (its deadline restarted and its clock set now), else one made here
    /// from the pre-instantiated component; then `f`. A long-lived host
    /// then hands the spent store to its spares' thread to drop, and asks
    /// it for the next spare. An instantiation that failed ahead fails this
    /// call, as it would have here. Only evaluations use spares: `describe`
    /// and `check_params` are rare outside one-shot processes.
    fn call<R>(
        &self,
        gate: &Gate,
        limits: &Limits,
        now: Timestamp,
        (export, ahead): (Export, Ahead),
        f: impl FnOnce(&mut Store<HostState>, &World) -> wasmtime::Result<R>,
    ) -> Result<(R, Vec<GateLog>, Duration), GateError> {
        let spares = self.spares.as_ref().filter(|_| ahead == Ahead::Yes);
        let key = spares.map(|_| SpareKey {
            sha256: gate.sha256().to_owned(),
            limits: *limits,
        });
        // A gate whose instances are quick to make makes its own in the
        // call and asks for no spare.
        let (spare, ahead) = match spares.zip(key.as_ref()).map(|(s, k)| s.take(k)) {
            Some(Taken { spare, ahead }) => (spare, ahead),
            None => (None, false),
        };
        // Without a spare, a pool slot for the instance made here.
        let permit = match spare {
            Some(_) => None,
            None => self.slots.as_ref().map(Slots::take),
        };
        let started = Instant::now();
        let deadline = ticker::deadline(started, limits.timeout);
        let _running = self.ticker.running(deadline);
        let Instance {
            mut store,
            made,
            permit,
        } = if let Some(mut spare) = spare {
            spare.store.data_mut().set_now(now);
            spare.set_deadline(deadline);
            spare
        } else {
            let instance = Instance::new(&self.engine, &gate.compiled.pre, limits, now, deadline, permit);
            if let Some((s, k)) = spares.zip(key.as_ref()) {
                s.made_in_call(k, started.elapsed());
            }
            instance
        };
        let result = made
            .map_err(Failed::Instantiate)
            .and_then(|g| f(&mut store, &g).map_err(|e| Failed::Call(export, e)));
        let elapsed = started.elapsed();
        let outcome = Self::finish(gate, limits, &mut store, result);
        if let Some((spares, key)) = spares.zip(key).filter(|_| ahead) {
            spares.refill(key, self.maker(gate, limits), Box::new((store, permit)));
        } else {
            // The store gives back its pool slot before the permit is free.
            drop(store);
            drop(permit);
        }
        outcome.map(|(r, logs)| (r, logs, elapsed))
    }

    /// How the spares' thread makes this gate's next instance: in a free
    /// pool slot (none free: no spare this time), under the same limits.
    fn maker(&self, gate: &Gate, limits: &Limits) -> Make<Instance> {
        let engine = self.engine.clone();
        let pre = gate.compiled.pre.clone();
        let slots = self.slots.clone();
        let ticker = self.ticker.handle();
        let limits = *limits;
        Box::new(move || {
            let permit = match &slots {
                Some(s) => Some(s.try_take()?),
                None => None,
            };
            let deadline = ticker::deadline(Instant::now(), limits.timeout);
            let _running = ticker.running(deadline);
            Some(Instance::new(
                &engine,
                &pre,
                &limits,
                crate::clock::now(),
                deadline,
                permit,
            ))
        })
    }

    /// A call's result with what the gate said, or its typed error.
    fn finish<R>(
        gate: &Gate,
        limits: &Limits,
        store: &mut Store<HostState>,
        result: Result<R, Failed>,
    ) -> Result<(R, Vec<GateLog>), GateError> {
        match result {
            Ok(r) => Ok((r, store.data_mut().take_logs())),
            Err(failed) => {
                let (kind, e) = match failed {
                    Failed::Instantiate(e) => (classify(&e, store.data(), limits, None), e),
                    Failed::Call(export, e) => (classify(&e, store.data(), limits, Some(export)), e),
                };
                if let GateErrorKind::NotReturnable {
                    trap, guest_output, ..
                } = &kind
                {
                    // What the runtime said, for the author who asks (-v).
                    tracing::info!(gate = gate.label(), trap, output = guest_output, "gate trapped");
                } else if matches!(
                    kind,
                    GateErrorKind::Trap { .. }
                        | GateErrorKind::WrongValue { .. }
                        | GateErrorKind::Exception { .. }
                        | GateErrorKind::Panic { .. }
                        | GateErrorKind::Thrown { .. }
                ) {
                    tracing::debug!(
                        gate = gate.label(),
                        error = %error_text(&e),
                        output = %store.data().guest_output(),
                        "gate trapped"
                    );
                }
                Err(gate.error(kind).with_logs(store.data_mut().take_logs()))
            }
        }
    }
}

/// How a call failed: making its instance, or in the export itself.
enum Failed {
    Instantiate(wasmtime::Error),
    Call(Export, wasmtime::Error),
}

/// Which limit or fault ended a call, from the store's own record and the
/// error's type; never from the error's text. An export's error that is no
/// trap is the host refusing what the gate returned (wasmtime checks every
/// value it lifts), unless the gate printed a fault of its own first.
fn classify(
    e: &wasmtime::Error,
    state: &HostState,
    limits: &Limits,
    export: Option<Export>,
) -> GateErrorKind {
    if state.budget.hit {
        return GateErrorKind::MemoryCap { limit: limits.memory };
    }
    let trap = e.downcast_ref::<Trap>();
    if trap == Some(&Trap::Interrupt) {
        return GateErrorKind::Timeout {
            limit: limits.timeout,
        };
    }
    if let (None, Some(export)) = (trap, export)
        && fault::read(&state.guest_output()).is_none()
    {
        return GateErrorKind::WrongValue {
            detail: error_text(e),
            expected: export.expects(),
        };
    }
    let raw = error_text(e);
    let trap_text = raw.strip_prefix("wasm trap: ").unwrap_or(&raw).to_owned();
    let guest_output = state.guest_output();
    let trapped = trapped(e, trap);
    if let Some(export) = export
        && let Some(r) = returned::read(&trapped, export.name(), &guest_output)
    {
        return GateErrorKind::NotReturnable {
            not: export.returns(),
            what: r.what,
            expected: returned::expected(r.language, export.name()),
            trap: trap_text,
            guest_output,
        };
    }
    let trap = trap_text;
    match fault::read(&guest_output) {
        Some(Fault::Exception { exception, at }) => GateErrorKind::Exception {
            exception,
            at,
            trap,
            guest_output,
        },
        Some(Fault::Thrown { value, at }) => GateErrorKind::Thrown {
            value,
            at,
            trap,
            guest_output,
        },
        Some(Fault::Panic { message, at }) => GateErrorKind::Panic {
            message,
            at,
            trap,
            guest_output,
        },
        None => GateErrorKind::Trap {
            message: trap,
            function: trapped_in(&trapped.frames),
            guest_output,
        },
    }
}

/// The trap's kind and the functions of its wasm backtrace, innermost
/// first, as [`returned`] reads them.
fn trapped(e: &wasmtime::Error, trap: Option<&Trap>) -> returned::Trapped {
    let frames = e
        .downcast_ref::<WasmBacktrace>()
        .map(|bt| {
            bt.frames()
                .iter()
                .filter_map(|f| f.func_name().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    returned::Trapped {
        unreachable: trap == Some(&Trap::UnreachableCodeReached),
        frames,
    }
}

/// The function of the gate's own code a trap was in: the innermost frame
/// of its backtrace that is not the C library's (`abort`), Rust's standard
/// library's (`std::process::abort`, the panic machinery) or the WASI
/// adapter's, Rust names demangled without their hash. None when the
/// component keeps no names (a stripped build, componentize-js).
fn trapped_in(frames: &[String]) -> Option<String> {
    /// Prefixes of the runtimes' own functions, demangled.
    const RUNTIME: &[&str] = &[
        "std::",
        "core::",
        "alloc::",
        "panic_abort::",
        "panic_unwind::",
        "<std::",
        "<core::",
        "<alloc::",
        "__rust",
        "__rdl_",
        "__rg_",
        "rust_panic",
        "wasi_snapshot_preview1::",
        "__wasi",
        "__wasilibc",
        "__wasm_call_",
        "wasi:",
    ];
    /// The C library's ways of ending a program.
    const LIBC: &[&str] = &["abort", "_Exit", "_exit", "exit", "raise", "__assert_fail"];
    frames
        .iter()
        .map(|f| rustc_demangle::try_demangle(f).map_or_else(|_| f.clone(), |d| format!("{d:#}")))
        .find(|name| {
            !name.is_empty() && !LIBC.contains(&name.as_str()) && !RUNTIME.iter().any(|p| name.starts_with(p))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_is_placed_in_the_gates_own_function() {
        let frames = |names: &[&str]| names.iter().map(|&n| n.to_owned()).collect::<Vec<_>>();
        // C: abort() in decide_hours, called from the export.
        assert_eq!(
            trapped_in(&frames(&["abort", "decide_hours", "exports_gate_evaluate"])).as_deref(),
            Some("decide_hours")
        );
        // Rust: std::process::abort in a gate function, names mangled (v0
        // and legacy), the hash dropped.
        assert_eq!(
            trapped_in(&frames(&[
                "_ZN3std3sys3pal4wasi7helpers14abort_internal17h0123456789abcdefE",
                "_ZN3std7process5abort17h0123456789abcdefE",
                "_ZN14night_owl_gate6decide17h0123456789abcdefE",
            ]))
            .as_deref(),
            Some("night_owl_gate::decide")
        );
        assert_eq!(
            trapped_in(&frames(&["_RNvCs1234_14night_owl_gate6decide"])).as_deref(),
            Some("night_owl_gate::decide")
        );
        assert_eq!(trapped_in(&frames(&["abort", "std::process::abort"])), None);
        assert_eq!(trapped_in(&[]), None);
    }

    #[test]
    fn the_offered_version_is_the_wits() {
        let wit = include_str!("../../wit/gate.wit");
        assert!(
            wit.contains(&format!("package automaton:gate@{GATE_WIT_VERSION};")),
            "wit/gate.wit's package version differs from GATE_WIT_VERSION"
        );
        let old = include_str!("../../wit/0.1.0/gate.wit");
        assert!(old.contains("package automaton:gate@0.1.0;"));
        let old = include_str!("../../wit/0.2.0/gate.wit");
        assert!(old.contains("package automaton:gate@0.2.0;"));
        assert_eq!(GATE_WIT_VERSIONS, ["0.1.0", "0.2.0", GATE_WIT_VERSION]);
    }

    #[test]
    fn host_and_gates_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<GateHost>();
        shared::<Gate>();
    }
}
