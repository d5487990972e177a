//! The loop's event log, `history.jsonl`: one JSON object a line, appended
//! under the loop's lock, read without it.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use std::path::{Path, PathBuf};

use crate::config::HistoryLimits;
use crate::error::{Error, Result};
use crate::gate::Context;
use crate::lock::Held;
use crate::state::{Outcome, ProcessOutcome, Status};
use crate::store::LoopDir;
use crate::tick::Verdict;

/// One line of history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at: Timestamp,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    pub fn now(kind: EventKind) -> Event {
        Event {
            at: Timestamp::now(),
            kind,
        }
    }

    /// The event as one line of JSON, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("events serialise");
        line.push(b'\n');
        line
    }
}

/// What happened. Serialised with a `kind` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EventKind {
    Created {
        by: String,
    },
    Paused {
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Resumed {
        by: String,
        from: Status,
    },
    Approved {
        by: String,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    ApprovalExpired {
        id: String,
        by: String,
        approved_at: Timestamp,
    },
    Rejected {
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A tick found the previous one dead mid-way (its `in_flight` marker).
    Crashed {
        tick: u64,
        pid: u32,
        host: String,
        started_at: Timestamp,
    },
    /// One gate's evaluation, with the context it saw (for `gate replay`).
    Gate {
        tick: u64,
        #[serde(flatten)]
        verdict: Verdict,
        context: Box<Context>,
    },
    /// Approvals a tick used to release an await.
    ApprovalsUsed {
        tick: u64,
        ids: Vec<String>,
        by: Vec<String>,
    },
    /// The step's metrics file could not be read.
    MetricsWarning {
        tick: u64,
        message: String,
    },
    WorktreeCreated {
        path: std::path::PathBuf,
        branch: String,
    },
    /// `check-gate --apply` recorded a decision without running the step.
    CheckGate {
        by: String,
        decision: crate::gate::Decision,
    },
    /// How a tick ended (busy and inactive ticks are not recorded).
    Tick {
        tick: u64,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<ProcessOutcome>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verifier: Option<ProcessOutcome>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worktree_changed: Option<bool>,
    },
}

impl EventKind {
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Created { .. } => "created",
            EventKind::Paused { .. } => "paused",
            EventKind::Resumed { .. } => "resumed",
            EventKind::Approved { .. } => "approved",
            EventKind::ApprovalExpired { .. } => "approval-expired",
            EventKind::Rejected { .. } => "rejected",
            EventKind::Crashed { .. } => "crashed",
            EventKind::Gate { .. } => "gate",
            EventKind::ApprovalsUsed { .. } => "approvals-used",
            EventKind::MetricsWarning { .. } => "metrics-warning",
            EventKind::WorktreeCreated { .. } => "worktree-created",
            EventKind::CheckGate { .. } => "check-gate",
            EventKind::Tick { .. } => "tick",
        }
    }
}

/// Appends events in one write. Only a lock holder may.
pub fn append(dir: &LoopDir, _held: &Held<'_>, events: &[Event]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let path = dir.history_path();
    let bytes: Vec<u8> = events.iter().flat_map(Event::to_line).collect();
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
        .map_err(Error::io("opening", &path))?;
    file.write_all(&bytes)
        .and_then(|()| file.sync_data())
        .map_err(Error::io("appending to", &path))
}

/// Starts a new history file when the current one has passed `limits`:
/// `history.jsonl` becomes `history.jsonl.1`, older rotated files shift up,
/// and those past `limits.keep` are deleted. Only a lock holder may.
/// Returns whether it rotated.
pub fn rotate_if_needed(dir: &LoopDir, _held: &Held<'_>, limits: &HistoryLimits) -> Result<bool> {
    let path = dir.history_path();
    let size = match fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("reading", &path)(e)),
    };
    if size < limits.max_size.as_u64() {
        return Ok(false);
    }
    let oldest = dir.rotated_history_path(limits.keep.max(1));
    match fs::remove_file(&oldest) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("removing", &oldest)(e)),
    }
    for n in (1..limits.keep.max(1)).rev() {
        let from = dir.rotated_history_path(n);
        if from.exists() {
            let to = dir.rotated_history_path(n + 1);
            fs::rename(&from, &to).map_err(Error::io("renaming", &from))?;
        }
    }
    let to = dir.rotated_history_path(1);
    fs::rename(&path, &to).map_err(Error::io("renaming", &path))?;
    if limits.keep == 0 {
        fs::remove_file(&to).map_err(Error::io("removing", &to))?;
    }
    Ok(true)
}

/// A history line that could not be read, kept so readers can say so.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    pub path: PathBuf,
    pub line: usize,
    pub reason: String,
}

/// Reads the whole history, rotated files first, oldest event first. Lines
/// that do not parse (a torn last line after a crash, an event kind from a
/// newer version) are returned apart.
pub fn read(dir: &LoopDir) -> Result<(Vec<Event>, Vec<BadLine>)> {
    let mut files: Vec<PathBuf> = (1..)
        .map(|n| dir.rotated_history_path(n))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    files.push(dir.history_path());
    let mut events = Vec::new();
    let mut bad = Vec::new();
    for path in files {
        read_file(&path, &mut events, &mut bad)?;
    }
    Ok((events, bad))
}

fn read_file(path: &Path, events: &mut Vec<Event>, bad: &mut Vec<BadLine>) -> Result<()> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("reading", path)(e)),
    };
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(Error::io("reading", path))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(e) => events.push(e),
            Err(e) => bad.push(BadLine {
                path: path.to_owned(),
                line: i + 1,
                reason: e.to_string(),
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_kind_and_at() {
        let e = Event::now(EventKind::Approved {
            by: "ann".into(),
            id: "ap-3".into(),
            note: None,
        });
        let v: serde_json::Value = serde_json::from_slice(&e.to_line()).unwrap();
        assert_eq!(v["kind"], "approved");
        assert!(v["at"].is_string());
        assert!(v.get("note").is_none());
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn gate_events_round_trip_with_their_context() {
        use crate::gate::{Decision, Phase};
        for decision in [Decision::Proceed, Decision::Halt("too much".into())] {
            let e = Event::now(EventKind::Gate {
                tick: 3,
                verdict: Verdict {
                    gate: "stock:budget".into(),
                    phase: Phase::AfterStep,
                    decision,
                    micros: 42,
                    error: None,
                },
                context: Box::default(),
            });
            let line = e.to_line();
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(v["kind"], "gate");
            assert_eq!(v["gate"], "stock:budget");
            assert!(v["decision"].is_string(), "{v}");
            let back: Event = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, e);
        }
    }
}
