//! The loop's lock: the only code that opens `.state.lock`. An exclusive
//! advisory lock (`flock(2)`, through std's `File::try_lock`: the lock
//! fd-lock takes, owned by the returned token) held for the whole of a
//! command that changes a loop. The holder writes who it is into the lock
//! file, so a waiter (and `status`) can name it; the OS releases the lock
//! when a holder dies.
//!
//! A holder that lets go with the loop's files whole (every commit done, no
//! step in flight, nothing half-written) may say so: the lock file then
//! reads `released <boot id>`. The next holder that finds that line,
//! written since this machine last booted, knows that no writer died
//! mid-write since the last recovery (a writer that dies leaves its own
//! record; a power loss reboots), and may skip looking for what one would
//! have left. Anything else (an empty file, a holder record, another
//! boot's line) means: look.
//!
//! On Windows `LockFileEx` locks are mandatory: a lock on the whole file
//! would stop every other process reading the holder record. There the
//! lock is one byte far past the record (offset 2^62), so `status` and a
//! waiter read who holds the loop while it is held, as on Unix.

use std::fs::{File, TryLockError};
#[cfg(unix)]
use std::os::unix::fs::FileExt;
#[cfg(windows)]
use std::os::windows::fs::FileExt;
use std::path::Path;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::Error;
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
            since: crate::clock::now(),
        }
    }

    /// Whether this holder leaves the lock to operators waiting for it:
    /// a tick does (pause, reject and cancel always get in before the next
    /// tick starts); every other command is an operator's.
    pub(crate) fn gives_way(&self) -> bool {
        self.command == "tick"
    }

    /// `pid 4242 (tick 17, running 3m12s)`.
    pub fn describe(&self) -> String {
        let running = crate::clock::now().duration_since(self.since).as_secs().max(0) as u64;
        let running = crate::duration::format(Duration::from_secs(running));
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
    pub(crate) fn is_alive(&self) -> bool {
        // Pid 0 (or one past i32) names no process on any host.
        if i32::try_from(self.pid).is_err() || self.pid == 0 {
            return false;
        }
        if self.host != who::host() {
            return true;
        }
        crate::os::process_alive(self.pid)
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

/// Proof that the loop's lock is held, and the lock itself: the store's
/// writes require it, and dropping it releases the lock (after clearing the
/// holder record, so nobody reads a stale holder; a holder that dies leaves
/// the record, and readers check the pid).
pub struct Held {
    file: File,
    holder: Holder,
    /// The length of the lock file's content as last written (or found).
    len: u64,
    /// The last holder let go with the loop's files whole, on this boot.
    found_released: bool,
    /// Say so when letting go: the loop's files are whole.
    release_whole: bool,
}

impl Held {
    /// Records the tick being run, so waiters can name it.
    pub(crate) fn set_tick(&mut self, tick: u64) {
        self.holder.tick = Some(tick);
        self.len = write_record(&self.file, &holder_line(&self.holder), self.len);
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// Whether the last holder let go saying the loop's files were whole,
    /// since this machine booted: no writer has died mid-write since.
    pub(crate) fn found_released(&self) -> bool {
        self.found_released
    }

    /// Whether to say, on letting go, that the loop's files are whole.
    pub(crate) fn release_whole(&mut self, whole: bool) {
        self.release_whole = whole;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        match released_line() {
            Some(line) if self.release_whole => {
                write_record(&self.file, line.as_bytes(), self.len);
            }
            _ => {
                let _ = self.file.set_len(0);
            }
        }
        // Closing the file releases the lock; unlocking first only makes
        // that explicit.
        let _ = unlock(&self.file);
    }
}

/// Takes the exclusive lock on `file` without waiting: std's
/// `File::try_lock` (`flock(2)`) on Unix.
#[cfg(unix)]
fn try_lock(file: &File) -> Result<(), TryLockError> {
    file.try_lock()
}

#[cfg(unix)]
fn unlock(file: &File) -> std::io::Result<()> {
    file.unlock()
}

/// Where the one byte locked on Windows lies: far past any record, so the
/// record stays readable while the lock is held.
#[cfg(windows)]
const LOCKED_BYTE: u64 = 1 << 62;

/// Takes the exclusive lock on `file` without waiting: `LockFileEx` on the
/// one byte at [`LOCKED_BYTE`] on Windows.
#[cfg(windows)]
fn try_lock(file: &File) -> Result<(), TryLockError> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Foundation::{ERROR_IO_PENDING, ERROR_LOCK_VIOLATION};
    use windows_sys::Win32::Storage::FileSystem::{
        LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY, LockFileEx,
    };
    // SAFETY: a zeroed OVERLAPPED is valid; the handle is `file`'s, open
    // for the call.
    let ok = unsafe {
        let mut at: windows_sys::Win32::System::IO::OVERLAPPED = std::mem::zeroed();
        at.Anonymous.Anonymous.Offset = LOCKED_BYTE as u32;
        at.Anonymous.Anonymous.OffsetHigh = (LOCKED_BYTE >> 32) as u32;
        LockFileEx(
            file.as_raw_handle(),
            LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY,
            0,
            1,
            0,
            &raw mut at,
        )
    };
    if ok != 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(c) if c == ERROR_LOCK_VIOLATION as i32 || c == ERROR_IO_PENDING as i32 => {
            Err(TryLockError::WouldBlock)
        }
        _ => Err(TryLockError::Error(e)),
    }
}

#[cfg(windows)]
fn unlock(file: &File) -> std::io::Result<()> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Storage::FileSystem::UnlockFileEx;
    // SAFETY: as in `try_lock`.
    let ok = unsafe {
        let mut at: windows_sys::Win32::System::IO::OVERLAPPED = std::mem::zeroed();
        at.Anonymous.Anonymous.Offset = LOCKED_BYTE as u32;
        at.Anonymous.Anonymous.OffsetHigh = (LOCKED_BYTE >> 32) as u32;
        UnlockFileEx(file.as_raw_handle(), 0, 1, 0, &raw mut at)
    };
    match ok {
        0 => Err(std::io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// The line a holder that lets go with the loop's files whole leaves in
/// the lock file: `released <boot id>`, naming this boot of this machine.
/// None where the boot has no id to read (then nobody skips recovery).
fn released_line() -> Option<&'static str> {
    static LINE: OnceLock<Option<String>> = OnceLock::new();
    LINE.get_or_init(|| crate::procfs::boot_id().map(|id| format!("released {id}\n")))
        .as_deref()
}

/// Takes the exclusive lock of loop `name` in the lock file at `path`, as
/// `wait` allows. The lock file is created on first use and never deleted;
/// one that is not a regular file (a FIFO, a device, a symbolic link) is
/// refused without blocking.
///
/// A holder that gives way ([`Holder::gives_way`], a tick) takes the lock
/// only while no operator waits for it ([`in_line`]); any other holder that
/// finds the lock held waits in line, so the next tick leaves the lock to
/// it.
pub(crate) fn acquire(path: &Path, name: &str, holder: Holder, wait: Wait) -> Result<Held, Error> {
    let (file, _) = crate::fsx::open_rw(path)?;
    let gives_way = holder.gives_way();
    let mut line: Option<InLine> = None;
    poll(
        name,
        wait,
        MAX_POLL,
        || {
            // Held across the attempt, so no operator starts waiting
            // between the look and the taking.
            let _look = match gives_way {
                true => match look_for_waiters(path)? {
                    Look::Waiting => return Ok(false),
                    clear => Some(clear),
                },
                false => None,
            };
            match try_lock(&file) {
                Ok(()) => Ok(true),
                Err(TryLockError::WouldBlock) => {
                    if !gives_way && wait != Wait::No && line.is_none() {
                        line = Some(in_line(path)?);
                    }
                    Ok(false)
                }
                Err(TryLockError::Error(e)) => Err(Error::io("locking", path)(e)),
            }
        },
        || read_holder(path),
    )?;
    drop(line);
    // Read under the lock: what the last holder left is final.
    let mut found = [0u8; RELEASED_MAX];
    let n = read_at_most(&file, &mut found);
    let found_released =
        n.is_some_and(|n| released_line().is_some_and(|line| &found[..n] == line.as_bytes()));
    // A full buffer (or a failed read): the file may be longer, so it is
    // always cut.
    let prev = n.filter(|&n| n < RELEASED_MAX).map_or(u64::MAX, |n| n as u64);
    let len = write_record(&file, &holder_line(&holder), prev);
    Ok(Held {
        file,
        holder,
        len,
        found_released,
        release_whole: false,
    })
}

/// The marker beside a loop's lock (`<lock file>.wait`) that operators
/// waiting for the lock hold a shared lock on, while they wait. A tick
/// about to take the lock first tries an exclusive lock on it: held by
/// nobody, nobody waits (and nobody starts to until the tick lets it go,
/// the lock taken or not); held, an operator waits, and the tick leaves
/// the lock to it. The OS releases a waiter's mark when it dies, so a
/// crashed waiter holds up no tick. Made on first contention, never
/// deleted.
pub(crate) fn waiting_path(lock: &Path) -> std::path::PathBuf {
    let mut path = lock.as_os_str().to_owned();
    path.push(".wait");
    path.into()
}

/// An operator's place in line for a loop's lock: its shared lock on the
/// marker ([`waiting_path`]), released when dropped or when it dies.
pub struct InLine(#[allow(dead_code)] File);

/// Marks this process as waiting for the lock at `lock`. Waits only for
/// ticks looking at the marker, each for an instant.
pub(crate) fn in_line(lock: &Path) -> Result<InLine, Error> {
    let path = waiting_path(lock);
    let (file, _) = crate::fsx::open_rw(&path)?;
    file.lock_shared().map_err(Error::io("locking", &path))?;
    Ok(InLine(file))
}

/// What a tick about to take the lock finds in line ([`look_for_waiters`]).
enum Look {
    /// An operator waits: the tick gives way.
    Waiting,
    /// Nobody waits; while this lives nobody starts to (it holds the
    /// marker's exclusive lock), unless no marker was ever made (`None`).
    Clear(#[allow(dead_code)] Option<File>),
}

/// Whether an operator waits for the lock at `lock`, as a tick about to
/// take it asks. A marker that cannot be opened holds up nobody.
fn look_for_waiters(lock: &Path) -> Result<Look, Error> {
    let path = waiting_path(lock);
    // Flock needs no write access: a reader's descriptor takes it.
    let Ok(Some((file, _))) = crate::fsx::open_read(&path) else {
        return Ok(Look::Clear(None));
    };
    match file.try_lock() {
        Ok(()) => Ok(Look::Clear(Some(file))),
        Err(TryLockError::WouldBlock) => Ok(Look::Waiting),
        Err(TryLockError::Error(e)) => Err(Error::io("locking", &path)(e)),
    }
}

/// Enough to hold a `released` line and tell whether there is more.
const RELEASED_MAX: usize = 128;

/// Reads from the start of `file` into `buf`, in one read: a read of a
/// regular file that comes back short has met its end.
fn read_at_most(file: &File, buf: &mut [u8]) -> Option<usize> {
    #[cfg(unix)]
    let n = file.read_at(buf, 0);
    #[cfg(windows)]
    let n = file.seek_read(buf, 0);
    n.ok()
}

/// The one waiting discipline of every loop lock, whatever holds it (a
/// lock file here, a database's advisory lock in the PostgreSQL store):
/// calls `try_take` until it takes the lock, as `wait` allows, pausing at
/// most `max_pause` between attempts; after a moment says on stderr whom
/// it waits for (`holder`), and on giving up names them in the error.
pub(crate) fn poll(
    name: &str,
    wait: Wait,
    max_pause: Duration,
    mut try_take: impl FnMut() -> Result<bool, Error>,
    holder: impl Fn() -> Option<Holder>,
) -> Result<(), Error> {
    let started = Instant::now();
    let mut announced = false;
    let mut pause = Duration::from_millis(1);
    loop {
        if try_take()? {
            return Ok(());
        }
        let waited = started.elapsed();
        let give_up = match wait {
            Wait::No => true,
            Wait::For(limit) => waited >= limit,
            Wait::Forever => false,
        };
        if give_up {
            return Err(Error::LockNotObtained {
                name: name.to_owned(),
                holder: holder(),
            });
        }
        if !announced && waited >= ANNOUNCE_AFTER {
            announced = true;
            if let Some(h) = holder() {
                tracing::warn!("waiting for loop {name:?}: held by {}", h.describe());
            } else {
                tracing::warn!("waiting for loop {name:?}: its lock is held");
            }
        }
        thread::sleep(pause);
        pause = (pause * 2).min(max_pause);
    }
}

fn holder_line(holder: &Holder) -> Vec<u8> {
    let mut text = serde_json::to_vec(holder).unwrap_or_default();
    text.push(b'\n');
    text
}

/// Writes `line` as the lock file's content, which was `prev` bytes long;
/// returns its new length. Best effort: the record only informs waiters
/// (and the next holder); the lock is what counts. Written over the last
/// one, then cut to its length if that was longer: a reader meanwhile finds
/// no valid record (as it would an empty file), and the file system frees
/// and allocates no block for a rewrite.
fn write_record(file: &File, line: &[u8], prev: u64) -> u64 {
    let len = line.len() as u64;
    if write_all_at(file, line).is_err() {
        // Whatever is there now is no valid record of anything.
        let _ = file.set_len(0);
        return 0;
    }
    if prev > len {
        let _ = file.set_len(len);
    }
    len
}

/// Writes all of `line` at the start of `file`.
fn write_all_at(file: &File, line: &[u8]) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        file.write_all_at(line, 0)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < line.len() {
            match file.seek_write(&line[done..], done as u64)? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => done += n,
            }
        }
        Ok(())
    }
}

/// The current holder of the lock in `path`, read without locking: none
/// when the lock is free, or its last holder died without a word. A lock
/// file that is not a regular file names no holder (and is never blocked on).
pub fn read_holder(path: &Path) -> Option<Holder> {
    recorded_holder(path).and_then(|(holder, alive)| alive.then_some(holder))
}

/// The holder record in the lock file, alive or not, and whether its
/// process still runs: a dead one left it when it died (harmless: the OS
/// released its lock).
pub(crate) fn recorded_holder(path: &Path) -> Option<(Holder, bool)> {
    let text = crate::fsx::read_regular(path, HOLDER_MAX).ok()??;
    let holder: Holder = serde_json::from_slice(text.trim_ascii()).ok()?;
    let alive = holder.is_alive();
    Some((holder, alive))
}

/// A holder record is one short line; anything longer is not one.
const HOLDER_MAX: u64 = 64 * 1024;

/// An exclusive lock on a root-level file, held while the value lives: the
/// daemon holds `daemon.lock` so a second daemon on the root, and `daemon
/// --status`, can tell one is serving it.
pub struct RootLock(#[allow(dead_code)] File);

/// Takes the lock on `path` without waiting; `None` when another process
/// holds it.
pub(crate) fn try_hold(path: &Path) -> Result<Option<RootLock>, Error> {
    let (file, _) = crate::fsx::open_rw(path)?;
    match try_lock(&file) {
        Ok(()) => Ok(Some(RootLock(file))),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(Error::io("locking", path)(e)),
    }
}

/// Whether some process holds the lock on `path` (a missing file: none).
pub(crate) fn is_held(path: &Path) -> bool {
    path.exists() && matches!(try_hold(path), Ok(None))
}

/// Tells the holder of a lock that can be lost while it lives (the
/// PostgreSQL store's lease) that it has lost it: the store calls
/// [`LockWatch::lose`] once it can no longer prove it holds the lock, in
/// time for what runs under the lock to be stopped before anyone else may
/// take it. A tick hangs the killing of its step on [`LockWatch::on_lost`],
/// and hands each deadline the store sets ([`LockWatch::renewed`]) to the
/// step's guard ([`LockWatch::on_renewed`]), which kills the step at it
/// even when the runner is stopped.
#[derive(Clone, Default)]
pub struct LockWatch(std::sync::Arc<std::sync::Mutex<WatchState>>);

#[derive(Default)]
struct WatchState {
    lost: bool,
    hooks: Vec<Box<dyn Fn() + Send>>,
    /// When what runs under the lock must be stopped unless the lock is
    /// renewed before: a quarter of a lease before the server may give
    /// the lock to another.
    deadline: Option<std::time::Instant>,
    renewals: Vec<Box<dyn Fn(std::time::Instant) + Send>>,
}

impl LockWatch {
    fn state(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the lock is lost: said so, or its deadline has passed (the
    /// step's guard may have killed the step at it a moment before the
    /// store's watchdog says so).
    pub(crate) fn is_lost(&self) -> bool {
        let s = self.state();
        s.lost || s.deadline.is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// Runs `hook` when the lock is lost (at once if it is already).
    /// Hooks must be quick and must not wait: they run on the store's
    /// watchdog.
    pub(crate) fn on_lost(&self, hook: impl Fn() + Send + 'static) {
        let mut s = self.state();
        if s.lost {
            hook();
        } else {
            s.hooks.push(Box::new(hook));
        }
    }

    /// Runs `hook` with each new deadline (at once with the current one):
    /// what runs under the lock must be stopped by then unless a later
    /// deadline comes. Hooks must be quick and must not wait.
    pub(crate) fn on_renewed(&self, hook: impl Fn(std::time::Instant) + Send + 'static) {
        let mut s = self.state();
        if let Some(at) = s.deadline {
            hook(at);
        }
        s.renewals.push(Box::new(hook));
    }

    /// The lock holds until `at` at least, unless renewed again. A
    /// deadline passed stays passed: what ran under it may be killed.
    pub fn renewed(&self, at: std::time::Instant) {
        let mut s = self.state();
        let passed = |d: std::time::Instant| d >= at || std::time::Instant::now() >= d;
        if s.lost || s.deadline.is_some_and(passed) {
            return;
        }
        s.deadline = Some(at);
        for hook in &s.renewals {
            hook(at);
        }
    }

    /// Marks the lock lost and runs every hook; the first call only.
    pub(crate) fn lose(&self) {
        let mut s = self.state();
        if s.lost {
            return;
        }
        s.lost = true;
        for hook in &s.hooks {
            hook();
        }
    }
}

impl std::fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockWatch")
            .field("lost", &self.is_lost())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_from_either_end_of_time_is_described() {
        for since in [Timestamp::MAX, Timestamp::MIN] {
            let h = Holder {
                since,
                ..Holder::me("tick")
            };
            assert!(h.describe().starts_with("pid "), "{}", h.describe());
        }
    }
}
