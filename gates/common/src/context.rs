//! The evaluation context and the decision, mirroring the WIT types one to
//! one so the logic can be tested without a component runtime.

/// When a gate is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Before the tick's step runs.
    #[default]
    BeforeStep,
    /// After the step and verifier ran.
    AfterStep,
}

/// What happened when a tick's step (and verifier) ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunResult {
    pub tick: u64,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub verifier_passed: Option<bool>,
    pub worktree_changed: Option<bool>,
    pub ended_at_ms: u64,
}

/// An operator's approval not yet used.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Approval {
    pub id: String,
    pub by: String,
    pub at_ms: u64,
    pub note: Option<String>,
}

/// Everything a gate may base its decision on (see `context` in the WIT).
#[derive(Debug, Clone)]
pub struct Context {
    pub loop_name: String,
    pub phase: Phase,
    pub tick: u64,
    pub now_ms: u64,
    pub last_run: Option<RunResult>,
    pub consecutive_failures: u32,
    pub unchanged_ticks: u32,
    pub pending_approvals: Vec<Approval>,
    pub params: String,
    pub state: String,
    pub metrics: String,
    pub totals: String,
    /// The host's `in-zone` (0.3.0): none for a gate built against an
    /// earlier version.
    pub in_zone: Option<InZone>,
}

/// The host's `in-zone`: an instant (ms since the Unix epoch) in an IANA
/// time zone.
pub type InZone = fn(i64, &str) -> Result<LocalTime, String>;

/// An instant's local time in a zone, as far as the stock gates read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalTime {
    /// The zone's offset from UTC then, in seconds.
    pub offset_seconds: i32,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            loop_name: String::from("test"),
            phase: Phase::BeforeStep,
            tick: 0,
            now_ms: 0,
            last_run: None,
            consecutive_failures: 0,
            unchanged_ticks: 0,
            pending_approvals: Vec::new(),
            params: String::from("{}"),
            state: String::from("{}"),
            metrics: String::from("{}"),
            totals: String::from("{}"),
            in_zone: None,
        }
    }
}

/// A gate's answer; the host combines them (halt > complete > await-approval
/// > skip > proceed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Proceed,
    Skip(String),
    AwaitApproval(String),
    Halt(String),
    Complete(String),
}

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Log lines a gate wrote while deciding; the component glue forwards them to
/// the host's `log` import, tests read them.
#[derive(Debug, Default)]
pub struct Log {
    pub lines: Vec<(Level, String)>,
}

impl Log {
    pub fn write(&mut self, level: Level, message: impl Into<String>) {
        self.lines.push((level, message.into()));
    }

    pub fn info(&mut self, message: impl Into<String>) {
        self.write(Level::Info, message);
    }

    pub fn debug(&mut self, message: impl Into<String>) {
        self.write(Level::Debug, message);
    }
}
