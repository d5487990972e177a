//! `gate test --cases FILE`: a table of contexts with the decision each
//! should get, evaluated in one process against one loaded gate; and
//! `gate context`, the example context with every field.

use std::io::{self, Write};
use std::path::Path;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::{
    Approval, Asker, Commits, Context, Decision, GateSource, Limits, PendingAwait, Phase, RunResult,
};
use crate::error::{Error, Result};
use crate::gate::GateHost;
use crate::term::safe;

/// One case: a context (missing fields take defaults), optional params and
/// phase overriding the context's, and the decision expected.
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

/// The decision a case expects; `reason`, when given, must match exactly.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Expect {
    pub decision: DecisionName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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

impl Expect {
    fn matches(&self, d: &Decision) -> bool {
        self.decision.as_str() == d.name() && self.reason.as_deref().is_none_or(|r| r == d.reason())
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            Some(r) => write!(f, "{}: {r}", self.decision.as_str()),
            None => f.write_str(self.decision.as_str()),
        }
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
            Case::deserialize(item).map_err(|source| Error::CasesJson {
                path: path.to_owned(),
                case: Some(case),
                source,
            })
        })
        .collect()
}

/// One case's outcome.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Outcome {
    pub name: String,
    pub expected: Expect,
    /// What the gate decided, or its error.
    pub got: std::result::Result<Decision, String>,
    pub passed: bool,
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

/// Loads and describes the gate once, then checks and evaluates each case
/// in a fresh instance. A case whose gate errs fails with the error.
pub(super) fn run(
    host: &GateHost,
    target: &GateSource,
    cases: Vec<Case>,
    params: Option<serde_json::Value>,
    phase: Option<Phase>,
    limits: &Limits,
) -> Result<CasesReport> {
    let gate = host.load(target)?;
    let info = host.describe(&gate)?;
    let mut outcomes = Vec::new();
    for (i, case) in cases.into_iter().enumerate() {
        let mut ctx = case.context;
        if let Some(p) = case.params.or_else(|| params.clone()) {
            ctx.params = p;
        }
        if let Some(p) = case.phase.or(phase) {
            ctx.phase = p;
        }
        let got = host
            .check_params(&gate, &ctx.params)
            .and_then(|()| host.evaluate(&gate, &ctx, limits))
            .map(|e| e.decision)
            .map_err(|e| e.to_string());
        outcomes.push(Outcome {
            name: case.name.unwrap_or_else(|| format!("case {}", i + 1)),
            passed: got.as_ref().is_ok_and(|d| case.expect.matches(d)),
            expected: case.expect,
            got,
        });
    }
    Ok(CasesReport {
        gate: gate.label().to_owned(),
        version: format!("{} {}", info.name, info.version),
        cases: outcomes,
    })
}

pub(super) fn render(r: &CasesReport, json: bool, out: &mut dyn Write) -> io::Result<()> {
    if json {
        return super::write_json(r, out);
    }
    writeln!(out, "gate {} ({})", safe(&r.gate), safe(&r.version))?;
    for c in &r.cases {
        let (name, expected) = (safe(&c.name), safe(&c.expected.to_string()).into_owned());
        match (&c.got, c.passed) {
            (Ok(d), true) => writeln!(out, "ok    {name}: {}", safe(&d.to_string()))?,
            (Ok(d), false) => writeln!(
                out,
                "FAIL  {name}: expected {expected}, got {}",
                safe(&d.to_string())
            )?,
            (Err(e), _) => writeln!(
                out,
                "FAIL  {name}: expected {expected}, got an error: {}",
                safe(e)
            )?,
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
        ] {
            assert!(obj.contains_key(field), "{field}");
        }
        assert_eq!(obj.len(), 14, "a new field belongs in the example");
        let back: Context = serde_json::from_value(json).unwrap();
        assert_eq!(back, example_context());
    }

    #[test]
    fn expectations_match_name_and_reason() {
        let e: Expect = serde_json::from_str(r#"{"decision":"skip","reason":"weekend"}"#).unwrap();
        assert!(e.matches(&Decision::Skip("weekend".into())));
        assert!(!e.matches(&Decision::Skip("holiday".into())));
        assert!(!e.matches(&Decision::Proceed));
        let any: Expect = serde_json::from_str(r#"{"decision":"await-approval"}"#).unwrap();
        assert!(any.matches(&Decision::AwaitApproval("x".into())));
        assert!(serde_json::from_str::<Expect>(r#"{"decision":"maybe"}"#).is_err());
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
