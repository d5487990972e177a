//! Making a root, a loop, and a loop moved here from another store.

use std::fs;
use std::io::Write;
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;

use super::state_file::state_bytes;
use super::{CONFIG, HISTORY, LoopDir, NEW_PREFIX, STATE};
use crate::error::{Error, Result};
use crate::fsx::{Modes, create_dirs, sync_dir, write_file};
use crate::history::{Event, EventKind};
use crate::root::{LoopName, Root};
use crate::state::State;
use crate::who::Actor;

/// Makes the root's directories.
pub(crate) fn init_root(root: &Root) -> Result<bool> {
    let fresh = !root.loops_dir().is_dir();
    create_dirs(&root.loops_dir())?;
    create_dirs(&root.cache_dir())?;
    Ok(fresh)
}

/// Builds a new loop in a temporary directory beside the others and renames
/// it into place; fails if the loop exists. No lock file is made. `events`
/// are the loop's first history, committed with `state` as `by`'s.
pub(super) fn create_loop(
    root: &Root,
    name: &LoopName,
    config_text: &str,
    state: &State,
    events: Vec<EventKind>,
    by: &Actor,
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
    // A group's root shares the loop with the group ([`crate::fsx::mode`]).
    let modes = Modes::of_dir(&loops);
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    builder.permissions(fs::Permissions::from_mode(modes.dir()));
    let tmp = builder
        .prefix(&format!("{NEW_PREFIX}{name}-"))
        .tempdir_in(&loops)
        .map_err(Error::io("creating a temporary directory in", &loops))?;
    #[cfg(unix)]
    fs::File::open(tmp.path())
        .and_then(|d| modes.set_dir(&d))
        .map_err(Error::io("setting the mode of", tmp.path()))?;
    #[cfg(windows)]
    crate::os::make_private(tmp.path()).map_err(Error::io("setting the ACL of", tmp.path()))?;
    let write = |file: &str, bytes: &[u8]| -> Result<()> {
        let path = tmp.path().join(file);
        let mut f =
            crate::fsx::create_mode(fs::OpenOptions::new().write(true).create_new(true), modes.file())
                .open(&path)
                .map_err(Error::io("creating", &path))?;
        modes
            .set_file(&f)
            .map_err(Error::io("setting the mode of", &path))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_data())
            .map_err(Error::io("writing", &path))
    };
    let history: Vec<u8> = crate::store::stamp(events, state.version, state.updated_at, by)
        .iter()
        .flat_map(Event::to_line)
        .collect();
    write(CONFIG, config_text.as_bytes())?;
    write(HISTORY, &history)?;
    write(STATE, &state_bytes(state))?;
    sync_dir(tmp.path())?;
    match crate::fsx::rename_noreplace(tmp.path(), target.path()) {
        Ok(()) => {
            // The directory now lives at its final name; nothing to clean up.
            let _ = tmp.keep();
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists()),
        Err(e) => return Err(Error::io("renaming into place", target.path())(e)),
    }
    sync_dir(&loops)?;
    Ok(target)
}

/// Writes a loop moved here from another store into `<root>/loops/<name>/`,
/// which may hold the loop's files already (step output, gate files): its
/// loop.toml and history as given (each event keeps its version), then its
/// state, the commit point. Fails if the loop exists here.
pub(super) fn adopt_loop(
    root: &Root,
    name: &LoopName,
    config_text: &str,
    state: &State,
    events: &[Event],
) -> Result<LoopDir> {
    let target = LoopDir::new(root, name.clone());
    if target.exists() {
        return Err(Error::LoopExists {
            name: name.to_string(),
            root: root.path().to_owned(),
        });
    }
    create_dirs(target.path())?;
    // An `in_flight` record left from the loop's earlier life here would
    // be read against the new state: it goes before the state exists.
    match fs::remove_file(target.flight_path()) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("removing", target.flight_path())(e));
        }
        _ => {}
    }
    let history: Vec<u8> = events.iter().flat_map(Event::to_line).collect();
    write_file(target.path(), &target.config_path(), config_text.as_bytes())?;
    write_file(target.path(), &target.history_path(), &history)?;
    write_file(target.path(), &target.state_path(), &state_bytes(state))?;
    Ok(target)
}
