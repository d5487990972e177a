//! Gate authors keep their gates: the host calls a gate built against
//! `automaton:gate@0.1.0` in that version's world, deciding as it did, and
//! one built against 0.2.0 in its own, where the context carries the
//! worktree's commits and the pending await; one built against 0.3.0 asks
//! in its `describe` for runs and windows of history, and the host gives
//! them, computed from the loop's history. The stock gates stay built
//! against 0.1.0 and are the standing proof of it.

use std::path::{Path, PathBuf};

use automaton::domain::{
    Approval, Asker, Commits, Context, Decision, GateHistory, GateSource, HistoryRequest, Limits, PastRun,
    PendingAwait, WindowSums,
};
use automaton::gate::{GateHost, stock_gates};
use serde_json::Value;
use wit_parser::{Int, SizeAlign, Type, TypeDefKind};

use crate::common::Env;
use crate::gate_fixtures as fx;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn file(path: &Path) -> GateSource {
    GateSource::File {
        path: path.to_owned(),
        sha256: None,
    }
}

fn commits() -> Commits {
    Commits {
        branch: "loop/x".to_owned(),
        head_before: Some("1111111".to_owned()),
        head_after: Some("2222222".to_owned()),
    }
}

fn pending(approvals: Vec<Approval>) -> PendingAwait {
    PendingAwait {
        id: "aw-7".to_owned(),
        tick: 3,
        asked: vec![Asker {
            gate: "stock:approve-every".to_owned(),
            version: Some("1.0.0".to_owned()),
            reason: "every 3 ticks".to_owned(),
        }],
        since: "2026-11-30T10:00:00Z".parse().unwrap(),
        head: Some("2222222".to_owned()),
        approvals,
    }
}

fn approval() -> Approval {
    Approval {
        id: "ap-9".to_owned(),
        by: "ann".to_owned(),
        at: "2026-11-30T10:05:00Z".parse().unwrap(),
        note: None,
        await_id: Some("aw-7".to_owned()),
        head: None,
        snapshot: None,
    }
}

/// The offset of each field of record `name` in wit/gate.wit, and the
/// offset of the payload of an `option` field.
fn layout(name: &str) -> Vec<(String, usize, Option<usize>)> {
    let (resolve, _) = fx::wit_v0_2();
    let mut sizes = SizeAlign::default();
    sizes.fill(&resolve);
    let (_, def) = resolve
        .types
        .iter()
        .find(|(_, t)| t.name.as_deref() == Some(name))
        .unwrap();
    let TypeDefKind::Record(record) = &def.kind else {
        panic!("{name} is not a record")
    };
    let offsets = sizes.field_offsets(record.fields.iter().map(|f| &f.ty));
    record
        .fields
        .iter()
        .zip(offsets)
        .map(|(f, (offset, _))| {
            let payload = match f.ty {
                Type::Id(id) => match &resolve.types[id].kind {
                    TypeDefKind::Option(inner) => Some(
                        offset.size_wasm32()
                            + sizes.payload_offset(Int::U8, [None, Some(inner)]).size_wasm32(),
                    ),
                    _ => None,
                },
                _ => None,
            };
            (f.name.clone(), offset.size_wasm32(), payload)
        })
        .collect()
}

fn field(layout: &[(String, usize, Option<usize>)], name: &str) -> (usize, Option<usize>) {
    let (_, at, payload) = layout.iter().find(|(n, ..)| n == name).unwrap();
    (*at, *payload)
}

#[test]
fn the_new_test_gate_reads_the_fields_where_wit_gate_wit_puts_them() {
    let ctx = layout("context");
    assert_eq!(field(&ctx, "loop-name").0 as u32, fx::CTX_LOOP_NAME);
    assert_eq!(field(&ctx, "tick").0 as u32, fx::CTX_TICK);
    let at = |n| field(&ctx, n);
    assert_eq!(
        at("commits"),
        (fx::CTX2_COMMITS as usize, Some(fx::CTX2_COMMITS_PAYLOAD as usize))
    );
    assert_eq!(
        at("pending-await"),
        (fx::CTX2_AWAIT as usize, Some(fx::CTX2_AWAIT_PAYLOAD as usize))
    );
    assert_eq!(
        field(&layout("commits"), "head-after").0 as u32,
        fx::COMMITS_HEAD_AFTER
    );
    let awaits = layout("pending-await");
    assert_eq!(field(&awaits, "id").0, 0);
    assert_eq!(field(&awaits, "approvals").0 as u32, fx::AWAIT_APPROVALS);
}

#[test]
fn a_gate_of_each_version_is_called_in_its_own_world() {
    let tmp = tempfile::tempdir().unwrap();
    let host = GateHost::new(None).unwrap();
    let old = host
        .load(&file(&write(tmp.path(), "old.wasm", &fx::echo_loop_name())))
        .unwrap();
    let new = host
        .load(&file(&write(
            tmp.path(),
            "new.wasm",
            &fx::reads_commits_and_await(),
        )))
        .unwrap();
    assert_eq!((old.wit_version(), new.wit_version()), ("0.1.0", "0.2.0"));
    let decide = |gate, ctx: &Context| host.evaluate(gate, ctx, &Limits::default()).unwrap().decision;
    let plain = Context {
        loop_name: "agent".to_owned(),
        ..Context::default()
    };
    let full = Context {
        commits: Some(commits()),
        pending_await: Some(pending(vec![])),
        ..plain.clone()
    };
    // The 0.1.0 gate decides as it did, whatever a later version adds.
    assert_eq!(decide(&old, &plain), Decision::Skip("agent".to_owned()));
    assert_eq!(decide(&old, &full), Decision::Skip("agent".to_owned()));
    // The 0.2.0 gate reads what 0.2.0 added.
    assert_eq!(decide(&new, &plain), Decision::Proceed);
    assert_eq!(decide(&new, &full), Decision::AwaitApproval("aw-7".to_owned()));
    let approved = Context {
        pending_await: Some(pending(vec![approval()])),
        ..full.clone()
    };
    assert_eq!(decide(&new, &approved), Decision::Complete("aw-7".to_owned()));
    let committed = Context {
        pending_await: None,
        ..full
    };
    assert_eq!(decide(&new, &committed), Decision::Skip("2222222".to_owned()));
}

#[test]
fn the_stock_gates_but_time_window_stay_built_against_the_first_version_and_decide_as_before() {
    let host = GateHost::new(None).unwrap();
    for stock in stock_gates() {
        let gate = host.load(&GateSource::Stock(stock.name.to_owned())).unwrap();
        // time-window reads the host's zones (`in-zone`, 0.3.0).
        let built = if stock.name == "time-window" {
            "0.3.0"
        } else {
            "0.1.0"
        };
        assert_eq!(gate.wit_version(), built, "{}", stock.name);
    }
    // What 0.2.0 adds changes nothing of a 0.1.0 gate's decision.
    let gate = host.load(&GateSource::Stock("approve-every".to_owned())).unwrap();
    let base = Context {
        tick: 3,
        params: serde_json::json!({"every": 3}),
        ..Context::default()
    };
    let with_new = Context {
        commits: Some(commits()),
        pending_await: Some(pending(vec![approval()])),
        ..base.clone()
    };
    let before = host.evaluate(&gate, &base, &Limits::default()).unwrap().decision;
    let after = host
        .evaluate(&gate, &with_new, &Limits::default())
        .unwrap()
        .decision;
    assert!(matches!(before, Decision::AwaitApproval(_)), "{before:?}");
    assert_eq!(before, after);
}

#[test]
fn a_ticks_pending_await_and_its_approvals_reach_a_gate_of_the_new_version() {
    let env = crate::files_only!("loop.toml edited by hand");
    env.new_loop("v2", "step = \"true\"\n");
    let gates = env.loop_dir("v2").join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    write(&gates, "v2.wasm", &fx::reads_commits_and_await());
    let toml = "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n\
                [[gate]]\npath = \"gates/v2.wasm\"\n";
    std::fs::write(env.loop_dir("v2").join("loop.toml"), toml).unwrap();
    let tick = || {
        let v: Value = serde_json::from_str(&env.ok(&["tick", "v2", "--json"])).unwrap();
        v["outcome"].as_str().unwrap().to_owned()
    };
    let v2_said = || {
        let last = env
            .history("v2")
            .into_iter()
            .rev()
            .find(|e| e["kind"] == "gate" && e["gate"].as_str().is_some_and(|g| g.ends_with("v2.wasm")))
            .unwrap();
        (
            last["decision"].as_str().unwrap().to_owned(),
            last["reason"].as_str().unwrap_or("").to_owned(),
        )
    };
    assert_eq!(tick(), "ran");
    assert_eq!(tick(), "awaiting-approval");
    assert_eq!(v2_said().0, "proceed", "the await opens after the gates decide");
    let id = env.state("v2")["awaiting"]["id"].as_str().unwrap().to_owned();
    // As the next tick would decide (a repeated await records no gates).
    let checked: Value = serde_json::from_str(&env.ok(&["check-gate", "v2", "--json"])).unwrap();
    let v2 = checked["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["gate"] == "gates/v2.wasm")
        .unwrap();
    assert_eq!(
        (v2["decision"].as_str(), v2["reason"].as_str()),
        (Some("await-approval"), Some(id.as_str()))
    );
    env.ok(&["approve", "v2"]);
    assert_eq!(tick(), "completed");
    assert_eq!(v2_said(), ("complete".to_owned(), id));
}

#[test]
fn gate_test_reads_a_context_with_the_new_fields() {
    let env = Env::new();
    let tmp = tempfile::tempdir().unwrap();
    let gate = write(tmp.path(), "v2.wasm", &fx::reads_commits_and_await());
    let ctx = write(
        tmp.path(),
        "ctx.json",
        br#"{"commits": {"branch": "loop/x", "head_before": "aaa", "head_after": "bbb"}}"#,
    );
    let out = env.ok(&[
        "gate",
        "test",
        gate.to_str().unwrap(),
        "--context",
        ctx.to_str().unwrap(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["decision"].as_str(), v["reason"].as_str()),
        (Some("skip"), Some("bbb")),
        "{v}"
    );
}

#[test]
fn a_gate_of_0_3_0_asks_for_history_and_reads_what_the_host_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&write(
            tmp.path(),
            "v3.wasm",
            &fx::reads_history(2, &[3_600_000, 86_400_000]),
        )))
        .unwrap();
    assert_eq!(gate.wit_version(), "0.3.0");
    assert_eq!(
        host.describe(&gate).unwrap().history,
        HistoryRequest {
            runs: 2,
            windows_ms: vec![3_600_000, 86_400_000],
        }
    );
    let run = |tick| PastRun {
        tick,
        ended_at_ms: 1000 * tick,
        ok: tick != 2,
        metrics: [("cost_usd".to_owned(), 1.25)].into(),
    };
    let ctx = Context {
        history: GateHistory {
            runs: vec![run(2), run(3)],
            windows: vec![WindowSums {
                window_ms: 3_600_000,
                runs: 3,
                failures: 1,
                sums: [("cost_usd".to_owned(), 3.75)].into(),
            }],
        },
        ..Context::default()
    };
    let eval = host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
    assert_eq!(eval.decision, Decision::Skip(r#"{"cost_usd":3.75}"#.to_owned()));
    let said: Vec<&str> = eval.logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(said, ["r3", "f1", "l2"]);
    // Given nothing, it proceeds; a 0.2.0 gate is never asked.
    let eval = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(eval.decision, Decision::Proceed);
    let v2 = host
        .load(&file(&write(
            tmp.path(),
            "v2.wasm",
            &fx::reads_commits_and_await(),
        )))
        .unwrap();
    assert!(host.describe(&v2).unwrap().history.is_empty());
}

#[test]
fn a_ticks_gate_sees_the_runs_and_window_sums_of_the_loops_history() {
    let env = crate::files_only!("loop.toml edited by hand, and the file store's ledger");
    let step = "step = \"echo '{\\\"cost_usd\\\": 0.5}' > \\\"$AUTOMATON_METRICS\\\"\"\n";
    env.new_loop("h", step);
    let gates = env.loop_dir("h").join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    write(&gates, "h.wasm", &fx::reads_history(5, &[86_400_000]));
    let toml = format!("{step}[[gate]]\npath = \"gates/h.wasm\"\nphase = [\"after-step\"]\n");
    std::fs::write(env.loop_dir("h").join("loop.toml"), toml).unwrap();
    let said = || {
        let last = env
            .history("h")
            .into_iter()
            .rev()
            .find(|e| e["kind"] == "gate")
            .unwrap();
        last["reason"].as_str().unwrap().to_owned()
    };
    for sum in ["0.5", "1.0", "1.5"] {
        let v: Value = serde_json::from_str(&env.ok(&["tick", "h", "--json"])).unwrap();
        assert_eq!(v["outcome"], "ran");
        // After the step, this tick's run is counted.
        assert_eq!(said(), format!("{{\"cost_usd\":{sum}}}"));
    }
    let ledger = env.loop_dir("h").join("ledger.jsonl");
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(
        text.lines().count(),
        2,
        "the committed runs before the third: {text}"
    );
    // Before the next step, as `check-gate` evaluates: the three runs.
    let toml = format!("{step}[[gate]]\npath = \"gates/h.wasm\"\n");
    std::fs::write(env.loop_dir("h").join("loop.toml"), toml).unwrap();
    let check = || {
        let v: Value = serde_json::from_str(&env.ok(&["check-gate", "h", "--json"])).unwrap();
        v["decisions"][0]["reason"].as_str().unwrap().to_owned()
    };
    assert_eq!(check(), r#"{"cost_usd":1.5}"#);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 3);
    // A lost or damaged ledger is made again from the history.
    std::fs::remove_file(&ledger).unwrap();
    assert_eq!(check(), r#"{"cost_usd":1.5}"#);
    std::fs::write(&ledger, "not json\n").unwrap();
    assert_eq!(check(), r#"{"cost_usd":1.5}"#);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 3);
}

#[test]
fn the_stock_time_window_takes_an_iana_zone_from_the_hosts_database() {
    let host = GateHost::new(None).unwrap();
    let gate = host.load(&GateSource::Stock("time-window".to_owned())).unwrap();
    let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    let decide = |now: &str, zone: &str| {
        let ctx = Context {
            now: at(now),
            params: serde_json::json!({"start": "09:00", "end": "17:00", "timezone": zone}),
            ..Context::default()
        };
        host.evaluate(&gate, &ctx, &Limits::default())
    };
    // 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer.
    assert_eq!(
        decide("2026-11-30T08:00:00Z", "Europe/Paris").unwrap().decision,
        Decision::Proceed
    );
    assert_eq!(
        decide("2026-06-29T07:00:00Z", "Europe/Paris").unwrap().decision,
        Decision::Proceed
    );
    assert_eq!(
        decide("2026-06-29T06:59:00Z", "Europe/Paris").unwrap().decision,
        Decision::Skip("outside the time window 09:00–17:00 (Europe/Paris): it is mon 08:59".to_owned())
    );
    assert_eq!(
        decide("2026-11-30T14:00:00Z", "America/New_York")
            .unwrap()
            .decision,
        Decision::Proceed
    );
    let err = decide("2026-11-30T14:00:00Z", "Mars/Olympus")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("timezone: unknown time zone \"Mars/Olympus\""),
        "{err}"
    );
}

/// The runs a gate asks for are summed over its window from the loop's
/// history on either store: each tick's after-step gate sees the cost of
/// every run so far, its own included.
#[test]
fn a_gates_window_sums_the_loops_runs_on_either_store() {
    let env = Env::new();
    let wasm = write(&env.scratch(), "h.wasm", &fx::reads_history(5, &[86_400_000]));
    let step = "step = \"echo '{\\\"cost_usd\\\": 0.5}' > \\\"$AUTOMATON_METRICS\\\"\"\n";
    env.new_loop(
        "sums",
        &format!(
            "{step}[[gate]]\npath = {:?}\nphase = [\"after-step\"]\n",
            wasm.to_str().unwrap()
        ),
    );
    for sum in ["0.5", "1.0", "1.5"] {
        let v: Value = serde_json::from_str(&env.ok(&["tick", "sums", "--json"])).unwrap();
        assert_eq!(v["outcome"], "ran", "{v}");
        let last = env
            .history("sums")
            .into_iter()
            .rev()
            .find(|e| e["kind"] == "gate")
            .unwrap();
        assert_eq!(last["reason"], format!("{{\"cost_usd\":{sum}}}"), "{last}");
    }
}

/// The same recorded runs give the same `history` on the file store (its
/// ledger file) and on PostgreSQL (its `runs` table): runs outside every
/// window and on their edges, failures of the step, of the verifier and by
/// a timeout, a metric some runs lack, a clock that stepped back, events
/// that are not runs, the last-runs cut, and this tick's own run.
#[test]
#[allow(clippy::float_cmp, reason = "the sums are rounded to the figures added")]
fn a_gates_history_is_the_same_on_the_file_store_and_on_postgresql() {
    use automaton::domain::{GateHistory, HistoryRequest, PastRun};
    use automaton::history::Event;
    use automaton::root::{Flags, Root};
    use automaton::store::Stores;

    let Some(pg) = Env::postgres() else { return };
    let file = Env::file();
    let now: jiff::Timestamp = "2026-11-30T12:00:00.5Z".parse().unwrap();
    let ms = |t: jiff::Timestamp| u64::try_from(t.as_millisecond()).unwrap();
    let (hour, day) = (3_600_000_u64, 86_400_000_u64);
    let ago = |d: u64| jiff::Timestamp::from_millisecond(i64::try_from(ms(now) - d).unwrap()).unwrap();
    let ok = serde_json::json!({"exit_code": 0, "duration_ms": 5, "timed_out": false});
    let bad = serde_json::json!({"exit_code": 1, "duration_ms": 5, "timed_out": false});
    let slow = serde_json::json!({"exit_code": null, "signal": 9, "duration_ms": 9, "timed_out": true});
    // (when, step, verifier, metrics); None for a tick whose step did not run.
    let runs: Vec<(jiff::Timestamp, Option<&Value>, Option<&Value>, Value)> = vec![
        (
            ago(10 * day),
            Some(&ok),
            None,
            serde_json::json!({"cost_usd": 4.25, "tokens": 1000}),
        ),
        (
            ago(8 * day),
            Some(&bad),
            None,
            serde_json::json!({"cost_usd": 0.1}),
        ),
        // Exactly on the 7 d window's start: not in it.
        (
            ago(7 * day),
            Some(&ok),
            None,
            serde_json::json!({"cost_usd": 0.2, "tokens": 30}),
        ),
        (ago(3 * day), None, None, serde_json::json!({})),
        (
            ago(2 * day) + jiff::SignedDuration::from_nanos(999_999),
            Some(&ok),
            Some(&bad),
            serde_json::json!({"cost_usd": 2.3}),
        ),
        (ago(day - 1), Some(&slow), None, serde_json::json!({"tokens": 7})),
        (
            ago(5 * hour),
            Some(&ok),
            None,
            serde_json::json!({"cost_usd": 0.1, "tokens": 12}),
        ),
        // The clock stepped back: counted as ending when the run before did.
        (
            ago(6 * hour),
            Some(&ok),
            Some(&ok),
            serde_json::json!({"cost_usd": 0.2}),
        ),
        (ago(hour), Some(&ok), None, serde_json::json!({})),
        (
            ago(hour - 1),
            Some(&bad),
            None,
            serde_json::json!({"cost_usd": 0.7, "tokens": 1e21}),
        ),
        (
            ago(2000),
            Some(&ok),
            None,
            serde_json::json!({"cost_usd": 0.05, "tokens": 3}),
        ),
    ];
    let mut events: Vec<Event> = Vec::new();
    let mut version = 1;
    let event = |v: u64, at: jiff::Timestamp, rest: Value| -> Event {
        let mut e = serde_json::json!({"v": v, "at": at.to_string()});
        e.as_object_mut()
            .unwrap()
            .extend(rest.as_object().unwrap().clone());
        serde_json::from_value(e).unwrap()
    };
    events.push(event(
        version,
        ago(11 * day),
        serde_json::json!({"kind": "created", "by": "ann"}),
    ));
    for (i, (at, step, verifier, metrics)) in runs.iter().enumerate() {
        version += 1;
        let tick = i as u64 + 1;
        let mut e = serde_json::json!({"kind": "tick", "tick": tick, "outcome": "ran", "metrics": metrics});
        match step {
            Some(step) => e["step"] = (*step).clone(),
            None => e["outcome"] = "skipped".into(),
        }
        if let Some(v) = verifier {
            e["verifier"] = (*v).clone();
        }
        events.push(event(version, *at, e));
        if i == 4 {
            version += 1;
            let kind = serde_json::json!({"kind": "paused", "by": "ann"});
            events.push(event(version, *at, kind));
        }
    }
    let last_tick = runs.len() as u64;
    let mut state = automaton::state::State::new(ago(11 * day));
    state.version = version;
    state.tick = last_tick;
    let config = "step = \"true\"\n";
    let name = automaton::root::LoopName::new("same").unwrap();
    let history_of = |env: &Env, store: &str| {
        let root = Root::open(Flags {
            root: Some(&env.root),
            store: Some(store),
            server_bound: None,
        })
        .unwrap();
        let stores = Stores::open(&root).unwrap();
        stores.adopt(&name, config, &state, &events).unwrap();
        let lp = stores.get("same").unwrap();
        let ask = |runs: u32, windows_ms: Vec<u64>, current: Option<&PastRun>| -> GateHistory {
            lp.gate_history(last_tick, &HistoryRequest { runs, windows_ms }, now, current)
                .unwrap()
        };
        let this = PastRun {
            tick: last_tick + 1,
            ended_at_ms: ms(now),
            ok: false,
            metrics: [("cost_usd".to_owned(), 0.3)].into(),
        };
        let windows = vec![1000, hour, day, 2 * day, 7 * day, 30 * day];
        vec![
            ask(3, windows.clone(), None),
            ask(50, windows.clone(), None),
            ask(0, vec![hour - 1, 1], None),
            ask(4, windows.clone(), Some(&this)),
            ask(1, vec![], Some(&this)),
            // Before the third run was committed.
            lp.gate_history(
                3,
                &HistoryRequest {
                    runs: 5,
                    windows_ms: windows,
                },
                now,
                None,
            )
            .unwrap(),
        ]
    };
    let on_file = history_of(&file, "file");
    let on_pg = history_of(&pg, &pg.pg.as_ref().unwrap().url);
    assert_eq!(on_file, on_pg);
    // What both say, for the record: the 7 d window holds the runs after
    // the one on its start, the tick that did not run not among them.
    let seven = &on_file[0].windows[4];
    assert_eq!((seven.runs, seven.failures), (7, 3), "{seven:?}");
    assert_eq!(seven.sums["cost_usd"], 3.35, "{seven:?}");
    assert_eq!(on_file[1].runs.len(), 10);
    assert_eq!(
        on_file[0].runs.iter().map(|r| r.tick).collect::<Vec<_>>(),
        [9, 10, 11]
    );
    assert_eq!(on_file[0].runs[1].metrics["tokens"], 1e21);
    assert_eq!(
        on_file[5].runs.iter().map(|r| r.tick).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}
