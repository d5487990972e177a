//! The crate's error type. Every variant carries what an operator needs to
//! act on it (the loop, file, line, holder) and maps to one exit code (README, "Exit codes").

use std::io;
use std::path::PathBuf;

use crate::config::ConfigError;
use crate::lock::Holder;
use crate::state::Outcome;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid loop name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },

    #[error("invalid user name {name:?}: {reason}")]
    InvalidUser { name: String, reason: &'static str },

    /// `gate allow-rollback`'s version is not one a signed gate's can be
    /// compared with.
    #[error("invalid gate version {version:?}: not a semantic version (MAJOR.MINOR.PATCH)")]
    InvalidVersion { version: String },

    #[error("no user named {name:?} in {store} (`automaton user list` lists them)")]
    NoSuchUser { name: String, store: String },

    #[error("user {name:?} already exists in {store}; `automaton user rotate {name}` gives it a new token")]
    UserExists { name: String, store: String },

    /// `serve`'s flags that do not go together, or a proxy secret that
    /// cannot be used.
    #[error("serve: {reason}")]
    ServeSetup { reason: String },

    /// `daemon --metrics ADDR` that may not listen as asked.
    #[error("daemon --metrics: {reason}")]
    MetricsSetup { reason: String },

    #[error("cannot listen on {addr}")]
    Listen {
        addr: String,
        #[source]
        source: io::Error,
    },

    /// `daemon --service` off Windows, or not started by the Service
    /// Control Manager, or refused by it.
    #[error("daemon --service: {reason}")]
    Service { reason: String },

    /// The daemon cannot listen for its stop signals.
    #[error("cannot listen for signals")]
    Signals(#[source] io::Error),

    /// The daemon cannot start one of its threads (`tick-0`, `signals`,
    /// `listen`).
    #[error("cannot start the daemon's thread {name:?}")]
    DaemonThread {
        name: String,
        #[source]
        source: io::Error,
    },

    #[error("TLS: {}: {message}", path.display())]
    Tls { path: PathBuf, message: String },

    #[error("no automaton root at {}: run `automaton init` there, or pass --root", path.display())]
    NoRoot { path: PathBuf },

    #[error("no loop named {name:?} in {}", root.display())]
    NoSuchLoop { name: String, root: PathBuf },

    #[error("no command {name:?}{hint} (`automaton help` lists them)")]
    NoSuchCommand { name: String, hint: String },

    /// An error about a name the user typed, with the name most like it
    /// (`; did you mean "agent"?`, from [`crate::suggest`]).
    #[error("{error}{hint}")]
    Hinted { error: Box<Error>, hint: String },

    #[error("no group named {name:?} on this host (`groupadd {name}` makes one)")]
    NoSuchGroup { name: String },

    #[error("cannot share {} with group {group:?}: {source} (its owner, or root, runs `automaton init --group`, and must be in the group)", path.display())]
    NotShared {
        path: PathBuf,
        group: String,
        #[source]
        source: io::Error,
    },

    #[error("loop {name:?} already exists in {}", root.display())]
    LoopExists { name: String, root: PathBuf },

    #[error(
        "a directory {} exists without a loop in it (it holds {holds}); move it aside, run `automaton new` again, then move what it held into the new loop's directory",
        dir.display()
    )]
    NotALoop { dir: PathBuf, holds: String },

    #[error(transparent)]
    Config(#[from] ConfigError),

    #[error("unknown store {value:?} (from {from}): write `file`, or a postgres:// URL")]
    BadStore { value: String, from: String },

    #[error("{}PostgreSQL store {url}: {action}", loop_prefix(name.as_deref()))]
    Database {
        /// The loop being worked on, if any.
        name: Option<String>,
        /// The store's URL, its password redacted.
        url: String,
        action: String,
        /// The server gave up waiting for a table or row lock.
        lock_wait: bool,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A write sent to the server whose answer was lost (no answer within
    /// the bound, the connection cut or ended): it may have been made.
    #[error(
        "{}PostgreSQL store {url}: {what} may or may not have been made: the server's answer was \
         lost; do not repeat it before `{check}` says which",
        loop_prefix(name.as_deref())
    )]
    MaybeMade {
        name: Option<String>,
        url: String,
        /// What was written (`version 7 of the loop's state`).
        what: String,
        /// The command that says whether it was made.
        check: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error(
        "PostgreSQL store {url} has schema version {found}, but this automaton knows versions up to {known}; \
         nothing was changed (a newer automaton wrote it: upgrade this one)"
    )]
    SchemaTooNew { url: String, found: i32, known: i32 },

    #[error("loop {name:?} cannot be moved: {reason}")]
    NotMoved { name: String, reason: String },

    /// Several loops of one `migrate` could not move: each named once.
    #[error("{} of {total} loops were not moved:\n  {}", errors.len(), errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    SomeNotMoved { total: usize, errors: Vec<Error> },

    #[error("{error}; {} was left unchanged, and the edit is kept in {}", config.display(), kept.display())]
    EditRejected {
        /// Why the edited copy was refused (it names the copy, line and column).
        error: Box<Error>,
        config: PathBuf,
        kept: PathBuf,
    },

    #[error("{action}: {message}")]
    Editor { action: String, message: String },

    #[error("state file {} is unreadable: {reason}; it was left untouched (restore it, or remove the loop with `automaton rm --force`)", path.display())]
    CorruptState { path: PathBuf, reason: String },

    #[error("state file {} has schema {found}, but this automaton reads schema {expected}; it was left untouched (a newer automaton reads it; `automaton rm --force` removes the loop)", path.display())]
    UnknownSchema {
        path: PathBuf,
        found: u64,
        expected: u32,
    },

    #[error("{} is {kind}; automaton reads and writes only regular files there, and left it untouched", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },

    #[error("{} is, or passes through, a symbolic link; automaton follows no link to or inside a loop's directory, and left it and what it points to untouched", path.display())]
    Link { path: PathBuf },

    #[error("{} is {size} bytes, more than the {max} automaton ever writes there; it was left untouched", path.display())]
    TooLarge { path: PathBuf, size: u64, max: u64 },

    #[error("loop {name:?}: a commit built on version {found}, but the loop is at {}; nothing was written", expected.map_or_else(|| "an unknown version".to_owned(), |v| v.to_string()))]
    Conflict {
        name: String,
        expected: Option<u64>,
        found: u64,
    },

    #[error(
        "loop {name:?}: tick {tick} ran its step ({step}), but its result could not be recorded; \
         the next command on this loop records the tick as crashed, so do not run it again"
    )]
    Unrecorded {
        name: String,
        tick: u64,
        step: String,
        #[source]
        source: Box<Error>,
    },

    #[error(
        "loop {name:?}: committed version {version}, but its durability is unknown: the directory \
         sync after it failed; the change is made (do not repeat it), and the next command on this \
         loop syncs it again"
    )]
    NotDurable {
        name: String,
        version: u64,
        #[source]
        source: Box<Error>,
    },

    #[error(
        "loop {name:?}: tick {tick} had died mid-way; its crash was recorded (version {version}), but \
         the directory sync after that failed, so this command changed nothing else: run it again \
         (the next command on this loop syncs the directory first)"
    )]
    RecoveryNotDurable {
        name: String,
        tick: u64,
        version: u64,
        #[source]
        source: Box<Error>,
    },

    #[error(
        "loop {name:?}: its lock was lost ({reason}); nothing was written, and whatever ran under \
         the lock was stopped before another holder could take it"
    )]
    LockLost { name: String, reason: String },

    #[error("loop {name:?} is busy: {}", describe_holder(holder.as_ref()))]
    LockNotObtained { name: String, holder: Option<Holder> },

    #[error("loop {name:?}: {message}")]
    Refused { name: String, message: String },

    #[error(
        "loop {name:?}: {user} may not `{command}`: it needs one of its {role}{}{record}",
        holders.as_deref().map(|h| format!(" ({})", holders_text(h))).unwrap_or_default()
    )]
    NotAllowed {
        name: String,
        command: &'static str,
        /// The name that counts for the one who asked.
        user: String,
        role: &'static str,
        /// Who holds the role: told only to one who may view the loop.
        holders: Option<Vec<String>>,
        /// Whether the refusal is in the loop's history.
        record: Box<crate::access::Record>,
    },

    #[error(
        "root {}: {user} may not `{command}`: it needs one of its admins ({}: {whence}); nothing was changed{record}",
        root.display(),
        holders_text(holders)
    )]
    NotAdmin {
        root: PathBuf,
        command: &'static str,
        /// The OS user who asked.
        user: String,
        holders: Vec<String>,
        /// Where the admins are set.
        whence: String,
        /// Whether the refusal is in the admin record.
        record: Box<crate::access::Record>,
    },

    #[error(
        "{name:?} is not one of the delegates recorded in {store} (`automaton delegate list` lists them)"
    )]
    NoSuchDelegate { name: String, store: String },

    #[error(
        "the root-wide access of a root on the file store is its {}: there is nothing to record (`access import` is for a root in PostgreSQL, whose hosts each have a file of their own)",
        config.display()
    )]
    AccessInFile { config: PathBuf },

    #[error("loop {name:?} has no {what} for tick {tick} ({} is not there)", path.display())]
    NoOutput {
        name: String,
        tick: u64,
        /// `step output`, `verifier output`, `output`.
        what: &'static str,
        /// The file or directory looked for.
        path: PathBuf,
    },

    #[error(transparent)]
    Gate(#[from] crate::gate::GateError),

    #[error("invalid context JSON in {name}")]
    ContextJson {
        name: String,
        #[source]
        source: serde_json::Error,
    },

    /// A `gate test --cases` file that is not an array of cases, or one
    /// case in it that is not a case (`case` names it: its number, from 1,
    /// and its name).
    #[error("invalid {} in {}", case.as_deref().map_or_else(|| "cases file".to_owned(), |c| format!("case {c}")), path.display())]
    CasesJson {
        path: PathBuf,
        case: Option<String>,
        #[source]
        source: serde_json::Error,
    },

    #[error(transparent)]
    Schedule(#[from] crate::schedule::ScheduleError),

    #[error(
        "{error}; to remove what the install left, run `automaton schedule remove {name} --backend {backend}`"
    )]
    InstallFailed {
        name: String,
        backend: crate::schedule::Backend,
        error: Box<Error>,
    },

    #[error(
        "the system clock reads {seconds} seconds since 1970-01-01, outside the times automaton can record \
         (up to {}); nothing was done: set the clock right",
        latest.strftime("%Y-%m-%dT%H:%M:%SZ")
    )]
    Clock {
        seconds: i128,
        /// The last time that can be recorded.
        latest: jiff::Timestamp,
    },

    #[error("cannot write the output; any change it reports was made before this")]
    Output(#[from] io::Error),

    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `e` and each of its causes, joined by `": "`: how `main` says an error,
/// and how a tick's failure is kept as its reason.
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

fn loop_prefix(name: Option<&str>) -> String {
    name.map(|n| format!("loop {n:?}: ")).unwrap_or_default()
}

fn holders_text(holders: &[String]) -> String {
    match holders {
        [] => "nobody holds it".to_owned(),
        _ => holders.join(", "),
    }
}

fn describe_holder(holder: Option<&Holder>) -> String {
    match holder {
        Some(h) => format!("held by {}", h.describe()),
        None => "its lock is held by another process".to_owned(),
    }
}

/// How a command that ran to its end went, as its exit status says it
/// (README, "Exit codes"). Most end [`Exit::Ok`]; a tick, a check or a
/// report may end otherwise with nothing gone wrong. A command that fails
/// returns an [`Error`] instead, whose [`Error::exit_code`] says its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// A check found something wanting: no daemon serves the root
    /// (`daemon --status`), a gate's case did not decide as expected
    /// (`gate test --cases`), `doctor` found a problem.
    Wanting,
    /// The tick's step or verifier failed.
    StepFailed,
    /// The tick, or a decision `check-gate --apply` recorded, halted the
    /// loop.
    Halted,
    /// `gate replay`: a decision would differ.
    Differs,
}

impl Exit {
    /// The process exit code (README, "Exit codes").
    pub fn exit_code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Wanting => 1,
            Exit::StepFailed => 6,
            Exit::Halted => 7,
            Exit::Differs => 11,
        }
    }
}

/// How `tick` exits for each outcome (docs/ticks.md).
impl From<Outcome> for Exit {
    fn from(outcome: Outcome) -> Exit {
        match outcome {
            Outcome::Failed => Exit::StepFailed,
            Outcome::Halted => Exit::Halted,
            _ => Exit::Ok,
        }
    }
}

/// The kinds of failure, one for each exit code an error can have
/// (README, "Exit codes"): [`Error::class`] sorts every error into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Nothing worth reporting as a failure: the reader of the output went
    /// away (a closed pipe).
    Quiet,
    /// An error, including a request the loop's state refuses.
    Failed,
    /// Usage, or an invalid name.
    Usage,
    /// No such loop, user or root.
    NotFound,
    /// The lock was not obtained in time.
    Busy,
    /// Invalid config or state: a record that cannot be read as it is.
    InvalidState,
    /// The step ran, but its result could not be recorded.
    Unrecorded,
    /// Made, but maybe not durable.
    NotDurable,
    /// Maybe made: the answer to the commit was lost.
    MaybeMade,
    /// The one who asked does not hold the role the command needs.
    NotAllowed,
}

impl Class {
    /// The process exit code (README, "Exit codes").
    pub fn exit_code(self) -> u8 {
        match self {
            Class::Quiet => 0,
            Class::Failed => 1,
            Class::Usage => 2,
            Class::NotFound => 3,
            Class::Busy => 4,
            Class::InvalidState => 5,
            Class::Unrecorded => 8,
            Class::NotDurable | Class::MaybeMade => 9,
            Class::NotAllowed => 10,
        }
    }
}

impl Error {
    /// The process exit code for this error (README, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        self.class().exit_code()
    }

    /// What kind of failure this is: what its exit code says, and what the
    /// console's answer says.
    pub fn class(&self) -> Class {
        match self {
            Error::InvalidName { .. }
            | Error::NoSuchCommand { .. }
            | Error::NoSuchGroup { .. }
            | Error::InvalidUser { .. }
            | Error::InvalidVersion { .. } => Class::Usage,
            Error::NotShared { .. } => Class::Failed,
            Error::NoSuchUser { .. } | Error::NoSuchDelegate { .. } => Class::NotFound,
            Error::AccessInFile { .. } => Class::Usage,
            Error::UserExists { .. } | Error::Listen { .. } => Class::Failed,
            Error::Signals(_) | Error::DaemonThread { .. } | Error::Service { .. } => Class::Failed,
            Error::Tls { .. } | Error::ServeSetup { .. } | Error::MetricsSetup { .. } => Class::Usage,
            Error::NoRoot { .. } | Error::NoSuchLoop { .. } => Class::NotFound,
            Error::LockNotObtained { .. } => Class::Busy,
            Error::Config(_)
            | Error::CorruptState { .. }
            | Error::UnknownSchema { .. }
            | Error::NotRegular { .. }
            | Error::Link { .. }
            | Error::TooLarge { .. } => Class::InvalidState,
            Error::EditRejected { .. } => Class::InvalidState,
            Error::BadStore { .. } => Class::Usage,
            // A table or row lock not obtained in time, as a loop's lock.
            Error::Database { lock_wait: true, .. } => Class::Busy,
            Error::Database { .. } | Error::NotMoved { .. } => Class::Failed,
            Error::SomeNotMoved { errors, .. } => errors.first().map_or(Class::Failed, Error::class),
            Error::SchemaTooNew { .. } => Class::InvalidState,
            Error::Editor { .. } => Class::Failed,
            Error::Conflict { .. } | Error::LockLost { .. } => Class::Failed,
            // The step ran: a scheduler that retries on failure must not
            // run it again.
            Error::Unrecorded { .. } => Class::Unrecorded,
            // Made, but maybe not durable: a retry would make it twice.
            Error::NotDurable { .. } => Class::NotDurable,
            // Only a dead tick's record was made: the command's own change
            // was not, and a retry makes it once.
            Error::RecoveryNotDurable { .. } => Class::Failed,
            // Maybe made: a retry could make it twice.
            Error::MaybeMade { .. } => Class::MaybeMade,
            Error::LoopExists { .. } | Error::NotALoop { .. } | Error::Refused { .. } | Error::Io { .. } => {
                Class::Failed
            }
            Error::NoOutput { .. } | Error::Clock { .. } => Class::Failed,
            // Not one of the role's holders: nothing was changed.
            Error::NotAllowed { .. } | Error::NotAdmin { .. } => Class::NotAllowed,
            Error::Gate(_) => Class::Failed,
            Error::ContextJson { .. } => Class::Usage,
            Error::CasesJson { .. } => Class::Usage,
            // A schedule record that does not parse is bad state on disk.
            Error::Schedule(crate::schedule::ScheduleError::BadRecord { .. }) => Class::InvalidState,
            // A cadence a backend cannot say, a scheduler command that failed.
            Error::Schedule(_) => Class::Failed,
            Error::InstallFailed { error, .. } | Error::Hinted { error, .. } => error.class(),
            Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe => Class::Quiet,
            Error::Output(_) => Class::Failed,
        }
    }

    /// Wraps an io error with what was being done and to which path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { action, path, source }
    }
}
