//! What `schedule install` left behind, recorded in
//! `<root>/schedules/<loop>.json` so `show`, `remove` and the halt and resume
//! hooks know which backend holds the loop's schedule, under which name, and
//! which files it wrote. One record a loop; written atomically.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::Backend;
use crate::error::{Error, Result};
use crate::root::Root;

/// An installed OS schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub backend: Backend,
    /// The unit, label, task or crontab marker: `<loop>-<hash of the root>`,
    /// behind each backend's prefix.
    pub name: String,
    /// The cadence, as loop.toml wrote it when installed.
    pub cadence: String,
    /// What the scheduler runs.
    pub command: Vec<String>,
    /// Files written for the backend (units, plist, task XML).
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// False after a halt or completion disabled it; `resume` sets it again.
    pub enabled: bool,
    pub installed_at: Timestamp,
}

/// `<root>/schedules/`.
pub(crate) fn dir(root: &Root) -> PathBuf {
    dir_of(root.path())
}

/// `schedules/` under the root at `root`.
pub(crate) fn dir_of(root: &Path) -> PathBuf {
    root.join("schedules")
}

fn path(root: &Root, name: &str) -> PathBuf {
    dir(root).join(format!("{name}.json"))
}

/// The record of loop `name`, if its schedule is installed.
pub(crate) fn read(root: &Root, name: &str) -> Result<Option<Record>> {
    let path = path(root, name);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading", &path)(e)),
    };
    serde_json::from_slice(&text).map(Some).map_err(|source| {
        Error::Schedule(super::ScheduleError::BadRecord {
            name: name.to_owned(),
            path,
            source,
        })
    })
}

/// Every record under the root, sorted by loop.
pub(crate) fn all(root: &Root) -> Result<Vec<Record>> {
    let dir = dir(root);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("listing", &dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io("listing", &dir))?;
        let file = entry.file_name();
        let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".json")) else {
            continue;
        };
        if let Some(r) = read(root, name)? {
            out.push(r);
        }
    }
    out.sort_by(|a, b| a.loop_name.cmp(&b.loop_name));
    Ok(out)
}

pub(crate) fn write(root: &Root, record: &Record) -> Result<()> {
    let dir = dir(root);
    crate::fsx::create_dirs(&dir)?;
    let mut bytes = serde_json::to_vec_pretty(record).expect("a record serialises");
    bytes.push(b'\n');
    crate::fsx::write_file(&dir, &path(root, &record.loop_name), &bytes)
}

pub(crate) fn delete(root: &Root, name: &str) -> Result<()> {
    let path = path(root, name);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io("removing", &path)(e)),
        _ => Ok(()),
    }
}

/// A short, stable hash of the root's path (FNV-1a, 32 bits as 8 hex
/// digits), so two roots with a loop of the same name get different units.
pub(crate) fn root_hash(root: &Path) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in root.as_os_str().as_encoded_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_hash_is_stable_and_distinguishes_roots() {
        assert_eq!(root_hash(Path::new("")), "811c9dc5");
        assert_eq!(root_hash(Path::new("/a")), root_hash(Path::new("/a")));
        assert_ne!(root_hash(Path::new("/a")), root_hash(Path::new("/b")));
    }
}
