//! The on-disk store: the only code that knows the loop directory's file
//! names, and the one function that writes state (temp file in the same
//! directory, fsync, rename, fsync the directory). A state file that fails to
//! read is reported and never overwritten.

use std::fs::{self, DirBuilder, File};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::Deserialize;

use crate::config::LoopConfig;
use crate::error::{Error, Result};
use crate::lock::Held;
use crate::root::{LoopName, Root};
use crate::state::{SCHEMA, State};

const CONFIG: &str = "loop.toml";
const STATE: &str = ".state.loop";
const LOCK: &str = ".state.lock";
const HISTORY: &str = "history.jsonl";
const RUNS: &str = "runs";

/// One loop's directory, `<root>/loops/<name>/`.
#[derive(Debug, Clone)]
pub struct LoopDir {
    name: LoopName,
    dir: PathBuf,
}

impl LoopDir {
    /// The directory of `name` under `root`, whether or not the loop exists.
    pub fn new(root: &Root, name: LoopName) -> LoopDir {
        let dir = root.loops_dir().join(name.as_str());
        LoopDir { name, dir }
    }

    /// The loop `name`, which must exist (have a state file).
    pub fn open(root: &Root, name: &str) -> Result<LoopDir> {
        let dir = LoopDir::new(root, LoopName::new(name)?);
        if !dir.exists() {
            return Err(Error::NoSuchLoop {
                name: name.to_owned(),
                root: root.path().to_owned(),
            });
        }
        Ok(dir)
    }

    pub fn name(&self) -> &LoopName {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A loop exists when its state file does.
    pub fn exists(&self) -> bool {
        self.state_path().symlink_metadata().is_ok()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG)
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE)
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    pub fn history_path(&self) -> PathBuf {
        self.dir.join(HISTORY)
    }

    /// The `n`th rotated history file (1 is the most recent).
    pub fn rotated_history_path(&self, n: usize) -> PathBuf {
        self.dir.join(format!("{HISTORY}.{n}"))
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.dir.join(RUNS)
    }

    /// Reads and validates `loop.toml`.
    pub fn config(&self) -> Result<LoopConfig> {
        Ok(LoopConfig::load(&self.config_path())?)
    }

    /// Reads the state. Missing means no such loop; unparsable or of an
    /// unknown schema is an error naming the file.
    pub fn read_state(&self) -> Result<State> {
        let path = self.state_path();
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NoSuchLoop {
                    name: self.name.to_string(),
                    root: self
                        .dir
                        .parent()
                        .and_then(Path::parent)
                        .unwrap_or(&self.dir)
                        .to_owned(),
                });
            }
            Err(e) => return Err(Error::io("reading", &path)(e)),
        };
        parse_state(&text, &path)
    }

    /// Writes `state` durably as the next version. Only a lock holder may.
    pub fn write_state(&self, held: &Held<'_>, state: &mut State) -> Result<()> {
        self.write_state_as(held, state, Durability::Full)
    }

    /// Writes `state` as the next version with the given durability.
    pub fn write_state_as(&self, _held: &Held<'_>, state: &mut State, durability: Durability) -> Result<()> {
        state.version += 1;
        state.updated_at = Timestamp::now();
        write_atomic(&self.dir, &self.state_path(), &state_bytes(state), durability)
    }
}

fn state_bytes(state: &State) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(state).expect("state serialises");
    bytes.push(b'\n');
    bytes
}

/// Parses state text, checking the schema before the shape.
pub fn parse_state(text: &[u8], path: &Path) -> Result<State> {
    #[derive(Deserialize)]
    struct Probe {
        schema: Option<serde_json::Value>,
    }
    let corrupt = |reason: String| Error::CorruptState {
        path: path.to_owned(),
        reason,
    };
    let probe: Probe = serde_json::from_slice(text).map_err(|e| corrupt(format!("not valid JSON ({e})")))?;
    match probe.schema {
        None => return Err(corrupt("it has no `schema` number".into())),
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(SCHEMA)) => {}
        Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => {
            return Err(Error::UnknownSchema {
                path: path.to_owned(),
                found: n.as_u64().unwrap_or_default(),
                expected: SCHEMA,
            });
        }
        Some(other) => return Err(corrupt(format!("`schema` is {other}, not a number"))),
    }
    serde_json::from_slice(text).map_err(|e| corrupt(e.to_string()))
}

/// Replaces `path` (in `dir`) with `bytes` atomically and durably, as the
/// state is written; for the root's other small files (schedule records).
pub fn write_file(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(dir, path, bytes, Durability::Full)
}

/// How much of a state write must survive a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The new file's data and its name: after a crash the new state is there.
    Full,
    /// The new file's data only: after a power loss the new state or the old
    /// one is there, never a torn or empty file. For the tick's `in_flight`
    /// marker, whose loss only forgets that a tick was running.
    Data,
}

/// Replaces `path` with `bytes` so that a reader sees the old file or the
/// new one, never a torn one, and the new one survives a crash.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(Error::io("creating a temporary file in", dir))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_data())
        .map_err(Error::io("writing", tmp.path().to_owned()))?;
    tmp.persist(path)
        .map_err(|e| Error::io("replacing", path)(e.error))?;
    match durability {
        Durability::Full => sync_dir(dir),
        Durability::Data => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("syncing directory", dir))
}

/// Creates directories (mode 0700) down to `path`.
pub fn create_dirs(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(Error::io("creating directory", path))
}

/// Makes the root's directories.
pub fn init_root(root: &Root) -> Result<bool> {
    let fresh = !root.loops_dir().is_dir();
    create_dirs(&root.loops_dir())?;
    create_dirs(&root.cache_dir())?;
    Ok(fresh)
}

/// Builds a new loop in a temporary directory beside the others and renames
/// it into place; fails if the loop exists. No lock file is made.
/// `history` is the loop's first history line.
pub fn create_loop(
    root: &Root,
    name: &LoopName,
    config_text: &str,
    state: &State,
    history: &[u8],
) -> Result<LoopDir> {
    let target = LoopDir::new(root, name.clone());
    let exists = || Error::LoopExists {
        name: name.to_string(),
        root: root.path().to_owned(),
    };
    if target.path().symlink_metadata().is_ok() {
        return Err(exists());
    }
    let loops = root.loops_dir();
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".new-{name}-"))
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(&loops)
        .map_err(Error::io("creating a temporary directory in", &loops))?;
    let write = |file: &str, bytes: &[u8]| -> Result<()> {
        let path = tmp.path().join(file);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(Error::io("creating", &path))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_data())
            .map_err(Error::io("writing", &path))
    };
    write(CONFIG, config_text.as_bytes())?;
    write(HISTORY, history)?;
    write(STATE, &state_bytes(state))?;
    sync_dir(tmp.path())?;
    match nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        tmp.path(),
        nix::fcntl::AT_FDCWD,
        target.path(),
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {
            // The directory now lives at its final name; nothing to clean up.
            let _ = tmp.keep();
        }
        Err(nix::errno::Errno::EEXIST) => return Err(exists()),
        Err(e) => return Err(Error::io("renaming into place", target.path())(e.into())),
    }
    sync_dir(&loops)?;
    Ok(target)
}

/// Deletes a loop's directory. The caller holds its lock: the directory is
/// first renamed aside, so a waiter that then takes the (now orphaned) lock
/// finds no loop rather than half of one.
pub fn remove_loop(dir: &LoopDir, _held: &Held<'_>) -> Result<()> {
    let parent = dir.path().parent().unwrap_or(Path::new("."));
    let aside = parent.join(format!(".removed-{}-{}", dir.name(), std::process::id()));
    fs::rename(dir.path(), &aside).map_err(Error::io("moving aside", dir.path()))?;
    sync_dir(parent)?;
    fs::remove_dir_all(&aside).map_err(Error::io("removing", &aside))
}

/// The names of the loops under `root`, sorted. Entries that are not loops
/// (temporary directories, stray files) are passed over.
pub fn list_loops(root: &Root) -> Result<Vec<LoopDir>> {
    let loops = root.loops_dir();
    let mut out = Vec::new();
    for entry in fs::read_dir(&loops).map_err(Error::io("listing", &loops))? {
        let entry = entry.map_err(Error::io("listing", &loops))?;
        let Some(name) = entry.file_name().to_str().and_then(|n| LoopName::new(n).ok()) else {
            continue;
        };
        let dir = LoopDir::new(root, name);
        if dir.exists() {
            out.push(dir);
        }
    }
    out.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_checked_before_shape() {
        let p = Path::new("s");
        assert!(matches!(
            parse_state(b"{\"schema\": 2}", p),
            Err(Error::UnknownSchema { found: 2, .. })
        ));
        assert!(matches!(
            parse_state(b"{\"schema\": 1}", p),
            Err(Error::CorruptState { .. })
        ));
        assert!(matches!(
            parse_state(b"{\"sche", p),
            Err(Error::CorruptState { .. })
        ));
        assert!(matches!(parse_state(b"[]", p), Err(Error::CorruptState { .. })));
        assert!(matches!(parse_state(b"{}", p), Err(Error::CorruptState { .. })));
        let good = state_bytes(&State::new(Timestamp::now()));
        assert!(parse_state(&good, p).is_ok());
    }
}
