//! The loop's lock: the only code that opens `.state.lock`. An exclusive
//! advisory lock (fd-lock) held for the whole of a command that changes a
//! loop. The holder writes who it is into the lock file, so a waiter (and
//! `status`) can name it; the OS releases the lock when a holder dies.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::thread;
use std::time::{Duration, Instant};

use fd_lock::{RwLock, RwLockWriteGuard};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::store::LoopDir;
use crate::who;

/// How long a waiter waits before it says what it is waiting for.
const ANNOUNCE_AFTER: Duration = Duration::from_millis(200);
/// The longest pause between two attempts to take the lock.
const MAX_POLL: Duration = Duration::from_millis(25);

/// Who holds a loop's lock, as written into the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// The command holding it: `tick`, `pause`, `approve`, ...
    pub command: String,
    /// The tick being run, when the holder is a tick.
    #[serde(default)]
    pub tick: Option<u64>,
    pub since: Timestamp,
}

impl Holder {
    /// This process, about to run `command`.
    pub fn me(command: &str) -> Holder {
        Holder {
            pid: std::process::id(),
            host: who::host(),
            command: command.to_owned(),
            tick: None,
            since: Timestamp::now(),
        }
    }

    /// `pid 4242 (tick 17, running 3m12s)`.
    pub fn describe(&self) -> String {
        let running = Timestamp::now().duration_since(self.since).as_secs().max(0) as u64;
        let running = humantime::format_duration(Duration::from_secs(running));
        let host = if self.host == who::host() {
            String::new()
        } else {
            format!(" on {}", self.host)
        };
        let what = match self.tick {
            Some(t) if self.command == "tick" => format!("tick {t}"),
            Some(t) => format!("{}, tick {t}", self.command),
            None => self.command.clone(),
        };
        format!("pid {}{host} ({what}, running {running})", self.pid)
    }

    /// Whether the process this names still runs. A holder on another host
    /// cannot be checked and is taken at its word.
    fn is_alive(&self) -> bool {
        if self.host != who::host() {
            return true;
        }
        let Ok(pid) = i32::try_from(self.pid) else {
            return false;
        };
        match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
            Ok(()) => true,
            Err(e) => e == nix::errno::Errno::EPERM,
        }
    }
}

/// How long a command waits for a lock that is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Give up at once.
    No,
    /// Give up after this long.
    For(Duration),
    /// Wait as long as it takes.
    Forever,
}

/// Proof that the loop's lock is held; the store's writes require it.
pub struct Held<'a> {
    guard: RwLockWriteGuard<'a, File>,
    holder: Holder,
}

impl Held<'_> {
    /// Records the tick being run, so waiters can name it.
    pub fn set_tick(&mut self, tick: u64) {
        self.holder.tick = Some(tick);
        write_holder(&self.guard, &self.holder);
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// Runs `f` while holding the loop's exclusive lock, taken as `wait` allows.
/// The lock file is created on first use and never deleted.
pub fn with_lock<T, E>(
    dir: &LoopDir,
    holder: Holder,
    wait: Wait,
    f: impl FnOnce(&mut Held<'_>) -> std::result::Result<T, E>,
) -> std::result::Result<T, E>
where
    E: From<Error>,
{
    let path = dir.lock_path();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(Error::io("opening the lock file", &path))?;
    let mut lock = RwLock::new(file);
    let started = Instant::now();
    let mut announced = false;
    let mut pause = Duration::from_millis(1);
    loop {
        match lock.try_write() {
            Ok(guard) => {
                write_holder(&guard, &holder);
                let mut held = Held { guard, holder };
                let result = f(&mut held);
                // Clear the record before the OS lock goes, so nobody reads a
                // stale holder; a holder that dies leaves it, and readers check
                // the pid.
                let _ = held.guard.set_len(0);
                return result;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::io("locking", &path)(e).into()),
        }
        let waited = started.elapsed();
        let give_up = match wait {
            Wait::No => true,
            Wait::For(limit) => waited >= limit,
            Wait::Forever => false,
        };
        if give_up {
            return Err(Error::LockNotObtained {
                name: dir.name().to_string(),
                holder: read_holder(dir),
            }
            .into());
        }
        if !announced && waited >= ANNOUNCE_AFTER {
            announced = true;
            match read_holder(dir) {
                Some(h) => tracing::warn!(
                    "waiting for loop {:?}: held by {}",
                    dir.name().as_str(),
                    h.describe()
                ),
                None => tracing::warn!("waiting for loop {:?}: its lock is held", dir.name().as_str()),
            }
        }
        thread::sleep(pause);
        pause = (pause * 2).min(MAX_POLL);
    }
}

fn write_holder(file: &File, holder: &Holder) {
    // Best effort: the record only informs waiters; the lock is what counts.
    if let Ok(mut text) = serde_json::to_vec(holder) {
        text.push(b'\n');
        let _ = file.set_len(0);
        let _ = file.write_all_at(&text, 0);
    }
}

/// The current holder of a loop's lock, read without locking: none when the
/// lock is free, or its last holder died without a word.
pub fn read_holder(dir: &LoopDir) -> Option<Holder> {
    let mut text = String::new();
    File::open(dir.lock_path()).ok()?.read_to_string(&mut text).ok()?;
    let holder: Holder = serde_json::from_str(text.trim()).ok()?;
    holder.is_alive().then_some(holder)
}

/// An exclusive lock on a root-level file, held while the value lives: the
/// daemon holds `daemon.lock` so a second daemon on the root, and `daemon
/// --status`, can tell one is serving it.
pub struct RootLock(#[allow(dead_code)] nix::fcntl::Flock<File>);

/// Takes the lock on `path` without waiting; `None` when another process
/// holds it.
pub fn try_hold(path: &std::path::Path) -> Result<Option<RootLock>, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(Error::io("opening the lock file", path))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(RootLock(lock))),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::io("locking", path)(e.into())),
    }
}

/// Whether some process holds the lock on `path` (a missing file: none).
pub fn is_held(path: &std::path::Path) -> bool {
    path.exists() && matches!(try_hold(path), Ok(None))
}
