//! `loop.toml`: the whole schema (README, "Config") as typed structs. Unknown keys and
//! bad values are errors that name the file, line and column.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::domain::{GateSource, Limits, Mode, OnError, Phase};

pub mod notify;
pub mod scrape;

use self::notify::Notify;

/// A loop's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopConfig {
    /// Shown by `list` and `status`.
    #[serde(default)]
    pub description: Option<String>,
    /// The step: an argv array or a string run by `sh -c` (`step = ...`),
    /// or a `[step]` table with its `command` and what it may touch.
    pub step: Step,
    /// Where the step runs, relative to the loop dir; ignored with a worktree.
    #[serde(default = "default_workdir")]
    pub workdir: PathBuf,
    /// The step's timeout; the whole process group is killed.
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// What a tick does when it finds the lock held.
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    pub verifier: Option<Verifier>,
    #[serde(default)]
    pub worktree: Option<WorktreeConfig>,
    #[serde(default)]
    pub schedule: Option<Schedule>,
    #[serde(default, rename = "gate")]
    pub gates: Vec<GateConfig>,
    /// `[gates]`: what the loop requires of its gates' signatures, beyond
    /// what the root's automaton.toml requires.
    #[serde(default, rename = "gates")]
    pub signing: Signing,
    #[serde(default)]
    pub approval: ApprovalRules,
    /// Who may approve and operate the loop; unset roles fall back to the
    /// root's automaton.toml, then to anyone.
    #[serde(default, rename = "access")]
    pub access_lists: crate::access::Access,
    #[serde(default)]
    pub runs: Runs,
    #[serde(default)]
    pub history: HistoryLimits,
    #[serde(default)]
    pub notify: Option<Notify>,
    /// Where people reach the console (the root's automaton.toml's when unset).
    #[serde(default)]
    pub server: notify::Server,
    #[serde(default)]
    pub runner: Runner,
    /// Variables of the runner's environment that the step, the verifier
    /// and the notify command get although they are the store's secrets
    /// (`AUTOMATON_STORE`, `PGPASSWORD`, ...), which they otherwise never
    /// inherit.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// `[labels]`: names and values added to each of the loop's series on
    /// `/metrics` (docs/metrics.md): a few, named by Prometheus's rules.
    #[serde(default)]
    pub labels: Labels,
    /// The group the loop's spend counts in (`scope = "group:NAME"`
    /// budgets of the root's automaton.toml).
    #[serde(default)]
    pub group: Option<String>,
    /// The most one step may spend: what a tick reserves in every budget
    /// it belongs to before its step runs (0 when unset).
    #[serde(default)]
    pub max_per_tick: Option<crate::budget::spec::Cap>,
    /// What a step that reports no cost counts at in its budgets.
    #[serde(default)]
    pub unreported: crate::budget::Unreported,
    /// `[[budget]]`: budgets of the loop's own.
    #[serde(default, rename = "budget")]
    pub budgets: Vec<crate::budget::BudgetSpec>,
    /// The text it was read from, with its sha256: what the record of the
    /// rules compares (not a key of loop.toml).
    #[serde(skip)]
    pub source: crate::rules::Source,
}

impl LoopConfig {
    /// The withheld variables `pass_env` names that the runner has, with
    /// their values.
    pub(crate) fn passed_env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        self.pass_env
            .iter()
            .filter_map(|name| Some((name.into(), std::env::var_os(name)?)))
            .collect()
    }
}

/// `[runner]`: which hosts may run the loop's ticks (a loop whose worktree
/// lives on one machine, say). Empty: any host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runner {
    #[serde(default)]
    pub hosts: Vec<String>,
}

impl Runner {
    /// Whether `host` may run the loop's ticks.
    pub fn allows(&self, host: &str) -> bool {
        self.hosts.is_empty() || self.hosts.iter().any(|h| h == host)
    }
}

/// The most `[labels]` a loop may set: each is a label on every one of
/// its series, so the count of series stays bounded.
pub(crate) const MAX_LABELS: usize = 8;

/// The longest value of a `[labels]` entry, in bytes.
pub(crate) const MAX_LABEL_VALUE: usize = 128;

/// The label names automaton's own series use, which `[labels]` may not.
pub(crate) const RESERVED_LABELS: &[&str] = &[
    "loop", "status", "outcome", "why", "kind", "gate", "decision", "metric", "le", "quantile", "instance",
    "job",
];

/// A loop's `[labels]`: label name to value, checked as they are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(pub std::collections::BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        let map = std::collections::BTreeMap::<String, String>::deserialize(d)?;
        check_labels(&map).map_err(serde::de::Error::custom)?;
        Ok(Labels(map))
    }
}

/// Why `[labels]` may not be used: too many, a name Prometheus refuses or
/// automaton's own series use, a value too long.
fn check_labels(map: &std::collections::BTreeMap<String, String>) -> Result<(), String> {
    if map.len() > MAX_LABELS {
        return Err(format!(
            "[labels] sets {} labels; at most {MAX_LABELS}",
            map.len()
        ));
    }
    for (name, value) in map {
        let mut chars = name.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "[labels] `{name}` is not a label name: a letter or `_`, then letters, digits and `_`"
            ));
        }
        if name.starts_with("__") {
            return Err(format!(
                "[labels] `{name}`: names starting with `__` are Prometheus's own"
            ));
        }
        if RESERVED_LABELS.contains(&name.as_str()) {
            return Err(format!(
                "[labels] `{name}` is a label of automaton's own series; pick another name"
            ));
        }
        if value.len() > MAX_LABEL_VALUE {
            return Err(format!(
                "[labels] `{name}` is longer than {MAX_LABEL_VALUE} bytes"
            ));
        }
    }
    Ok(())
}

fn default_workdir() -> PathBuf {
    PathBuf::from(".")
}

/// `step`: the command alone (`step = "..."`), or the `[step]` table:
/// the command and what the step (and the verifier) may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub command: CommandLine,
    /// Whether the step runs confined (the default) or not (`"off"`).
    pub confine: Confine,
    /// Places the step may write besides its run directory, its worktree
    /// (or workdir outside the root) and the temporary directories.
    pub writable: Vec<PathBuf>,
    /// Places the step may read that it otherwise may not (in the root,
    /// beyond its own loop's directory; `~/.ssh`, `~/.gnupg`).
    pub readable: Vec<PathBuf>,
    /// Which TCP ports the step may connect to; see [`Connect`].
    pub connect: Connect,
    /// The OS user the step runs as (the runner must be root or hold
    /// CAP_SETUID and CAP_SETGID).
    pub run_as: Option<String>,
}

/// `[step] confine`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confine {
    /// Landlock; a tick where the kernel cannot confine refuses to run.
    #[default]
    On,
    /// The step runs with the runner's every right: recorded as
    /// "unconfined" in each tick event, and shown so.
    Off,
}

/// `[step] connect`: the TCP ports a step may connect to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Connect {
    /// Any port but those a console serving the root listens on (the
    /// default).
    #[default]
    NotConsole,
    /// Any port (`connect = "any"`), the console's too.
    Any,
    /// Only these (`connect = [443, 5432]`).
    Only(Vec<u16>),
}

impl<'de> Deserialize<'de> for Connect {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged, expecting = "\"any\", or an array of TCP port numbers")]
        enum Raw {
            Word(String),
            Ports(Vec<u16>),
        }
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "any" => Ok(Connect::Any),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "connect = {w:?}: write \"any\", or an array of TCP port numbers"
            ))),
            Raw::Ports(p) => Ok(Connect::Only(p)),
        }
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            command: CommandLine,
            #[serde(default)]
            confine: Confine,
            #[serde(default)]
            writable: Vec<PathBuf>,
            #[serde(default)]
            readable: Vec<PathBuf>,
            #[serde(default)]
            connect: Connect,
            #[serde(default)]
            run_as: Option<String>,
        }
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Step;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command (an array of strings, or a string run by sh -c), or a [step] table")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Step, E> {
                CommandLine::deserialize(serde::de::value::StrDeserializer::new(v)).map(Step::from)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Step, A::Error> {
                CommandLine::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Step::from)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Step, A::Error> {
                let t = Table::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Step {
                    command: t.command,
                    confine: t.confine,
                    writable: t.writable,
                    readable: t.readable,
                    connect: t.connect,
                    run_as: t.run_as.filter(|u| !u.is_empty()),
                })
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl From<CommandLine> for Step {
    fn from(command: CommandLine) -> Step {
        Step {
            command,
            confine: Confine::On,
            writable: Vec::new(),
            readable: Vec::new(),
            connect: Connect::NotConsole,
            run_as: None,
        }
    }
}

/// A command: `["prog", "arg"]`, or `"a shell line"` run by `sh -c`
/// (on Windows, by `cmd /C`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLine {
    Argv(Vec<String>),
    Shell(String),
}

impl CommandLine {
    /// The program and its arguments, as they will be executed.
    pub(crate) fn argv(&self) -> Vec<String> {
        match self {
            CommandLine::Argv(v) => v.clone(),
            #[cfg(unix)]
            CommandLine::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
            #[cfg(windows)]
            CommandLine::Shell(s) => vec!["cmd".into(), "/C".into(), s.clone()],
        }
    }
}

impl fmt::Display for CommandLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandLine::Shell(s) => f.write_str(s),
            CommandLine::Argv(v) => f.write_str(&v.join(" ")),
        }
    }
}

impl<'de> Deserialize<'de> for CommandLine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(
            untagged,
            expecting = "a command: an array of strings, or a string run by sh -c"
        )]
        enum Raw {
            Shell(String),
            Argv(Vec<String>),
        }
        match Raw::deserialize(d)? {
            Raw::Shell(s) if s.trim().is_empty() => Err(serde::de::Error::custom("the command is empty")),
            Raw::Argv(v) if v.first().is_none_or(std::string::String::is_empty) => {
                Err(serde::de::Error::custom("the command is empty"))
            }
            Raw::Shell(s) => Ok(CommandLine::Shell(s)),
            Raw::Argv(v) => Ok(CommandLine::Argv(v)),
        }
    }
}

/// A duration written as a human string: `"30m"`, `"1h 30m"`, `"200ms"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn parse(s: &str) -> Result<Dur, String> {
        crate::duration::parse(s).map(Dur).map_err(|e| {
            format!("invalid duration {s:?} ({e}); write it like \"30s\", \"15m\" or \"1h 30m\"")
        })
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::duration::format(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Dur::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// What a tick does when the loop's lock is held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// Answer `busy` at once.
    #[default]
    Skip,
    /// Wait for the lock (bounded by `--timeout`).
    Wait,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verifier {
    pub command: CommandLine,
    #[serde(default)]
    pub timeout: Option<Dur>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeConfig {
    pub repo: PathBuf,
    pub branch: String,
    /// Where the worktree goes; default `<loop dir>/worktree`.
    #[serde(default)]
    pub path: Option<PathBuf>,
}

/// The loop's cadence, for `schedule install` and `daemon`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawSchedule")]
pub struct Schedule {
    pub cadence: Cadence,
    pub jitter: Option<Dur>,
    /// An IANA time zone for a `cron` cadence; the system's when absent.
    pub timezone: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    Every(Dur),
    Cron(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    every: Option<Dur>,
    cron: Option<String>,
    jitter: Option<Dur>,
    timezone: Option<String>,
}

impl TryFrom<RawSchedule> for Schedule {
    type Error = String;
    fn try_from(r: RawSchedule) -> Result<Self, String> {
        let cadence = match (r.every, r.cron) {
            (Some(_), Some(_)) => return Err("give either `every` or `cron`, not both".into()),
            (None, None) => return Err("give `every = \"15m\"` or `cron = \"*/15 * * * *\"`".into()),
            (Some(e), None) if e.0 < min_every() => {
                return Err(format!("`every` must be at least {}", Dur(min_every())));
            }
            (Some(e), None) => Cadence::Every(e),
            (None, Some(c)) => {
                if c.split_whitespace().count() != 5 {
                    return Err(format!(
                        "`cron = {c:?}` needs five fields: minute hour day month weekday"
                    ));
                }
                Cadence::Cron(c)
            }
        };
        let schedule = Schedule {
            cadence,
            jitter: r.jitter,
            timezone: r.timezone,
        };
        schedule.check()?;
        Ok(schedule)
    }
}

impl Schedule {
    /// Refuses a schedule that cannot do what it says: a cron expression
    /// that is not valid or never fires, an unknown time zone, a `timezone`
    /// on an `every` cadence, and a jitter not shorter than the cadence
    /// (which would change the cadence rather than spread it). Whether an
    /// OS scheduler can express it is that backend's to say.
    pub fn check(&self) -> Result<(), String> {
        let shortest = match &self.cadence {
            Cadence::Every(_) if self.timezone.is_some() => {
                return Err("`timezone` applies to `cron` cadences; `every` counts real time".into());
            }
            Cadence::Every(d) => d.0,
            Cadence::Cron(expr) => {
                let cron = crate::cron::parse(expr).map_err(|why| format!("cron = {expr:?}: {why}"))?;
                let tz = time_zone(self.timezone.as_deref())?;
                // The closest two firings (64 of them walked) matter only
                // to a jitter; otherwise one firing says it ever fires.
                let shortest = match self.jitter {
                    Some(_) => crate::cron::shortest_gap(&cron, &tz),
                    None => crate::cron::fires(&cron, &tz).then_some(Duration::MAX),
                };
                shortest.ok_or_else(|| format!("cron = {expr:?}: it never fires (no date matches)"))?
            }
        };
        if let Some(j) = self.jitter
            && j.0 >= shortest
        {
            return Err(format!(
                "`jitter = \"{j}\"` must be shorter than the cadence ({}, at its closest {}): \
                 a jitter that long changes the cadence instead of spreading it",
                Schedule {
                    jitter: None,
                    ..self.clone()
                }
                .describe(),
                crate::duration::format(shortest)
            ));
        }
        Ok(())
    }

    /// The schedule as loop.toml writes it: `every = "5m"`, `cron = "…"`,
    /// with its jitter and time zone.
    pub fn describe(&self) -> String {
        let mut text = match &self.cadence {
            Cadence::Every(d) => format!("every = \"{d}\""),
            Cadence::Cron(c) => format!("cron = \"{c}\""),
        };
        if let Some(j) = self.jitter {
            text += &format!(", jitter = \"{j}\"");
        }
        if let Some(tz) = &self.timezone {
            text += &format!(", timezone = \"{tz}\"");
        }
        text
    }
}

/// The zone `[schedule] timezone` names, or the system's when it names none.
pub(crate) fn time_zone(name: Option<&str>) -> Result<jiff::tz::TimeZone, String> {
    match name {
        None => Ok(jiff::tz::TimeZone::system()),
        Some(name) => crate::clock::zone(name)
            .map_err(|e| format!("timezone = {name:?}: not an IANA time zone here ({e})")),
    }
}

/// The shortest `every`: 1s, or less when `AUTOMATON_MIN_EVERY` says so
/// (tests drive the daemon with sub-second cadences).
fn min_every() -> Duration {
    std::env::var("AUTOMATON_MIN_EVERY")
        .ok()
        .and_then(|v| crate::duration::parse(&v).ok())
        .unwrap_or(Duration::from_secs(1))
}

/// `[gates]` of loop.toml (and of the root's automaton.toml, which also
/// names the trust file): whether every component gate must be signed,
/// and by how many trusted keys. A loop can only require more than its
/// root: signatures required by either are required.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signing {
    #[serde(default)]
    pub require_signed: bool,
    /// Distinct trusted keys that must have signed each gate (k of n); 1
    /// unless set.
    #[serde(default)]
    pub signers: Option<std::num::NonZeroU32>,
}

/// One `[[gate]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawGate")]
pub struct GateConfig {
    pub source: GateSource,
    pub phases: Vec<Phase>,
    pub params: serde_json::Value,
    /// The line of loop.toml that sets `params` (or of the gate's entry
    /// when it sets none), for messages about them.
    pub params_line: Option<usize>,
    /// Where `params` starts in loop.toml's text, until
    /// [`LoopConfig::parse`] turns it into `params_line`.
    params_at: Option<usize>,
    pub on_error: OnError,
    pub limits: Limits,
    /// `enforce` (the default) or `shadow`: evaluated and recorded beside
    /// the live gates, never enforced.
    pub mode: Mode,
}

impl GateConfig {
    /// The gate's source with a relative path resolved against `loop_dir`.
    pub(crate) fn resolved_source(&self, loop_dir: &Path) -> GateSource {
        match &self.source {
            GateSource::File { path, sha256 } => GateSource::File {
                path: loop_dir.join(path),
                sha256: sha256.clone(),
            },
            stock => stock.clone(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    stock: Option<String>,
    path: Option<PathBuf>,
    sha256: Option<String>,
    #[serde(default)]
    phase: Option<Vec<Phase>>,
    #[serde(default)]
    params: Option<toml::Spanned<serde_json::Value>>,
    #[serde(default)]
    on_error: OnError,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    mode: Mode,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout: Option<Dur>,
    memory: Option<bytesize::ByteSize>,
}

impl TryFrom<RawGate> for GateConfig {
    type Error = String;
    fn try_from(r: RawGate) -> Result<Self, String> {
        let source = match (r.stock, r.path, r.sha256) {
            (Some(_), Some(_), _) => return Err("a gate has either `stock` or `path`, not both".into()),
            (None, None, _) => return Err("a gate needs `stock = \"NAME\"` or `path = \"FILE.wasm\"`".into()),
            (Some(_), None, Some(_)) => {
                return Err("`sha256` pins a `path` gate; stock gates ship inside the binary".into());
            }
            (Some(name), None, None) => GateSource::Stock(name),
            (None, Some(path), sha256) => {
                if let Some(h) = &sha256
                    && (h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()))
                {
                    return Err(format!("`sha256 = {h:?}` is not 64 hex digits"));
                }
                GateSource::File {
                    path,
                    sha256: sha256.map(|h| h.to_ascii_lowercase()),
                }
            }
        };
        let mut phases = r.phase.unwrap_or_else(|| vec![Phase::BeforeStep]);
        if phases.is_empty() {
            return Err("`phase` lists no phase: use [\"before-step\"], [\"after-step\"] or both".into());
        }
        phases.sort();
        phases.dedup();
        let params_at = r.params.as_ref().map(|p| p.span().start);
        let params = r
            .params
            .map_or_else(|| serde_json::json!({}), toml::Spanned::into_inner);
        if !params.is_object() {
            return Err("`params` must be a table, e.g. params = { every = 5 }".into());
        }
        let defaults = Limits::default();
        let limits = Limits {
            timeout: r.limits.timeout.map_or(defaults.timeout, |d| d.0),
            memory: r.limits.memory.map_or(defaults.memory, |m| m.as_u64()),
        };
        if limits.timeout.is_zero() || limits.memory == 0 {
            return Err("gate limits must be greater than zero".into());
        }
        Ok(GateConfig {
            source,
            phases,
            params,
            params_line: None,
            params_at,
            on_error: r.on_error,
            limits,
            mode: r.mode,
        })
    }
}

/// `[approval]`: who may approve, how many, and for how long an approval holds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRules {
    /// Only these users may approve; everyone when absent.
    #[serde(default)]
    pub approvers: Option<Vec<String>>,
    /// Distinct approvers needed to release one await.
    #[serde(default = "one")]
    pub required: u32,
    /// Approvals older than this are dropped.
    #[serde(default)]
    pub expires: Option<Dur>,
    /// What an approval is bound to besides its await.
    #[serde(default)]
    pub bind: Bind,
    /// What a change to the rules (docs/ticks.md, "The record of config
    /// changes") does: recorded only, or recorded and awaited.
    #[serde(default)]
    pub config_changes: ConfigChanges,
}

/// `[approval] config_changes`: a change to the loop's rules (its gates,
/// access, approval, history limits, passed secrets, `[step]` table, or the
/// root's automaton.toml) is always recorded; with `"await"` the next tick
/// also awaits an approval of it before any gate or step runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigChanges {
    #[default]
    Record,
    Await,
}

/// `[approval] bind`: an approval counts for the await it was given for
/// (`"await"`), and with `"commit"` only while the worktree's HEAD is the
/// commit it was given on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bind {
    #[default]
    Await,
    Commit,
}

fn one() -> u32 {
    1
}

impl Default for ApprovalRules {
    fn default() -> Self {
        ApprovalRules {
            approvers: None,
            required: 1,
            expires: None,
            bind: Bind::Await,
            config_changes: ConfigChanges::Record,
        }
    }
}

/// `[runs]`: what is kept of each tick's step and verifier output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runs {
    /// How many `runs/<tick>/` directories are kept.
    #[serde(default = "default_keep")]
    pub keep: usize,
    /// The most kept of each output stream of one process.
    #[serde(default = "default_output_limit")]
    pub output_limit: bytesize::ByteSize,
}

fn default_keep() -> usize {
    50
}

fn default_output_limit() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(1)
}

impl Default for Runs {
    fn default() -> Self {
        Runs {
            keep: default_keep(),
            output_limit: default_output_limit(),
        }
    }
}

/// `[history]`: how much of `history.jsonl` is kept. When a commit finds it
/// past `max_size`, it is renamed to `history.<n>.jsonl` (`n` one more than
/// the newest rotated file's) and a new one starts; the newest `keep`
/// rotated files are kept, older ones are deleted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryLimits {
    #[serde(default = "default_history_max")]
    pub max_size: bytesize::ByteSize,
    #[serde(default = "default_history_keep")]
    pub keep: usize,
}

fn default_history_max() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(8)
}

fn default_history_keep() -> usize {
    3
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_size: default_history_max(),
            keep: default_history_keep(),
        }
    }
}

/// A loop.toml that could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config {}{}: [[gate]] {index} ({gate}): {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Gate {
        path: PathBuf,
        /// The line the message is about, when it is about one.
        line: Option<usize>,
        /// 1 for the first `[[gate]]`.
        index: usize,
        gate: String,
        message: String,
    },
    #[error("invalid config {}: [schedule] {message}", path.display())]
    Schedule { path: PathBuf, message: String },
    #[error("invalid config {}:{line}:{column}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// More than one thing is wrong: each of them, in the file's order.
    #[error("{} problems: {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    /// A TOML file (`text`, read from `path`) that does not parse into its
    /// type: where, what, and the key or value meant when a name is
    /// mistyped (`unknown field `ovrlap`...; did you mean `overlap`?`).
    pub(crate) fn toml(text: &str, path: &Path, e: &toml::de::Error) -> ConfigError {
        let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
        let message = e.message().trim_end();
        ConfigError::Invalid {
            path: path.to_owned(),
            line,
            column,
            message: format!("{message}{}", crate::suggest::serde_hint(message)),
        }
    }

    /// `errors` as one error: none, the one, or [`ConfigError::Several`].
    pub fn all(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Several(errors)),
        }
    }
}

impl LoopConfig {
    /// Reads and validates a loop.toml file.
    pub fn load(path: &Path) -> Result<LoopConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        LoopConfig::parse(&text, path)
    }

    /// Parses loop.toml text; `path` is used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<LoopConfig, ConfigError> {
        let mut config: LoopConfig = toml::from_str(text).map_err(|e| ConfigError::toml(text, path, &e))?;
        config.source = crate::rules::Source::of(text);
        for gate in &mut config.gates {
            gate.params_line = gate.params_at.take().map(|at| line_column(text, at).0);
        }
        if let Some(b) = config
            .budgets
            .iter()
            .find(|b| b.scope != crate::budget::Scope::Loop)
        {
            let at = text.find("scope").unwrap_or(0);
            let (line, column) = line_column(text, at);
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message: format!(
                    "budget {:?}: a loop.toml's budget is the loop's own (scope = \"loop\"); a group's or the root's is declared in the root's automaton.toml",
                    b.name
                ),
            });
        }
        if config.approval.approvers.is_some() && config.access_lists.approvers.is_some() {
            let at = text.find("[access]").unwrap_or(0);
            let (line, column) = line_column(text, at);
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message: "approvers are set in both [approval] and [access]; keep one list (they are the same role)"
                    .to_owned(),
            });
        }
        Ok(config)
    }

    /// The loop's `[access]` lists, `[approval] approvers` being its
    /// approvers when `[access]` does not name them.
    pub fn access(&self) -> crate::access::Access {
        let mut access = self.access_lists.clone();
        if access.approvers.is_none() {
            access.approvers = self.approval.approvers.clone();
        }
        access
    }
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LoopConfig, ConfigError> {
        LoopConfig::parse(text, Path::new("loop.toml"))
    }

    fn err(text: &str) -> (usize, usize, String) {
        match parse(text).unwrap_err() {
            ConfigError::Invalid {
                line,
                column,
                message,
                ..
            } => (line, column, message),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn labels_are_read_and_bad_ones_refused_with_their_line() {
        let c = parse("step = \"true\"\n[labels]\nteam = \"infra\"\ntier = \"1\"\n").unwrap();
        assert_eq!(c.labels.0.get("team").map(String::as_str), Some("infra"));
        for (bad, says) in [
            ("\"9lives\" = \"x\"", "not a label name"),
            ("\"a-b\" = \"x\"", "not a label name"),
            ("__meta = \"x\"", "Prometheus's own"),
            ("loop = \"x\"", "automaton's own"),
        ] {
            let (line, _, message) = err(&format!("step = \"true\"\n[labels]\n{bad}\n"));
            assert!(line >= 2, "{bad}: line {line}");
            assert!(message.contains(says), "{bad}: {message}");
        }
        let many: String = (0..=MAX_LABELS).map(|i| format!("l{i} = \"v\"\n")).collect();
        let (_, _, message) = err(&format!("step = \"true\"\n[labels]\n{many}"));
        assert!(message.contains("at most"), "{message}");
    }

    #[test]
    fn full_example_parses() {
        let c = parse(
            r#"
step = ["./agent.sh", "--task", "fix-flaky-tests"]
workdir = "."
timeout = "30m"
overlap = "wait"

[verifier]
command = "cargo test --quiet"
timeout = "10m"

[worktree]
repo = "/path/to/repo"
branch = "loop/fix"

[schedule]
every = "15m"
jitter = "30s"

[approval]
approvers = ["alice", "bob"]
required = 2
expires = "24h"

[[gate]]
stock = "approve-every"
params = { every = 5 }

[[gate]]
path = "gates/budget.wasm"
sha256 = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
phase = ["after-step"]
params = { metric = "cost_usd", max = 20.0 }
on_error = "skip"
limits = { timeout = "200ms", memory = "64MiB" }
"#,
        )
        .unwrap();
        assert_eq!(c.step.command.argv()[0], "./agent.sh");
        assert_eq!(c.timeout, Some(Dur(Duration::from_mins(30))));
        assert_eq!(c.overlap, Overlap::Wait);
        let shell: [&str; 2] = if cfg!(windows) {
            ["cmd", "/C"]
        } else {
            ["sh", "-c"]
        };
        assert_eq!(
            c.verifier.unwrap().command.argv(),
            [shell[0], shell[1], "cargo test --quiet"]
        );
        assert_eq!(
            c.schedule.unwrap().cadence,
            Cadence::Every(Dur(Duration::from_mins(15)))
        );
        assert_eq!(c.approval.required, 2);
        assert_eq!(c.gates.len(), 2);
        assert_eq!(c.gates[0].source, GateSource::Stock("approve-every".into()));
        assert_eq!(c.gates[0].phases, [Phase::BeforeStep]);
        assert_eq!(c.gates[0].on_error, OnError::Halt);
        let g = &c.gates[1];
        assert_eq!(g.phases, [Phase::AfterStep]);
        assert_eq!(g.on_error, OnError::Skip);
        assert_eq!(g.limits.timeout, Duration::from_millis(200));
        assert_eq!(g.limits.memory, 64 * 1024 * 1024);
        assert_eq!(g.params["max"], 20.0);
        match &g.source {
            GateSource::File { sha256, .. } => assert!(sha256.as_ref().unwrap().starts_with("abcdef")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn minimal_config_takes_defaults() {
        let c = parse("step = \"true\"\n").unwrap();
        assert_eq!(c.overlap, Overlap::Skip);
        assert_eq!(c.runs.keep, 50);
        assert!(c.gates.is_empty());
        assert_eq!(c.approval.required, 1);
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let (line, col, msg) = err("step = \"true\"\n\nstpe = 1\n");
        assert_eq!((line, col), (3, 1));
        assert!(msg.contains("unknown field `stpe`"), "{msg}");
    }

    #[test]
    fn unknown_key_in_gate_is_reported_at_its_line() {
        let (line, _, msg) = err("step = \"true\"\n[[gate]]\nstock = \"budget\"\nparamz = {}\n");
        assert!(msg.contains("paramz"), "{msg}");
        assert_eq!(line, 4);
    }

    #[test]
    fn bad_values_are_explained() {
        assert!(
            err("step = \"true\"\ntimeout = \"soon\"\n")
                .2
                .contains("invalid duration")
        );
        assert!(err("step = []\n").2.contains("empty"));
        assert!(err("step = \"true\"\noverlap = \"queue\"\n").2.contains("queue"));
        assert!(
            err("step = \"true\"\n[[gate]]\nphase = [\"before-step\"]\n")
                .2
                .contains("needs `stock")
        );
        assert!(
            err("step = \"true\"\n[[gate]]\nstock = \"a\"\npath = \"b\"\n")
                .2
                .contains("not both")
        );
        assert!(
            err("step = \"true\"\n[schedule]\ncron = \"* *\"\n")
                .2
                .contains("five fields")
        );
        assert!(
            err("step = \"true\"\n[[gate]]\npath = \"g.wasm\"\nsha256 = \"xyz\"\n")
                .2
                .contains("64 hex")
        );
        assert!(err("").2.contains("step"));
    }
}
