//! The torture run: workers fire random operations at one loop at once
//! (tick, approve, pause, resume, reject, status, history, check-gate
//! --apply) and kill a fifth of them with SIGKILL at a random moment, while
//! an observer reads the loop over and over. Then one recovering command,
//! and the invariants of `invariants` must hold, plus: no two steps ever
//! overlapped, no approval was used twice, and the version any reader saw
//! never went back.
//!
//! It runs for `AUTOMATON_TORTURE_SECS` seconds (4 by default, to keep the
//! suite quick; CI sets 60) and prints its figures (`--nocapture` shows them on success).

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::invariants::{Audit, Scratch, approval_id};

/// The step leaves start and end marks; one that starts while the step
/// that marked the last start is still alive records an overlap.
const LOOP: &str = r#"
step = '''
m="$AUTOMATON_ROOT/marks"
last=$(tail -n 1 "$m" 2>/dev/null)
case "$last" in
  "start "*) p=${last#start }
    if [ -r /proc/$p/stat ] && ! grep -q ') Z' /proc/$p/stat 2>/dev/null; then
      echo "step $$ started while step $p was running" >> "$AUTOMATON_ROOT/overlaps"
    fi;;
esac
echo "start $$" >> "$m"
sleep 0.02
echo "end $$" >> "$m"
'''
overlap = "wait"
[[gate]]
stock = "approve-every"
params = { every = 3 }
"#;

/// Operations and their weights.
const OPS: &[(&str, u32)] = &[
    ("tick", 36),
    ("approve", 14),
    ("resume", 12),
    ("pause", 6),
    ("reject", 2),
    ("status", 10),
    ("history", 10),
    ("check-gate", 10),
];

const WORKERS: usize = 4;

fn args(op: &str) -> Vec<&str> {
    let wait = ["--timeout", "30s"];
    match op {
        "status" => vec!["status", "t", "--json"],
        "history" => vec!["history", "t", "--json"],
        "check-gate" => [&["check-gate", "t", "--apply"][..], &wait].concat(),
        "approve" => [&["approve", "t", "--ahead", "--note", "torture"][..], &wait].concat(),
        "reject" => [&["reject", "t", "--halt", "--reason", "torture"][..], &wait].concat(),
        other => [&[other, "t"][..], &wait].concat(),
    }
}

fn pick() -> &'static str {
    let total: u32 = OPS.iter().map(|(_, w)| w).sum();
    let mut r = fastrand::u32(0..total);
    for (op, w) in OPS {
        if r < *w {
            return op;
        }
        r -= w;
    }
    unreachable!()
}

#[derive(Default)]
struct Tally {
    ops: BTreeMap<String, u32>,
    kills: u32,
    exits: BTreeMap<String, u32>,
    acked: Vec<String>,
    problems: Vec<String>,
}

/// Waits for `child`, killing it first when `kill_after` says so; true if
/// the kill landed before it ended.
fn finish(mut child: Child, kill_after: Option<Duration>) -> (bool, std::process::Output) {
    let mut killed = false;
    if let Some(after) = kill_after {
        let until = Instant::now() + after;
        while Instant::now() < until && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed = true;
        }
    }
    (killed, child.wait_with_output().unwrap())
}

fn worker(s: &Scratch, until: Instant, tally: &Mutex<Tally>) {
    while Instant::now() < until {
        let op = pick();
        let child = s
            .cmd()
            .args(args(op))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let kill_after = (fastrand::u32(0..5) == 0).then(|| Duration::from_millis(fastrand::u64(0..120)));
        let (killed, out) = finish(child, kill_after);
        let mut t = tally.lock().unwrap();
        *t.ops.entry(op.to_owned()).or_default() += 1;
        if killed {
            t.kills += 1;
            continue;
        }
        let code = out.status.code().map_or("signal".to_owned(), |c| c.to_string());
        *t.exits.entry(format!("{op} {code}")).or_default() += 1;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if op == "approve" && out.status.success() {
            match approval_id(&stdout) {
                Some(id) => t.acked.push(id),
                None => t
                    .problems
                    .push(format!("approve exited 0 without an id: {stdout}")),
            }
        }
        if matches!(op, "status" | "history") && !out.status.success() {
            t.problems.push(format!(
                "{op} exited {code}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
}

/// Reads the loop again and again; the versions it sees must never go back
/// and no read may fail or find a torn line.
fn observer(s: &Scratch, until: Instant, tally: &Mutex<Tally>) -> (u64, u32) {
    let (mut highest, mut reads) = (0, 0);
    while Instant::now() < until {
        let seen = Audit::read(s, "t");
        reads += 1;
        let mut t = tally.lock().unwrap();
        for e in &seen.read_errors {
            t.problems.push(format!("a reader saw: {e}"));
        }
        if !seen.state.is_null() {
            if seen.version() < highest {
                t.problems
                    .push(format!("version went back from {highest} to {}", seen.version()));
            }
            highest = highest.max(seen.version());
        }
    }
    (highest, reads)
}

/// Every `end` mark follows the `start` of the same step.
fn marks_problems(marks: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut last: Option<&str> = None;
    for line in marks.lines() {
        if let Some(pid) = line.strip_prefix("end ") {
            if last != Some(pid) {
                problems.push(format!("step {pid} ended after another step started ({last:?})"));
            }
            last = None;
        } else if let Some(pid) = line.strip_prefix("start ") {
            last = Some(pid);
        }
    }
    problems
}

#[test]
fn random_operations_and_kills_keep_every_invariant() {
    let secs: u64 = std::env::var("AUTOMATON_TORTURE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let s = Scratch::new();
    // The marks are kept beside the root: a confined step writes nothing
    // of it but its run directory.
    let marks_dir = s.root.parent().unwrap().join("marks");
    std::fs::create_dir(&marks_dir).unwrap();
    s.new_loop(
        "t",
        &LOOP.replace("$AUTOMATON_ROOT/", &format!("{}/", marks_dir.display())),
    );
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let tally = Mutex::new(Tally::default());
    let (highest, reads) = std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| worker(&s, until, &tally));
        }
        scope.spawn(|| observer(&s, until, &tally)).join().unwrap()
    });
    let recover = s.run(&["resume", "t", "--timeout", "60s"]);
    let mut t = tally.into_inner().unwrap();
    if !recover.status.success() {
        t.problems.push(format!(
            "recovering `resume` exited {:?}: {}",
            recover.status.code(),
            String::from_utf8_lossy(&recover.stderr).trim()
        ));
    }
    let audit = Audit::read(&s, "t");
    t.problems
        .extend(audit.violations(&t.acked, highest, &s.loop_dir("t")));
    let marks = std::fs::read_to_string(marks_dir.join("marks")).unwrap_or_default();
    t.problems.extend(marks_problems(&marks));
    if let Ok(overlaps) = std::fs::read_to_string(marks_dir.join("overlaps")) {
        t.problems.extend(overlaps.lines().map(str::to_owned));
    }

    let ops: u32 = t.ops.values().sum();
    let steps = marks.lines().filter(|l| l.starts_with("start ")).count();
    let kinds = |k: &str| audit.events.iter().filter(|e| e["kind"] == k).count();
    // A step starts only once its tick is in flight, so it is counted (as
    // run or crashed); a tick recorded as run started its step.
    let ran = audit
        .events
        .iter()
        .filter(|e| e["kind"] == "tick" && e.get("step").is_some_and(|s| !s.is_null()))
        .count();
    if steps as u64 > audit.tick() {
        t.problems.push(format!(
            "{steps} steps started but only {} ticks counted",
            audit.tick()
        ));
    }
    if ran > steps {
        t.problems.push(format!(
            "{ran} ticks recorded as run but only {steps} steps started"
        ));
    }
    eprintln!(
        "torture: {:.0?}, {WORKERS} workers: {ops} operations {:?}, {} SIGKILLs, {reads} observer reads; \
         {} ticks counted, {steps} steps started, {} events ({} tick, {} crashed, {} approved, {} approvals-used), \
         {} approvals acknowledged, final version {}; exits {:?}",
        started.elapsed(),
        t.ops,
        t.kills,
        audit.tick(),
        audit.events.len(),
        kinds("tick"),
        kinds("crashed"),
        kinds("approved"),
        kinds("approvals-used"),
        t.acked.len(),
        audit.version(),
        t.exits,
    );
    let mut problems = t.problems;
    problems.sort();
    let mut counted: Vec<(String, usize)> = Vec::new();
    for p in problems {
        match counted.last_mut() {
            Some((last, n)) if *last == p => *n += 1,
            _ => counted.push((p, 1)),
        }
    }
    let mut list: Vec<String> = counted
        .iter()
        .take(40)
        .map(|(p, n)| format!("  {n} × {p}"))
        .collect();
    if counted.len() > 40 {
        list.push(format!("  … and {} more", counted.len() - 40));
    }
    assert!(counted.is_empty(), "torture found:\n{}", list.join("\n"));
    assert!(
        steps > 0 && t.kills > 0,
        "the run should have run steps and killed operations"
    );
}
