//! The file store's `in_flight` record (`.state.flight`): a tick's commit
//! before its step, written in place. Readers see it as the committed state
//! while it is whole and of the next version, with its events; a torn,
//! stale or newer record is passed over and loses nothing; a runner killed
//! mid-step is recorded as crashed with the record's events exactly once;
//! `doctor` says what the record is.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::invariants::{Audit, Scratch, approval_id};

/// A gated loop whose step, when `$AUTOMATON_ROOT/die` exists, kills its
/// runner mid-step, and while `$AUTOMATON_ROOT/hold` exists, waits.
/// Unconfined: a confined step may neither signal its runner nor touch
/// the root.
const LOOP: &str = r#"
[step]
confine = "off"
command = 'if [ -e "$AUTOMATON_ROOT/die" ]; then rm "$AUTOMATON_ROOT/die"; kill -9 $PPID; sleep 5; fi; while [ -e "$AUTOMATON_ROOT/hold" ]; do sleep 0.05; done'
[[gate]]
stock = "approve-every"
params = { every = 1 }
"#;

/// The record's header: magic, version, payload length, checksum.
const HEADER: usize = 56;

fn record(s: &Scratch) -> PathBuf {
    s.loop_dir("l").join(".state.flight")
}

/// The state file's own JSON, as written (never with `in_flight`).
fn state_file(s: &Scratch) -> Value {
    serde_json::from_slice(&fs::read(s.loop_dir("l").join(".state.loop")).unwrap()).unwrap()
}

/// A loop that has ticked once and holds one approval (its id).
fn approved() -> (Scratch, String) {
    let s = Scratch::new();
    s.new_loop("l", LOOP);
    s.ok(&["tick", "l"]);
    let id = approval_id(&s.ok(&["approve", "l", "--ahead", "--note", "go"])).unwrap();
    (s, id)
}

/// `approved`, then a tick that uses the approval and whose runner is
/// killed mid-step: its record is whole, nothing recorded it yet.
fn killed_mid_step() -> (Scratch, String) {
    let (s, id) = approved();
    fs::write(s.root.join("die"), "").unwrap();
    let out = s.run(&["tick", "l"]);
    assert_eq!(out.status.signal(), Some(9), "the step kills its runner: {out:?}");
    (s, id)
}

fn count(events: &[Value], kind: &str, tick: u64) -> usize {
    events
        .iter()
        .filter(|e| e["kind"] == kind && e["tick"].as_u64() == Some(tick))
        .count()
}

fn used(events: &[Value], id: &str) -> usize {
    events
        .iter()
        .filter(|e| e["kind"] == "approvals-used")
        .filter(|e| e["ids"].as_array().unwrap().iter().any(|i| i == id))
        .count()
}

fn pending(state: &Value, id: &str) -> bool {
    state["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["id"] == id)
}

#[test]
fn a_runner_killed_mid_step_is_recorded_as_crashed_with_its_gate_events_and_approval_once() {
    let (s, id) = killed_mid_step();
    let seen = Audit::read(&s, "l");
    let file = state_file(&s);
    assert!(
        file["in_flight"].is_null(),
        "the state file never holds in_flight"
    );
    assert_eq!(seen.version(), file["version"].as_u64().unwrap() + 1);
    let dead = seen.state["in_flight"]["tick"]
        .as_u64()
        .expect("readers see the step in flight");
    assert_eq!(used(&seen.events, &id), 1, "the consumed approval is committed");
    assert_eq!(count(&seen.events, "gate", dead), 1);
    assert!(!pending(&seen.state, &id));

    // An operator's command records the crash, with the record's events.
    s.ok(&["pause", "l"]);
    let after = Audit::read(&s, "l");
    assert_eq!(
        after.violations(std::slice::from_ref(&id), seen.version(), &s.loop_dir("l")),
        Vec::<String>::new()
    );
    assert!(after.state["in_flight"].is_null());
    assert_eq!(after.tick(), dead, "the dead tick counts");
    assert_eq!(count(&after.events, "crashed", dead), 1);
    assert_eq!(count(&after.events, "gate", dead), 1);
    assert_eq!(used(&after.events, &id), 1);
    let tail: Vec<&str> = after
        .events
        .iter()
        .rev()
        .take(2)
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(tail, ["paused", "crashed"]);

    // The record is now stale: later commands neither see nor repeat it.
    s.ok(&["resume", "l"]);
    s.ok(&["approve", "l", "--ahead"]);
    s.ok(&["tick", "l"]);
    let last = Audit::read(&s, "l");
    assert_eq!(count(&last.events, "crashed", dead), 1);
    assert_eq!(count(&last.events, "gate", dead), 1);
    assert_eq!(used(&last.events, &id), 1);
    assert_eq!(last.tick(), dead + 1);
    assert!(
        last.violations(&[id], after.version(), &s.loop_dir("l"))
            .is_empty()
    );
}

#[test]
fn a_torn_record_is_ignored_and_nothing_is_lost() {
    let (template, id) = killed_mid_step();
    let whole = fs::read(record(&template)).unwrap();
    let len = HEADER + u64::from_le_bytes(whole[16..24].try_into().unwrap()) as usize;
    let before = state_file(&template);
    let committed = {
        // What was committed before the dead tick's record: its events are
        // those of the state file's version and below.
        let all: Vec<Value> = serde_json::from_str(&template.ok(&["history", "l", "--json"])).unwrap();
        all.into_iter()
            .filter(|e| e["v"].as_u64().unwrap() <= before["version"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let flip = |at: usize| {
        let mut b = whole.clone();
        b[at] ^= 0x20;
        b
    };
    let variants: Vec<(&str, Vec<u8>)> = vec![
        ("cut in its header", whole[..HEADER / 2].to_vec()),
        ("cut in its payload", whole[..len / 2].to_vec()),
        ("one byte short", whole[..len - 1].to_vec()),
        ("a flipped checksum byte", flip(30)),
        ("a flipped payload byte", flip(HEADER + len / 3)),
        ("a flipped last byte", flip(len - 1)),
    ];
    for (what, bytes) in variants {
        let s = Scratch::copy_of(&template);
        fs::write(record(&s), &bytes).unwrap();
        let seen = Audit::read(&s, "l");
        assert_eq!(seen.state["version"], before["version"], "{what}");
        assert!(seen.state["in_flight"].is_null(), "{what}");
        assert_eq!(
            seen.events, committed,
            "{what}: readers see what was committed, no more"
        );
        assert!(pending(&seen.state, &id), "{what}: the approval was never used");

        s.ok(&["pause", "l"]);
        let after = Audit::read(&s, "l");
        assert!(
            after
                .violations(std::slice::from_ref(&id), 0, &s.loop_dir("l"))
                .is_empty(),
            "{what}"
        );
        assert_eq!(&after.events[..committed.len()], &committed[..], "{what}");
        assert_eq!(
            after.events.len(),
            committed.len() + 1,
            "{what}: only the pause is new"
        );
        assert_eq!(after.tick(), before["tick"].as_u64().unwrap(), "{what}");
        assert!(pending(&after.state, &id), "{what}");
    }
}

#[test]
fn a_stale_record_is_ignored() {
    let (s, id) = killed_mid_step();
    let old = fs::read(record(&s)).unwrap();
    s.ok(&["pause", "l"]);
    s.ok(&["resume", "l"]);
    let before = Audit::read(&s, "l");
    // A record left from an older tick (as a power loss could leave one
    // under a later state): its version is behind the state file's + 1.
    fs::write(record(&s), &old).unwrap();
    let seen = Audit::read(&s, "l");
    assert_eq!(seen.state, before.state);
    assert_eq!(seen.events, before.events);
    s.ok(&["approve", "l", "--ahead"]);
    s.ok(&["tick", "l"]);
    let after = Audit::read(&s, "l");
    assert!(
        after
            .violations(&[id], before.version(), &s.loop_dir("l"))
            .is_empty()
    );
    assert_eq!(after.events.iter().filter(|e| e["kind"] == "crashed").count(), 1);
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_mins(1);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_reader_during_a_tick_sees_it_in_flight_with_its_before_step_events() {
    let (s, id) = approved();
    let hold = s.root.join("hold");
    fs::write(&hold, "").unwrap();
    let mut tick = s.cmd().args(["tick", "l"]).stdout(Stdio::null()).spawn().unwrap();
    let mut seen = Audit::read(&s, "l");
    wait_until("the tick's step to start", || {
        seen = Audit::read(&s, "l");
        !seen.state["in_flight"].is_null()
    });
    let running = seen.state["in_flight"]["tick"].as_u64().unwrap();
    assert!(state_file(&s)["in_flight"].is_null());
    assert_eq!(used(&seen.events, &id), 1, "{:?}", seen.events);
    assert_eq!(count(&seen.events, "gate", running), 1);
    assert_eq!(count(&seen.events, "tick", running), 0);
    let status = s.ok(&["status", "l"]);
    assert!(status.contains(&format!("tick {running}")), "{status}");

    fs::remove_file(&hold).unwrap();
    assert!(tick.wait().unwrap().success());
    let after = Audit::read(&s, "l");
    assert!(
        after
            .violations(std::slice::from_ref(&id), seen.version(), &s.loop_dir("l"))
            .is_empty()
    );
    assert_eq!(used(&after.events, &id), 1);
    assert_eq!(count(&after.events, "gate", running), 1);
    assert_eq!(count(&after.events, "tick", running), 1);
    assert_eq!(after.version(), seen.version() + 1);
}

/// `doctor --json`'s findings for loop `l`, as `level check: message`.
fn doctor(s: &Scratch) -> Vec<String> {
    let out = s.run(&["doctor", "l", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["loops"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{} {}: {}",
                f["level"].as_str().unwrap(),
                f["check"].as_str().unwrap(),
                f["message"].as_str().unwrap()
            )
        })
        .collect()
}

fn has(found: &[String], start: &str) -> bool {
    found.iter().any(|f| f.starts_with(start))
}

/// A record with a good checksum around `payload`, of `version`.
fn sealed(version: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"atflight");
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let sum: [u8; 32] = Sha256::new()
        .chain_update(&b)
        .chain_update(payload)
        .finalize()
        .into();
    b.extend_from_slice(&sum);
    b.extend_from_slice(payload);
    b
}

#[test]
fn doctor_says_what_the_record_is_in_each_condition() {
    let (template, _) = killed_mid_step();
    let whole = fs::read(record(&template)).unwrap();
    let version = u64::from_le_bytes(whole[8..16].try_into().unwrap());
    let at = |s: &Scratch, bytes: &[u8]| fs::write(record(s), bytes).unwrap();
    let fresh = || Scratch::copy_of(&template);

    let s = fresh();
    let found = doctor(&s);
    assert!(
        has(
            &found,
            &format!("ok in-flight-record: .state.flight commits version {version}")
        ),
        "{found:?}"
    );
    assert!(has(&found, "warning in-flight: tick"), "{found:?}");
    s.ok(&["doctor", "l", "--fix"]);
    let found = doctor(&s);
    assert!(
        !has(&found, "ok in-flight-record"),
        "a record the state has passed is nothing to say: {found:?}"
    );
    assert!(found.iter().all(|f| f.starts_with("ok ")), "{found:?}");

    let s = fresh();
    let mut torn = whole.clone();
    torn[HEADER + 5] ^= 1;
    at(&s, &torn);
    let found = doctor(&s);
    assert!(
        has(&found, "note in-flight-record: .state.flight is torn"),
        "{found:?}"
    );
    assert!(!has(&found, "warning in-flight"), "{found:?}");

    let s = fresh();
    let mut ahead = whole.clone();
    ahead[8..16].copy_from_slice(&(version + 5).to_le_bytes());
    at(&s, &ahead);
    let found = doctor(&s);
    assert!(
        has(&found, "warning in-flight-record: .state.flight is of version"),
        "{found:?}"
    );
    assert_eq!(
        Audit::read(&s, "l").version(),
        version - 1,
        "readers pass over it"
    );

    let s = fresh();
    at(&s, &sealed(version, b"{\"state\": 1}"));
    let found = doctor(&s);
    assert!(has(&found, "error in-flight-record:"), "{found:?}");
    let err = String::from_utf8(s.run(&["status", "l"]).stderr).unwrap();
    assert!(
        err.contains(".state.flight"),
        "a record that does not read is named: {err}"
    );
    assert_eq!(
        s.run(&["pause", "l"]).status.code(),
        Some(5),
        "and nothing writes over it"
    );
}

#[test]
fn the_record_file_is_made_once_and_never_shrinks() {
    let (s, _) = approved();
    let path: &Path = &record(&s);
    let mut sizes = Vec::new();
    for _ in 0..3 {
        s.ok(&["approve", "l", "--ahead"]);
        s.ok(&["tick", "l"]);
        let meta = fs::metadata(path).unwrap();
        sizes.push((std::os::unix::fs::MetadataExt::ino(&meta), meta.len()));
    }
    assert!(
        sizes.windows(2).all(|w| w[0].0 == w[1].0),
        "one file, written in place: {sizes:?}"
    );
    assert!(sizes.windows(2).all(|w| w[0].1 <= w[1].1), "{sizes:?}");
    assert!(sizes.iter().all(|(_, len)| len % 4096 == 0), "{sizes:?}");
}
