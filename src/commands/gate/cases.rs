//! `gate test --cases FILE`: a table of contexts with the decision each
//! should get, evaluated in one process against one loaded gate; and
//! `gate context`, the example context with every field.

use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::{
    Approval, Asker, Commits, Context, Decision, GateBudget, GateHistory, GateSource, Limits, PastRun,
    PendingAwait, Phase, RunResult, WindowSums,
};
use crate::error::{Error, Result};
use crate::gate::{Gate, GateError, GateErrorKind, GateHost};
use crate::term::safe;

/// One case: a context (missing fields take defaults), optional params and
/// phase overriding the context's, and what is expected.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Case {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub context: Context,
    #[serde(default)]
    pub params: Option<serde_json::Value>,
    #[serde(default)]
    pub phase: Option<Phase>,
    pub expect: Expect,
}

/// What a case expects: a decision, or an error (of a kind, or the params
/// rejected naming one param); then, optionally, the reason (the
/// decision's, or the error's message) exactly or by a pattern, and a log
/// line matching a pattern. Every expectation given must hold.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Expect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorName>,
    /// The param `check-params` must reject: its message names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_param: Option<String>,
    /// The decision's reason or the error's message, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A regular expression the reason or message must match (anywhere in
    /// it, unless anchored with `^` and `$`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_matches: Option<Pattern>,
    /// A regular expression one of the gate's log lines must match; a line
    /// reads `LEVEL: MESSAGE` (`info: hello`), as history keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<Pattern>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum DecisionName {
    Proceed,
    Skip,
    AwaitApproval,
    Halt,
    Complete,
}

impl DecisionName {
    fn as_str(self) -> &'static str {
        match self {
            DecisionName::Proceed => "proceed",
            DecisionName::Skip => "skip",
            DecisionName::AwaitApproval => "await-approval",
            DecisionName::Halt => "halt",
            DecisionName::Complete => "complete",
        }
    }
}

/// The kinds of error a case can expect: those a call to a loaded gate can
/// end in (see [`GateErrorKind::name`]). `trap` is any failure of the
/// gate's own code, whatever its language called it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ErrorName {
    Trap,
    Panic,
    Exception,
    Thrown,
    NotReturnable,
    WrongValue,
    Timeout,
    Memory,
    Refused,
    BadParams,
}

impl ErrorName {
    fn as_str(self) -> &'static str {
        match self {
            ErrorName::Trap => "trap",
            ErrorName::Panic => "panic",
            ErrorName::Exception => "exception",
            ErrorName::Thrown => "thrown",
            ErrorName::NotReturnable => "not-returnable",
            ErrorName::WrongValue => "wrong-value",
            ErrorName::Timeout => "timeout",
            ErrorName::Memory => "memory",
            ErrorName::Refused => "refused",
            ErrorName::BadParams => "bad-params",
        }
    }

    fn matches(self, kind: &GateErrorKind) -> bool {
        match self {
            ErrorName::Trap => kind.is_trap(),
            other => other.as_str() == kind.name(),
        }
    }
}

/// A regular expression from a cases file, compiled when the file is read
/// so a bad one is an error naming its case.
#[derive(Debug, Clone)]
pub(super) struct Pattern(regex::Regex);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        regex::Regex::new(&text)
            .map(Pattern)
            .map_err(|e| serde::de::Error::custom(format!("invalid pattern {text:?}: {e}")))
    }
}

impl Serialize for Pattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl Expect {
    /// A case expects one outcome: a decision, or an error.
    fn check(&self) -> std::result::Result<(), String> {
        let wants_error = self.error.is_some() || self.rejected_param.is_some();
        match (self.decision, wants_error) {
            (Some(_), true) => Err("expect holds a decision and an error: give one".to_owned()),
            (None, false) => Err("expect needs a decision, an error or a rejected_param".to_owned()),
            _ if self.rejected_param.is_some() && self.error.is_some_and(|e| e != ErrorName::BadParams) => {
                Err("a rejected_param is a bad-params error".to_owned())
            }
            _ => Ok(()),
        }
    }

    /// Which expectation the gate's answer fails, if one does.
    fn judge(
        &self,
        got: &std::result::Result<Decision, GateError>,
        logs: &[String],
    ) -> std::result::Result<(), String> {
        let plain = Got::from_result(got);
        let reason = match got {
            Ok(d) => {
                if let Some(want) = self.decision.filter(|w| w.as_str() != d.name()) {
                    return Err(format!("expected {}, got {plain}", want.as_str()));
                }
                if self.decision.is_none() {
                    return Err(format!("expected {}, got {plain}", self.error_wanted()));
                }
                d.reason().to_owned()
            }
            Err(e) => {
                let wanted = self
                    .error
                    .or(self.rejected_param.as_ref().map(|_| ErrorName::BadParams));
                if !wanted.is_some_and(|w| w.matches(e.kind())) {
                    let want = self
                        .decision
                        .map_or_else(|| self.error_wanted(), |d| d.as_str().to_owned());
                    return Err(format!("expected {want}, got {plain}"));
                }
                let message = message(e.kind());
                if let Some(p) = self
                    .rejected_param
                    .as_ref()
                    .filter(|p| !message.contains(p.as_str()))
                {
                    return Err(format!(
                        "expected {p:?} rejected, but the rejection names it not: {message}"
                    ));
                }
                message
            }
        };
        self.judge_reason(&reason)?;
        self.judge_logs(logs)
    }

    fn error_wanted(&self) -> String {
        match (&self.rejected_param, self.error) {
            (Some(p), _) => format!("the param {p:?} rejected"),
            (None, Some(e)) => format!("a {} error", e.as_str()),
            (None, None) => "an error".to_owned(),
        }
    }

    fn judge_reason(&self, reason: &str) -> std::result::Result<(), String> {
        if let Some(want) = self.reason.as_ref().filter(|w| *w != reason) {
            return Err(format!("expected the reason {want:?}, got {reason:?}"));
        }
        match &self.reason_matches {
            Some(p) if !p.0.is_match(reason) => {
                Err(format!("the reason {reason:?} does not match /{}/", p.0.as_str()))
            }
            _ => Ok(()),
        }
    }

    fn judge_logs(&self, logs: &[String]) -> std::result::Result<(), String> {
        match &self.log {
            Some(p) if !logs.iter().any(|l| p.0.is_match(l)) => Err(format!(
                "no log line matches /{}/ (the gate logged {} line{})",
                p.0.as_str(),
                logs.len(),
                if logs.len() == 1 { "" } else { "s" }
            )),
            _ => Ok(()),
        }
    }
}

/// An error's own message: what the gate said when it refused or rejected
/// its params, else the host's account of the error.
fn message(kind: &GateErrorKind) -> String {
    match kind {
        GateErrorKind::Refused { message } | GateErrorKind::ParamsRejected { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Reads a cases file: a JSON array of cases. An error names the case
/// (its number, from 1, and its name) and what is wrong with it, such as a
/// field no context has.
pub(super) fn read(path: &Path) -> Result<Vec<Case>> {
    let text = std::fs::read_to_string(path).map_err(Error::io("reading the cases", path))?;
    let items: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|source| Error::CasesJson {
        path: path.to_owned(),
        case: None,
        source,
    })?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let case = match item.get("name").and_then(serde_json::Value::as_str) {
                Some(name) => format!("{} ({name:?})", i + 1),
                None => (i + 1).to_string(),
            };
            Case::deserialize(item)
                .and_then(|c| {
                    c.expect
                        .check()
                        .map_err(<serde_json::Error as serde::de::Error>::custom)?;
                    Ok(c)
                })
                .map_err(|source| Error::CasesJson {
                    path: path.to_owned(),
                    case: Some(case),
                    source,
                })
        })
        .collect()
}

/// What the gate answered, as `--json` shows it: `{"decision": "skip",
/// "reason": "weekend"}` or `{"error": "trap", "message": "…"}`.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(super) enum Got {
    Decision(Decision),
    Error { error: &'static str, message: String },
}

impl Got {
    fn from_result(r: &std::result::Result<Decision, GateError>) -> Got {
        match r {
            Ok(d) => Got::Decision(d.clone()),
            Err(e) => Got::Error {
                error: e.kind().name(),
                message: message(e.kind()),
            },
        }
    }
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Got::Decision(d) => write!(f, "{d}"),
            Got::Error { error, message } => write!(f, "a {error} error: {message}"),
        }
    }
}

/// One case's outcome.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Outcome {
    pub name: String,
    pub passed: bool,
    /// The expectation the gate's answer failed, said as a sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    pub expected: Expect,
    pub got: Got,
    /// What the gate logged and printed, each line `LEVEL: MESSAGE`.
    pub logs: Vec<String>,
    /// The case's time: `check-params` and `evaluate`, instantiation
    /// included, in milliseconds.
    pub ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench: Option<Bench>,
}

/// A case run again and again (`--bench N`): its times' median and 99th
/// percentile (nearest rank), in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Bench {
    pub runs: u32,
    pub median_ms: f64,
    pub p99_ms: f64,
}

impl Bench {
    fn of(mut times: Vec<Duration>) -> Bench {
        times.sort_unstable();
        let rank = |q: f64| {
            let n = times.len() as f64;
            let i = ((q * n).ceil() as usize).clamp(1, times.len()) - 1;
            ms(times[i])
        };
        Bench {
            runs: u32::try_from(times.len()).unwrap_or(u32::MAX),
            median_ms: rank(0.5),
            p99_ms: rank(0.99),
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// What `gate test --cases` found.
#[derive(Debug, Clone, Serialize)]
pub(super) struct CasesReport {
    pub gate: String,
    pub version: String,
    pub cases: Vec<Outcome>,
}

impl CasesReport {
    pub(super) fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed).count()
    }
}

/// The params and phase every case takes unless it gives its own, and how
/// often to run each (`--bench`).
pub(super) struct Defaults {
    pub params: Option<serde_json::Value>,
    pub phase: Option<Phase>,
    pub bench: Option<u32>,
}

/// Loads and describes the gate once, then checks and evaluates each case
/// in a fresh instance, timing it.
pub(super) fn run(
    host: &GateHost,
    target: &GateSource,
    cases: Vec<Case>,
    defaults: &Defaults,
    limits: &Limits,
) -> Result<CasesReport> {
    let gate = host.load(target)?;
    let info = host.describe(&gate)?;
    let mut outcomes = Vec::new();
    for (i, case) in cases.into_iter().enumerate() {
        let mut ctx = case.context;
        if let Some(p) = case.params.or_else(|| defaults.params.clone()) {
            ctx.params = p;
        }
        if let Some(p) = case.phase.or(defaults.phase) {
            ctx.phase = p;
        }
        let (got, logs, took) = once(host, &gate, &ctx, limits);
        let bench = defaults
            .bench
            .map(|n| Bench::of((0..n.max(1)).map(|_| once(host, &gate, &ctx, limits).2).collect()));
        let failed = case.expect.judge(&got, &logs).err();
        outcomes.push(Outcome {
            name: case.name.unwrap_or_else(|| format!("case {}", i + 1)),
            passed: failed.is_none(),
            failed,
            expected: case.expect,
            got: Got::from_result(&got),
            logs,
            ms: ms(took),
            bench,
        });
    }
    Ok(CasesReport {
        gate: gate.label().to_owned(),
        version: format!("{} {}", info.name, info.version),
        cases: outcomes,
    })
}

/// One call of `check-params` then `evaluate`: the answer, the log lines
/// and the time it took.
fn once(
    host: &GateHost,
    gate: &Gate,
    ctx: &Context,
    limits: &Limits,
) -> (std::result::Result<Decision, GateError>, Vec<String>, Duration) {
    let start = Instant::now();
    let answer = host
        .check_params(gate, &ctx.params)
        .and_then(|()| host.evaluate(gate, ctx, limits));
    let took = start.elapsed();
    let logs = match &answer {
        Ok(e) => &e.logs[..],
        Err(e) => e.logs(),
    };
    let lines = logs
        .iter()
        .map(|l| format!("{}: {}", l.level.as_str(), l.message))
        .collect();
    (answer.map(|e| e.decision), lines, took)
}

pub(super) fn render(r: &CasesReport, json: bool, out: &mut dyn Write) -> io::Result<()> {
    if json {
        return super::write_json(r, out);
    }
    writeln!(out, "gate {} ({})", safe(&r.gate), safe(&r.version))?;
    for c in &r.cases {
        let time = match &c.bench {
            Some(b) => format!(
                "median {:.3} ms, p99 {:.3} ms over {} runs",
                b.median_ms, b.p99_ms, b.runs
            ),
            None => format!("{:.3} ms", c.ms),
        };
        let name = safe(&c.name);
        match &c.failed {
            None => writeln!(out, "ok    {name}: {} ({time})", safe(&c.got.to_string()))?,
            Some(why) => writeln!(out, "FAIL  {name}: {} ({time})", safe(why))?,
        }
    }
    let failed = r.failed();
    writeln!(out, "{} passed, {failed} failed", r.cases.len() - failed)
}

/// A context with every field filled in, as `gate test --context` reads it
/// and history records it. Times are RFC 3339 here; the gate sees them as
/// milliseconds since the Unix epoch (`now-ms`, `ended-at-ms`, `at-ms`).
pub(super) fn example_context() -> Context {
    let at = |s: &str| s.parse::<Timestamp>().expect("a valid example time");
    Context {
        loop_name: "nightly-report".to_owned(),
        phase: Phase::BeforeStep,
        tick: 4,
        now: at("2026-11-30T10:00:00Z"),
        last_run: Some(RunResult {
            tick: 4,
            exit_code: Some(1),
            duration_ms: 81_250,
            timed_out: false,
            verifier_passed: None,
            worktree_changed: Some(true),
            ended_at: at("2026-11-30T09:01:21Z"),
        }),
        consecutive_failures: 1,
        unchanged_ticks: 0,
        pending_approvals: vec![Approval {
            id: "a1b2c3".to_owned(),
            by: "alice".to_owned(),
            at: at("2026-11-30T09:30:00Z"),
            note: Some("looked at the logs; go ahead".to_owned()),
            await_id: None,
            head: None,
            snapshot: None,
        }],
        params: serde_json::json!({"start_hour": 9, "end_hour": 17}),
        state: serde_json::json!({"status": "active", "tick": 4}),
        metrics: serde_json::json!({"cost_usd": 0.42}),
        totals: serde_json::json!({"cost_usd": 3.1}),
        commits: Some(Commits {
            branch: "loop/nightly-report".to_owned(),
            head_before: Some("3f2a9c1d0b7e4f5a6c8d9e0f1a2b3c4d5e6f7a8b".to_owned()),
            head_after: Some("9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c".to_owned()),
        }),
        pending_await: Some(PendingAwait {
            id: "aw-12".to_owned(),
            tick: 4,
            asked: vec![Asker {
                gate: "stock:approve-every".to_owned(),
                version: Some("1.0.0".to_owned()),
                reason: "every 5 ticks need an approval".to_owned(),
            }],
            since: at("2026-11-30T09:01:22Z"),
            head: Some("9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c".to_owned()),
            approvals: Vec::new(),
        }),
        history: GateHistory {
            runs: vec![PastRun {
                tick: 4,
                ended_at_ms: 1_796_029_281_000,
                ok: false,
                metrics: [("cost_usd".to_owned(), 0.42)].into(),
            }],
            windows: vec![WindowSums {
                window_ms: 86_400_000,
                runs: 4,
                failures: 1,
                sums: [("cost_usd".to_owned(), 3.1)].into(),
            }],
        },
        budgets: vec![GateBudget {
            name: "daily".to_owned(),
            metric: "cost_usd".to_owned(),
            window: "24h".to_owned(),
            spent: 3.1,
            reserved: 0.0,
            cap: 5.0,
            window_end_ms: Some(1_796_036_400_000),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_context_has_every_field_and_reads_back() {
        let json = serde_json::to_value(example_context()).unwrap();
        let obj = json.as_object().unwrap();
        for field in [
            "loop_name",
            "phase",
            "tick",
            "now",
            "last_run",
            "consecutive_failures",
            "unchanged_ticks",
            "pending_approvals",
            "params",
            "state",
            "metrics",
            "totals",
            "commits",
            "pending_await",
            "history",
            "budgets",
        ] {
            assert!(obj.contains_key(field), "{field}");
        }
        assert_eq!(obj.len(), 16, "a new field belongs in the example");
        let back: Context = serde_json::from_value(json).unwrap();
        assert_eq!(back, example_context());
    }

    #[test]
    fn expectations_match_name_and_reason() {
        let judge = |e: &Expect, d: Decision| e.judge(&Ok(d), &[]);
        let e: Expect = serde_json::from_str(r#"{"decision":"skip","reason":"weekend"}"#).unwrap();
        assert!(judge(&e, Decision::Skip("weekend".into())).is_ok());
        assert!(judge(&e, Decision::Skip("holiday".into())).is_err());
        assert!(judge(&e, Decision::Proceed).is_err());
        let any: Expect = serde_json::from_str(r#"{"decision":"await-approval"}"#).unwrap();
        assert!(judge(&any, Decision::AwaitApproval("x".into())).is_ok());
        assert!(serde_json::from_str::<Expect>(r#"{"decision":"maybe"}"#).is_err());
        let pat: Expect =
            serde_json::from_str(r#"{"decision":"skip","reason_matches":"^outside \\d+"}"#).unwrap();
        assert!(judge(&pat, Decision::Skip("outside 9-17".into())).is_ok());
        assert!(judge(&pat, Decision::Skip("it is outside 9".into())).is_err());
    }

    #[test]
    fn a_case_expects_one_outcome_and_a_pattern_that_compiles() {
        let check = |s: &str| {
            serde_json::from_str::<Expect>(s)
                .map_err(|e| e.to_string())
                .and_then(|e| e.check())
        };
        assert!(check(r#"{"error":"trap"}"#).is_ok());
        assert!(check(r#"{"rejected_param":"start_hour"}"#).is_ok());
        assert!(check(r#"{"decision":"skip","error":"trap"}"#).is_err());
        assert!(check(r#"{"reason":"x"}"#).is_err());
        assert!(check(r#"{"error":"refused","rejected_param":"x"}"#).is_err());
        assert!(check(r#"{"error":"crash"}"#).is_err());
        let bad = check(r#"{"decision":"skip","reason_matches":"("}"#).unwrap_err();
        assert!(bad.contains("invalid pattern \"(\""), "{bad}");
    }

    /// A typo in a case is an error that names the file, the case and the
    /// field, not a context with the field quietly left at its default.
    #[test]
    fn a_typo_in_a_case_names_the_case_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cases.json");
        let write = |text: &str| std::fs::write(&path, text).unwrap();
        write(
            r#"[{"expect": {"decision": "proceed"}},
                {"name": "at noon", "context": {"nw": "2026-11-30T12:00:00Z"}, "expect": {"decision": "proceed"}}]"#,
        );
        let err = read(&path).unwrap_err();
        let Error::CasesJson { case, source, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(case.as_deref(), Some(r#"2 ("at noon")"#));
        assert!(source.to_string().contains("unknown field `nw`"), "{source}");
        assert!(
            err.to_string().starts_with(r#"invalid case 2 ("at noon") in "#),
            "{err}"
        );
        assert!(err.to_string().ends_with("cases.json"), "{err}");

        write(r#"[{"context": {"last_run": {"exit": 1}}, "expect": {"decision": "proceed"}}]"#);
        let err = read(&path).unwrap_err();
        assert!(
            matches!(&err, Error::CasesJson { case: Some(c), source, .. } if c == "1" && source.to_string().contains("`exit`")),
            "{err:?}"
        );

        write(r#"{"expect": {"decision": "proceed"}}"#);
        let err = read(&path).unwrap_err();
        assert!(matches!(&err, Error::CasesJson { case: None, .. }), "{err:?}");
        assert!(err.to_string().starts_with("invalid cases file "), "{err}");
    }
}
