//! History rotation is one step: a tick killed (SIGKILL) or failed (EIO,
//! ENOSPC) by strace's fault injection at each rename and unlink of a
//! rotation loses no event and reads in order; rotated files an older
//! build left with a gap in their numbers are all read, found by `doctor`
//! and renamed in order by `doctor --fix`, which a kill at any of its
//! renames leaves readable.
//!
//! strace comes from the OS; without it these tests say they were skipped
//! (the parts that need it), unless `AUTOMATON_REQUIRE_STRACE=1`.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::BIN;
use crate::crash::strace_usable;
use crate::invariants::{Audit, Scratch};

/// The syscalls a rename or an unlink is made with, on x86_64 and aarch64.
const SYSCALLS: &[&str] = &["rename", "renameat", "renameat2", "unlink", "unlinkat"];

/// How an injected call fails: the process killed, or the call failing.
const FAULTS: &[&str] = &["signal=SIGKILL", "error=EIO", "error=ENOSPC"];

/// Every commit rotates (any history is past one byte).
const LOOP: &str = "step = \"true\"\n[history]\nmax_size = \"1B\"\nkeep = 4\n";

/// How a command run with a fault injected at the k-th call ended.
enum Faulted {
    /// The fault was injected.
    Hit,
    /// The command made fewer than k such calls.
    Missed,
    /// The architecture has no such syscall.
    NoSuchSyscall,
}

/// Runs `automaton args` under strace, `fault` injected at the `k`-th
/// call of `syscall`.
fn run_faulted(s: &Scratch, syscall: &str, fault: &str, k: u32, args: &[&str]) -> Faulted {
    let trace = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("strace")
        .args(["-f", "-o"])
        .arg(trace.path())
        .arg("-e")
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(format!("inject={syscall}:{fault}:when={k}"))
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
    if stderr.starts_with("strace:") && stderr.contains("invalid system call") {
        return Faulted::NoSuchSyscall;
    }
    let killed = out.status.signal() == Some(9) || out.status.code() == Some(137);
    let traced = std::fs::read_to_string(trace.path()).unwrap_or_default();
    if killed || traced.contains("(INJECTED)") {
        Faulted::Hit
    } else {
        Faulted::Missed
    }
}

/// The events of versions up to `v`.
fn up_to(events: &[Value], v: u64) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["v"].as_u64().is_some_and(|ev| ev <= v))
        .cloned()
        .collect()
}

/// A root with loop `r`, ticked `ticks` times: with every commit rotating,
/// it has `ticks` rotated history files (up to `keep`).
fn template(ticks: usize) -> Scratch {
    let s = Scratch::new();
    s.new_loop("r", LOOP);
    for _ in 0..ticks {
        s.ok(&["tick", "r"]);
    }
    s
}

/// What a tick and the recovering command leave without a fault: how many
/// of the events before they keep, and the invariants the events deleted
/// past `keep` break (a counted tick whose event is gone).
struct Clean {
    kept: usize,
    violations: Vec<String>,
}

/// What is wrong with the history after a fault and a recovering command:
/// the events the template had must be a whole run of its newest ones, at
/// least as many as without a fault, in order and each once; then every
/// invariant of a loop after a crash that holds without a fault.
fn problems(s: &Scratch, before: &Audit, clean: &Clean) -> Vec<String> {
    let after = Audit::read(s, "r");
    let mut v = after.violations(&[], before.version(), &s.loop_dir("r"));
    v.retain(|x| !clean.violations.contains(x));
    let kept = clean.kept;
    let old = up_to(&after.events, before.version());
    let n = before.events.len();
    if old.len() < kept || old.len() > n || old[..] != before.events[n - old.len()..] {
        v.push(format!(
            "of the {n} events before, {} are left, not the newest {kept} or more in order",
            old.len()
        ));
    }
    let mut seen = BTreeMap::new();
    for e in &after.events {
        *seen.entry(e.to_string()).or_insert(0) += 1;
    }
    if let Some((e, n)) = seen.iter().find(|(_, n)| **n > 1) {
        v.push(format!("{e} is read {n} times"));
    }
    if !after
        .events
        .windows(2)
        .all(|w| w[0]["v"].as_u64() <= w[1]["v"].as_u64())
    {
        v.push("the events are out of order".to_owned());
    }
    v
}

/// Injects each fault at each call of each syscall of one tick, until the
/// tick makes no more such calls; the next command recovers. Returns what
/// went wrong where, and how many of the events before a tick and the
/// recovering command keep without a fault.
fn faults_at_every_rename_and_unlink(
    test: &str,
    template: &Scratch,
) -> (BTreeMap<String, Vec<String>>, usize) {
    let before = Audit::read(template, "r");
    assert!(before.read_errors.is_empty(), "{:?}", before.read_errors);
    let s = Scratch::copy_of(template);
    s.ok(&["tick", "r"]);
    s.ok(&["pause", "r"]);
    let after = Audit::read(&s, "r");
    let clean = Clean {
        kept: up_to(&after.events, before.version()).len(),
        violations: after.violations(&[], before.version(), &s.loop_dir("r")),
    };
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut hits = 0;
    for syscall in SYSCALLS {
        'fault: for fault in FAULTS {
            for k in 1..100 {
                let s = Scratch::copy_of(template);
                match run_faulted(&s, syscall, fault, k, &["tick", "r"]) {
                    Faulted::NoSuchSyscall => break 'fault,
                    Faulted::Missed => continue 'fault,
                    Faulted::Hit => hits += 1,
                }
                let recovered = s.run(&["pause", "r"]);
                let mut seen = problems(&s, &before, &clean);
                if !recovered.status.success() {
                    seen.push(format!(
                        "`pause` exited {:?}: {}",
                        recovered.status.code(),
                        String::from_utf8_lossy(&recovered.stderr).trim()
                    ));
                }
                for p in seen {
                    found.entry(p).or_default().push(format!("{syscall}#{k} {fault}"));
                }
            }
            panic!("{test}: {syscall} {fault} never stopped being injected");
        }
    }
    assert!(hits > 0, "{test}: no fault was injected");
    eprintln!("{test}: {hits} faults injected");
    (found, clean.kept)
}

fn assert_none(test: &str, found: &BTreeMap<String, Vec<String>>) {
    let report: Vec<String> = found
        .iter()
        .map(|(p, at)| format!("{p}\n    at {}", at.join(", ")))
        .collect();
    assert!(found.is_empty(), "{test}:\n  {}", report.join("\n  "));
}

/// Two rotated files and `keep = 4`: neither the tick's rotation nor the
/// recovering command's deletes a file, so every event stays, the
/// `created` event first.
#[test]
fn a_rotation_killed_or_failed_at_any_rename_keeps_every_event() {
    let test = "a_rotation_killed_or_failed_at_any_rename_keeps_every_event";
    if !strace_usable(test) {
        return;
    }
    let template = template(2);
    let before = Audit::read(&template, "r");
    assert_eq!(before.events[0]["kind"], "created");
    let (found, kept) = faults_at_every_rename_and_unlink(test, &template);
    assert_eq!(kept, before.events.len(), "without a fault nothing is deleted");
    assert_none(test, &found);
}

/// Four rotated files and `keep = 4`: the tick's rotation deletes the
/// oldest (and the recovering command's the next); a fault anywhere loses
/// no more than that, and no event is read twice or out of order.
#[test]
fn a_rotation_killed_or_failed_at_any_rename_or_unlink_past_keep_loses_only_the_oldest() {
    let test = "a_rotation_killed_or_failed_at_any_rename_or_unlink_past_keep";
    if !strace_usable(test) {
        return;
    }
    let (found, _) = faults_at_every_rename_and_unlink(test, &template(4));
    assert_none(test, &found);
}

/// Names of the history files in `dir`, sorted.
fn history_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("history."))
        .collect();
    names.sort();
    names
}

/// A loop whose history is split by hand, as an older build killed
/// mid-rotation leaves it: its files `history.jsonl.9`, `.7`, `.6`, `.2`,
/// `.1` (oldest first; 8 and 3 to 5 missing), one file this build rotated
/// (`history.1.jsonl`, newer than all of them) and `history.jsonl`.
/// Returns the root and every event in order.
fn with_a_gap() -> (Scratch, Vec<Value>) {
    let s = Scratch::new();
    s.new_loop("g", "step = \"true\"\n");
    for _ in 0..8 {
        s.ok(&["tick", "g"]);
    }
    let all = Audit::read(&s, "g").events;
    let dir = s.loop_dir("g");
    let text = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let names = [
        "history.jsonl.9",
        "history.jsonl.7",
        "history.jsonl.6",
        "history.jsonl.2",
        "history.jsonl.1",
        "history.1.jsonl",
        "history.jsonl",
    ];
    assert!(lines.len() >= names.len(), "{} lines", lines.len());
    let per = lines.len() / names.len();
    for (i, name) in names.iter().enumerate() {
        let end = if i + 1 == names.len() {
            lines.len()
        } else {
            (i + 1) * per
        };
        std::fs::write(dir.join(name), lines[i * per..end].concat()).unwrap();
    }
    (s, all)
}

fn doctor(s: &Scratch, args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["doctor", "g", "--json"];
    all.extend_from_slice(args);
    let out = s.run(&all);
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap())
}

fn history_findings(report: &Value) -> Vec<(String, String)> {
    report["loops"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "history")
        .map(|f| {
            (
                f["level"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_gap_an_older_build_left_is_read_across_found_by_doctor_and_fixed_in_order() {
    let (s, all) = with_a_gap();
    assert_eq!(all[0]["kind"], "created");
    assert_eq!(
        Audit::read(&s, "g").events,
        all,
        "every file is read, in order, the gap notwithstanding"
    );

    let (code, report) = doctor(&s, &[]);
    assert_eq!(code, Some(1), "{report}");
    let found = history_findings(&report);
    assert!(
        found.iter().any(|(level, m)| level == "warning"
            && m.contains("history.jsonl.8")
            && m.contains("history.jsonl.3")
            && m.contains("missing")),
        "{found:?}"
    );
    let dir = s.loop_dir("g");
    assert!(
        dir.join("history.jsonl.9").exists(),
        "doctor without --fix renames nothing"
    );

    let (code, report) = doctor(&s, &["--fix"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        history_files(&dir),
        [
            "history.1.jsonl",
            "history.2.jsonl",
            "history.3.jsonl",
            "history.4.jsonl",
            "history.5.jsonl",
            "history.6.jsonl",
            "history.jsonl"
        ]
    );
    assert_eq!(Audit::read(&s, "g").events, all, "nothing lost, nothing moved");
    let (code, report) = doctor(&s, &[]);
    assert_eq!(code, Some(0), "{report}");

    // The next rotation takes the next number.
    let toml = dir.join("loop.toml");
    let text = std::fs::read_to_string(&toml).unwrap() + "[history]\nmax_size = \"1B\"\nkeep = 10\n";
    std::fs::write(&toml, text).unwrap();
    s.ok(&["tick", "g"]);
    assert!(dir.join("history.7.jsonl").exists(), "{:?}", history_files(&dir));
    assert_eq!(Audit::read(&s, "g").events[..all.len()], all);
}

/// `doctor --fix` killed at each of its renames leaves a history read
/// whole and in order, and the next `doctor --fix` finishes the repair.
#[test]
fn doctor_fix_killed_at_any_rename_leaves_the_history_readable_in_order() {
    let test = "doctor_fix_killed_at_any_rename_leaves_the_history_readable_in_order";
    if !strace_usable(test) {
        return;
    }
    let (template, all) = with_a_gap();
    let mut kills = 0;
    let mut problems = Vec::new();
    for syscall in ["rename", "renameat", "renameat2"] {
        for k in 1..100 {
            let s = Scratch::copy_of(&template);
            match run_faulted(&s, syscall, "signal=SIGKILL", k, &["doctor", "g", "--fix"]) {
                Faulted::Hit => kills += 1,
                Faulted::Missed | Faulted::NoSuchSyscall => break,
            }
            if Audit::read(&s, "g").events != all {
                problems.push(format!(
                    "after a kill at {syscall}#{k}, the history is not read whole and in order"
                ));
            }
            let (code, report) = doctor(&s, &["--fix"]);
            let left: Vec<String> = history_files(&s.loop_dir("g"))
                .into_iter()
                .filter(|n| n.starts_with("history.jsonl."))
                .collect();
            if code != Some(0) || !left.is_empty() || Audit::read(&s, "g").events != all {
                problems.push(format!(
                    "after a kill at {syscall}#{k}, `doctor --fix` again: exit {code:?}, {left:?} left: {report}"
                ));
            }
        }
    }
    assert!(kills > 0, "{test}: no rename was reached");
    assert!(problems.is_empty(), "{test}:\n  {}", problems.join("\n  "));
}
