//! The figures of each loop `/metrics` shows, read at scrape time: from
//! the listing (state, config, next firing: the core's list view), the
//! ledger of firings, and the history. What the history gives is kept per
//! loop in a [`Cache`] and read again only when the loop's state version
//! moved (every commit that appends to a history bumps it), so a scrape of
//! an unchanged root reads each history once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use crate::config::LoopConfig;
use crate::daemon::When;
use crate::error::Result;
use crate::fires::{Fire, Kind};
use crate::history::{Event, EventKind};
use crate::ops::Ctx;
use crate::ops::views::status::{Listed, LoopView, Seen};
use crate::state::{Outcome, State};
use crate::store::LoopStore;

/// A series' labels: `loop`, the loop's `[labels]`, then the figure's own.
pub(crate) type Labels = Vec<(String, String)>;

/// The upper bounds of the histograms of times a person or a scheduler
/// takes (lateness, await to approval): a second to a week.
pub(crate) const SLOW_BUCKETS: &[f64] = &[
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4.0 * 3600.0,
    86400.0,
    3.0 * 86400.0,
    7.0 * 86400.0,
];

/// The upper bounds of the gate evaluation time histogram: 1 ms to 10 s,
/// a bucket a factor of ten (few buckets: every loop has a histogram a gate).
pub(crate) const GATE_BUCKETS: &[f64] = &[0.001, 0.01, 0.1, 1.0, 10.0];

/// A histogram of observations, bucketed as they are taken in.
#[derive(Debug, Clone)]
pub(crate) struct Hist {
    pub bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last is above every bound.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Hist {
    pub(crate) fn new(bounds: &'static [f64]) -> Hist {
        Hist {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub(crate) fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// The buckets as `(upper bound, count)`, `+Inf` last.
    pub(crate) fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.counts.iter().copied())
            .collect()
    }
}

/// What a loop's history says, as `/metrics` counts it.
#[derive(Debug, Clone)]
pub(crate) struct HistoryFigures {
    /// Ticks recorded, by outcome.
    pub ticks: BTreeMap<&'static str, u64>,
    /// Gate evaluations, by gate and decision.
    pub gate_decisions: BTreeMap<(String, &'static str), u64>,
    /// Gate evaluations that failed (their `on_error` decided), by gate.
    pub gate_errors: BTreeMap<String, u64>,
    /// How long each gate's evaluations took, by gate.
    pub gate_seconds: BTreeMap<String, Hist>,
    /// From an await's start to each approval given for it.
    pub await_to_approval: Hist,
    /// When the last tick whose step succeeded was recorded.
    pub last_success: Option<Timestamp>,
}

impl HistoryFigures {
    fn of(events: &[Event]) -> HistoryFigures {
        let mut f = HistoryFigures {
            ticks: BTreeMap::new(),
            gate_decisions: BTreeMap::new(),
            gate_errors: BTreeMap::new(),
            gate_seconds: BTreeMap::new(),
            await_to_approval: Hist::new(SLOW_BUCKETS),
            last_success: None,
        };
        let mut awaits: HashMap<&str, Timestamp> = HashMap::new();
        for e in events {
            match &e.kind {
                EventKind::Tick { outcome, .. } => {
                    *f.ticks.entry(outcome.as_str()).or_default() += 1;
                    if *outcome == Outcome::Ran {
                        f.last_success = Some(e.at);
                    }
                }
                EventKind::Gate { verdict, .. } => {
                    let gate = verdict.gate.clone();
                    *f.gate_decisions
                        .entry((gate.clone(), verdict.decision.name()))
                        .or_default() += 1;
                    if verdict.error.is_some() {
                        *f.gate_errors.entry(gate.clone()).or_default() += 1;
                    }
                    f.gate_seconds
                        .entry(gate)
                        .or_insert_with(|| Hist::new(GATE_BUCKETS))
                        .observe(verdict.micros as f64 / 1e6);
                }
                EventKind::Awaiting { awaiting } => {
                    awaits.insert(&awaiting.id, awaiting.since);
                }
                EventKind::Approved {
                    await_id: Some(id), ..
                } => {
                    if let Some(since) = awaits.get(id.as_str()) {
                        f.await_to_approval.observe(seconds_between(*since, e.at));
                    }
                }
                _ => {}
            }
        }
        f
    }
}

/// What a loop's ledger of firings says, as `/metrics` counts it.
#[derive(Debug, Clone)]
pub(crate) struct FireFigures {
    /// Firings by kind and why.
    pub firings: BTreeMap<(&'static str, String), u64>,
    /// How late each firing the daemon ran started after it fell due.
    pub lateness: Hist,
    /// When the last firing that was not missed fell due.
    pub last_firing: Option<Timestamp>,
}

impl FireFigures {
    fn of(fires: &[Fire]) -> FireFigures {
        let mut f = FireFigures {
            firings: BTreeMap::new(),
            lateness: Hist::new(SLOW_BUCKETS),
            last_firing: None,
        };
        for r in fires {
            *f.firings.entry((r.kind.as_str(), r.why.clone())).or_default() += r.count;
            if let (Kind::Ran, Some(started)) = (r.kind, r.started) {
                f.lateness.observe(seconds_between(r.at, started));
            }
            if r.kind != Kind::Missed {
                f.last_firing = f.last_firing.max(Some(r.last_at()));
            }
        }
        f
    }
}

/// What each loop's history and ledger gave, by loop name, with what they
/// were read at (the state's version, the ledger's mark): kept by a
/// long-lived server or daemon between scrapes.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    loops: Mutex<HashMap<String, Kept>>,
}

#[derive(Debug, Default)]
struct Kept {
    history: Option<(u64, Arc<HistoryFigures>)>,
    fires: Option<(String, Arc<FireFigures>)>,
}

impl Cache {
    /// The history figures of `dir` at state version `version`: those
    /// kept, or read now. A history that cannot be read gives none (and
    /// a warning); the next scrape tries again.
    fn history(&self, dir: &dyn LoopStore, version: u64) -> Option<Arc<HistoryFigures>> {
        let name = dir.name().to_string();
        if let Some((v, f)) = self.lock().get(&name).and_then(|k| k.history.as_ref())
            && *v == version
        {
            return Some(Arc::clone(f));
        }
        let figures = match dir.history() {
            Ok(h) => Arc::new(HistoryFigures::of(&h.events)),
            Err(e) => {
                tracing::warn!("/metrics: loop {name:?}: {}", crate::error::with_causes(&e));
                return None;
            }
        };
        self.lock().entry(name).or_default().history = Some((version, Arc::clone(&figures)));
        Some(figures)
    }

    /// The ledger figures of `dir` whose ledger has mark `mark`: those
    /// kept for that mark, or read now (without a mark, read every time).
    fn fires(&self, dir: &dyn LoopStore, mark: Option<String>) -> Arc<FireFigures> {
        let name = dir.name().to_string();
        if let Some(mark) = &mark
            && let Some((m, f)) = self.lock().get(&name).and_then(|k| k.fires.as_ref())
            && m == mark
        {
            return Arc::clone(f);
        }
        let fires = dir.fires(None).unwrap_or_else(|e| {
            tracing::warn!("/metrics: loop {name:?}: {}", crate::error::with_causes(&e));
            Vec::new()
        });
        let figures = Arc::new(FireFigures::of(&fires));
        if let Some(mark) = mark {
            self.lock().entry(name).or_default().fires = Some((mark, Arc::clone(&figures)));
        }
        figures
    }

    /// Forgets the loops not among `names` (removed since).
    fn keep_only(&self, names: &std::collections::HashSet<&str>) {
        self.lock().retain(|n, _| names.contains(n.as_str()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.loops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One loop's figures.
#[derive(Debug)]
pub(crate) struct LoopFigures {
    pub labels: Labels,
    /// As `list` shows it: a status, `invalid`, or `unreadable`.
    pub status: String,
    pub next_firing: Option<Timestamp>,
    pub last_firing: Option<Timestamp>,
    pub last_success: Option<Timestamp>,
    pub expected_interval: Option<f64>,
    pub consecutive_failures: Option<u32>,
    /// Whether an await is open (none when the state did not read).
    pub awaits_open: Option<u32>,
    pub awaiting_since: Option<Timestamp>,
    /// The step's metric totals.
    pub totals: BTreeMap<String, f64>,
    pub fires: Option<Arc<FireFigures>>,
    pub history: Option<Arc<HistoryFigures>>,
}

/// The statuses `automaton_loop_status` has a series for, each loop one.
pub(crate) const STATUSES: &[&str] = &[
    "active",
    "paused",
    "awaiting_approval",
    "halted",
    "completed",
    "invalid",
    "unreadable",
];

/// The figures of every loop the context's actor may see.
pub(crate) fn read(ctx: &Ctx, cache: &Cache) -> Result<Vec<LoopFigures>> {
    let seen = crate::ops::views::status::read_all(ctx)?;
    let now = crate::clock::now();
    let marks = match ctx.stores.fires_marks() {
        Some(Ok(marks)) => Some(marks),
        Some(Err(e)) => {
            tracing::warn!("/metrics: {}", crate::error::with_causes(&e));
            None
        }
        None => None,
    };
    let figures: Vec<LoopFigures> = seen
        .iter()
        .map(|s| {
            let mark = match &marks {
                Some(m) => m.get(s.dir.name().as_str()).cloned(),
                None => s.dir.fires_mark(),
            };
            of_loop(s, cache, mark, now)
        })
        .collect();
    let names = seen.iter().map(|s| s.dir.name().as_str()).collect();
    cache.keep_only(&names);
    Ok(figures)
}

/// The figures of one loop as the listing read it.
fn of_loop(seen: &Seen, cache: &Cache, fires_mark: Option<String>, now: Timestamp) -> LoopFigures {
    let dir = seen.dir.as_ref();
    let mut f = LoopFigures {
        labels: labels(dir.name().as_str(), seen.config.as_ref()),
        status: "unreadable".into(),
        next_firing: None,
        last_firing: None,
        last_success: None,
        expected_interval: None,
        consecutive_failures: None,
        awaits_open: None,
        awaiting_since: None,
        totals: BTreeMap::new(),
        fires: None,
        history: None,
    };
    let Listed::Loop(view) = &seen.listed else {
        return f;
    };
    from_view(&mut f, view);
    let fires = cache.fires(dir, fires_mark);
    f.last_firing = f.last_firing.max(fires.last_firing);
    f.fires = Some(fires);
    f.history = cache.history(dir, view.state.version);
    let history_success = f.history.as_ref().and_then(|h| h.last_success);
    f.last_success = f.last_success.max(history_success);
    let schedule = seen.config.as_ref().and_then(|c| c.schedule.as_ref());
    f.expected_interval = schedule
        .and_then(|s| When::of(s).ok())
        .and_then(|w| expected_interval(&w, f.last_firing, now));
    f
}

/// `loop="NAME"` and the loop's `[labels]`.
fn labels(name: &str, config: Option<&LoopConfig>) -> Labels {
    let mut labels = vec![("loop".to_owned(), name.to_owned())];
    if let Some(c) = config {
        labels.extend(c.labels.0.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    labels
}

/// What the state and the listing's view say.
fn from_view(f: &mut LoopFigures, view: &LoopView) {
    let state: &State = &view.state;
    f.status = view.shown_status();
    f.next_firing = view.next_due;
    f.awaits_open = Some(u32::from(state.awaiting.is_some()));
    f.awaiting_since = state.awaiting.as_ref().map(|a| a.since);
    f.totals = state.totals.clone();
    if let Some(t) = &state.last_tick {
        f.last_firing = Some(t.started_at);
        f.consecutive_failures = Some(state.consecutive_failures);
        if t.outcome == Outcome::Ran {
            f.last_success = Some(t.ended_at);
        }
    }
}

/// The time the schedule has between two firings now: an `every`'s
/// interval; for a cron expression, the longer of the time from the last
/// firing (or now, before any) to the next it calls for and the time from
/// that one to the one after. So a weekday schedule's weekend counts as
/// one long interval, and a tick run by hand between two firings does not
/// shorten it.
fn expected_interval(when: &When, last: Option<Timestamp>, now: Timestamp) -> Option<f64> {
    match when {
        When::Every(d) => Some(d.as_secs_f64()),
        When::Cron(_) => {
            let from = last.unwrap_or(now);
            let next = when.after(from, from)?;
            let after = when.after(next, next)?;
            Some(seconds_between(from, next).max(seconds_between(next, after)))
        }
    }
}

/// Seconds from `a` to `b`, never negative.
pub(crate) fn seconds_between(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_millisecond() - a.as_millisecond()).max(0) as f64 / 1000.0
}

/// A timestamp as Prometheus's seconds since the epoch.
pub(crate) fn epoch_seconds(t: Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_buckets_each_observation_once() {
        let mut h = Hist::new(&[1.0, 10.0]);
        for v in [0.5, 1.0, 3.0, 100.0] {
            h.observe(v);
        }
        assert_eq!(h.buckets(), vec![(1.0, 2), (10.0, 1), (f64::INFINITY, 1)]);
        assert_eq!(h.count, 4);
    }

    #[test]
    fn a_weekday_crons_weekend_is_one_long_interval() {
        let s = crate::config::Schedule {
            cadence: crate::config::Cadence::Cron("0 9 * * 1-5".into()),
            jitter: None,
            timezone: Some("UTC".into()),
        };
        let when = When::of(&s).unwrap();
        let friday: Timestamp = "2026-01-02T09:00:00Z".parse().unwrap();
        let monday: Timestamp = "2026-01-05T09:00:00Z".parse().unwrap();
        let saturday: Timestamp = "2026-01-03T12:00:00Z".parse().unwrap();
        assert_eq!(
            expected_interval(&when, Some(friday), saturday),
            Some(3.0 * 86400.0)
        );
        assert_eq!(expected_interval(&when, Some(monday), monday), Some(86400.0));
        let by_hand: Timestamp = "2026-01-05T10:02:30Z".parse().unwrap();
        assert_eq!(expected_interval(&when, Some(by_hand), by_hand), Some(86400.0));
    }
}
