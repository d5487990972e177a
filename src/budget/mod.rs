//! The spend governor (docs/budgets.md): the budgets a loop belongs to, and
//! the root-wide ledger of what each budget's current window has spent and
//! what ticks hold reserved. A tick reserves its `max_per_tick` in every
//! budget before its step runs ([`reserve`]) and settles it with the
//! reported cost after ([`settle`]); a tick that died holding a
//! reservation is settled at it by the loop's next tick.
//!
//! The ledger is `<root>/budgets/ledger.json`, replaced atomically while
//! `<root>/budgets/ledger.lock` is held. Lock order: the ledger's lock is
//! taken only while the loop's lock is held (a tick's), or by a command
//! that holds no loop's lock (`budget`), and never the reverse: nothing
//! waits for a loop's lock while holding the ledger's.

pub mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use spec::{BudgetSpec, OnCap, Scope, Unreported, Window};

use crate::config::LoopConfig;
use crate::error::{Error, Result};
use crate::history::EventKind;

/// The most a ledger file may hold.
const LEDGER_MAX: u64 = 16 * 1024 * 1024;

/// A budget a loop belongs to: its spec, and the account its spend is kept
/// in (`NAME` for a group's or the root's, `NAME@LOOP` for one loop's of the
/// root's, `LOOP:NAME` for one a loop.toml declares).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub account: String,
    pub spec: BudgetSpec,
}

/// The budgets the loop `name` (with `config`) belongs to: the root's whose
/// scope takes it in, then its own.
pub(crate) fn of_loop(root_budgets: &[BudgetSpec], name: &str, config: &LoopConfig) -> Vec<Member> {
    let mut out = Vec::new();
    for b in root_budgets {
        let account = match &b.scope {
            Scope::Root => b.name.clone(),
            Scope::Group(g) if config.group.as_deref() == Some(g.as_str()) => b.name.clone(),
            Scope::Group(_) => continue,
            Scope::Loop => format!("{}@{name}", b.name),
        };
        out.push(Member {
            account,
            spec: b.clone(),
        });
    }
    for b in &config.budgets {
        out.push(Member {
            account: format!("{name}:{}", b.name),
            spec: b.clone(),
        });
    }
    out
}

/// The ledger: each account's current window, and the reservations held.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub accounts: BTreeMap<String, Account>,
    #[serde(default)]
    pub holds: Vec<Hold>,
    /// Each loop's last settlement of its own tick, until the loop's next
    /// tick: a power loss may take the tick's record (and its `in_flight`
    /// mark, never synced) while the settlement, written before them, stays;
    /// the next tick, which then has the same number, records it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settled: Vec<Settled>,
}

/// A tick's settlement, as its `budget-settled` event has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub tick: u64,
    pub reserved: f64,
    pub costs: BTreeMap<String, f64>,
}

/// What one budget's current window has spent (settled ticks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub spent: f64,
}

/// A tick's reservation, held while its step runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub tick: u64,
    pub amount: f64,
    pub at: Timestamp,
    /// The accounts it is held in, each with the start of the window it
    /// was taken in (a hold counts in that window only).
    pub accounts: Vec<(String, i64)>,
}

/// One budget as a tick or an operator sees it now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    pub name: String,
    pub account: String,
    pub metric: String,
    pub window: String,
    pub scope: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    pub spent: f64,
    pub reserved: f64,
    pub cap: f64,
    pub on_cap: OnCap,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_start_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_end_ms: Option<i64>,
}

impl Ledger {
    /// Starts every account of `members` whose window has ended over, in
    /// the window that holds `now`.
    fn roll(&mut self, members: &[Member], now: Timestamp) {
        for m in members {
            let Some((start, end)) = spec::bounds(&m.spec.window, m.spec.tz.as_ref(), now) else {
                continue;
            };
            let acct = self.accounts.entry(m.account.clone()).or_insert(Account {
                window_start_ms: start,
                window_end_ms: end,
                spent: 0.0,
            });
            if acct.window_start_ms != start {
                *acct = Account {
                    window_start_ms: start,
                    window_end_ms: end,
                    spent: 0.0,
                };
            }
        }
    }

    /// What is held in `account`'s window that starts at `start`.
    fn reserved(&self, account: &str, start: Option<i64>) -> f64 {
        self.holds
            .iter()
            .flat_map(|h| h.accounts.iter().map(move |a| (h.amount, a)))
            .filter(|(_, (a, s))| a == account && Some(*s) == start)
            // A fold from 0.0: an empty sum of f64 is -0.0.
            .fold(0.0, |sum, (amount, _)| sum + amount)
    }

    /// `m` now, after [`Ledger::roll`].
    pub fn standing(&self, m: &Member, now: Timestamp) -> Standing {
        let window = spec::bounds(&m.spec.window, m.spec.tz.as_ref(), now);
        let acct = self
            .accounts
            .get(&m.account)
            .filter(|a| Some(a.window_start_ms) == window.map(|w| w.0));
        Standing {
            name: m.spec.name.clone(),
            account: m.account.clone(),
            metric: m.spec.metric.clone(),
            window: m.spec.window.to_string(),
            scope: m.spec.scope.clone().into(),
            tz: m.spec.tz.as_ref().map(|t| t.name.clone()),
            spent: acct.map_or(0.0, |a| a.spent),
            reserved: self.reserved(&m.account, window.map(|w| w.0)),
            cap: m.spec.cap.0,
            on_cap: m.spec.on_cap,
            window_start_ms: window.map(|w| w.0),
            window_end_ms: window.map(|w| w.1),
        }
    }

    /// Settles the hold of `loop_name`'s tick `tick` (or, with `None`, any
    /// it holds: ticks that died, at their amount), each account at what
    /// `cost` says for its metric and the hold's amount, added to the
    /// window it was taken in. The events it makes.
    fn settle(
        &mut self,
        members: &[Member],
        loop_name: &str,
        tick: Option<u64>,
        cost: &dyn Fn(&str, f64) -> f64,
    ) -> Vec<EventKind> {
        let mut events = Vec::new();
        let (settled, kept): (Vec<Hold>, Vec<Hold>) = std::mem::take(&mut self.holds)
            .into_iter()
            .partition(|h| h.loop_name == loop_name && tick.is_none_or(|t| h.tick == t));
        self.holds = kept;
        for h in settled {
            let mut costs = BTreeMap::new();
            for (account, start) in &h.accounts {
                let member = members.iter().find(|m| &m.account == account);
                let c = match (member, tick) {
                    (Some(m), Some(_)) => cost(&m.spec.metric, h.amount),
                    _ => h.amount,
                };
                costs.insert(account.clone(), c);
                let Some(acct) = self
                    .accounts
                    .get_mut(account)
                    .filter(|a| a.window_start_ms == *start)
                else {
                    continue;
                };
                let before = acct.spent;
                acct.spent += c;
                if let Some(m) = member
                    && let Some(warn) = m.spec.warn_at
                {
                    let at = warn.0 * m.spec.cap.0;
                    if before < at && acct.spent >= at {
                        events.push(EventKind::BudgetWarning {
                            budget: m.spec.name.clone(),
                            window: m.spec.window.to_string(),
                            spent: acct.spent,
                            cap: m.spec.cap.0,
                            warn_at: warn.0,
                        });
                    }
                }
            }
            // A tick window counts each tick by itself: a cost past its cap is said.
            if tick.is_some() {
                for m in members.iter().filter(|m| m.spec.window == Window::Tick) {
                    let c = cost(&m.spec.metric, h.amount);
                    if c > m.spec.cap.0 {
                        events.push(EventKind::BudgetWarning {
                            budget: m.spec.name.clone(),
                            window: "tick".to_owned(),
                            spent: c,
                            cap: m.spec.cap.0,
                            warn_at: 1.0,
                        });
                    }
                }
            }
            if tick.is_some() {
                self.settled.retain(|s| s.loop_name != loop_name);
                self.settled.push(Settled {
                    loop_name: loop_name.to_owned(),
                    tick: h.tick,
                    reserved: h.amount,
                    costs: costs.clone(),
                });
            }
            events.push(EventKind::BudgetSettled {
                tick: h.tick,
                reserved: h.amount,
                costs,
                died: tick.is_none(),
            });
        }
        events
    }

    /// Before `loop_name`'s tick `tick` reserves: its last settlement
    /// whose tick has the same number or a later one, as the event a
    /// dead tick's settlement is (its record was lost with the tick's
    /// number); the loop's older ones, whose records stand, are let go.
    fn unrecorded(&mut self, loop_name: &str, tick: u64) -> Vec<EventKind> {
        let (mine, others): (Vec<Settled>, Vec<Settled>) = std::mem::take(&mut self.settled)
            .into_iter()
            .partition(|s| s.loop_name == loop_name);
        self.settled = others;
        mine.into_iter()
            .filter(|s| s.tick >= tick)
            .map(|s| EventKind::BudgetSettled {
                tick: s.tick,
                reserved: s.reserved,
                costs: s.costs,
                died: true,
            })
            .collect()
    }
}

/// A reservation refused: the budget it did not fit in, as it stood.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub standing: Standing,
    pub amount: f64,
}

impl Refusal {
    /// The reason a tick gives: the budget, its window, the spend and the cap.
    pub fn reason(&self) -> String {
        let s = &self.standing;
        let window = match s
            .window_end_ms
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        {
            Some(end) => format!("{} window to {end}", s.window),
            None => format!("{} window", s.window),
        };
        format!(
            "budget {} ({window}): spent {:.2} and reserved {:.2} of {} {:.2}; this tick's {:.2} does not fit",
            s.name, s.spent, s.reserved, s.metric, s.cap, self.amount
        )
    }
}

/// What [`reserve`] did.
#[derive(Debug)]
pub struct Reserved {
    /// Settlements of ticks that died holding reservations, and the
    /// reservation's own event when it was taken.
    pub events: Vec<EventKind>,
    /// `None`: held; else the first budget it did not fit in.
    pub refused: Option<Refusal>,
}

/// Where a root's ledger is kept: its file, or a store shared by hosts.
#[derive(Clone, Copy)]
pub enum Place<'a> {
    File(&'a Path),
    Shared(&'a dyn SharedLedger),
}

impl<'a> Place<'a> {
    /// The ledger of the root at `root` whose store keeps `shared`.
    pub fn of(root: &'a Path, shared: Option<&'a dyn SharedLedger>) -> Place<'a> {
        shared.map_or(Place::File(root), Place::Shared)
    }
}

/// An account as a reservation names it: its window now, and its cap.
#[derive(Debug, Clone)]
pub struct Window4 {
    pub account: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub cap: f64,
}

/// What a shared ledger's reservation answered.
#[derive(Debug, Clone)]
pub struct RawReserve {
    /// The index of the first account it did not fit in.
    pub refused: Option<usize>,
    pub spent: f64,
    pub reserved: f64,
    /// The holds of ticks that died, settled at their amounts.
    pub dead: Vec<(u64, f64)>,
}

/// One account a shared ledger settled a hold in.
#[derive(Debug, Clone)]
pub struct RawSettled {
    pub account: String,
    pub amount: f64,
    pub before: f64,
    pub after: f64,
}

/// A ledger kept by a store that hosts share (PostgreSQL): each change in
/// one round trip, checked and made atomically.
pub trait SharedLedger: Send + Sync {
    fn reserve(
        &self,
        loop_name: &str,
        tick: u64,
        amount: f64,
        force: bool,
        accounts: &[Window4],
    ) -> Result<RawReserve>;
    fn settle(&self, loop_name: &str, tick: u64, costs: &[(String, f64)]) -> Result<Vec<RawSettled>>;
    fn release(&self, loop_name: &str, tick: u64) -> Result<()>;
    /// These accounts, and the holds in any of them.
    fn read(&self, accounts: &[String]) -> Result<Ledger>;
    /// Starts these accounts' spend over: what each had spent.
    fn reset(&self, accounts: &[String]) -> Result<BTreeMap<String, f64>>;
}

/// The ledger file of the root at `root`.
pub fn ledger_path(root: &Path) -> PathBuf {
    root.join("budgets").join("ledger.json")
}

/// Runs `f` on the ledger under its lock, and replaces the file when `f`
/// says it changed it.
pub fn with_ledger<T>(root: &Path, f: impl FnOnce(&mut Ledger) -> (T, bool)) -> Result<T> {
    let dir = root.join("budgets");
    if !dir.is_dir() {
        crate::fsx::create_dirs(&dir)?;
    }
    let lock_path = dir.join("ledger.lock");
    let (lock, _) = crate::fsx::open_rw(&lock_path)?;
    lock.lock().map_err(Error::io("locking", lock_path.clone()))?;
    // A temporary file left here is a writer's that died before its
    // rename: every writer holds the lock.
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(crate::fsx::TMP_PREFIX)
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let path = ledger_path(root);
    let mut ledger = match crate::fsx::read_regular(&path, LEDGER_MAX)? {
        None => Ledger::default(),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::CorruptState {
            path: path.clone(),
            reason: e.to_string(),
        })?,
    };
    let (out, changed) = f(&mut ledger);
    if changed {
        let mut bytes = serde_json::to_vec_pretty(&ledger).expect("a ledger serialises");
        bytes.push(b'\n');
        crate::fsx::write_file(&dir, &path, &bytes)?;
    }
    // The lock goes with the handle.
    drop(lock);
    Ok(out)
}

/// Reserves `amount` for `loop_name`'s tick `tick` in every budget of
/// `members`, after settling any reservation a dead tick of the loop left
/// at its amount. Refused (nothing held) when it does not fit in one of
/// them, unless `force` (a person approved spending past the cap).
pub fn reserve(
    place: Place<'_>,
    members: &[Member],
    loop_name: &str,
    tick: u64,
    amount: f64,
    force: bool,
) -> Result<Reserved> {
    let now = crate::clock::now();
    let root = match place {
        Place::File(root) => root,
        Place::Shared(db) => return reserve_shared(db, members, loop_name, tick, amount, force, now),
    };
    with_ledger(root, |ledger| {
        let mut events = ledger.unrecorded(loop_name, tick);
        events.extend(ledger.settle(members, loop_name, None, &|_, amount| amount));
        ledger.roll(members, now);
        if !force {
            for m in members {
                let s = ledger.standing(m, now);
                let fits = if m.spec.window == Window::Tick {
                    amount <= s.cap
                } else {
                    s.spent + s.reserved + amount <= s.cap && (amount > 0.0 || s.spent < s.cap)
                };
                if !fits {
                    let changed = !events.is_empty();
                    events.push(EventKind::BudgetCapped {
                        tick,
                        budget: s.name.clone(),
                        window: s.window.clone(),
                        spent: s.spent,
                        reserved: s.reserved,
                        cap: s.cap,
                        amount,
                        on_cap: m.spec.on_cap,
                    });
                    return (
                        Reserved {
                            events,
                            refused: Some(Refusal { standing: s, amount }),
                        },
                        changed,
                    );
                }
            }
        }
        let accounts: Vec<(String, i64)> = members
            .iter()
            .filter_map(|m| {
                Some((
                    m.account.clone(),
                    ledger.accounts.get(&m.account)?.window_start_ms,
                ))
            })
            .collect();
        events.push(EventKind::BudgetReserved {
            tick,
            amount,
            budgets: accounts.iter().map(|(a, _)| a.clone()).collect(),
            approved: force,
        });
        ledger.holds.push(Hold {
            loop_name: loop_name.to_owned(),
            tick,
            amount,
            at: now,
            accounts,
        });
        (
            Reserved {
                events,
                refused: None,
            },
            true,
        )
    })
}

/// Settles `loop_name`'s tick `tick`: in each budget at the cost its
/// metric has in `metrics` (reported, or priced by `pricing`), else
/// (nothing reported) at the reservation or at zero as `unreported` says.
pub fn settle(
    place: Place<'_>,
    members: &[Member],
    loop_name: &str,
    tick: u64,
    metrics: &BTreeMap<String, f64>,
    pricing: &Pricing,
    unreported: Unreported,
) -> Result<Vec<EventKind>> {
    let root = match place {
        Place::File(root) => root,
        Place::Shared(db) => {
            let cost = |metric: &str| match (cost_of(metrics, metric, pricing), unreported) {
                (Some(c), _) => Some(c),
                (None, Unreported::Reservation) => None,
                (None, Unreported::Zero) => Some(0.0),
            };
            return settle_shared(db, members, loop_name, tick, &cost);
        }
    };
    with_ledger(root, |ledger| {
        let cost = |metric: &str, amount: f64| match (cost_of(metrics, metric, pricing), unreported) {
            (Some(c), _) => c,
            (None, Unreported::Reservation) => amount,
            (None, Unreported::Zero) => 0.0,
        };
        let events = ledger.settle(members, loop_name, Some(tick), &cost);
        let changed = !events.is_empty();
        (events, changed)
    })
}

/// Each of `members` as it stands now (read under the ledger's lock; a
/// missing ledger is an empty one, and is not made).
pub fn standings(place: Place<'_>, members: &[Member]) -> Result<Vec<Standing>> {
    let now = crate::clock::now();
    let ledger = read_accounts(place, members.iter())?;
    Ok(members.iter().map(|m| ledger.standing(m, now)).collect())
}

/// The ledger with (at least) the accounts of `members`: the whole file on
/// the file store, one query for those accounts on a shared one.
fn read_accounts<'a>(place: Place<'_>, members: impl Iterator<Item = &'a Member>) -> Result<Ledger> {
    let root = match place {
        Place::File(root) => root,
        Place::Shared(db) => {
            let mut accounts: Vec<String> = members.map(|m| m.account.clone()).collect();
            accounts.sort_unstable();
            accounts.dedup();
            return db.read(&accounts);
        }
    };
    let path = ledger_path(root);
    Ok(match crate::fsx::read_regular(&path, LEDGER_MAX)? {
        None => Ledger::default(),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::CorruptState {
            path: path.clone(),
            reason: e.to_string(),
        })?,
    })
}

/// Starts the loop's own accounts (`NAME@LOOP`, `LOOP:NAME`) over: what
/// each had spent, by budget name. Shared budgets are left as they are.
pub fn reset_own(place: Place<'_>, members: &[Member], loop_name: &str) -> Result<BTreeMap<String, f64>> {
    let root = match place {
        Place::File(root) => root,
        Place::Shared(db) => {
            let own: Vec<&Member> = members.iter().filter(|m| m.account != m.spec.name).collect();
            let accounts: Vec<String> = own.iter().map(|m| m.account.clone()).collect();
            let reset = db.reset(&accounts)?;
            return Ok(own
                .iter()
                .filter_map(|m| Some((m.spec.name.clone(), *reset.get(&m.account)?)))
                .collect());
        }
    };
    with_ledger(root, |ledger| {
        let mut reset = BTreeMap::new();
        for m in members.iter().filter(|m| m.account != m.spec.name) {
            if let Some(a) = ledger.accounts.get_mut(&m.account)
                && a.spent != 0.0
            {
                reset.insert(m.spec.name.clone(), a.spent);
                a.spent = 0.0;
            }
        }
        let _ = loop_name;
        let changed = !reset.is_empty();
        (reset, changed)
    })
}

/// `[pricing]` of automaton.toml: for a budget's metric (`cost_usd`), the
/// price of one unit of each metric a step may report instead
/// (`input_tokens = 0.000003`).
pub type Pricing = BTreeMap<String, BTreeMap<String, spec::Cap>>;

/// What the step of a tick cost in `metric`: as it reported it, else
/// priced from what it reported by `pricing`'s table for `metric` (when
/// it reported one of the metrics priced); `None` when neither.
pub fn cost_of(metrics: &BTreeMap<String, f64>, metric: &str, pricing: &Pricing) -> Option<f64> {
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    if let Some(v) = metrics.get(metric).copied().filter(|v| ok(*v)) {
        return Some(v);
    }
    let prices = pricing.get(metric)?;
    let priced: Vec<f64> = prices
        .iter()
        .filter_map(|(k, price)| Some(metrics.get(k).copied().filter(|v| ok(*v))? * price.0))
        .collect();
    if priced.is_empty() {
        return None;
    }
    Some(priced.iter().fold(0.0, |sum, v| sum + v)).filter(|v| ok(*v))
}

/// Drops `loop_name`'s tick `tick`'s reservation without counting it: the
/// tick did not run its step after all (its await was not released).
pub fn release(place: Place<'_>, loop_name: &str, tick: u64) -> Result<()> {
    let root = match place {
        Place::File(root) => root,
        Place::Shared(db) => return db.release(loop_name, tick),
    };
    with_ledger(root, |ledger| {
        let before = ledger.holds.len();
        ledger
            .holds
            .retain(|h| !(h.loop_name == loop_name && h.tick == tick));
        ((), ledger.holds.len() != before)
    })
}

/// The budgets the loop `name` (with `config`) belongs to, as gates and
/// listings see them now. A ledger that cannot be read shows none (said
/// as a warning): what reads this decides nothing by itself.
pub(crate) fn for_gate(
    root: &crate::root::Root,
    shared: Option<&dyn SharedLedger>,
    name: &str,
    config: &LoopConfig,
) -> Vec<crate::domain::GateBudget> {
    let members = of_loop(&root.settings().budgets, name, config);
    standings_for_gate(Place::of(root.path(), shared), &members, name)
}

/// [`for_gate`] for a loop whose budgets, `members`, are already known
/// (a tick's).
pub(crate) fn standings_for_gate(
    place: Place<'_>,
    members: &[Member],
    name: &str,
) -> Vec<crate::domain::GateBudget> {
    if members.is_empty() {
        return Vec::new();
    }
    match standings(place, members) {
        Ok(s) => s.into_iter().map(gate_budget).collect(),
        Err(e) => {
            tracing::warn!("loop {name:?}: its budgets are not shown: {e}");
            Vec::new()
        }
    }
}

/// [`for_gate`] for many loops at once, `(name, config)` each, with one
/// read of the ledger (one query on a shared one) rather than one a loop:
/// a listing's.
pub(crate) fn for_gates(
    root: &crate::root::Root,
    shared: Option<&dyn SharedLedger>,
    loops: &[(&str, &LoopConfig)],
) -> Vec<Vec<crate::domain::GateBudget>> {
    let members: Vec<Vec<Member>> = loops
        .iter()
        .map(|(name, config)| of_loop(&root.settings().budgets, name, config))
        .collect();
    if members.iter().all(Vec::is_empty) {
        return vec![Vec::new(); loops.len()];
    }
    let now = crate::clock::now();
    match read_accounts(Place::of(root.path(), shared), members.iter().flatten()) {
        Ok(ledger) => members
            .iter()
            .map(|ms| ms.iter().map(|m| gate_budget(ledger.standing(m, now))).collect())
            .collect(),
        Err(e) => {
            tracing::warn!("the loops' budgets are not shown: {e}");
            vec![Vec::new(); loops.len()]
        }
    }
}

fn gate_budget(s: Standing) -> crate::domain::GateBudget {
    crate::domain::GateBudget {
        name: s.name,
        metric: s.metric,
        window: s.window,
        spent: s.spent,
        reserved: s.reserved,
        cap: s.cap,
        window_end_ms: s.window_end_ms,
    }
}

/// [`reserve`] on a shared ledger: the tick windows checked here, every
/// other budget by the store in one round trip.
fn reserve_shared(
    db: &dyn SharedLedger,
    members: &[Member],
    loop_name: &str,
    tick: u64,
    amount: f64,
    force: bool,
    now: Timestamp,
) -> Result<Reserved> {
    let mut events = Vec::new();
    let capped = |m: &Member, spent: f64, reserved: f64, window: Option<(i64, i64)>| {
        let standing = Standing {
            name: m.spec.name.clone(),
            account: m.account.clone(),
            metric: m.spec.metric.clone(),
            window: m.spec.window.to_string(),
            scope: m.spec.scope.clone().into(),
            tz: m.spec.tz.as_ref().map(|t| t.name.clone()),
            spent,
            reserved,
            cap: m.spec.cap.0,
            on_cap: m.spec.on_cap,
            window_start_ms: window.map(|w| w.0),
            window_end_ms: window.map(|w| w.1),
        };
        let event = EventKind::BudgetCapped {
            tick,
            budget: m.spec.name.clone(),
            window: m.spec.window.to_string(),
            spent,
            reserved,
            cap: m.spec.cap.0,
            amount,
            on_cap: m.spec.on_cap,
        };
        (Refusal { standing, amount }, event)
    };
    if !force
        && let Some(m) = members
            .iter()
            .find(|m| m.spec.window == Window::Tick && amount > m.spec.cap.0)
    {
        let (refusal, event) = capped(m, 0.0, 0.0, None);
        events.push(event);
        return Ok(Reserved {
            events,
            refused: Some(refusal),
        });
    }
    let windowed: Vec<(&Member, Window4)> = members
        .iter()
        .filter_map(|m| {
            let (start_ms, end_ms) = spec::bounds(&m.spec.window, m.spec.tz.as_ref(), now)?;
            Some((
                m,
                Window4 {
                    account: m.account.clone(),
                    start_ms,
                    end_ms,
                    cap: m.spec.cap.0,
                },
            ))
        })
        .collect();
    let accounts: Vec<Window4> = windowed.iter().map(|(_, w)| w.clone()).collect();
    let raw = db.reserve(loop_name, tick, amount, force, &accounts)?;
    for (dead, held) in &raw.dead {
        events.push(EventKind::BudgetSettled {
            tick: *dead,
            reserved: *held,
            costs: accounts.iter().map(|a| (a.account.clone(), *held)).collect(),
            died: true,
        });
    }
    if let Some(i) = raw.refused
        && let Some((m, w)) = windowed.get(i)
    {
        let (refusal, event) = capped(m, raw.spent, raw.reserved, Some((w.start_ms, w.end_ms)));
        events.push(event);
        return Ok(Reserved {
            events,
            refused: Some(refusal),
        });
    }
    events.push(EventKind::BudgetReserved {
        tick,
        amount,
        budgets: accounts.iter().map(|a| a.account.clone()).collect(),
        approved: force,
    });
    Ok(Reserved {
        events,
        refused: None,
    })
}

/// [`settle`] on a shared ledger: `cost` gives each budget's metric's
/// cost (`None`: the reservation).
fn settle_shared(
    db: &dyn SharedLedger,
    members: &[Member],
    loop_name: &str,
    tick: u64,
    cost: &dyn Fn(&str) -> Option<f64>,
) -> Result<Vec<EventKind>> {
    let costs: Vec<(String, f64)> = members
        .iter()
        .filter(|m| m.spec.window != Window::Tick)
        .filter_map(|m| Some((m.account.clone(), cost(&m.spec.metric)?)))
        .collect();
    let settled = db.settle(loop_name, tick, &costs)?;
    let mut events = Vec::new();
    let mut by_account = BTreeMap::new();
    let mut reserved = 0.0;
    for s in &settled {
        reserved = s.amount;
        by_account.insert(s.account.clone(), s.after - s.before);
        if let Some(m) = members.iter().find(|m| m.account == s.account)
            && let Some(warn) = m.spec.warn_at
        {
            let at = warn.0 * m.spec.cap.0;
            if s.before < at && s.after >= at {
                events.push(EventKind::BudgetWarning {
                    budget: m.spec.name.clone(),
                    window: m.spec.window.to_string(),
                    spent: s.after,
                    cap: m.spec.cap.0,
                    warn_at: warn.0,
                });
            }
        }
    }
    for m in members.iter().filter(|m| m.spec.window == Window::Tick) {
        if let Some(c) = cost(&m.spec.metric)
            && c > m.spec.cap.0
        {
            events.push(EventKind::BudgetWarning {
                budget: m.spec.name.clone(),
                window: "tick".to_owned(),
                spent: c,
                cap: m.spec.cap.0,
                warn_at: 1.0,
            });
        }
    }
    if !settled.is_empty() {
        events.push(EventKind::BudgetSettled {
            tick,
            reserved,
            costs: by_account,
            died: false,
        });
    }
    Ok(events)
}
