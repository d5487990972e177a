//! The TCP ports the consoles serving a root listen on, kept in the root
//! (`consoles/<pid>`, the port in decimal) while each serves: a step's
//! confinement denies it connections to them (src/tick/confinement.rs).
//! Plain files, no server code: the tick reads them.

use std::path::{Path, PathBuf};

/// The directory of the records, in the root.
const CONSOLES: &str = "consoles";

/// A console's record, removed when it is dropped (the console stops).
#[derive(Debug)]
pub(crate) struct Listening {
    path: PathBuf,
}

impl Listening {
    /// Records that this process serves `root` on `port`.
    pub(crate) fn record(root: &Path, port: u16) -> crate::error::Result<Listening> {
        let dir = root.join(CONSOLES);
        crate::fsx::create_dirs(&dir)?;
        let path = dir.join(std::process::id().to_string());
        crate::fsx::write_file(&dir, &path, format!("{port}\n").as_bytes())?;
        Ok(Listening { path })
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The ports of the consoles serving `root` now: records of processes
/// that are gone are skipped.
pub(crate) fn listening(root: &Path) -> Vec<u16> {
    let Ok(entries) = std::fs::read_dir(root.join(CONSOLES)) else {
        return Vec::new();
    };
    let mut ports: Vec<u16> = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .is_some_and(alive)
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Whether process `pid` exists (signal 0: nothing is sent).
#[cfg(windows)]
fn alive(pid: i32) -> bool {
    u32::try_from(pid).is_ok_and(crate::os::process_alive)
}

/// Whether process `pid` exists (signal 0: nothing is sent).
#[cfg(unix)]
fn alive(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e != Errno::ESRCH,
    }
}
