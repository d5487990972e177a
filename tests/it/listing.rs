//! The loop table (`list`, `status` with no name) as an operator reads it:
//! a status typed as it is printed, a table that fits the terminal, a
//! running tick and an overdue loop said plainly, and a mistyped name
//! answered with the nearest one.

use std::fs;
use std::process::Stdio;

use unicode_width::UnicodeWidthStr;

use crate::common::{Env, wait_for};
use crate::snapshots::settings;

/// A loop waiting for an approval: its first tick runs, its second waits.
fn awaiting(env: &Env, name: &str) {
    env.new_loop(
        name,
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    env.ok(&["tick", name]);
    env.ok(&["tick", name]);
    assert_eq!(env.state(name)["status"], "awaiting_approval");
}

fn names(env: &Env, args: &[&str]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&env.ok(args)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn list_status_accepts_awaiting_approval_as_status_prints_it() {
    let env = Env::new();
    awaiting(&env, "waiting");
    env.new_loop("idle", "step = \"true\"\n");
    for spelling in ["awaiting_approval", "awaiting-approval", "awaiting"] {
        assert_eq!(
            names(&env, &["list", "--json", "--status", spelling]),
            ["waiting"],
            "{spelling}"
        );
    }
    assert_eq!(
        names(&env, &["list", "--json", "--status", "active,awaiting_approval"]),
        ["idle", "waiting"]
    );
    // What `status` prints is what `list --status` takes.
    let shown = env.ok(&["status", "waiting"]);
    assert!(shown.contains("awaiting_approval"), "{shown}");
    // A status typed wrong is answered with the nearest one.
    let err = env.fails(2, &["list", "--status", "awaitng_approval"]);
    assert!(err.contains("awaiting_approval"), "{err}");
}

const LONG: &str = "keeps the flaky integration tests of the payment service green, one fix per tick, with a review every fifth";

#[test]
fn list_fits_the_width_it_is_given_and_cuts_the_description() {
    let env = Env::new();
    env.new_loop(
        "fix-flaky-tests",
        &format!(
            "description = \"{LONG}\"\nstep = \"true\"\n[schedule]\nevery = \"15m\"\njitter = \"30s\"\n"
        ),
    )
    .new_loop(
        "nightly",
        "description = \"the nightly build\"\nstep = \"true\"\n",
    );
    env.ok(&["tick", "fix-flaky-tests"]);
    for columns in ["80", "72"] {
        let out = env.cmd().arg("list").env("COLUMNS", columns).output().unwrap();
        assert!(out.status.success());
        let table = String::from_utf8(out.stdout).unwrap();
        let width: usize = columns.parse().unwrap();
        for line in table.lines() {
            assert!(line.width() <= width, "wider than {width}: {line:?}\n{table}");
        }
        assert_eq!(table.lines().count(), 3, "one line a loop:\n{table}");
    }
    let out = env.cmd().arg("list").env("COLUMNS", "80").output().unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains('…'), "{table}");
    settings(&env).bind(|| insta::assert_snapshot!("list_80_columns", table));
    // Piped, with no width given, every cell is whole.
    let whole = env.ok(&["list"]);
    assert!(whole.contains(LONG), "{whole}");
}

#[test]
fn a_running_tick_is_shown_as_running_in_the_table() {
    let env = Env::new();
    let dir = env.scratch().join("signals");
    fs::create_dir_all(&dir).unwrap();
    env.new_loop("slow", &crate::common::gated_step(&dir));
    let mut tick = env
        .cmd()
        .args(["tick", "slow"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
    let table = env.ok(&["list"]);
    fs::write(dir.join("go"), "").unwrap();
    assert!(tick.wait().unwrap().success());
    let row = table.lines().find(|l| l.starts_with("slow")).unwrap();
    assert!(row.contains("running (tick 1, "), "{table}");
    assert!(!row.contains("active"), "{table}");
    // The tick's own lock is not a second column saying the same.
    assert!(!table.contains("LOCK"), "{table}");
    let after = env.ok(&["list"]);
    assert!(
        after
            .lines()
            .any(|l| l.starts_with("slow") && l.contains("active")),
        "{after}"
    );
}

#[test]
fn overdue_loops_that_nothing_fires_are_said_once_below_the_table() {
    let env = crate::files_only!("backdates .state.loop by hand");
    for name in ["hourly", "daily"] {
        env.new_loop(name, "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
        // Made a day ago and never ticked: due since then.
        let path = env.loop_dir(name).join(".state.loop");
        let mut state: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        state["created_at"] = "2020-01-01T00:00:00Z".into();
        fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    }
    env.new_loop("unscheduled", "step = \"true\"\n");
    let table = env.ok(&["list"]);
    let hourly = table.lines().find(|l| l.starts_with("hourly")).unwrap();
    assert!(hourly.contains("overdue "), "{table}");
    let said: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("no daemon serves this root"))
        .collect();
    assert_eq!(said.len(), 1, "{table}");
    assert!(
        said[0].contains("2 loops are overdue") && said[0].contains("automaton daemon"),
        "{table}"
    );
    // A loop that has ticked on time is not overdue.
    env.ok(&["tick", "hourly"]);
    env.ok(&["tick", "daily"]);
    let table = env.ok(&["list"]);
    assert!(!table.contains("overdue"), "{table}");
    assert!(!table.contains("no daemon serves"), "{table}");
}

/// A loop awaiting approval runs no step until it is approved: it is not
/// overdue, nothing is said to fire it, and `list` and `status` say since
/// when it awaits, which await, and the command that reviews it.
#[test]
fn an_awaiting_loop_is_not_overdue_and_says_since_when_and_how_to_review_it() {
    let env = crate::files_only!("backdates .state.loop by hand");
    env.new_loop(
        "gated",
        "step = \"true\"\n[schedule]\nevery = \"1h\"\n\
         [[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    )
    .new_loop("hourly", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    env.ok(&["tick", "gated"]);
    env.run(&["tick", "gated"]);
    // Both last came due long ago.
    for name in ["gated", "hourly"] {
        let path = env.loop_dir(name).join(".state.loop");
        let mut state: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        state["created_at"] = "2020-01-01T00:00:00Z".into();
        if !state["last_tick"].is_null() {
            state["last_tick"]["started_at"] = "2020-01-01T00:00:00Z".into();
            state["awaiting"]["since"] = "2020-01-01T00:00:00Z".into();
        }
        fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    }
    let v = env.status("gated");
    assert_eq!(v["status"], "awaiting_approval", "{v}");
    assert!(v["next_due"].is_null(), "{v}");
    let await_id = v["awaiting"]["id"].as_str().unwrap().to_owned();
    let table = env.ok(&["list"]);
    let row = table.lines().find(|l| l.starts_with("gated")).unwrap();
    assert!(!row.contains("overdue"), "{table}");
    let said = table
        .lines()
        .find(|l| l.starts_with("gated: awaiting approval since "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        said.contains(" ago)") && said.contains(&await_id) && said.ends_with("automaton review gated"),
        "{table}"
    );
    // The footer counts the active loop alone as one nothing fires.
    assert!(table.contains("loop hourly is overdue"), "{table}");
    let status = env.ok(&["status", "gated"]);
    let row = |key: &str| status.lines().find(|l| l.starts_with(key)).map(str::to_owned);
    assert_eq!(row("next due"), None, "{status}");
    assert_eq!(row("fired by"), None, "{status}");
    let awaits = row("awaiting").unwrap_or_else(|| panic!("{status}"));
    assert!(
        awaits.contains("approval since ")
            && awaits.contains(" ago)")
            && awaits.contains(&await_id)
            && awaits.ends_with("automaton review gated"),
        "{status}"
    );
}

/// `status NAME` says of an overdue loop what `list` says: overdue by how
/// much, and that nothing fires it, rather than `next due ... (now)`.
#[test]
fn status_of_an_overdue_loop_says_by_how_much_and_that_nothing_fires_it() {
    let env = crate::files_only!("backdates .state.loop by hand");
    env.new_loop("hourly", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    let path = env.loop_dir("hourly").join(".state.loop");
    let mut state: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    state["created_at"] = "2020-01-01T00:00:00Z".into();
    fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    let table = env.ok(&["list"]);
    let row = table.lines().find(|l| l.starts_with("hourly")).unwrap();
    let by = row
        .split_whitespace()
        .skip_while(|w| *w != "overdue")
        .nth(1)
        .unwrap();
    let status = env.ok(&["status", "hourly"]);
    let row = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .map(|l| l[key.len()..].trim_start().to_owned())
    };
    let due = row("next due").unwrap_or_else(|| panic!("{status}"));
    assert!(due.starts_with(&format!("overdue {by} (came due ")), "{status}");
    assert_eq!(
        row("fired by").as_deref(),
        Some(
            "nothing: no daemon serves this root and it has no OS schedule; \
             run `automaton daemon`, or `automaton schedule install hourly`"
        ),
        "{status}"
    );
    // Once it has ticked it is due in an hour, and nothing is said of it.
    env.ok(&["tick", "hourly"]);
    let status = env.ok(&["status", "hourly"]);
    assert!(status.contains("(in 59m"), "{status}");
    assert!(
        !status.contains("overdue") && !status.contains("fired by"),
        "{status}"
    );
}

#[test]
fn a_mistyped_user_is_answered_with_the_nearest() {
    let env = Env::new();
    env.ok(&["user", "add", "annika"]);
    for args in [&["user", "rotate", "anika"][..], &["user", "remove", "anika"]] {
        let err = env.fails(3, args);
        assert!(
            err.contains("no user named \"anika\"") && err.trim_end().ends_with("; did you mean \"annika\"?"),
            "{args:?}: {err}"
        );
    }
    let err = env.fails(3, &["user", "remove", "zed"]);
    assert!(!err.contains("did you mean"), "{err}");
}

/// A mistyped key or value of loop.toml, or of the root's automaton.toml,
/// is answered with the one meant, at its line and column.
#[test]
fn a_mistyped_key_or_value_of_a_toml_file_is_answered_with_the_nearest() {
    let env = Env::new();
    let file = env.root.join("mistyped.toml");
    for (toml, at, meant) in [
        (
            "step = \"true\"\novrlap = \"skip\"\n",
            ":2:1: unknown field `ovrlap`",
            "`overlap`",
        ),
        (
            "step = \"true\"\noverlap = \"skp\"\n",
            ":2:11: unknown variant `skp`",
            "`skip`",
        ),
        (
            "step = \"true\"\n[[gate]]\nstock = \"budget\"\nphase = [\"befor-step\"]\n",
            ":4:10: unknown variant `befor-step`",
            "`before-step`",
        ),
        // A stock gate's params are named the same way, at their line.
        (
            "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { evry = 3 }\n",
            ":4: [[gate]] 1 (stock:approve-every): rejected its params: unknown field `evry`",
            "`every`",
        ),
    ] {
        fs::write(&file, toml).unwrap();
        let err = env.fails(5, &["validate", file.to_str().unwrap()]);
        assert!(err.contains(&format!("mistyped.toml{at}")), "{err}");
        assert!(
            err.trim_end().ends_with(&format!("; did you mean {meant}?")),
            "{err}"
        );
    }
    fs::write(env.root.join("automaton.toml"), "\nstor = \"file\"\n").unwrap();
    let err = env.fails(5, &["list"]);
    assert!(err.contains("automaton.toml:2:1: unknown field `stor`"), "{err}");
    assert!(err.trim_end().ends_with("; did you mean `store`?"), "{err}");
}

/// A `[[gate]] path` that is not there is answered with the file of its
/// directory most like it, as loop.toml would write it, by `validate` and
/// by a tick.
#[test]
fn a_missing_gate_file_is_answered_with_the_nearest_beside_it() {
    let env = Env::new();
    env.new_loop(
        "office",
        "step = \"true\"\n[[gate]]\npath = \"gates/ofice-hours.wasm\"\n",
    );
    let gates = env.loop_dir("office").join("gates");
    fs::create_dir_all(&gates).unwrap();
    fs::write(gates.join("office-hours.wasm"), crate::gate_fixtures::good()).unwrap();
    fs::write(gates.join("budget.wasm"), crate::gate_fixtures::good()).unwrap();
    let err = env.fails(5, &["validate", "office"]);
    assert!(
        err.contains("ofice-hours.wasm does not exist; did you mean \"gates/office-hours.wasm\"?"),
        "{err}"
    );
    let out = env.run(&["tick", "office", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["decisions"][0]["error"],
        "gate gates/ofice-hours.wasm was not found (no such file); did you mean \"gates/office-hours.wasm\"?",
        "{v}"
    );
}

#[test]
fn a_mistyped_loop_name_is_answered_with_the_nearest() {
    let env = Env::new();
    env.new_loop("agent", "step = \"true\"\n")
        .new_loop("nightly", "step = \"true\"\n");
    for args in [
        &["status", "agnet"][..],
        &["tick", "agnet"],
        &["logs", "agnet"],
        &["pause", "agnet"],
    ] {
        let err = env.fails(3, args);
        assert!(err.contains("no loop named \"agnet\""), "{err}");
        assert!(err.contains("did you mean \"agent\"?"), "{args:?}: {err}");
    }
    // Nothing like it: no suggestion.
    let err = env.fails(3, &["status", "zzzz"]);
    assert!(!err.contains("did you mean"), "{err}");
}

#[test]
fn a_mistyped_stock_gate_command_or_backend_is_answered_with_the_nearest() {
    let env = Env::new();
    let err = env.fails(1, &["gate", "inspect", "stock:budgt"]);
    assert!(err.contains("did you mean \"budget\"?"), "{err}");
    let file = env.root.join("x.toml");
    fs::write(
        &file,
        "step = \"true\"\n[[gate]]\nstock = \"max-failure\"\nparams = { max = 3 }\n",
    )
    .unwrap();
    let err = env.fails(5, &["new", "x", "--from", file.to_str().unwrap()]);
    assert!(err.contains("did you mean \"max-failures\"?"), "{err}");
    let err = env.fails(2, &["man", "aprove"]);
    assert!(err.contains("did you mean \"approve\"?"), "{err}");
    env.new_loop("x", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    let err = env.fails(
        2,
        &["schedule", "install", "x", "--backend", "systemdd", "--dry-run"],
    );
    assert!(err.contains("systemd"), "{err}");
}
