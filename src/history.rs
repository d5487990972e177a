//! The loop's event log, `history.jsonl`: one JSON object a line, appended
//! under the loop's lock, read without it.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lock::Held;
use crate::state::Status;
use crate::store::LoopDir;

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

/// A history line that could not be read, kept so readers can say so.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    pub line: usize,
    pub reason: String,
}

/// Reads the whole history. Lines that do not parse (a torn last line after
/// a crash, an event kind from a newer version) are returned apart.
pub fn read(dir: &LoopDir) -> Result<(Vec<Event>, Vec<BadLine>)> {
    let path = dir.history_path();
    let file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(Error::io("reading", &path)(e)),
    };
    let mut events = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(Error::io("reading", &path))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(e) => events.push(e),
            Err(e) => bad.push(BadLine {
                line: i + 1,
                reason: e.to_string(),
            }),
        }
    }
    Ok((events, bad))
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
}
