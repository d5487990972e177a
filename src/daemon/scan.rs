//! Finding the loops and their schedules: the root is rescanned every few
//! seconds, the loop list read again only when the loops directory
//! changed and a config only when its mtime did; on Linux the configs are
//! watched (`watch`) and a rescan looks at those it was told changed,
//! elsewhere (and past the watches to be had) at a thousand configs' mtimes
//! at most, in turns. Loops found due at once are spread over a cadence, and a
//! removed loop is forgotten. Each config read is checked against the
//! daemon's user with the one check (`access::check`): a loop whose
//! operators it is not among is not ticked, said once in the log, and its
//! firings are recorded as refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use jiff::{SignedDuration, Timestamp};

use super::dispatch::Dispatcher;
use super::due::{When, jittered};
use super::queue::Queue;
use super::watch::Watch;
use super::{CONFIGS_PER_SCAN, FULL_LISTING};
use crate::access::{Action, Denied};
use crate::config::{LoopConfig, Schedule};
use crate::state::Status;
use crate::store::LoopStore;

/// The scan's own state: the dispatcher asks it when a scan is due and
/// tells it to scan soon or list the loops again; only the scan reads
/// and writes the rest.
pub(super) struct Scanner {
    /// The scans made.
    scans: u64,
    /// The loops directory's mtime at the last listing, and when that was.
    listing: Option<(SystemTime, Instant)>,
    /// When the root is next rescanned.
    next: Instant,
    /// The mtime of the root's records of OS schedules (`schedules/`) at
    /// the last scan: when it moves, every config is read again, to learn
    /// which loops an OS scheduler fires now.
    installed: Option<SystemTime>,
    /// The loops whose configs are not watched, in the order their
    /// configs are looked at: each scan looks at the next
    /// [`CONFIGS_PER_SCAN`] from `cursor` on, so a scan touches that many
    /// loops, not every one. A loop is here exactly while its entry holds
    /// no watch.
    order: Vec<Arc<str>>,
    cursor: usize,
    /// Loops were watched since `order` was last pruned of them.
    prune: bool,
    /// What tells of configs changed (Linux, the file store): `None`
    /// where every config is looked at in turns.
    watch: Option<Watch>,
    /// Loops whose config the next scan reads whatever its turn: new ones,
    /// and ones a shared store said changed.
    pending: Vec<Arc<str>>,
    /// Every config read again at the next scan.
    reread_all: bool,
}

impl Default for Scanner {
    fn default() -> Scanner {
        Scanner {
            scans: 0,
            listing: None,
            next: Instant::now(),
            installed: None,
            order: Vec::new(),
            cursor: 0,
            prune: false,
            watch: None,
            pending: Vec::new(),
            reread_all: false,
        }
    }
}

impl Scanner {
    /// The scan of `root`'s loops; their configs are watched when the
    /// store does not tell of changes itself and the system can watch.
    pub(super) fn of(root: &crate::root::Root, notifies: bool) -> Scanner {
        Scanner {
            watch: if notifies {
                None
            } else {
                Watch::start(&root.loops_dir())
            },
            ..Scanner::default()
        }
    }

    /// When the next scan is due.
    pub(super) fn next(&self) -> Instant {
        self.next
    }

    /// Whether a scan is due now.
    pub(super) fn due(&self) -> bool {
        Instant::now() >= self.next
    }

    /// The next scan in `after`, once one is made.
    pub(super) fn next_in(&mut self, after: Duration) {
        self.next = Instant::now() + after;
    }

    /// A scan at the next round.
    pub(super) fn now(&mut self) {
        self.next = Instant::now();
    }

    /// The loops listed again at the next scan.
    pub(super) fn relist(&mut self) {
        self.listing = None;
    }

    /// Loop `name`'s config read again at the next scan.
    pub(super) fn reread(&mut self, name: &Arc<str>) {
        self.pending.push(Arc::clone(name));
    }

    /// Every config read again at the next scan.
    pub(super) fn reread_all(&mut self) {
        self.reread_all = true;
    }
}

/// A loop the daemon knows.
pub(super) struct Entry {
    pub(super) dir: Box<dyn LoopStore>,
    /// The config's mtime when last read; `None` before the first read.
    pub(super) config_mtime: Option<Option<SystemTime>>,
    /// The watch on its config (`watch`); `None` while it has none, and
    /// its config is looked at in turns.
    pub(super) watch: Option<i32>,
    /// The schedule as last read; `None` when it has none or its config is invalid.
    pub(super) schedule: Option<(Schedule, When)>,
    /// The firing the last tick filled (its due time before jitter).
    pub(super) fired: Option<Timestamp>,
    /// When the daemon started the tick that filled it (or passed it over).
    pub(super) started: Option<Timestamp>,
    /// The firing queued, before jitter.
    pub(super) nominal: Option<Timestamp>,
    /// The loop's commit stamp ([`crate::store::LoopStore::stamp`]) when
    /// a tick found it paused, halted or completed: until the state
    /// changes, a firing is passed over without a tick.
    pub(super) inactive: Option<crate::store::Stamp>,
    /// The scan that last saw the loop.
    pub(super) seen: u64,
    /// The hosts its config lets run it (empty: any), as last read.
    pub(super) hosts: Vec<String>,
    /// Why the daemon's user may not tick it, as its config last read
    /// said: its firings are then recorded as refused, and run nothing.
    pub(super) refused: Option<Denied>,
    pub(super) config_path: PathBuf,
    /// The OS scheduler whose schedule of the loop is installed
    /// (`automaton schedule install`): it fires the loop, and the daemon
    /// does not.
    pub(super) os_scheduled: Option<crate::schedule::Backend>,
}

impl Entry {
    pub(super) fn new(dir: Box<dyn LoopStore>) -> Entry {
        Entry {
            config_path: dir.config_path(),
            dir,
            config_mtime: None,
            watch: None,
            schedule: None,
            fired: None,
            started: None,
            nominal: None,
            inactive: None,
            seen: 0,
            hosts: Vec::new(),
            refused: None,
            os_scheduled: None,
        }
    }

    /// What a firing refused records: who the daemon runs as (`me`), and
    /// who may tick the loop. `None` when the daemon's user may.
    pub(super) fn refusal(&self, me: &crate::who::Actor) -> Option<String> {
        self.refused.as_ref().map(|d| {
            format!(
                "the daemon runs as {}, and a tick needs one of its {} ({})",
                me.user,
                d.role.as_str(),
                d.holders.join(", ")
            )
        })
    }
}

impl Dispatcher<'_> {
    /// Picks up new and removed loops, and configs that changed. Linear in
    /// the loops; the listing is read again only when the loops directory
    /// changed (and every half minute regardless).
    pub(super) fn rescan(&mut self) {
        self.scanner.scans += 1;
        let scan = self.scanner.scans;
        self.hear();
        let Some(relisted) = self.relist(scan) else {
            return;
        };
        self.look_at_installed();
        let now = crate::clock::now();
        let (starting, scheduled) = self.read_configs(now);
        self.prune_order();
        self.spread(&starting, now);
        self.log_scheduled(&scheduled, starting.len());
        self.offer(&scheduled);
        if relisted {
            self.forget_removed(scan);
        }
    }

    /// Takes in what the watches told since the last scan: each config
    /// that changed (or whose watch is gone) is looked at by this scan,
    /// and a loop that came or went in the loops directory has them
    /// listed again. An overflowed queue may have hidden anything: every
    /// config is looked at, and the loops listed.
    fn hear(&mut self) {
        let Some(watch) = self.scanner.watch.as_mut() else {
            return;
        };
        let heard = watch.take();
        if heard.overflowed {
            self.scanner.relist();
            self.scanner.reread_all();
        }
        for (name, raw) in heard.lost {
            if let Some(e) = self.loops.get_mut(&name)
                && e.watch == Some(raw)
            {
                e.watch = None;
                self.scanner.order.push(name);
            }
        }
        for name in heard.changed {
            if self.loops.contains_key(&name) {
                self.scanner.pending.push(name);
            }
        }
        if !heard.listed.is_empty() {
            self.scanner.relist();
        }
        for name in heard.listed {
            if let Some((name, _)) = self.loops.get_key_value(name.as_str()) {
                self.scanner.pending.push(Arc::clone(name));
            }
        }
    }

    /// Takes the loops watched since the last prune out of the turns.
    fn prune_order(&mut self) {
        if !std::mem::take(&mut self.scanner.prune) {
            return;
        }
        let loops = &self.loops;
        let scanner = &mut self.scanner;
        scanner
            .order
            .retain(|n| loops.get(n).is_some_and(|e| e.watch.is_none()));
        scanner.cursor = match scanner.order.len() {
            0 => 0,
            n => scanner.cursor % n,
        };
    }

    /// When the root's records of OS schedules changed (one installed or
    /// removed), every config is read again, as if never read (a store on
    /// a server has no config mtime to tell a change by).
    fn look_at_installed(&mut self) {
        let now = mtime(&crate::schedule::record::dir(self.root));
        if now == self.scanner.installed {
            return;
        }
        self.scanner.installed = now;
        for e in self.loops.values_mut() {
            e.config_mtime = None;
        }
        self.scanner.reread_all();
    }

    /// Marks the loops listed as seen by `scan`, a loop new to the daemon
    /// becoming an entry. The listing is read again only when the loops
    /// directory changed, or (unwatched) it was read half a minute ago; the store then
    /// opens only the loops the daemon does not know. `Some(true)` when the
    /// loops were listed, `Some(false)` when the last listing stands, and
    /// `None` when they cannot be listed.
    fn relist(&mut self, scan: u64) -> Option<bool> {
        let dir_mtime = mtime(&self.root.loops_dir());
        // A watched loops directory tells of every loop that comes or goes
        // (`hear`): no listing on the half minute.
        let watched = self.scanner.watch.is_some();
        let relist = match (self.scanner.listing, dir_mtime) {
            (Some((m, at)), Some(now_m)) => m != now_m || (!watched && at.elapsed() >= FULL_LISTING),
            _ => true,
        };
        if !relist {
            return Some(false);
        }
        let known = |name: &str| self.loops.contains_key(name);
        let (names, new) = match self.stores.list_unknown(&known) {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!("cannot list the loops: {e}");
                return None;
            }
        };
        self.scanner.listing = dir_mtime.map(|m| (m, Instant::now()));
        for name in names {
            if let Some(e) = self.loops.get_mut(name.as_str()) {
                e.seen = scan;
            }
        }
        for dir in new {
            let name: Arc<str> = Arc::from(dir.name().as_str());
            self.scanner.order.push(Arc::clone(&name));
            self.scanner.pending.push(Arc::clone(&name));
            let mut entry = Entry::new(dir);
            entry.seen = scan;
            self.loops.insert(name, entry);
        }
        Some(true)
    }

    /// The loops whose configs this scan looks at: those pending (new, or
    /// said to have changed), and the next [`CONFIGS_PER_SCAN`] of those
    /// not watched, in turn; every loop when all are to be read again.
    fn configs_to_look_at(&mut self) -> Vec<Arc<str>> {
        let scanner = &mut self.scanner;
        if std::mem::take(&mut scanner.reread_all) {
            scanner.pending.clear();
            return self.loops.keys().cloned().collect();
        }
        let mut names = std::mem::take(&mut scanner.pending);
        // A config told of twice is looked at once.
        let mut told = std::collections::HashSet::with_capacity(names.len());
        names.retain(|n| told.insert(Arc::clone(n)));
        let n = scanner.order.len();
        let take = n.min(CONFIGS_PER_SCAN);
        for i in 0..take {
            names.push(Arc::clone(&scanner.order[(scanner.cursor + i) % n]));
        }
        if n > 0 {
            scanner.cursor = (scanner.cursor + take) % n;
        }
        names
    }

    /// Reads the configs that changed among those this scan looks at (a
    /// loop never read is read now), and takes in each new schedule: the
    /// loops it makes due now, and every loop newly scheduled.
    fn read_configs(&mut self, now: Timestamp) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
        let mut starting: Vec<Arc<str>> = Vec::new();
        let mut scheduled: Vec<Arc<str>> = Vec::new();
        let actor = self.stores.me();
        let mut approved: Vec<Arc<str>> = Vec::new();
        let first_scan = self.scanner.scans == 1;
        for name in self.configs_to_look_at() {
            let Some(entry) = self.loops.get_mut(&name) else {
                continue;
            };
            let name = &name;
            if let Some(watch) = self.scanner.watch.as_mut() {
                // Watched before it is looked at: a change after the look
                // is told.
                let held = entry.watch;
                entry.watch = watch.watch(name, &entry.config_path, held);
                match (held, entry.watch) {
                    (None, Some(_)) => self.scanner.prune = true,
                    (Some(_), None) => self.scanner.order.push(Arc::clone(name)),
                    _ => {}
                }
            }
            let modified = mtime(&entry.config_path);
            if entry.config_mtime == Some(modified) {
                continue;
            }
            let first = entry.config_mtime.is_none();
            entry.config_mtime = Some(modified);
            let read = read_config(name, entry.dir.as_ref(), actor, self.stores.access());
            // One scheduler per loop: one an OS scheduler fires is not the
            // daemon's to fire.
            let installed = installed_schedule(self.root, name);
            say_installed(name, entry.os_scheduled, installed, read.schedule.is_some());
            entry.os_scheduled = installed;
            let schedule = read.schedule.filter(|_| installed.is_none());
            entry.hosts = read.hosts;
            say_refused(name, &actor.user, entry.refused.as_ref(), read.refused.as_ref());
            entry.refused = read.refused;
            if first && schedule.is_some() {
                // Found awaiting approval (before this daemon started, or
                // by another's tick): watched, so an approval starts it;
                // one approved before the daemon started starts now.
                self.awaits.watch(name);
                match entry.dir.load() {
                    Ok(s) if s.status == Status::AwaitingApproval => {
                        if first_scan && !s.pending_approvals.is_empty() {
                            approved.push(Arc::clone(name));
                        }
                    }
                    _ => self.awaits.forget(name),
                }
            }
            let same = match (&entry.schedule, &schedule) {
                (Some((a, _)), Some((b, _))) => a == b,
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            entry.schedule = schedule;
            let running = self.running.contains_key(name);
            match first_firing(name, entry, &mut self.queue, running, now) {
                First::None => {}
                First::Now => {
                    scheduled.push(Arc::clone(name));
                    starting.push(Arc::clone(name));
                }
                First::Queued => scheduled.push(Arc::clone(name)),
            }
        }
        for name in approved {
            self.heard_of(&name);
        }
        (starting, scheduled)
    }

    /// One line a newly scheduled loop; a summary (and the lines at debug
    /// level) when many were scheduled at once.
    pub(super) fn log_scheduled(&self, names: &[Arc<str>], spread: usize) {
        let many = names.len() > 5;
        if many {
            tracing::info!(
                "{} loops scheduled; {spread} due now, spread over their cadence",
                names.len()
            );
        }
        for name in names {
            let Some(e) = self.loops.get(name) else { continue };
            let (Some((s, _)), Some(next)) = (&e.schedule, e.nominal) else {
                continue;
            };
            let next = crate::clock::local(next);
            if many {
                tracing::debug!(
                    "loop {name:?} scheduled ({}), next at {next}",
                    crate::schedule::describe(s)
                );
            } else {
                tracing::info!(
                    "loop {name:?} scheduled ({}), next at {next}",
                    crate::schedule::describe(s)
                );
            }
        }
    }

    /// Loops due at once when found (a new root, a daemon that was down) are
    /// spread over one cadence, in name order among the loops of that
    /// cadence, rather than fired in one burst; a loop alone at its cadence
    /// fires now.
    pub(super) fn spread(&mut self, starting: &[Arc<str>], now: Timestamp) {
        let mut groups: HashMap<Duration, Vec<&Arc<str>>> = HashMap::new();
        for name in starting {
            if let Some((_, when)) = self.loops.get(name).and_then(|e| e.schedule.as_ref()) {
                groups.entry(when.period(now)).or_default().push(name);
            }
        }
        for (period, mut names) in groups {
            names.sort();
            let n = names.len() as u32;
            for (i, name) in (0u32..).zip(names) {
                let Some(entry) = self.loops.get_mut(name) else {
                    continue;
                };
                let Some((s, _)) = &entry.schedule else {
                    continue;
                };
                let offset = period.mul_f64(f64::from(i) / f64::from(n));
                let at = now
                    .checked_add(SignedDuration::try_from(offset).unwrap_or_default())
                    .unwrap_or(now);
                // The firing it stands for stays the one overdue.
                entry.nominal = Some(entry.nominal.map_or(at, |n| n.min(at)));
                self.queue
                    .set(Arc::clone(name), jittered(at, s.jitter.map(|j| j.0)));
            }
        }
    }

    /// Loops gone from the root: logged, and never fired again. A running
    /// tick of one finishes on its own.
    pub(super) fn forget_removed(&mut self, scan: u64) {
        let gone: Vec<Arc<str>> = self
            .loops
            .iter()
            .filter(|(_, e)| e.seen != scan)
            .map(|(n, _)| Arc::clone(n))
            .collect();
        if gone.is_empty() {
            return;
        }
        for name in &gone {
            if let Some(e) = self.loops.remove(name)
                && let (Some(watch), Some(raw)) = (self.scanner.watch.as_mut(), e.watch)
            {
                watch.unwatch(name, raw);
            }
            self.queue.unset(name);
            tracing::info!("loop {name:?} was removed: it is no longer ticked");
        }
        let loops = &self.loops;
        self.scanner.order.retain(|n| loops.contains_key(n));
        self.scanner.cursor = 0;
    }
}

/// Where a loop whose schedule changed fires first.
enum First {
    /// Not at all: it has no schedule now, its tick is running (it is
    /// rescheduled with the new cadence when that ends), or its cadence
    /// never fires again.
    None,
    /// Now: it is due, and is spread with the others due now.
    Now,
    /// At the time queued.
    Queued,
}

/// Takes in `entry`'s new schedule: unqueued when it has none, else its
/// first firing after its last tick (or the one it just filled).
fn first_firing(
    name: &Arc<str>,
    entry: &mut Entry,
    queue: &mut Queue<Arc<str>>,
    running: bool,
    now: Timestamp,
) -> First {
    let Some((s, when)) = &entry.schedule else {
        queue.unset(name);
        entry.nominal = None;
        return First::None;
    };
    if running {
        return First::None;
    }
    let last = entry.fired.or_else(|| {
        entry
            .dir
            .load()
            .ok()
            .and_then(|st| st.last_tick.map(|t| t.started_at))
    });
    let Some(first) = when.first(last, now) else {
        tracing::warn!("loop {name:?} is not scheduled: its cadence never fires again");
        return First::None;
    };
    if first <= now {
        // The last firing overdue, not now: the ledger then accounts for
        // it (a crashed tick's, taken again) and for those missed before.
        entry.nominal = last
            .and_then(|l| when.after(l, l))
            .filter(|t| *t <= now)
            .map(|t| super::ledger::stands_for(when, t, now));
        return First::Now;
    }
    entry.nominal = Some(first);
    queue.set(Arc::clone(name), jittered(first, s.jitter.map(|j| j.0)));
    First::Queued
}

/// What the daemon reads of a loop's config.
pub(super) struct Read {
    /// Its schedule, where this host fires it.
    pub(super) schedule: Option<(Schedule, When)>,
    /// The hosts it may run on (`[runner] hosts`; empty: any).
    pub(super) hosts: Vec<String>,
    /// Why `actor`, the daemon's user, may not tick it.
    pub(super) refused: Option<Denied>,
}

/// Reads loop `name`'s config: its schedule, its hosts, and whether the
/// daemon's user (`actor`) may tick it, by its `[access]` over the
/// root's (`defaults`), as `automaton tick` is checked.
/// The OS scheduler that fires loop `name`, if its schedule is installed
/// (a record that cannot be read says none: the daemon fires the loop).
fn installed_schedule(root: &crate::root::Root, name: &str) -> Option<crate::schedule::Backend> {
    crate::schedule::record::read(root, name)
        .ok()
        .flatten()
        .map(|r| r.backend)
}

/// Says, once, that an OS scheduler fires loop `name` (its schedule
/// `scheduled` in its config) and the daemon leaves it alone, or that its
/// OS schedule was removed.
fn say_installed(
    name: &str,
    was: Option<crate::schedule::Backend>,
    now: Option<crate::schedule::Backend>,
    scheduled: bool,
) {
    match (was, now) {
        (_, Some(b)) if was != now && scheduled => tracing::info!(
            "loop {name:?} is fired by its {b} schedule (`automaton schedule install`); \
             the daemon leaves it to {b} (`automaton schedule remove {name}` hands it to the daemon)"
        ),
        (Some(b), None) if scheduled => {
            tracing::info!("loop {name:?}: its {b} schedule was removed; the daemon fires it");
        }
        _ => {}
    }
}

pub(super) fn read_config(
    name: &str,
    dir: &dyn LoopStore,
    actor: &crate::who::Actor,
    defaults: &crate::access::Access,
) -> Read {
    let config = dir.config();
    let hosts = config
        .as_ref()
        .map(|c| c.runner.hosts.clone())
        .unwrap_or_default();
    let refused = config.as_ref().ok().and_then(|c: &LoopConfig| {
        let rules = crate::access::rules_of(c, defaults);
        crate::access::check(actor, Action::Tick, &rules).err()
    });
    Read {
        schedule: schedule_of(name, config),
        hosts,
        refused,
    }
}

/// Says in the log, once, that the daemon's user may not tick loop
/// `name` (or, once, that it may again), when a config read changes it;
/// the daemon runs as `me`.
fn say_refused(name: &str, me: &str, was: Option<&Denied>, now: Option<&Denied>) {
    match (was, now) {
        (_, Some(d)) if was != Some(d) => tracing::warn!(
            "loop {name:?} is not ticked by this daemon: it runs as {}, and a tick needs one of its {} ({}); \
             its firings are recorded as refused",
            me,
            d.role.as_str(),
            d.holders.join(", ")
        ),
        (Some(_), None) => tracing::info!("loop {name:?}: this daemon's user may tick it again"),
        _ => {}
    }
}

fn schedule_of(
    name: &str,
    config: crate::error::Result<crate::config::LoopConfig>,
) -> Option<(Schedule, When)> {
    let schedule = match config {
        Ok(c) if !c.runner.allows(&crate::who::host()) => {
            tracing::info!(
                "loop {name:?} runs on {} only; not scheduled on this host",
                c.runner.hosts.join(", ")
            );
            None
        }
        Ok(c) => c.schedule,
        Err(e) => {
            tracing::warn!("loop {name:?} is not scheduled: {e}");
            None
        }
    }?;
    match When::of(&schedule) {
        Ok(w) => Some((schedule, w)),
        Err(e) => {
            tracing::warn!("loop {name:?} is not scheduled: {e}");
            None
        }
    }
}

pub(super) fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
