//! `cancel`: end the tick in flight, as `systemctl stop` ends a unit. The
//! tick's runner holds the lock, so this works from outside it: it leaves a
//! note of who asked in the tick's run directory, sends SIGTERM to the
//! step's process group (named in the `in_flight` record, or written by the
//! runner into the run directory; the verifier's is written there), SIGKILL
//! after a grace period, and returns once the tick has recorded itself (as
//! cancelled by whom, with the reason they gave), whoever takes the lock
//! next.
//!
//! A group is signalled only once `/proc` proves it is the step's: its
//! leader has the id and the start (clock ticks since boot, on this boot)
//! that the runner recorded, is the runner's child, and runs what the
//! runner's guard runs. A record that proves nothing (forged, stale, or
//! written by a build that did not record the start) is refused, and
//! nothing is signalled.

use std::time::{Duration, Instant};

#[cfg(unix)]
use nix::sys::signal::{Signal, killpg};
#[cfg(unix)]
use nix::unistd::Pid;
use serde::Serialize;

use super::{Answer, Ctx};
use crate::error::{Error, Result};
use crate::fsx::Dir;
use crate::lock::{Holder, Wait};
use crate::runs::{self, Runs};
use crate::state::{Cancellation, InFlight, ProcessStart};
use crate::store::LoopStore;
use crate::tick::after::Change;
use crate::who;

/// How often to look at the tick: for its group, and for its record.
const POLL: Duration = Duration::from_millis(50);

/// How long `cancel` waits for the tick to end, without `--timeout`.
pub(crate) const TIMEOUT: Duration = Duration::from_mins(1);

/// End loop `name`'s tick in flight.
pub(crate) struct Cancel {
    pub name: String,
    /// Why, for the record: kept with the tick it cancels.
    pub reason: Option<String>,
    /// How long SIGTERM has before SIGKILL follows.
    pub grace: Duration,
    /// How long to wait for the tick to end and be recorded ([`TIMEOUT`]
    /// when none).
    pub timeout: Option<Duration>,
}

/// What was cancelled: the answer.
#[derive(Serialize)]
pub(crate) struct Cancelled {
    #[serde(rename = "loop")]
    pub name: String,
    /// The tick that was in flight; none when there was none.
    pub tick: Option<u64>,
    /// The signals sent to its step's process group, in order.
    pub signals: Vec<&'static str>,
    pub by: String,
    /// The reason given, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

pub(crate) fn cancel(ctx: &Ctx<'_>, req: Cancel, answer: Answer<'_, Cancelled>) -> Result<Cancelled> {
    // The tick it would stop holds the lock: a refusal is said, and
    // recorded, at once all the same (it takes no lock).
    let dir = ctx.allowed(&req.name, crate::access::Action::Cancel)?;
    let dir = &*dir;
    let note = Cancellation {
        by: ctx.actor.user.clone(),
        reason: crate::bounds::opt_text(req.reason).filter(|r| !r.trim().is_empty()),
    };
    let state = dir.load()?;
    let mut report = Cancelled {
        name: dir.name().to_string(),
        tick: None,
        signals: Vec::new(),
        by: note.by.clone(),
        reason: note.reason.clone(),
    };
    let Some(flight) = state.in_flight else {
        answer(&report)?;
        return Ok(report);
    };
    report.tick = Some(flight.tick);
    let target = Target {
        dir,
        flight: &flight,
        me: ctx.stores.me(),
    };
    target.check_host()?;
    // A group the record names is proved before anything is written.
    if let Some(Found::Refuted(why)) = target.named() {
        return match target.ended()? {
            true => answer(&report).map(|()| report),
            false => Err(target.refused(&why)),
        };
    }
    let run = Runs::make(dir.base_dir())?.make_run(flight.tick)?;
    runs::write_note(&run, &note)?;
    if let Some(group) = target.group(&run)? {
        signal(group, Signal::SIGTERM, flight.pid);
        report.signals.push("SIGTERM");
        if !target.wait_ended(req.grace)?
            && let Found::Proved(group) = target.live(&run)
        {
            signal(group, Signal::SIGKILL, flight.pid);
            report.signals.push("SIGKILL");
        }
    }
    if !target.wait_ended(req.timeout.unwrap_or(TIMEOUT))? {
        return Err(Error::LockNotObtained {
            name: dir.name().to_string(),
            holder: LoopStore::holder(dir),
        });
    }
    let said = answer(&report);
    // Once the tick is recorded and the answer given: its people hear of it.
    if let Ok(state) = dir.load() {
        let mut notice = ctx.operated(dir, &state, "cancel");
        notice.tick = flight.tick;
        notice.reason = note.reason;
        ctx.follow(Change::Operated(dir, Box::new(notice)));
    }
    said.map(|()| report)
}

/// What a look for a process group found.
enum Found {
    /// A group proved to be the tick's step's (or verifier's).
    Proved(Pid),
    /// None to signal yet: no group named, or its leader is gone (the
    /// step ended; the verifier may follow).
    Nothing,
    /// A leader that is not the one the runner recorded: why.
    Refuted(String),
}

/// The tick being cancelled.
struct Target<'a> {
    dir: &'a dyn LoopStore,
    flight: &'a InFlight,
    /// This process's own actor: who records the tick crashed when its
    /// runner died.
    me: &'a crate::who::Actor,
}

impl Target<'_> {
    /// A group id means something on the runner's host only.
    fn check_host(&self) -> Result<()> {
        if self.flight.host == who::host() {
            return Ok(());
        }
        Err(Error::Refused {
            name: self.dir.name().to_string(),
            message: format!(
                "tick {} runs on host {}; cancel it there (nothing was signalled)",
                self.flight.tick, self.flight.host
            ),
        })
    }

    /// The group the `in_flight` record names, proved or not.
    fn named(&self) -> Option<Found> {
        let group = self.flight.group?;
        Some(prove(group, self.flight.group_start.as_ref(), self.flight.pid))
    }

    /// The verifier's group, else the step's (named in the `in_flight`
    /// record, or written in the run directory when it could not be): the
    /// first proved, else why one was refuted. A group file the step
    /// forged cannot hide a group that proves.
    fn live(&self, run: &Dir) -> Found {
        let runner = self.flight.pid;
        let named = self.flight.group.map(|g| (g, self.flight.group_start.clone()));
        let written = || runs::read_group(run, "step");
        let candidates = [runs::read_group(run, "verifier"), named.or_else(written)];
        let mut refuted = None;
        for (group, start) in candidates.into_iter().flatten() {
            match prove(group, start.as_ref(), runner) {
                Found::Proved(group) => return Found::Proved(group),
                Found::Refuted(why) => {
                    refuted.get_or_insert(why);
                }
                Found::Nothing => {}
            }
        }
        refuted.map_or(Found::Nothing, Found::Refuted)
    }

    /// The group to signal once the step (or verifier) runs; none if the
    /// tick is recorded before one does. A group the record names may not
    /// hold the step yet: the runner then finds the note left before the
    /// signal, and stops the step itself. A group that proves to be
    /// another's is refused, and the note taken back.
    fn group(&self, run: &Dir) -> Result<Option<Pid>> {
        loop {
            match self.live(run) {
                Found::Proved(group) => return Ok(Some(group)),
                Found::Refuted(why) if !self.ended()? => {
                    runs::remove_note(run);
                    return Err(self.refused(&why));
                }
                Found::Refuted(_) => return Ok(None),
                Found::Nothing if self.ended()? => return Ok(None),
                Found::Nothing => std::thread::sleep(POLL),
            }
        }
    }

    /// Whether the tick has recorded itself: the committed state no longer
    /// has it in flight. A runner that died leaves it there: the lock is
    /// then free, and taking it records the tick as crashed.
    fn ended(&self) -> Result<bool> {
        let state = self.dir.load()?;
        if state
            .in_flight
            .as_ref()
            .is_none_or(|f| f.tick != self.flight.tick)
        {
            return Ok(true);
        }
        if alive(self.flight.pid) {
            return Ok(false);
        }
        match self.dir.lock(Holder::me("cancel"), Wait::No) {
            Ok(mut session) => session.load(self.me).map(|_| true),
            Err(Error::LockNotObtained { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `bound` for the tick to record itself.
    fn wait_ended(&self, bound: Duration) -> Result<bool> {
        let until = Instant::now() + bound;
        loop {
            if self.ended()? {
                return Ok(true);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            std::thread::sleep(left.min(POLL));
        }
    }

    fn refused(&self, why: &str) -> Error {
        Error::Refused {
            name: self.dir.name().to_string(),
            message: format!(
                "tick {} is in flight, but {why}; nothing was signalled",
                self.flight.tick
            ),
        }
    }
}

/// Whether `group` is the job of a step the runner `runner` started: on
/// Windows the job's name proves it ([`crate::step::Group`]).
#[cfg(windows)]
fn prove(group: i32, _: Option<&ProcessStart>, runner: u32) -> Found {
    match group > 1 && crate::step::has_job(runner, group) {
        true => Found::Proved(group),
        false => Found::Nothing,
    }
}

/// Whether `group`, led since `start`, is the group of a step the runner
/// `runner` started.
#[cfg(unix)]
fn prove(group: i32, start: Option<&ProcessStart>, runner: u32) -> Found {
    let Some(start) = start else {
        return Found::Refuted(match crate::procfs::boot_id() {
            Some(_) => format!(
                "its record names process group {group} without the start of its leader \
                 (an older automaton wrote it), so the group cannot be told from another that took its id"
            ),
            None => format!("this system has no /proc to prove that process group {group} is the step's"),
        });
    };
    if group <= 1 || crate::procfs::stat(group).is_none() {
        return Found::Nothing;
    }
    match crate::step::is_step_group(group, runner, start) {
        true => Found::Proved(Pid::from_raw(group)),
        false => Found::Refuted(format!(
            "process group {group} is not the one its runner (pid {runner}) started for the step"
        )),
    }
}

/// Whether process `pid` is alive (or not ours to signal, which is alive).
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

#[cfg(windows)]
fn alive(pid: u32) -> bool {
    crate::os::process_alive(pid)
}

/// A step's job on Windows, named by its id ([`crate::step::Group`]).
#[cfg(windows)]
type Pid = i32;

/// What `cancel` asks of a step's job: Windows has no signals, and both
/// terminate the job.
#[cfg(windows)]
#[derive(Debug, Clone, Copy)]
#[allow(clippy::upper_case_acronyms)] // named as the Unix signals they stand for
enum Signal {
    SIGTERM,
    SIGKILL,
}

#[cfg(windows)]
fn signal(group: Pid, sig: Signal, runner: u32) {
    if !crate::step::stop_job(runner, group) {
        tracing::debug!("cannot end ({sig:?}) job {group} of pid {runner}");
    }
}

#[cfg(unix)]
fn signal(group: Pid, sig: Signal, runner: u32) {
    if let Err(e) = killpg(group, sig) {
        tracing::debug!("cannot send {sig} to process group {group} of pid {runner}: {e}");
    }
}
