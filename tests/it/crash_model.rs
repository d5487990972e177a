//! A power loss at every point, modelled as ALICE does (Pillai et al.,
//! "All File Systems Are Not Created Equal", OSDI 2014): a real `tick`, a
//! real `approve` and a real `pause` that records a dead tick are run
//! under `strace -f -y -xx`, their calls on the loop's directory (and on
//! the root's `budgets/`, where a budgeted tick reserves and settles in
//! the ledger) become steps (metadata operations, data writes, syncs; `fs`), and for a crash
//! after each step every state ext4 may leave under the rules below is
//! built (`states`), written into a copy of the root, read with `status
//! --json` and `history --json`, recovered with one command and checked
//! with `invariants`' checks.
//!
//! The rules, ext4's default mode (`data=ordered`, `auto_da_alloc`, one
//! journal), stated conservatively (a state they allow that ext4 would not
//! leave can only make the test fail, never pass):
//!
//! - Metadata operations (a file or directory made, a rename, an
//!   exchange, an unlink, a size set by `ftruncate`, `O_TRUNC` or
//!   `fallocate`) are journaled in program order: a crash leaves a prefix
//!   of them.
//! - A sync makes durable a prefix: `fsync` of a file or a directory all
//!   operations up to the last that touched it (its name, its size, the
//!   entries in it); `fdatasync` those up to the last that made the file
//!   or set its size; either one, of a file that grew since it was last
//!   synced, all operations so far (the new size is logged at the sync,
//!   in the transaction every earlier operation is in). A file's new
//!   directory entry is so durable only after a sync of its directory, or
//!   a later sync whose commit carries it.
//! - A write is durable once its file is synced. Before, it may be lost
//!   whole or in part: tried are all of it, none, and its first half (cut
//!   at the 4 KiB boundary nearest its middle, or mid-write when it spans
//!   none: a torn sector), every combination for up to three unsynced
//!   writes, and for more, the writes kept in order up to one (whole or
//!   half) and each one alone lost or half.
//! - `auto_da_alloc`: a `rename` that replaces a file flushes the renamed
//!   file's data before the rename commits, so where the rename is on
//!   disk its file's earlier writes are too. (The store does not rely on
//!   it: it syncs the file first.) Not for `RENAME_EXCHANGE`.
//! - What the command found is durable: every state starts from the
//!   directory as it was before the command ran.
//! - A power loss reboots the machine: a `released <boot id>` line in the
//!   lock file names another boot afterwards, as it would.
//!
//! Not modelled: blocks of one write reaching the disk out of order beyond
//! the one cut point, a write lost while a later write to the same file
//! before the same sync is kept beyond the combinations above, a rename's
//! source and target directories journaled apart, files outside the loop's
//! directory and the root's `budgets/` (whose own entry in the root, when
//! a command makes it, is taken as the loop directory's), and a disk that
//! loses what it acknowledged as flushed.
//!
//! Each state is checked against what was promised by the time of the
//! crash: the version is never behind the one readers reported right
//! after the last `fsync` of the loop directory the command completed
//! before the crash, nor, once the command has exited 0, behind the one
//! it committed (nor, after recovery, behind what readers reported before
//! it); an approval `approve` acknowledged counts once the crash
//! comes after the `fsync` of the directory that ended its commit; and
//! every check of `invariants` holds after the recovering command. The
//! `in_flight` record's commit is relaxed (never synced), so losing it may
//! make a tick number be used again: allowed, as long as state and
//! history agree. With a budget, the ledger must parse in every state and
//! count (spent and held) at least what history says was settled and at
//! most one reservation more (the command's tick); once the step may have
//! run (its first write), its reservation or its settlement must be
//! there; and after the next tick, at most one reservation more than
//! history settled for each tick recorded as crashed. Every violating state is reported with its crash point and the
//! writes it lost.
//!
//! Gated on strace like `crash`: skipped, saying so, unless
//! `AUTOMATON_REQUIRE_STRACE=1`.

mod fs;
mod states;
mod trace;

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::BIN;
use crate::crash::{crashed, strace_usable, ticked};
use crate::invariants::{Audit, Scratch, approval_id};
use fs::{Kind, Recording, Tree};
use states::Crash;

/// The calls that may change a file (those an architecture lacks marked
/// `?`). A descriptor's path comes with each call (`-y`), so `close` and
/// `dup` need not be traced.
const TRACED: &[&str] = &[
    "openat",
    "?open",
    "?creat",
    "write",
    "writev",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "lseek",
    "ftruncate",
    "truncate",
    "fallocate",
    "fsync",
    "fdatasync",
    "?rename",
    "?renameat",
    "renameat2",
    "?link",
    "linkat",
    "?unlink",
    "unlinkat",
    "?rmdir",
    "?mkdir",
    "mkdirat",
];

/// At most this many distinct states are checked per command; beyond, an
/// evenly spread subset is (and the report says so).
const MAX_STATES: usize = 400;

/// Checks run side by side.
const WORKERS: usize = 2;

/// One command to record, where it starts from and how it is recovered.
struct Scenario {
    name: &'static str,
    template: fn() -> (Scratch, String),
    command: &'static [&'static str],
    recover: &'static [&'static str],
    /// Whether the loop spends into a budget: the root's `budgets/` is
    /// traced too, and the ledger checked in every state.
    budgeted: bool,
}

/// The name the root's `budgets/` directory has in a recorded tree (beside
/// the loop directory's own names).
const BUDGETS: &str = "@budgets";

/// The tree of `s`'s loop `l` and, under [`BUDGETS`], of its root's
/// `budgets/` when there is one.
fn read_trees(s: &Scratch) -> Tree {
    let mut tree = fs::read_tree(&s.loop_dir("l"));
    let budgets = s.root.join("budgets");
    if budgets.is_dir() {
        tree.insert(BUDGETS.to_owned(), None);
        for (rel, content) in fs::read_tree(&budgets) {
            tree.insert(format!("{BUDGETS}/{rel}"), content);
        }
    }
    tree
}

/// What a crash after some step may not break.
struct Promise {
    /// The version readers must see at least.
    floor: u64,
    /// Approvals that must be pending or used.
    acked: Vec<String>,
    /// With a budget: the least the ledger must count (spent and held) in
    /// the loop's account, once the step may have run (its reservation
    /// must be there, or its settlement).
    spend_floor: f64,
}

/// The recorded run, and what it promised when.
struct Recorded {
    rec: Recording,
    /// The crash point from which the step may have run (its first write
    /// of its metrics), and what the ledger counted before the command
    /// plus the reservation the command's tick holds.
    step_from: Option<usize>,
    spend_after_step: f64,
    /// Base version, then for each sync of the loop directory the crash
    /// point after it and the version readers reported there.
    floors: Vec<(usize, u64)>,
    /// The approval `approve` acknowledged, if it did.
    acked_now: Option<String>,
    acked_before: String,
}

impl Recorded {
    fn promise(&self, k: usize) -> Promise {
        let floor = self
            .floors
            .iter()
            .rev()
            .find(|(p, _)| *p <= k)
            .map_or(0, |&(_, v)| v);
        let mut acked = vec![self.acked_before.clone()];
        // The point the command's commit was durable: the last sync of
        // the directory, else its exit.
        let n = self.rec.steps.len();
        let syncs = self.floors.iter().map(|&(p, _)| p).filter(|&p| p > 0 && p < n);
        let durable = syncs.max().unwrap_or(n);
        if let Some(id) = &self.acked_now
            && k >= durable
        {
            acked.push(id.clone());
        }
        let spend_floor = match self.step_from {
            Some(from) if k > from => self.spend_after_step,
            _ => 0.0,
        };
        Promise {
            floor,
            acked,
            spend_floor,
        }
    }
}

/// Runs `command` on a copy of `template` under strace and reads the trace
/// into steps, checking that replaying them whole gives what the command
/// left. Returns the steps and the command's stdout.
fn record(template: &Scratch, command: &[&str]) -> (Recording, String) {
    let s = Scratch::copy_of(template);
    let dir = s.loop_dir("l");
    let start = read_trees(&s);
    let out_dir = tempfile::tempdir().unwrap();
    let trace_file = out_dir.path().join("trace");
    let out = Command::new("strace")
        .args(["-f", "-y", "-xx", "-s", "1048576", "-e"])
        .arg(format!("trace={}", TRACED.join(",")))
        .arg("-o")
        .arg(&trace_file)
        .arg(BIN)
        .arg("--root")
        .arg(&s.root)
        .args(command)
        .env_remove("AUTOMATON_ROOT")
        .env("AUTOMATON_USER", crate::invariants::person())
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command:?} under strace: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace_file).unwrap();
    let budgets = s.root.join("budgets");
    let rec = Recording::of(
        &[(dir.as_path(), ""), (budgets.as_path(), BUDGETS)],
        &start,
        &trace::parse(&text),
    );
    let replayed = rec.replay_all(rec.steps.len());
    let real = read_trees(&s);
    let differ: Vec<String> = replayed
        .keys()
        .chain(real.keys())
        .filter(|p| replayed.get(*p) != real.get(*p))
        .map(|p| {
            let size = |t: &Tree| t.get(p).map(|c| c.as_ref().map_or(0, Vec::len));
            format!("{p}: model {:?} bytes, disk {:?}", size(&replayed), size(&real))
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{command:?}: the trace does not replay to what is on disk: {differ:?}"
    );
    (rec, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A copy of `template` whose loop directory (and root's `budgets/`)
/// holds `tree`, after a reboot: the boot named in a `released` lock line
/// is no longer this one.
fn materialise(template: &Scratch, tree: &Tree) -> Scratch {
    let s = Scratch::copy_of(template);
    let dir = s.loop_dir("l");
    std::fs::remove_dir_all(&dir).unwrap();
    let budgets_dir = s.root.join("budgets");
    if budgets_dir.is_dir() {
        std::fs::remove_dir_all(&budgets_dir).unwrap();
    }
    let mut tree = tree.clone();
    if let Some(Some(lock)) = tree.get_mut(".state.lock") {
        reboot(lock);
    }
    let under = format!("{BUDGETS}/");
    let has_budgets = tree.contains_key(BUDGETS);
    let (budgets, own): (Tree, Tree) = tree
        .into_iter()
        .filter(|(rel, _)| rel != BUDGETS)
        .partition(|(rel, _)| rel.starts_with(&under));
    fs::write_tree(&dir, &own);
    if has_budgets {
        let budgets: Tree = budgets
            .into_iter()
            .map(|(rel, c)| (rel[under.len()..].to_owned(), c))
            .collect();
        fs::write_tree(&budgets_dir, &budgets);
    }
    s
}

/// Replaces this boot's id in `bytes` with another of the same length.
fn reboot(bytes: &mut [u8]) {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let id = id.trim().as_bytes();
    if id.is_empty() {
        return;
    }
    let other: Vec<u8> = id
        .iter()
        .map(|&b| {
            if b == b'-' {
                b
            } else if b == b'0' {
                b'1'
            } else {
                b'0'
            }
        })
        .collect();
    if let Some(at) = bytes.windows(id.len()).position(|w| w == id) {
        bytes[at..at + id.len()].copy_from_slice(&other);
    }
}

/// The invariants a state breaks: as readers find it, then after `recover`.
fn check(sc: &Scenario, template: &Scratch, tree: &Tree, p: &Promise) -> Vec<String> {
    let s = materialise(template, tree);
    let dir = s.loop_dir("l");
    let mut out = Vec::new();
    let seen = Audit::read(&s, "l");
    let mut before = seen.violations(&p.acked, p.floor, &dir);
    before.retain(|v| !v.starts_with("in_flight") && !v.contains("stray temp"));
    if sc.budgeted {
        before.extend(ledger_as_found(&s, &seen.events, p.spend_floor));
    }
    out.extend(before.into_iter().map(|v| format!("before recovery: {v}")));
    let recovered = s.run(sc.recover);
    if !recovered.status.success() {
        out.push(format!(
            "`{}` exited {:?}: {}",
            sc.recover.join(" "),
            recovered.status.code(),
            String::from_utf8_lossy(&recovered.stderr).trim()
        ));
    }
    let after = Audit::read(&s, "l");
    let floor = p.floor.max(seen.version());
    out.extend(
        after
            .violations(&p.acked, floor, &dir)
            .into_iter()
            .map(|v| format!("after recovery: {v}")),
    );
    if sc.budgeted {
        out.extend(
            ledger_after_recovery(&s, &after.events)
                .into_iter()
                .map(|v| format!("after recovery: {v}")),
        );
    }
    out
}

/// What `history` (as `history --json` reads it) says was settled in the
/// loop's account.
fn settled(history: &[serde_json::Value]) -> f64 {
    history
        .iter()
        .filter(|e| e["kind"] == "budget-settled")
        .filter_map(|e| e["costs"]["l:daily"].as_f64())
        .sum()
}

/// The ledger after the recovering tick: it parses, holds nothing, has no
/// temporary file left beside it, and has counted every settlement
/// history records and at most one reservation (1) more for each tick
/// recorded as crashed (one that died after its settlement was written
/// but before its record). A settlement whose record a power loss took
/// with the tick's `in_flight` mark (so no crash is recorded, and the
/// tick's number is used again) is recorded by the next tick.
fn ledger_after_recovery(s: &Scratch, history: &[serde_json::Value]) -> Vec<String> {
    let dir = s.root.join("budgets");
    let ledger: serde_json::Value = match std::fs::read(dir.join("ledger.json")) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => return vec![format!("the ledger does not parse: {e}")],
        },
        Err(e) => return vec![format!("the ledger cannot be read: {e}")],
    };
    let mut out = crate::invariants::stray_temps(&dir);
    if ledger["holds"].as_array().is_none_or(|h| !h.is_empty()) {
        out.push(format!(
            "the ledger still holds reservations: {}",
            ledger["holds"]
        ));
    }
    let spent = ledger["accounts"]["l:daily"]["spent"].as_f64().unwrap_or(0.0);
    let settled = settled(history);
    let dead: std::collections::BTreeSet<u64> = history
        .iter()
        .filter(|e| e["kind"] == "crashed")
        .filter_map(|e| e["tick"].as_u64())
        .collect();
    let most = settled + dead.len() as f64;
    if spent < settled - 1e-9 || spent > most + 1e-9 {
        out.push(format!(
            "the ledger's spend {spent} is not within what history settled ({settled}) and one reservation more for each tick that died ({dead:?})"
        ));
    }
    out
}

/// The budget's account as a crash left it, before any command ran: the
/// ledger parses; what it counts (spent and held) is at least what
/// history says was settled and at most one reservation (1) more than
/// that, the tick that was running (a settlement written to the ledger
/// whose record was lost); and, once the step may have run, at least
/// `spend_floor`: its reservation was not lost.
fn ledger_as_found(s: &Scratch, history: &[serde_json::Value], spend_floor: f64) -> Vec<String> {
    let bytes = match std::fs::read(s.root.join("budgets").join("ledger.json")) {
        Ok(b) => b,
        Err(e) => return vec![format!("the ledger cannot be read: {e}")],
    };
    let ledger: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return vec![format!("the ledger does not parse: {e}")],
    };
    let spent = ledger["accounts"]["l:daily"]["spent"].as_f64().unwrap_or(0.0);
    let held: f64 = ledger["holds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["loop"] == "l")
        .filter_map(|h| h["amount"].as_f64())
        .sum::<f64>()
        + 0.0;
    let counted = spent + held;
    let settled = settled(history);
    let mut out = Vec::new();
    if counted < settled - 1e-9 || counted > settled + 1.0 + 1e-9 {
        out.push(format!(
            "the ledger counts {counted} (spent {spent}, held {held}), not within what history settled ({settled}) and one reservation more"
        ));
    }
    if counted < spend_floor - 1e-9 {
        out.push(format!(
            "the ledger counts {counted} (spent {spent}, held {held}) after the step may have run: its reservation is lost (at least {spend_floor})"
        ));
    }
    out
}

/// The ledger's count (spent and held) in the loop's account of `s`.
fn counted(s: &Scratch) -> f64 {
    let Ok(bytes) = std::fs::read(s.root.join("budgets").join("ledger.json")) else {
        return 0.0;
    };
    let ledger: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let held: f64 = ledger["holds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["amount"].as_f64())
        .sum();
    ledger["accounts"]["l:daily"]["spent"].as_f64().unwrap_or(0.0) + held
}

/// The version readers report right after each sync of the loop
/// directory, with the crash point it holds from; and after the last step,
/// once the command has exited 0, the version it committed.
fn floors(template: &Scratch, rec: &Recording, base: u64) -> Vec<(usize, u64)> {
    let n = rec.steps.len();
    let mut out = vec![(0, base)];
    for (j, step) in rec.steps.iter().enumerate() {
        if matches!(step.kind, Kind::Sync { ino: 0, .. }) || j + 1 == n {
            let s = materialise(template, &rec.replay_all(j + 1));
            out.push((j + 1, Audit::read(&s, "l").version()));
        }
    }
    out
}

/// At most [`MAX_STATES`] of `states`, evenly spread.
fn spread(states: Vec<(Tree, Crash)>) -> Vec<(Tree, Crash)> {
    let n = states.len();
    if n <= MAX_STATES {
        return states;
    }
    states
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i * MAX_STATES / n != (i + 1) * MAX_STATES / n)
        .map(|(_, s)| s)
        .collect()
}

fn model(sc: &Scenario) {
    if !strace_usable(sc.name) {
        return;
    }
    let (template, acked_before) = (sc.template)();
    let base = Audit::read(&template, "l").version();
    let (rec, stdout) = record(&template, sc.command);
    let step_from = rec
        .steps
        .iter()
        .position(|st| matches!(st.kind, Kind::Write { .. }) && st.what.contains("metrics ("));
    if sc.budgeted {
        assert!(
            step_from.is_some(),
            "{}: the step's write of its metrics is not in the trace",
            sc.name
        );
    }
    let run = Recorded {
        step_from,
        // The tick reserves 1.
        spend_after_step: counted(&template) + 1.0,
        floors: floors(&template, &rec, base),
        acked_now: (sc.command[0] == "approve")
            .then(|| approval_id(&stdout).expect("approve names its approval")),
        acked_before,
        rec,
    };
    let found = states::enumerate(&run.rec);
    let distinct = found.states.len();
    let states = spread(found.states);
    let next = AtomicUsize::new(0);
    let bad: Mutex<Vec<(usize, Vec<String>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some((tree, crash)) = states.get(i) else { break };
                    let v = check(sc, &template, tree, &run.promise(crash.k));
                    if !v.is_empty() {
                        bad.lock().unwrap().push((i, v));
                    }
                }
            });
        }
    });
    let mut bad = bad.into_inner().unwrap();
    bad.sort();
    let report = report(sc, &run, found.tried, distinct, &states, &bad);
    eprintln!("{report}");
    assert!(bad.is_empty(), "{report}");
}

fn report(
    sc: &Scenario,
    run: &Recorded,
    tried: usize,
    distinct: usize,
    states: &[(Tree, Crash)],
    bad: &[(usize, Vec<String>)],
) -> String {
    let steps = &run.rec.steps;
    let count = |f: fn(&Kind) -> bool| steps.iter().filter(|s| f(&s.kind)).count();
    let mut text = format!(
        "{}: {} steps ({} metadata operations, {} writes, {} syncs), {} crash points; \
         {tried} crash states, {distinct} distinct, {} checked: {}",
        sc.name,
        steps.len(),
        count(|k| matches!(k, Kind::Meta(_))),
        count(|k| matches!(k, Kind::Write { .. })),
        count(|k| matches!(k, Kind::Sync { .. })),
        steps.len() + 1,
        states.len(),
        if bad.is_empty() {
            "all consistent".to_owned()
        } else {
            format!("{} violate an invariant", bad.len())
        },
    );
    if run.rec.orphan_writes > 0 {
        text += &format!(
            " ({} writes to unlinked files passed over)",
            run.rec.orphan_writes
        );
    }
    for (i, v) in bad {
        text += &format!(
            "\n  {}\n    {}",
            states[*i].1.describe(&run.rec),
            v.join("\n    ")
        );
    }
    if !bad.is_empty() {
        text += "\n  the steps:";
        for (i, step) in steps.iter().enumerate() {
            text += &format!("\n    {} {}", i + 1, step.what);
        }
    }
    text
}

#[test]
fn a_power_loss_during_a_tick_leaves_a_consistent_loop() {
    model(&Scenario {
        name: "tick",
        template: ticked,
        command: &["tick", "l"],
        recover: &["pause", "l"],
        budgeted: false,
    });
}

#[test]
fn a_power_loss_during_an_approve_loses_no_acknowledged_approval() {
    model(&Scenario {
        name: "approve",
        template: ticked,
        command: &["approve", "l", "--ahead", "--note", "k"],
        recover: &["pause", "l"],
        budgeted: false,
    });
}

#[test]
fn a_power_loss_during_a_pause_that_records_a_dead_tick_records_it_once() {
    model(&Scenario {
        name: "pause",
        template: crashed,
        command: &["pause", "l"],
        recover: &["resume", "l"],
        budgeted: false,
    });
}

#[test]
fn a_power_loss_during_a_tick_with_a_budget_keeps_its_ledger_accounted() {
    model(&Scenario {
        name: "tick with a budget",
        template: crate::crash::budgeted,
        command: &["tick", "l"],
        recover: &["tick", "l"],
        budgeted: true,
    });
}
