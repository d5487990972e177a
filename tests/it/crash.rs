//! A crash at every point: `tick`, `approve`, `pause` and `check-gate
//! --apply` are killed (SIGKILL, by strace's fault injection) at the k-th
//! call of each write-side syscall, for every k until the command completes
//! without reaching it.
//! After each kill, readers must see a consistent loop; after one recovering
//! command, every invariant of `invariants` must hold: the state parses and
//! its version never goes back, every counted tick has exactly one tick or
//! crashed event, every acknowledged approval is pending or used, history has
//! no torn line and no temp file survives.
//!
//! Every kill point is tried when `AUTOMATON_CRASH_ALL=1` (CI sets it);
//! otherwise a fixed subset: the first two calls of each syscall, then one
//! in `SAMPLE` chosen by a hash of the scenario, syscall and call number,
//! so a run is quick and the same points are tried every time.
//!
//! strace comes from the OS (Debian: `apt-get install strace`). Without it,
//! or where ptrace is not allowed, the tests say they were skipped, unless
//! `AUTOMATON_REQUIRE_STRACE=1`, which makes that a failure.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::common::BIN;
use crate::invariants::{Audit, Scratch, approval_id};

/// The syscalls that change files, or may, on x86_64 and aarch64. Those a
/// command never makes cost one run each; names the architecture lacks are
/// passed over.
const WRITE_SIDE: &[&str] = &[
    "openat",
    "openat2",
    "open",
    "creat",
    "write",
    "writev",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "fsync",
    "fdatasync",
    "sync_file_range",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "unlink",
    "unlinkat",
    "ftruncate",
    "truncate",
    "fallocate",
    "mkdir",
    "mkdirat",
    "rmdir",
];

/// No command makes this many calls of one syscall; reaching it means the
/// injection never fires.
const MAX_K: u32 = 2_000;

/// Without `AUTOMATON_CRASH_ALL=1`, one kill point in this many (after the
/// first two of each syscall) is tried.
const SAMPLE: u64 = 5;

/// Whether the k-th call of `syscall` is a kill point this run tries.
fn tried(scenario: &str, syscall: &str, k: u32) -> bool {
    static ALL: OnceLock<bool> = OnceLock::new();
    if *ALL.get_or_init(|| std::env::var("AUTOMATON_CRASH_ALL").is_ok_and(|v| v == "1")) || k <= 2 {
        return true;
    }
    // FNV-1a: stable across runs and platforms, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in scenario
        .bytes()
        .chain([0])
        .chain(syscall.bytes())
        .chain(k.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(SAMPLE)
}

/// A step that, when `$AUTOMATON_ROOT/die` exists, removes it and kills its
/// runner (its parent) mid-step, leaving `in_flight` behind: unconfined,
/// since a confined step may neither signal its runner nor touch the root.
const LOOP: &str = r#"
[step]
command = 'if [ -e "$AUTOMATON_ROOT/die" ]; then rm "$AUTOMATON_ROOT/die"; kill -9 $PPID; sleep 5; fi'
confine = "off"
[[gate]]
stock = "approve-every"
params = { every = 1 }
"#;

/// Whether strace can trace here; prints why not, or fails when it must.
pub(crate) fn strace_usable(test: &str) -> bool {
    static USABLE: OnceLock<Result<(), String>> = OnceLock::new();
    let usable = USABLE.get_or_init(|| {
        let probe = crate::common::isolate(&mut Command::new("strace"))
            .args([
                "-f",
                "-o",
                "/dev/null",
                "-e",
                "inject=openat:signal=SIGKILL:when=1",
                "true",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        match probe {
            Err(e) => Err(format!("strace cannot be run ({e})")),
            Ok(out) if out.status.signal() == Some(9) || out.status.code() == Some(137) => Ok(()),
            Ok(out) => Err(format!(
                "strace cannot inject faults here ({}: {})",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    });
    match usable {
        Ok(()) => true,
        Err(why) => {
            skip_unless_strace_required(test, why);
            false
        }
    }
}

/// Says `test` was skipped and why, or fails it when
/// `AUTOMATON_REQUIRE_STRACE=1` says the strace'd tests must run.
fn skip_unless_strace_required(test: &str, why: &str) {
    assert!(
        std::env::var("AUTOMATON_REQUIRE_STRACE").as_deref() != Ok("1"),
        "{test}: {why}, and AUTOMATON_REQUIRE_STRACE=1"
    );
    eprintln!("{test}: skipped: {why}");
}

/// A loop `l` that has run one tick and holds one acknowledged approval,
/// its gate compiled into the root's cache: copied for every kill.
pub(crate) fn ticked() -> (Scratch, String) {
    let s = Scratch::new();
    s.new_loop("l", LOOP);
    s.ok(&["tick", "l"]);
    let id = approval_id(&s.ok(&["approve", "l", "--ahead", "--note", "go"])).unwrap();
    (s, id)
}

/// `ticked`, then a tick that uses the approval and dies mid-step: its
/// `in_flight` is left for the next command to find.
pub(crate) fn crashed() -> (Scratch, String) {
    let (s, id) = ticked();
    std::fs::write(s.root.join("die"), "").unwrap();
    let out = s.run(&["tick", "l"]);
    assert_eq!(
        out.status.signal(),
        Some(9),
        "the step should kill its runner: {out:?}"
    );
    assert!(!Audit::read(&s, "l").state["in_flight"].is_null());
    (s, id)
}

/// How one command under test died or ended.
enum Run {
    Killed,
    /// Its exit code, its stdout and stderr, and whether the fault was
    /// injected.
    Exited(Option<i32>, String, String, bool),
    NoSuchSyscall,
}

/// What is done to the k-th call of a syscall: the process killed, or
/// the call failed with an errno (strace makes the call return it instead
/// of making it).
#[derive(Clone, Copy)]
enum Fault {
    Kill,
    Errno(&'static str),
}

impl Fault {
    fn inject(self, syscall: &str, k: u32) -> String {
        match self {
            Fault::Kill => format!("inject={syscall}:signal=SIGKILL:when={k}"),
            Fault::Errno(e) => format!("inject={syscall}:error={e}:when={k}"),
        }
    }
}

fn run_faulted(s: &Scratch, fault: Fault, syscall: &str, k: u32, args: &[&str]) -> Run {
    // strace marks an injected call `(INJECTED)` in its trace: that tells
    // a run whose k-th call failed from one that never made it.
    let trace = s.root.join(".strace");
    let strace = [
        "-f".to_owned(),
        "-e".to_owned(),
        format!("trace={syscall}"),
        "-o".to_owned(),
        trace.display().to_string(),
        "-e".to_owned(),
        fault.inject(syscall, k),
    ];
    let out = under_strace(s, &strace, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let injected = std::fs::read_to_string(&trace).is_ok_and(|t| t.contains("INJECTED"));
    let _ = std::fs::remove_file(&trace);
    if out.status.signal() == Some(9) || out.status.code() == Some(137) {
        Run::Killed
    } else if stderr.starts_with("strace:") && stderr.contains("invalid system call") {
        Run::NoSuchSyscall
    } else {
        Run::Exited(
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr.into_owned(),
            injected,
        )
    }
}

/// What a command that a failed call stopped says by its exit code, held
/// against what it left: 0 (done) and 9 (done, durability unknown) may
/// have changed the loop; any other code must have changed nothing an
/// approval depends on, and no failed call may crash the command.
fn errno_violations(
    sc: &Scenario,
    code: Option<i32>,
    stderr: &str,
    base: &Audit,
    seen: &Audit,
) -> Vec<String> {
    let mut v = Vec::new();
    match code {
        None | Some(101) => v.push(format!("the command died or panicked (exit {code:?})")),
        Some(0 | 9) => {}
        // The report printed after the commit could not be written: the
        // message says the change was made.
        Some(1) if stderr.contains("cannot write the output") => {}
        Some(c) if sc.command[0] == "approve" => {
            if seen.pending() != base.pending() {
                v.push(format!(
                    "approve exited {c}, yet the pending approvals went from {} to {}",
                    base.pending(),
                    seen.pending()
                ));
            }
        }
        Some(_) => {}
    }
    v
}

/// One command to crash, where it starts from and how it is recovered.
struct Scenario {
    name: &'static str,
    template: fn() -> (Scratch, String),
    command: &'static [&'static str],
    recover: &'static [&'static str],
    /// What else must hold after the recovering command.
    check: fn(&Scratch) -> Vec<String>,
}

/// No check beyond the loop's invariants.
fn nothing_more(_: &Scratch) -> Vec<String> {
    Vec::new()
}

/// What the kills of one scenario found.
#[derive(Default)]
struct Findings {
    kill_points: BTreeMap<String, u32>,
    /// Violation → where it was seen: the syscall and the k of the call
    /// killed, or none for the run that completed without a kill.
    violations: BTreeMap<String, Vec<(&'static str, Option<u32>)>>,
    /// Runs that completed without reaching their kill point.
    clean_runs: usize,
}

impl Findings {
    fn report(&self, name: &str) -> String {
        let total: u32 = self.kill_points.values().sum();
        let per: Vec<String> = self.kill_points.iter().map(|(s, n)| format!("{s} {n}")).collect();
        let mut text = format!("{name}: {total} kill points ({})", per.join(", "));
        for (what, at) in &self.violations {
            text += &format!("\n  {what}\n    at {}", self.points(at));
        }
        text
    }

    /// `openat#3-9 write#2 (47 kill points), and every run without a kill`.
    fn points(&self, at: &[(&'static str, Option<u32>)]) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut kills = 0;
        let mut i = 0;
        while i < at.len() {
            let (syscall, Some(first)) = at[i] else {
                i += 1;
                continue;
            };
            let mut last = first;
            while i + 1 < at.len() && at[i + 1] == (syscall, Some(last + 1)) {
                last += 1;
                i += 1;
            }
            kills += last - first + 1;
            parts.push(if first == last {
                format!("{syscall}#{first}")
            } else {
                format!("{syscall}#{first}-{last}")
            });
            i += 1;
        }
        let clean = at.iter().filter(|(_, k)| k.is_none()).count();
        let mut text = format!("{} ({kills} kill points)", parts.join(" "));
        if clean == self.clean_runs {
            text += ", and every run without a kill";
        } else if clean > 0 {
            text += &format!(", and {clean} of {} runs without a kill", self.clean_runs);
        }
        text
    }
}

fn crash_everywhere(sc: &Scenario) {
    fault_everywhere(sc, Fault::Kill);
}

/// Injects `fault` at every write-side call of `sc`'s command (or the
/// sample `tried` picks), then checks what readers see and what one
/// recovering command leaves.
fn fault_everywhere(sc: &Scenario, fault: Fault) {
    if !strace_usable(sc.name) {
        return;
    }
    let (template, acked_before) = (sc.template)();
    let base = Audit::read(&template, "l");
    let mut found = Findings::default();
    for syscall in WRITE_SIDE {
        for k in 1..=MAX_K {
            assert!(k < MAX_K, "{}: {syscall} injection never stopped", sc.name);
            if !tried(sc.name, syscall, k) {
                continue;
            }
            let Some((faulted, seen)) = one_fault(sc, fault, &template, &base, &acked_before, syscall, k)
            else {
                break;
            };
            if faulted {
                *found.kill_points.entry((*syscall).to_owned()).or_default() += 1;
            } else {
                found.clean_runs += 1;
            }
            for v in seen {
                let at = (*syscall, faulted.then_some(k));
                found.violations.entry(v).or_default().push(at);
            }
            if !faulted {
                break;
            }
        }
    }
    let report = found.report(sc.name);
    eprintln!("{report}");
    assert!(
        found.kill_points.values().sum::<u32>() > 0,
        "{}: no fault point was reached",
        sc.name
    );
    assert!(found.violations.is_empty(), "{report}");
}

/// One run of `sc` with `fault` at the k-th `syscall`, on a copy of
/// `template`: whether the fault was met, and the violations seen. None
/// when the system has no such syscall.
fn one_fault(
    sc: &Scenario,
    fault: Fault,
    template: &Scratch,
    base: &Audit,
    acked_before: &str,
    syscall: &'static str,
    k: u32,
) -> Option<(bool, Vec<String>)> {
    let s = Scratch::copy_of(template);
    let mut seen: Vec<String> = Vec::new();
    let mut note = |what: String, phase: &str| seen.push(format!("{phase}: {what}"));
    let mut acked = vec![acked_before.to_owned()];
    let mut stderr = String::new();
    let (faulted, code) = match run_faulted(&s, fault, syscall, k, sc.command) {
        Run::NoSuchSyscall => return None,
        Run::Killed => (true, None),
        Run::Exited(code, stdout, err, injected) => {
            if sc.command[0] == "approve" && code == Some(0) {
                acked.push(approval_id(&stdout).expect("approve names its approval"));
            }
            stderr = err;
            (injected, code)
        }
    };
    let mut floor = base.version();
    if faulted {
        // What readers see at once, before any recovery.
        let seen = Audit::read(&s, "l");
        floor = floor.max(seen.version());
        let mut pre = seen.violations(&acked, base.version(), &s.loop_dir("l"));
        pre.retain(|v| !v.starts_with("in_flight") && !v.contains("stray temp"));
        if let Fault::Errno(_) = fault {
            pre.extend(errno_violations(sc, code, &stderr, base, &seen));
        }
        for v in pre {
            note(v, "after the fault");
        }
    }
    let recovered = s.run(sc.recover);
    if !recovered.status.success() {
        note(
            format!(
                "`{}` exited {:?}: {}",
                sc.recover.join(" "),
                recovered.status.code(),
                String::from_utf8_lossy(&recovered.stderr).trim()
            ),
            "recovery",
        );
    }
    let after = Audit::read(&s, "l");
    for v in after.violations(&acked, floor, &s.loop_dir("l")) {
        note(v, "after recovery");
    }
    for v in (sc.check)(&s) {
        note(v, "after recovery");
    }
    Some((faulted, seen))
}

#[test]
fn tick_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "tick",
        template: ticked,
        command: &["tick", "l"],
        recover: &["pause", "l"],
        check: nothing_more,
    });
}

/// A loop spending into a budget: each tick reserves 1 in the root's
/// ledger before its step and settles it (the step reports 1) before its
/// record is committed.
const BUDGETED: &str = r#"
step = 'echo cost_usd=1 > "$AUTOMATON_METRICS"'
max_per_tick = 1.0
[[budget]]
name = "daily"
window = "1d"
cap = 1000.0
"#;

pub(crate) fn budgeted() -> (Scratch, String) {
    let s = Scratch::new();
    s.new_loop("l", BUDGETED);
    s.ok(&["tick", "l"]);
    // Given ahead, and kept pending: no gate of the loop awaits.
    let id = approval_id(&s.ok(&["approve", "l", "--ahead", "--note", "go"])).unwrap();
    (s, id)
}

/// After a tick that recovers: the ledger parses, holds nothing, has no
/// temporary file left beside it, and has counted every settlement
/// history records, and at most one reservation more for each tick
/// recorded as crashed (one that died after its settlement was written
/// but before its record).
pub(crate) fn ledger_accounts_for_every_tick(s: &Scratch) -> Vec<String> {
    let mut out = Vec::new();
    let dir = s.root.join("budgets");
    let ledger: serde_json::Value = match std::fs::read(dir.join("ledger.json")) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => return vec![format!("the ledger does not parse: {e}")],
        },
        Err(e) => return vec![format!("the ledger cannot be read: {e}")],
    };
    out.extend(crate::invariants::stray_temps(&dir));
    if ledger["holds"].as_array().is_none_or(|h| !h.is_empty()) {
        out.push(format!(
            "the ledger still holds reservations: {}",
            ledger["holds"]
        ));
    }
    let spent = ledger["accounts"]["l:daily"]["spent"].as_f64().unwrap_or(0.0);
    let history = std::fs::read_to_string(s.loop_dir("l").join("history.jsonl")).unwrap_or_default();
    let (mut settled, mut crashed) = (0.0, 0.0);
    for e in history
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        match e["kind"].as_str() {
            Some("budget-settled") => settled += e["costs"]["l:daily"].as_f64().unwrap_or(0.0),
            Some("crashed") => crashed += 1.0,
            _ => {}
        }
    }
    if spent < settled - 1e-9 || spent > settled + crashed + 1e-9 {
        out.push(format!(
            "the ledger's spend {spent} is not within what history settled ({settled}) and {crashed} crashed tick(s) more"
        ));
    }
    out
}

#[test]
fn tick_with_a_budget_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "tick with a budget",
        template: budgeted,
        command: &["tick", "l"],
        recover: &["tick", "l"],
        check: ledger_accounts_for_every_tick,
    });
}

#[test]
fn approve_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "approve",
        template: ticked,
        command: &["approve", "l", "--ahead", "--note", "k"],
        recover: &["tick", "l"],
        check: nothing_more,
    });
}

#[test]
fn check_gate_apply_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "check-gate --apply",
        template: ticked,
        command: &["check-gate", "l", "--apply"],
        recover: &["approve", "l", "--ahead"],
        check: nothing_more,
    });
}

#[test]
fn pause_that_finds_a_dead_tick_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "pause",
        template: crashed,
        command: &["pause", "l"],
        recover: &["resume", "l"],
        check: nothing_more,
    });
}

/// A command that finds a dead tick records its crash first. When only the
/// directory sync after that record fails, the command says so and that
/// its own change was not made (exit 1, not 9, "the change is made"): the
/// loop is still active, and the command run again pauses it.
#[test]
fn a_failed_directory_sync_of_a_dead_ticks_record_does_not_say_the_change_is_made() {
    if !strace_usable("a_failed_directory_sync_of_a_dead_ticks_record_does_not_say_the_change_is_made") {
        return;
    }
    let (s, _) = crashed();
    let before = Audit::read(&s, "l");
    // The first fsync syncs the directory the dead tick left; the second
    // is the one after the crash's record.
    let strace = ["-f", "-o", "/dev/null", "-e", "inject=fsync:error=EIO:when=2"].map(String::from);
    let out = under_strace(&s, &strace, &["pause", "l"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("its crash was recorded") && stderr.contains("run it again"),
        "{stderr}"
    );
    let after = Audit::read(&s, "l");
    assert_eq!(after.version(), before.version() + 1, "the crash's record only");
    assert_eq!(after.state["status"], "active");
    assert!(after.state["in_flight"].is_null());
    s.ok(&["pause", "l"]);
    assert_eq!(Audit::read(&s, "l").state["status"], "paused");
}

/// Runs `args` with every `fsync` failing (`errno`): the directory sync
/// after a commit's rename is the only `fsync` a commit makes.
fn with_failing_dir_sync(s: &Scratch, args: &[&str]) -> std::process::Output {
    let strace = ["-f", "-o", "/dev/null", "-e", "inject=fsync:error=EIO"].map(String::from);
    under_strace(s, &strace, args)
}

/// `args` run on `s`'s root under strace with `strace` (its options), in
/// the environment of every scratch command.
fn under_strace(s: &Scratch, strace: &[String], args: &[&str]) -> std::process::Output {
    let mut c = Command::new("strace");
    c.args(strace).arg(BIN).arg("--root").arg(&s.root).args(args);
    crate::common::isolate(&mut c)
        .env("AUTOMATON_USER", crate::invariants::person())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A directory sync that fails after the state is swapped in: the change
/// is made and its events stay (nothing is cut), the command exits 9
/// saying its durability is unknown, and the next command goes on from it.
#[test]
fn a_failed_directory_sync_after_a_commit_keeps_the_commit_and_its_events() {
    if !strace_usable("a_failed_directory_sync_after_a_commit_keeps_the_commit_and_its_events") {
        return;
    }
    let (s, acked) = ticked();
    // A lock let go whole: the next holder makes no sync of its own first.
    let let_go_whole = || {
        s.ok(&["pause", "l"]);
        s.ok(&["resume", "l"]);
    };
    let_go_whole();
    let before = Audit::read(&s, "l");
    let out = with_failing_dir_sync(&s, &["approve", "l", "--ahead", "--note", "again"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains("durability is unknown"), "{stderr}");
    let after = Audit::read(&s, "l");
    assert_eq!(after.version(), before.version() + 1);
    assert_eq!(after.pending(), before.pending() + 1, "the approval was made");
    let approved = |a: &Audit| a.events.iter().filter(|e| e["kind"] == "approved").count();
    assert_eq!(approved(&after), approved(&before) + 1, "and its event kept");
    assert!(
        after
            .violations(std::slice::from_ref(&acked), before.version(), &s.loop_dir("l"))
            .is_empty()
    );

    // The next holder syncs the directory before anything else: with the
    // sync still failing, it changes nothing and says so.
    let out = with_failing_dir_sync(&s, &["pause", "l"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(Audit::read(&s, "l").version(), after.version());

    // A tick: counted, with its tick event.
    let_go_whole();
    let after = Audit::read(&s, "l");
    let out = with_failing_dir_sync(&s, &["tick", "l"]);
    assert_eq!(
        out.status.code(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ticked = Audit::read(&s, "l");
    assert_eq!(ticked.tick(), after.tick() + 1);
    assert!(
        ticked
            .violations(std::slice::from_ref(&acked), after.version(), &s.loop_dir("l"))
            .is_empty()
    );

    // The next command goes on from there; doctor finds nothing wrong.
    s.ok(&["pause", "l"]);
    let last = Audit::read(&s, "l");
    assert_eq!(last.tick(), ticked.tick());
    assert!(
        last.violations(&[acked], ticked.version(), &s.loop_dir("l"))
            .is_empty()
    );
    s.ok(&["doctor", "l"]);
}

/// The scenarios above, each with every write-side call failing in turn.
fn errno_everywhere(errno: &'static str) {
    let scenarios = [
        Scenario {
            name: "tick",
            template: ticked,
            command: &["tick", "l"],
            recover: &["pause", "l"],
            check: nothing_more,
        },
        Scenario {
            name: "approve",
            template: ticked,
            command: &["approve", "l", "--ahead", "--note", "k"],
            recover: &["tick", "l"],
            check: nothing_more,
        },
        Scenario {
            name: "check-gate --apply",
            template: ticked,
            command: &["check-gate", "l", "--apply"],
            recover: &["approve", "l", "--ahead"],
            check: nothing_more,
        },
        Scenario {
            name: "pause",
            template: crashed,
            command: &["pause", "l"],
            recover: &["resume", "l"],
            check: nothing_more,
        },
    ];
    for sc in &scenarios {
        fault_everywhere(sc, Fault::Errno(errno));
    }
}

/// An I/O error at any write-side call of a tick or an operator command
/// leaves a record that agrees with the state, and an exit code that says
/// whether the change was made.
#[test]
fn commands_failing_with_eio_at_every_write_side_syscall() {
    errno_everywhere("EIO");
}

/// As above, with the disk full at every call.
#[test]
fn commands_failing_with_enospc_at_every_write_side_syscall() {
    errno_everywhere("ENOSPC");
}

/// Unmounts a test's tmpfs however the test ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A tmpfs of `size` at `at`, or why the machine does not allow one.
fn mount_tmpfs(at: &std::path::Path, size: &str) -> Result<Mounted, String> {
    std::fs::create_dir_all(at).unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
        .arg(at)
        .output()
        .map_err(|e| format!("mount cannot be run ({e})"))?;
    if out.status.success() {
        Ok(Mounted(at.to_owned()))
    } else {
        Err(format!(
            "mounting a tmpfs is not allowed here ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The disk fills up while the step runs (the step fills it), so the
/// tick's commit fails: the state is the old one or the new one and
/// history agrees, the tick exits 8 saying its step ran, and once there is
/// room again the next command records the tick as crashed. (A commit
/// whose state fits the blocks of the spare state file needs no room; the
/// step reports 64 long metrics, so this state needs more.)
#[test]
fn a_full_disk_during_a_tick_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let _mounted = match mount_tmpfs(&mnt, "2m") {
        Ok(m) => m,
        // Root may mount one: there, not being able to is a failure.
        Err(why) if nix::unistd::geteuid().is_root() => {
            panic!("a_full_disk_during_a_tick_commit: {why}, though it runs as root")
        }
        Err(why) => {
            eprintln!("a_full_disk_during_a_tick_commit: skipped: {why} (it needs root)");
            return;
        }
    };
    let s = Scratch::at(mnt.join("root"));
    s.ok(&["init"]);
    // Made before the tick: a confined step may make nothing new beside
    // the root (nor in the directories above it).
    let marks = dir.path().join("marks");
    let disk = mnt.join("disk");
    std::fs::create_dir(&marks).unwrap();
    std::fs::create_dir(&disk).unwrap();
    let ran = marks.join("step-ran");
    let fill = mnt.join("fill");
    let filler = disk.join("filler");
    s.new_loop(
        "d",
        &format!(
            "step = \"touch '{ran}'; if [ -e '{fill}' ]; then for i in $(seq 10 73); do echo metric_with_a_long_name_to_make_the_state_outgrow_its_blocks_$i=1; done > \\\"$AUTOMATON_METRICS\\\"; dd if=/dev/zero of='{filler}' bs=4096 2>/dev/null; fi; exit 0\"\n",
            ran = ran.display(),
            fill = fill.display(),
            filler = filler.display(),
        ),
    );
    s.ok(&["tick", "d"]);
    let before = Audit::read(&s, "d");
    assert!(before.violations(&[], 0, &s.loop_dir("d")).is_empty());

    std::fs::remove_file(&ran).unwrap();
    std::fs::write(&fill, "").unwrap();
    let out = s.run(&["tick", "d"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(ran.exists(), "the step should have run");
    assert!(
        filler.metadata().unwrap().len() > 0,
        "the step should have filled the disk"
    );

    let mut problems = Vec::new();
    if out.status.code() != Some(8) {
        problems.push(format!(
            "the tick whose commit failed exited {:?}, not 8: {}",
            out.status.code(),
            stderr.trim()
        ));
    }
    let n = before.tick() + 1;
    if !(stderr.contains(&format!("tick {n}")) && stderr.contains("step") && stderr.contains("ran")) {
        problems.push(format!(
            "its message does not say that tick {n} ran its step: {}",
            stderr.trim()
        ));
    }
    let full = Audit::read(&s, "d");
    if !full.read_errors.is_empty() {
        problems.push(format!("readers on the full disk: {:?}", full.read_errors));
    }
    if full.tick() != before.tick() && full.tick() != n {
        problems.push(format!(
            "the state counts {} ticks, neither {} nor {n}",
            full.tick(),
            before.tick()
        ));
    }
    let mut seen = full.violations(&[], before.version(), &s.loop_dir("d"));
    seen.retain(|v| !v.starts_with("in_flight") && !v.contains("stray temp"));
    problems.extend(seen.into_iter().map(|v| format!("on the full disk: {v}")));

    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&fill).unwrap();
    let recover = s.run(&["pause", "d"]);
    if !recover.status.success() {
        problems.push(format!(
            "`pause` with room again exited {:?}: {}",
            recover.status.code(),
            String::from_utf8_lossy(&recover.stderr).trim()
        ));
    }
    let after = Audit::read(&s, "d");
    problems.extend(
        after
            .violations(&[], full.version(), &s.loop_dir("d"))
            .into_iter()
            .map(|v| format!("after recovery: {v}")),
    );
    let crashed = after
        .events
        .iter()
        .any(|e| e["kind"] == "crashed" && e["tick"].as_u64() == Some(n));
    if !crashed {
        problems.push(format!("tick {n} is not recorded as crashed after recovery"));
    }
    assert!(problems.is_empty(), "full disk:\n  {}", problems.join("\n  "));
}

/// The pid of the process strace (`tracer`) runs, once it has started it.
fn traced_child(tracer: u32) -> Option<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{tracer}/task")).ok()?;
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .next()
}

/// How far process `pid` has read the file at `path`, once it has it open.
fn read_position(pid: i32, path: &std::path::Path) -> Option<u64> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let fd = fds
        .filter_map(Result::ok)
        .find(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))?;
    let info =
        std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .and_then(|p| p.trim().parse().ok())
}

/// A reader that has read part of `history.jsonl`, up to the middle of an
/// unfinished commit's lines, while the next command cuts those lines and
/// commits its own in their place, must not glue the two into a line it
/// reports as unreadable: nothing on disk is damaged. The reader's first
/// read of the history is held (strace delays its return), the command
/// runs, and the reader goes on. The unfinished commit is made by
/// hand, as `docs/store.md` describes one: a torn line stamped with the
/// next version, ending where the reader's first read (8 KiB) ends.
#[test]
fn a_reader_racing_the_cut_of_an_unfinished_commit_reports_no_unreadable_line() {
    let test = "a_reader_racing_the_cut_of_an_unfinished_commit";
    if !strace_usable(test) {
        return;
    }
    let s = Scratch::new();
    s.new_loop("r", "step = \"true\"\n");
    let history = s.loop_dir("r").join("history.jsonl");
    let size = |p: &std::path::Path| p.metadata().map_or(0, |m| m.len() as usize);
    let reason = "x".repeat(1000);
    while size(&history) < 6000 {
        s.ok(&["pause", "r", "--reason", &reason]);
        s.ok(&["resume", "r"]);
    }
    let version = Audit::read(&s, "r").version();
    let head = format!(
        r#"{{"v":{},"at":"2026-01-01T00:00:00Z","kind":"paused","by":"x","reason":""#,
        version + 1
    );
    let fill = 8192 - size(&history) - head.len() - 2;
    let torn = format!("{head}{}\",", "y".repeat(fill));
    std::fs::OpenOptions::new()
        .append(true)
        .open(&history)
        .and_then(|mut f| std::io::Write::write_all(&mut f, torn.as_bytes()))
        .unwrap();
    assert_eq!(size(&history), 8192);
    // Its writer died holding the lock, and left its record there.
    std::fs::write(
        s.loop_dir("r").join(".state.lock"),
        "{\"pid\":999999999,\"host\":\"gone\",\"command\":\"pause\",\"since\":\"2026-01-01T00:00:00Z\"}\n",
    )
    .unwrap();

    // The reader's first read of the history returns only after a pause
    // (strace delays its exit); the command runs inside that pause, once the
    // read has moved the reader's position. A command slower than the pause
    // misses the race: the reader has read on (or is done) when it ends.
    let reader = crate::common::isolate(&mut Command::new("strace"))
        .args(["-f", "-o", "/dev/null", "-P"])
        .arg(&history)
        .args(["-e", "inject=read:delay_exit=3000000:when=1", BIN, "--root"])
        .arg(&s.root)
        .args(["history", "r", "--json"])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    let mut raced = Err("the reader never read the history with read(2)");
    while std::time::Instant::now() < deadline {
        let child = traced_child(reader.id());
        if let Some(pid) = child
            && let Some(pos) = read_position(pid, &history).filter(|p| *p > 0)
        {
            s.ok(&["pause", "r", "--reason", &"z".repeat(3000)]);
            raced = match read_position(pid, &history) == Some(pos) {
                true => Ok(()),
                false => Err("the command outlasted the reader's held read"),
            };
            break;
        }
        if traced_child(reader.id()).is_none() && std::fs::metadata(format!("/proc/{}", reader.id())).is_err()
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let out = reader.wait_with_output().unwrap();
    if let Err(why) = raced {
        skip_unless_strace_required(test, why);
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "history failed: {stderr}");
    let _: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !stderr.contains("unreadable"),
        "a reader that raced the cut of an unfinished commit reported damage that is not on disk: {}",
        stderr.trim()
    );
    let after = Audit::read(&s, "r");
    assert!(after.read_errors.is_empty(), "{:?}", after.read_errors);
}
