//! `cancel`: end the tick in flight, as `systemctl stop` ends a unit. The
//! tick's runner holds the lock, so this works from outside it: it leaves a
//! note of who asked in the tick's run directory, sends SIGTERM to the
//! step's process group (named in the `in_flight` record, or written by the
//! runner into the run directory; the verifier's is written there), SIGKILL
//! after a grace period, and waits for the runner to record the tick (as
//! cancelled by whom) and free the lock, which it then takes briefly to be
//! sure.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;

use super::render::safe;
use crate::cli::CancelArgs;
use crate::error::{Error, Result};
use crate::lock::{Holder, Wait};
use crate::root::Root;
use crate::store::LoopStore;
use crate::fsx::Dir;
use crate::runs::{self, Runs};
use crate::who;

/// How often to look for the step's process group to appear.
const POLL: Duration = Duration::from_millis(50);

#[derive(Serialize)]
struct Cancelled {
    #[serde(rename = "loop")]
    name: String,
    /// The tick that was in flight; none when there was none.
    tick: Option<u64>,
    /// The signals sent to its step's process group, in order.
    signals: Vec<&'static str>,
    by: String,
}

pub fn run(root: &Root, args: &CancelArgs, out: &mut dyn Write) -> Result<u8> {
    let dir = crate::store::open(root, &args.name)?;
    let dir = &*dir;
    let state = dir.load()?;
    let by = who::user();
    let mut report = Cancelled {
        name: dir.name().to_string(),
        tick: None,
        signals: Vec::new(),
        by: by.clone(),
    };
    let Some(flight) = state.in_flight else {
        return finish(&report, args.json.json, out);
    };
    report.tick = Some(flight.tick);
    let run_dir = Runs::make(dir.base_dir())?.make_run(flight.tick)?;
    runs::write_note(&run_dir, &by)?;

    let runner = flight.pid;
    let lock_free = |wait: Wait| match dir.lock(Holder::me("cancel"), wait) {
        Ok(_session) => Ok(true),
        Err(Error::LockNotObtained { .. }) => Ok(false),
        Err(e) => Err(e),
    };
    // A group id means something on the runner's host only.
    let named = flight.group.filter(|_| flight.host == who::host());
    if let Some(group) = step_group(&run_dir, named, runner, &lock_free)? {
        signal(group, Signal::SIGTERM, runner);
        report.signals.push("SIGTERM");
        if !lock_free(Wait::For(args.grace))?
            && let Some(group) = live_group(&run_dir, named, runner)
        {
            signal(group, Signal::SIGKILL, runner);
            report.signals.push("SIGKILL");
        }
    }
    if !lock_free(Wait::For(args.timeout))? {
        return Err(Error::LockNotObtained {
            name: dir.name().to_string(),
            holder: LoopStore::holder(dir),
        });
    }
    finish(&report, args.json.json, out)
}

fn finish(r: &Cancelled, json: bool, out: &mut dyn Write) -> Result<u8> {
    if json {
        super::emit_json(out, r)?;
        return Ok(0);
    }
    let line = match (r.tick, r.signals.last()) {
        (None, _) => format!("loop {} has no tick in flight; nothing to cancel", r.name),
        (Some(t), Some(_)) => format!(
            "cancelled tick {t} of loop {} ({}); it is recorded as cancelled by {}",
            r.name,
            r.signals.join(", then "),
            r.by
        ),
        (Some(t), None) => format!(
            "tick {t} of loop {} had no step running; it ended and the lock is free",
            r.name
        ),
    };
    super::emit(out, &format!("{}\n", safe(&line)))?;
    Ok(0)
}

/// The process group of the tick's step (or verifier) once it runs; none
/// if the tick ends (the lock comes free) before one starts. A group the
/// `in_flight` record names may not hold the step yet: the runner then
/// finds the note left before the signal, and stops the step itself.
fn step_group(
    run_dir: &Dir,
    named: Option<i32>,
    runner: u32,
    lock_free: &dyn Fn(Wait) -> Result<bool>,
) -> Result<Option<Pid>> {
    loop {
        if let Some(g) = live_group(run_dir, named, runner) {
            return Ok(Some(g));
        }
        if lock_free(Wait::For(POLL))? {
            return Ok(None);
        }
    }
}

/// The verifier's group, else the step's (named in the `in_flight` record
/// or the run directory), if its leader (the runner's guard process) is
/// still the runner's child: a stale id is never signalled.
fn live_group(run_dir: &Dir, named: Option<i32>, runner: u32) -> Option<Pid> {
    let written = |what| runs::read_group(run_dir, what).map(|(group, _)| group);
    let candidates = [written("verifier"), named.or_else(|| written("step"))];
    candidates.into_iter().flatten().find_map(|pgid| {
        let ours = match Path::new("/proc/self").exists() {
            true => parent_of(pgid) == Some(runner),
            // No /proc to ask: trusted while the tick is in flight.
            false => true,
        };
        (pgid > 1 && ours).then(|| Pid::from_raw(pgid))
    })
}

/// A process's parent, from /proc; none where there is no /proc.
fn parent_of(pid: i32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

fn signal(group: Pid, sig: Signal, runner: u32) {
    if let Err(e) = killpg(group, sig) {
        tracing::debug!("cannot send {sig} to process group {group} of pid {runner}: {e}");
    }
}
