//! Property tests of every parser of what is on disk: the state, history
//! lines, loop.toml, a step's metrics file and the lock's holder info. Any
//! input, random or a valid file damaged at random, gives a value or an
//! error, never a panic; what parses writes back to something that parses
//! the same.

use std::path::Path;

use automaton::config::LoopConfig;
use automaton::history::{Event, EventKind};
use automaton::lock::{self, Holder};
use automaton::metrics;
use automaton::state::{Outcome, ProcessOutcome, State};
use automaton::store;
use jiff::Timestamp;
use proptest::prelude::*;

/// How a valid file gets damaged: cut short, a byte changed, text inserted.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Byte(usize, u8),
    Insert(usize, String),
    Replace(usize, usize, String),
}

fn damage() -> impl Strategy<Value = Damage> {
    // Fragments that make the damage interesting to a JSON or TOML parser.
    let fragment = prop_oneof![
        any::<String>(),
        Just("null".to_owned()),
        Just("1e400".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("\"\\ud800\"".to_owned()),
        Just("{}".to_owned()),
        Just("[[[[".to_owned()),
        Just("\n".to_owned()),
        Just("= 1\n".to_owned()),
        Just("[[gate]]\n".to_owned()),
    ];
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Byte(i, b)),
        (any::<usize>(), fragment.clone()).prop_map(|(i, s)| Damage::Insert(i, s)),
        (any::<usize>(), 0..16usize, fragment).prop_map(|(i, n, s)| Damage::Replace(i, n, s)),
    ]
}

fn apply(text: &[u8], damages: &[Damage]) -> Vec<u8> {
    let mut t = text.to_vec();
    for d in damages {
        let at = |i: usize| if t.is_empty() { 0 } else { i % (t.len() + 1) };
        match d {
            Damage::Truncate(i) => {
                let i = at(*i);
                t.truncate(i);
            }
            Damage::Byte(i, b) => {
                if !t.is_empty() {
                    let i = i % t.len();
                    t[i] = *b;
                }
            }
            Damage::Insert(i, s) => {
                let i = at(*i);
                t.splice(i..i, s.bytes());
            }
            Damage::Replace(i, n, s) => {
                let i = at(*i);
                let end = (i + n).min(t.len());
                t.splice(i..end, s.bytes());
            }
        }
    }
    t
}

/// A state with something in every field a tick fills.
fn full_state() -> Vec<u8> {
    let now: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
    let mut s = State::new(now);
    s.version = 41;
    s.tick = 17;
    let at = automaton::state::At {
        head: Some("c0ffee".into()),
        snapshot: Some("5eed".into()),
    };
    s.approve("ann", Some("ok".into()), now, None, at).unwrap();
    s.metrics.insert("cost_usd".into(), 0.25);
    s.totals.insert("cost_usd".into(), 4.5);
    serde_json::to_vec_pretty(&s).unwrap()
}

/// One history line of each common kind.
fn lines() -> Vec<Vec<u8>> {
    let at: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
    let kinds = vec![
        EventKind::Created { by: "ann".into() },
        EventKind::Approved {
            by: "ann".into(),
            id: "ap-3".into(),
            note: Some("go".into()),
            await_id: Some("aw-3".into()),
            head: Some("c0ffee".into()),
            snapshot: Some("5eed".into()),
        },
        EventKind::ApprovalsUsed {
            tick: 4,
            ids: vec!["ap-3".into()],
            by: vec!["ann".into()],
            await_id: Some("aw-3".into()),
            approved_config: Some("ab12".into()),
        },
        EventKind::Crashed {
            tick: 5,
            pid: 4242,
            host: "h".into(),
            started_at: at,
        },
        EventKind::Tick {
            tick: 6,
            outcome: Outcome::Ran,
            reason: None,
            step: Some(ProcessOutcome {
                exit_code: Some(0),
                signal: None,
                duration_ms: 12,
                timed_out: false,
            }),
            verifier: None,
            worktree_changed: Some(true),
            host: None,
            head: Some(automaton::state::Head {
                branch: "loop/x".into(),
                before: Some("c0ffee".into()),
                after: Some("decaf".into()),
            }),
            metrics: [("cost_usd".to_owned(), 0.25)].into(),
            config: Some(automaton::rules::Hashes {
                loop_toml: "ab12".into(),
                automaton_toml: automaton::rules::RootFile::Absent,
            }),
            confinement: Some(automaton::step::confine::Confinement::Landlock {
                abi: 7,
                enforces: vec![automaton::step::confine::Enforced::Filesystem],
            }),
            fired_by: Some(automaton::fires::FiredBy::Cron),
            cancelled: Some(automaton::state::Cancellation {
                by: "ann".into(),
                reason: Some("a freeze".into()),
            }),
        },
        EventKind::ConfigChanged {
            change: automaton::rules::ConfigChange {
                via: automaton::rules::Via::Outside,
                by: None,
                before: automaton::rules::Hashes {
                    loop_toml: "ab12".into(),
                    automaton_toml: automaton::rules::RootFile::Absent,
                },
                after: automaton::rules::Hashes {
                    loop_toml: "cd34".into(),
                    automaton_toml: automaton::rules::RootFile::Sha256("ef56".into()),
                },
                diff: "-[[gate]]\n".into(),
                rules: vec![automaton::rules::Rule::Gates],
                awaits: true,
            },
        },
    ];
    kinds
        .into_iter()
        .map(|kind| Event::stamped(kind, 7, at, &automaton::who::identify("ann", None, &[])).to_line())
        .collect()
}

const CONFIG: &str = r#"
description = "fix the flaky tests"
step = ["./agent.sh", "--task", "fix-flaky-tests"]
workdir = "."
timeout = "30m"
overlap = "skip"

[verifier]
command = "cargo test --quiet"
timeout = "10m"

[worktree]
repo = "/path/to/repo"
branch = "loop/fix-flaky-tests"

[schedule]
every = "15m"
jitter = "30s"

[approval]
approvers = ["ann", "bob"]
required = 2
expires = "24h"

[[gate]]
stock = "approve-every"
params = { every = 5 }

[[gate]]
path = "gates/budget.wasm"
phase = ["after-step"]
params = { metric = "cost_usd", max = 20.0 }
on_error = "halt"
limits = { timeout = "200ms", memory = "64MiB" }
"#;

const HOLDER: &str = r#"{"pid":4242,"host":"h","command":"tick","tick":17,"since":"2026-01-02T03:04:05Z"}"#;

fn parse_state(bytes: &[u8]) {
    let path = Path::new("/loops/x/.state.loop");
    if let Ok(state) = store::parse_state(bytes, path) {
        let again = serde_json::to_vec_pretty(&state).unwrap();
        let back =
            store::parse_state(&again, path).expect("a parsed state writes back to a state that parses");
        assert_eq!(back, state);
    }
}

fn parse_line(bytes: &[u8]) {
    if let Ok(event) = serde_json::from_slice::<Event>(bytes) {
        let back: Event = serde_json::from_slice(&event.to_line())
            .expect("a parsed event writes back to a line that parses");
        assert_eq!(back, event);
    }
}

fn parse_config(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let _ = LoopConfig::parse(&text, Path::new("/loops/x/loop.toml"));
}

fn parse_holder(bytes: &[u8]) {
    let _ = serde_json::from_slice::<Holder>(bytes);
}

/// `cases` random inputs; a failure is shrunk and reported, not saved.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn state_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        parse_state(&bytes);
    }

    #[test]
    fn damaged_states_parse_or_fail_cleanly(d in proptest::collection::vec(damage(), 1..4)) {
        parse_state(&apply(&full_state(), &d));
    }

    #[test]
    fn history_line_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        parse_line(&bytes);
    }

    #[test]
    fn damaged_history_lines_parse_or_fail_cleanly(
        which in 0..5usize,
        d in proptest::collection::vec(damage(), 1..4),
    ) {
        parse_line(&apply(&lines()[which], &d));
    }

    #[test]
    fn config_parser_never_panics(text in any::<String>()) {
        parse_config(text.as_bytes());
    }

    #[test]
    fn damaged_configs_parse_or_fail_cleanly(d in proptest::collection::vec(damage(), 1..4)) {
        parse_config(&apply(CONFIG.as_bytes(), &d));
    }

    #[test]
    fn holder_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        parse_holder(&bytes);
    }

    #[test]
    fn damaged_holders_parse_or_fail_cleanly(d in proptest::collection::vec(damage(), 1..4)) {
        parse_holder(&apply(HOLDER.as_bytes(), &d));
    }
}

/// Metrics come through the file the step writes; any content gives finite
/// numbers or an error naming the file.
fn read_metrics_text(text: &[u8]) -> Result<std::collections::BTreeMap<String, f64>, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics");
    std::fs::write(&path, text).unwrap();
    match metrics::read_metrics(&path) {
        Ok(m) => {
            for (k, v) in &m {
                assert!(v.is_finite(), "metric {k} = {v} is not finite");
            }
            Ok(m)
        }
        Err(e) => {
            assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
            Err(e.to_string())
        }
    }
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|f| f.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        Just("1e308".to_owned()),
        Just("-1e308".to_owned()),
        Just("1e309".to_owned()),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("-0".to_owned()),
        Just("0x10".to_owned()),
        Just(String::new()),
        "[0-9.eE+-]{0,12}",
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn metrics_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = read_metrics_text(&bytes);
    }

    #[test]
    fn metrics_lines_give_finite_numbers_or_an_error(
        lines in proptest::collection::vec(("[a-z_.{}\" -]{0,8}", "[=: ]{0,2}", number()), 0..6),
        json in any::<bool>(),
    ) {
        let text = if json {
            let fields: Vec<String> = lines.iter().map(|(k, _, v)| format!("{k:?}: {v}")).collect();
            format!("{{{}}}", fields.join(", "))
        } else {
            lines.iter().map(|(k, sep, v)| format!("{k}{sep}{v}\n")).collect()
        };
        let _ = read_metrics_text(text.as_bytes());
    }

    /// Whatever finite metrics steps report, the totals they add up to
    /// leave a state that parses again: a total never becomes a number JSON
    /// cannot hold.
    #[test]
    fn totals_of_reported_metrics_keep_the_state_readable(
        values in proptest::collection::vec(prop_oneof![any::<f64>(), Just(1e308), Just(-1e308)], 1..4),
    ) {
        let mut state = State::new("2026-01-02T03:04:05Z".parse().unwrap());
        for v in values {
            if let Ok(m) = read_metrics_text(format!("x={v}\n").as_bytes()) {
                metrics::add_totals(&mut state.totals, &m);
            }
        }
        let bytes = serde_json::to_vec_pretty(&state).unwrap();
        let parsed = store::parse_state(&bytes, Path::new("/loops/x/.state.loop"));
        prop_assert!(parsed.is_ok(), "totals {:?} make an unreadable state: {:?}", state.totals, parsed.err());
    }

    /// What `status` and a waiter read from the lock file: any content gives
    /// no holder or a live one, never a process that cannot hold a lock.
    #[test]
    fn lock_file_contents_name_a_real_holder_or_none(
        d in proptest::collection::vec(damage(), 0..3),
        pid in prop_oneof![Just(0u32), Just(u32::MAX), Just(std::process::id()), any::<u32>()],
    ) {
        let text = HOLDER.replace("4242", &pid.to_string()).replace("\"h\"", &format!("{:?}", automaton::who::host()));
        let bytes = apply(text.as_bytes(), &d);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".state.lock");
        std::fs::write(&path, &bytes).unwrap();
        if let Some(h) = lock::read_holder(&path) {
            prop_assert!(h.pid != 0, "pid 0 named as the holder of a lock");
        }
    }
}
