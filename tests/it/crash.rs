//! A crash at every point: `tick`, `approve` and `pause` are killed
//! (SIGKILL, by strace's fault injection) at the k-th call of each write-side
//! syscall, for every k until the command completes without reaching it.
//! After each kill, readers must see a consistent loop; after one recovering
//! command, every invariant of `invariants` must hold: the state parses and
//! its version never goes back, every counted tick has exactly one tick or
//! crashed event, every acknowledged approval is pending or used, history has
//! no torn line and no temp file survives.
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

/// A step that, when `$AUTOMATON_ROOT/die` exists, removes it and kills its
/// runner (its parent) mid-step, leaving `in_flight` behind.
const LOOP: &str = r#"
step = 'if [ -e "$AUTOMATON_ROOT/die" ]; then rm "$AUTOMATON_ROOT/die"; kill -9 $PPID; sleep 5; fi'
[[gate]]
stock = "approve-every"
params = { every = 1 }
"#;

/// Whether strace can trace here; prints why not, or fails when it must.
fn strace_usable(test: &str) -> bool {
    static USABLE: OnceLock<Result<(), String>> = OnceLock::new();
    let usable = USABLE.get_or_init(|| {
        let probe = Command::new("strace")
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
        Err(why) if std::env::var("AUTOMATON_REQUIRE_STRACE").as_deref() == Ok("1") => {
            panic!("{test}: {why}, and AUTOMATON_REQUIRE_STRACE=1")
        }
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            false
        }
    }
}

/// A loop `l` that has run one tick and holds one acknowledged approval,
/// its gate compiled into the root's cache: copied for every kill.
fn ticked() -> (Scratch, String) {
    let s = Scratch::new();
    s.new_loop("l", LOOP);
    s.ok(&["tick", "l"]);
    let id = approval_id(&s.ok(&["approve", "l", "--note", "go"])).unwrap();
    (s, id)
}

/// `ticked`, then a tick that uses the approval and dies mid-step: its
/// `in_flight` is left for the next command to find.
fn crashed() -> (Scratch, String) {
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
    Exited(Option<i32>, String),
    NoSuchSyscall,
}

fn run_killed_at(s: &Scratch, syscall: &str, k: u32, args: &[&str]) -> Run {
    let out = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-e"])
        .arg(format!("inject={syscall}:signal=SIGKILL:when={k}"))
        .arg(BIN)
        .arg("--root")
        .arg(&s.root)
        .args(args)
        .env_remove("AUTOMATON_ROOT")
        .env("AUTOMATON_USER", "operator")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.signal() == Some(9) || out.status.code() == Some(137) {
        Run::Killed
    } else if stderr.starts_with("strace:") && stderr.contains("invalid system call") {
        Run::NoSuchSyscall
    } else {
        Run::Exited(
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

/// One command to crash, where it starts from and how it is recovered.
struct Scenario {
    name: &'static str,
    template: fn() -> (Scratch, String),
    command: &'static [&'static str],
    recover: &'static [&'static str],
}

/// What the kills of one scenario found.
#[derive(Default)]
struct Findings {
    kill_points: BTreeMap<String, u32>,
    /// Violation → the points (`syscall#k`) where it was seen.
    violations: BTreeMap<String, Vec<String>>,
}

impl Findings {
    fn report(&self, name: &str) -> String {
        let total: u32 = self.kill_points.values().sum();
        let per: Vec<String> = self.kill_points.iter().map(|(s, n)| format!("{s} {n}")).collect();
        let mut text = format!("{name}: {total} kill points ({})", per.join(", "));
        for (what, at) in &self.violations {
            text += &format!("\n  {what}\n    at {} point(s): {}", at.len(), at.join(" "));
        }
        text
    }
}

fn crash_everywhere(sc: &Scenario) {
    if !strace_usable(sc.name) {
        return;
    }
    let (template, acked_before) = (sc.template)();
    let base = Audit::read(&template, "l");
    let mut found = Findings::default();
    for syscall in WRITE_SIDE {
        for k in 1..=MAX_K {
            assert!(
                k < MAX_K,
                "{}: {syscall} injection never stopped killing",
                sc.name
            );
            let s = Scratch::copy_of(&template);
            let point = format!("{syscall}#{k}");
            let mut seen: Vec<String> = Vec::new();
            let mut note = |what: String, phase: &str| seen.push(format!("{phase}: {what}"));
            let mut acked = vec![acked_before.clone()];
            let killed = match run_killed_at(&s, syscall, k, sc.command) {
                Run::NoSuchSyscall => break,
                Run::Killed => true,
                Run::Exited(code, stdout) => {
                    if sc.command[0] == "approve" && code == Some(0) {
                        acked.push(approval_id(&stdout).expect("approve names its approval"));
                    }
                    false
                }
            };
            if killed {
                // What readers see at once, before any recovery.
                let seen = Audit::read(&s, "l");
                let mut pre = seen.violations(&acked, base.version(), &s.loop_dir("l"));
                pre.retain(|v| !v.starts_with("in_flight") && !v.starts_with("stray temp"));
                for v in pre {
                    note(v, "after the kill");
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
            for v in after.violations(&acked, base.version(), &s.loop_dir("l")) {
                note(v, "after recovery");
            }
            if killed {
                *found.kill_points.entry((*syscall).to_owned()).or_default() += 1;
            }
            for v in seen {
                found.violations.entry(v).or_default().push(point.clone());
            }
            if !killed {
                break;
            }
        }
    }
    let report = found.report(sc.name);
    eprintln!("{report}");
    assert!(
        found.kill_points.values().sum::<u32>() > 0,
        "{}: no kill point was reached",
        sc.name
    );
    assert!(found.violations.is_empty(), "{report}");
}

#[test]
fn tick_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "tick",
        template: ticked,
        command: &["tick", "l"],
        recover: &["pause", "l"],
    });
}

#[test]
fn approve_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "approve",
        template: ticked,
        command: &["approve", "l", "--note", "k"],
        recover: &["tick", "l"],
    });
}

#[test]
fn pause_that_finds_a_dead_tick_killed_at_every_write_side_syscall() {
    crash_everywhere(&Scenario {
        name: "pause",
        template: crashed,
        command: &["pause", "l"],
        recover: &["resume", "l"],
    });
}
