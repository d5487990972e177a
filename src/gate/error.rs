//! Gate errors: what went wrong (typed, never a string to compare) and which
//! gate it was, so an operator knows which plugin misbehaved and which limit
//! it hit.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::sandbox::GateLog;
use crate::domain::{Decision, OnError};

/// Why a gate could not be loaded, described or evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateErrorKind {
    /// The call ran past its timeout and was interrupted.
    Timeout { limit: Duration },
    /// The gate tried to grow its memory past the cap.
    MemoryCap { limit: u64 },
    /// The gate trapped (a panic, `unreachable`, a stack overflow, a bad
    /// value returned to the host…). `function` is the gate's function it
    /// trapped in, when the component keeps its functions' names (the
    /// innermost frame that is not the C library's or Rust's standard
    /// library's, Rust names demangled); `guest_output` is what it printed.
    Trap {
        message: String,
        function: Option<String>,
        guest_output: String,
    },
    /// The gate's code raised an exception it did not catch (a Python
    /// gate): `ValueError: bad hour`, and where (`app.py, line 18, in
    /// evaluate`). `trap` and `guest_output` are the raw detail, logged at
    /// debug level.
    Exception {
        exception: String,
        at: Option<String>,
        trap: String,
        guest_output: String,
    },
    /// The gate's code panicked (a Rust gate): the panic's message, and
    /// where (`src/lib.rs:41:9`). `trap` and `guest_output` are the raw
    /// detail, logged at debug level.
    Panic {
        message: String,
        at: Option<String>,
        trap: String,
        guest_output: String,
    },
    /// The gate's code threw a value that is not a string (a JavaScript
    /// gate; a thrown string is a refusal): the value as the gate printed
    /// it (`42`, `{"code":1}`, `TypeError: bad hour`), and where
    /// (`gate.js:27:25, in evaluate`). `trap` and `guest_output` are the
    /// raw detail, logged at debug level.
    Thrown {
        value: String,
        at: Option<String>,
        trap: String,
        guest_output: String,
    },
    /// The gate's code returned a value its language's bindings could not
    /// turn into the export's WIT type, so they trapped (a Python
    /// `evaluate` returning `"skip"`, a JavaScript one returning `{tag:
    /// 'skip'}` without its reason): `not` is what the export returns (`a
    /// decision`), `what` what the code returned and `expected` the shapes
    /// due, both as the gate's language says them. `trap` and
    /// `guest_output` are what the runtime said, logged at info level
    /// (`-v`).
    NotReturnable {
        not: &'static str,
        what: String,
        expected: &'static str,
        trap: String,
        guest_output: String,
    },
    /// The gate returned a value the host cannot read as the WIT type (an
    /// unknown decision tag, a string that is not UTF-8): `detail` is
    /// wasmtime's reason, `expected` what the export returns. The call
    /// fails; no decision is made up.
    WrongValue { detail: String, expected: &'static str },
    /// The file is not a WebAssembly component (not wasm, or a core module).
    NotAComponent { detail: String },
    /// The component does not target the `gate` world: an import the host
    /// does not offer, or an export missing or of the wrong type.
    /// `built_against` is the `automaton:gate` version the component
    /// names, when it names one the host does not offer; `world` is the
    /// version whose world it was checked against.
    WrongWorld {
        detail: String,
        built_against: Option<String>,
        world: String,
    },
    /// The component file does not exist. `near` is the file beside it
    /// whose name is most like its name, when one is like it enough.
    MissingFile { path: PathBuf, near: Option<String> },
    /// The component file could not be read.
    Io { path: PathBuf, message: String },
    /// The file's sha256 differs from the pin in loop.toml.
    HashMismatch { expected: String, actual: String },
    /// The gate's `check-params` rejected the params.
    ParamsRejected {
        message: String,
        /// The line of loop.toml that sets them, when the message is not
        /// already part of one that names it.
        line: Option<usize>,
    },
    /// The gate's `evaluate` returned an error instead of a decision.
    Refused { message: String },
    /// The component is malformed and does not compile.
    Compile { message: String },
    /// No stock gate has this name.
    UnknownStock { name: String },
    /// Signed gates are required and this one's signatures do not say it
    /// may run: who signed it, and why that is not enough.
    Untrusted { refusal: super::trust::Refusal },
    /// The host could not be set up (engine, linker, epoch thread); the
    /// error's gate label is then `host`.
    Host { message: String },
}

impl GateErrorKind {
    /// The kind's name, as a cases file expects it (`"error": "timeout"`)
    /// and `gate test --cases --json` reports it. A gate's own failure
    /// (`panic`, `exception`, `thrown`, `not-returnable`, `wrong-value`)
    /// is also a `trap`: see [`GateErrorKind::is_trap`].
    pub fn name(&self) -> &'static str {
        match self {
            GateErrorKind::Timeout { .. } => "timeout",
            GateErrorKind::MemoryCap { .. } => "memory",
            GateErrorKind::Trap { .. } => "trap",
            GateErrorKind::Exception { .. } => "exception",
            GateErrorKind::Panic { .. } => "panic",
            GateErrorKind::Thrown { .. } => "thrown",
            GateErrorKind::NotReturnable { .. } => "not-returnable",
            GateErrorKind::WrongValue { .. } => "wrong-value",
            GateErrorKind::NotAComponent { .. } => "not-a-component",
            GateErrorKind::WrongWorld { .. } => "wrong-world",
            GateErrorKind::MissingFile { .. } => "missing-file",
            GateErrorKind::Io { .. } => "io",
            GateErrorKind::HashMismatch { .. } => "hash-mismatch",
            GateErrorKind::ParamsRejected { .. } => "bad-params",
            GateErrorKind::Refused { .. } => "refused",
            GateErrorKind::Compile { .. } => "compile",
            GateErrorKind::UnknownStock { .. } => "unknown-stock",
            GateErrorKind::Untrusted { .. } => "untrusted",
            GateErrorKind::Host { .. } => "host",
        }
    }

    /// Whether the gate's code itself stopped the call: a trap, or a
    /// language's account of one (a panic, an exception, a thrown value,
    /// a value its bindings or the host could not read).
    pub fn is_trap(&self) -> bool {
        matches!(
            self,
            GateErrorKind::Trap { .. }
                | GateErrorKind::Exception { .. }
                | GateErrorKind::Panic { .. }
                | GateErrorKind::Thrown { .. }
                | GateErrorKind::NotReturnable { .. }
                | GateErrorKind::WrongValue { .. }
        )
    }
}

impl fmt::Display for GateErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateErrorKind::Timeout { limit } => {
                write!(f, "timed out after {}", crate::duration::format(*limit))
            }
            GateErrorKind::MemoryCap { limit } => {
                write!(f, "exceeded its memory limit of {}", human_bytes(*limit))
            }
            GateErrorKind::Trap {
                message,
                function,
                guest_output,
            } => {
                write!(f, "trapped: {message}")?;
                if let Some(function) = function {
                    write!(f, " (in {function})")?;
                }
                let output = super::fault::without_boilerplate(guest_output);
                if !output.is_empty() {
                    write!(f, "; gate output: {}", tail(&output, 2048))?;
                }
                Ok(())
            }
            GateErrorKind::Exception { exception, at, .. } => raised(f, "raised", exception, at.as_deref()),
            GateErrorKind::Panic { message, at, .. } => raised(f, "panicked:", message, at.as_deref()),
            GateErrorKind::Thrown { value, at, .. } => raised(f, "threw", value, at.as_deref()),
            GateErrorKind::NotReturnable {
                not, what, expected, ..
            } => write!(
                f,
                "returned a value that is not {not} ({}); expected {expected}",
                tail(what, 2048)
            ),
            GateErrorKind::WrongValue { detail, expected } => {
                write!(
                    f,
                    "returned a value of the wrong type ({detail}); expected {expected}"
                )
            }
            GateErrorKind::NotAComponent { detail } => {
                write!(f, "is not a WebAssembly component: {detail}")
            }
            GateErrorKind::WrongWorld {
                detail,
                built_against: Some(theirs),
                ..
            } => write!(
                f,
                "was built against automaton:gate@{theirs}; this automaton offers automaton:gate@{} ({detail})",
                offered(super::host::GATE_WIT_VERSIONS)
            ),
            GateErrorKind::WrongWorld { detail, world, .. } => write!(
                f,
                "does not target the automaton:gate@{world}/gate world: {detail}"
            ),
            // The path is the gate's label, already in front of these.
            GateErrorKind::MissingFile { .. } => f.write_str("was not found (no such file)"),
            GateErrorKind::Io { message, .. } => write!(f, "cannot be read: {message}"),
            GateErrorKind::HashMismatch { expected, actual } => write!(
                f,
                "sha256 mismatch: loop.toml pins {expected}, the file has {actual}"
            ),
            GateErrorKind::ParamsRejected {
                message,
                line: Some(line),
            } => write!(f, "rejected its params (loop.toml line {line}): {message}"),
            GateErrorKind::ParamsRejected { message, line: None } => {
                write!(f, "rejected its params: {message}")
            }
            GateErrorKind::Refused { message } => write!(f, "refused to decide: {message}"),
            GateErrorKind::Compile { message } => write!(f, "does not compile: {message}"),
            // The label (`stock:NAME`) is already in front of this.
            GateErrorKind::UnknownStock { .. } => {
                f.write_str("does not exist (`automaton gate list` shows the stock gates)")
            }
            GateErrorKind::Host { message } => write!(f, "cannot start: {message}"),
            GateErrorKind::Untrusted { refusal } => write!(f, "is not trusted: {refusal}"),
        }
    }
}

/// What a guest raised (`how`: raised, panicked, threw), and where.
/// `["0.1.0", "0.2.0", "0.3.0"]` as `0.1.0, @0.2.0 and @0.3.0`.
fn offered(versions: &[&str]) -> String {
    match versions.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and @{last}", rest.join(", @")),
        _ => versions.join(""),
    }
}

fn raised(f: &mut fmt::Formatter<'_>, how: &str, what: &str, at: Option<&str>) -> fmt::Result {
    write!(f, "{how} {}", tail(what, 2048))?;
    at.iter().try_for_each(|at| write!(f, " (at {at})"))
}

/// What a gate said of its params, as the host says it after "rejected its
/// params": without an "invalid params: " of its own in front, nor the
/// position serde_json puts at its end (" at line 1 column 14"), a place
/// in the JSON the host made of them that means nothing to whoever wrote
/// them in loop.toml.
pub(crate) fn params_message(message: &str) -> &str {
    let message = message.strip_prefix("invalid params: ").unwrap_or(message);
    let Some((head, pos)) = message.rsplit_once(" at line ") else {
        return message;
    };
    let numbers = pos.split_once(" column ").is_some_and(|(l, c)| {
        [l, c]
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if numbers { head } else { message }
}

fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// `64 MiB`, `1.5 KiB`, `512 B`: a size as messages say it.
pub(crate) fn human_bytes(n: u64) -> String {
    bytesize::ByteSize(n)
        .display()
        .iec()
        .to_string()
        .replace(".0 ", " ")
}

/// A gate error: the gate's label (`stock:NAME` or its path), its name and
/// version when it described itself, and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateError(Box<Inner>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inner {
    gate: String,
    version: Option<String>,
    kind: GateErrorKind,
    logs: Vec<GateLog>,
}

impl GateError {
    pub(crate) fn new(gate: impl Into<String>, kind: GateErrorKind) -> GateError {
        GateError(Box::new(Inner {
            gate: gate.into(),
            version: None,
            kind,
            logs: Vec::new(),
        }))
    }

    pub(crate) fn with_logs(mut self, logs: Vec<GateLog>) -> GateError {
        self.0.logs = logs;
        self
    }

    /// The same error under another label: the gate as loop.toml writes it
    /// (`gates/budget.wasm`) rather than the path it resolved to.
    pub(crate) fn labelled(mut self, gate: impl Into<String>) -> GateError {
        self.0.gate = gate.into();
        self
    }

    pub(crate) fn with_version(mut self, version: Option<String>) -> GateError {
        self.0.version = version;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &GateErrorKind {
        &self.0.kind
    }

    /// The gate's label: `stock:NAME` or the component's path.
    pub fn gate(&self) -> &str {
        &self.0.gate
    }

    /// What the gate logged and printed before the call failed (empty for
    /// errors before any call), for the loop's history.
    /// The same gate's error, said more precisely: what it was found to
    /// be after the fact (a refusal found to be of the gate's params).
    pub(crate) fn with_kind(mut self, kind: GateErrorKind) -> GateError {
        self.0.kind = kind;
        self
    }

    pub fn logs(&self) -> &[GateLog] {
        &self.0.logs
    }

    /// `name version` from the gate's `describe`, when it gave one.
    pub fn version(&self) -> Option<&str> {
        self.0.version.as_deref()
    }
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gate {}", self.0.gate)?;
        if let Some(v) = &self.0.version {
            write!(f, " ({v})")?;
        }
        write!(f, " {}", self.0.kind)?;
        // Said after the kind, in the words of the label it follows.
        if let GateErrorKind::MissingFile { near: Some(near), .. } = &self.0.kind {
            f.write_str(&crate::suggest::file_named(&self.0.gate, near))?;
        }
        Ok(())
    }
}

impl std::error::Error for GateError {}

/// What a gate error turns into under the gate's `on_error` policy: `halt`
/// (the default: fail closed) and `skip` carry the error's text as the
/// reason; `proceed` lets the tick go on.
///
/// A gate refused by the trust policy halts whatever its `on_error` says:
/// it never got to decide, and letting it `proceed` would make a required
/// signature optional.
pub(crate) fn decide_on_error(policy: OnError, err: &GateError) -> Decision {
    if matches!(err.kind(), GateErrorKind::Untrusted { .. }) {
        return Decision::Halt(err.to_string());
    }
    match policy {
        OnError::Halt => Decision::Halt(err.to_string()),
        OnError::Skip => Decision::Skip(err.to_string()),
        OnError::Proceed => Decision::Proceed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_the_gate_version_and_limit() {
        let e = GateError::new(
            "gates/budget.wasm",
            GateErrorKind::Timeout {
                limit: Duration::from_millis(200),
            },
        )
        .with_version(Some("budget 1.2.0".into()));
        assert_eq!(
            e.to_string(),
            "gate gates/budget.wasm (budget 1.2.0) timed out after 200ms"
        );
        let m = GateError::new(
            "stock:budget",
            GateErrorKind::MemoryCap {
                limit: 64 * 1024 * 1024,
            },
        );
        assert_eq!(
            m.to_string(),
            "gate stock:budget exceeded its memory limit of 64 MiB"
        );
    }

    #[test]
    fn on_error_policies() {
        let e = GateError::new("g.wasm", GateErrorKind::Refused { message: "no".into() });
        assert_eq!(
            decide_on_error(OnError::Halt, &e),
            Decision::Halt("gate g.wasm refused to decide: no".into())
        );
        assert_eq!(
            decide_on_error(OnError::Skip, &e),
            Decision::Skip("gate g.wasm refused to decide: no".into())
        );
        assert_eq!(decide_on_error(OnError::Proceed, &e), Decision::Proceed);
    }

    #[test]
    fn trap_output_is_shown_from_its_end() {
        let long = format!("{}THE END", "x".repeat(5000));
        let e = GateError::new(
            "g",
            GateErrorKind::Trap {
                message: "unreachable".into(),
                function: None,
                guest_output: long,
            },
        );
        let s = e.to_string();
        assert!(s.ends_with("THE END"));
        assert!(s.len() < 2200);
    }

    #[test]
    fn a_params_message_loses_what_the_host_says_or_cannot_place() {
        assert_eq!(
            params_message("unknown field `evry`, expected `every` at line 1 column 7"),
            "unknown field `evry`, expected `every`"
        );
        assert_eq!(params_message("invalid params: every: too big"), "every: too big");
        assert_eq!(
            params_message("every: must be at line 3"),
            "every: must be at line 3"
        );
        assert_eq!(params_message("plain"), "plain");
    }
}
