//! Human-facing output, pinned: the status views and the main error messages.

use std::fs;

use crate::common::Env;

pub(crate) fn settings(env: &Env) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex_escape(env.root.to_str().unwrap()), "[ROOT]");
    s.add_filter(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d", "[TIME]");
    s.add_filter(r"in \d+(ms|[smhd]\w*)", "in [DUR]");
    s.add_filter(r"\d+[smhd]\w* ago|just now", "[AGO]");
    s.add_filter(r"\.loop\.toml\.edit-[\w-]+\.toml", ".loop.toml.edit-[ID].toml");
    s.add_filter(r"pid \d+", "pid [PID]");
    s.add_filter(r"running \d+[a-z]+", "running [DUR]");
    s.set_prepend_module_to_snapshot(false);
    s
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if "\\.+*?()|[]{}^$".contains(c) {
                format!("\\{c}")
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[test]
fn status_views() {
    let env = Env::new();
    env.new_loop("fix-flaky-tests", "step = \"true\"\n")
        .new_loop("nightly", "step = \"true\"\n");
    let approve = |who: &str, note: &str| {
        let out = env
            .cmd()
            .args(["approve", "fix-flaky-tests", "--ahead", "--note", note])
            .env("AUTOMATON_USER", who)
            .output()
            .unwrap();
        assert!(out.status.success());
    };
    approve("ann", "looks good");
    approve("bob", "go ahead");
    env.ok(&["pause", "nightly", "--reason", "release freeze"]);
    settings(&env).bind(|| {
        insta::assert_snapshot!("status_all", env.ok(&["status"]));
        insta::assert_snapshot!("status_one", env.ok(&["status", "fix-flaky-tests"]));
        insta::assert_snapshot!("status_paused", env.ok(&["status", "nightly"]));
    });
}

#[test]
fn error_messages() {
    let env = crate::files_only!("corrupts .state.loop by hand");
    env.new_loop("demo", "step = \"true\"\n[approval]\napprovers = [\"ann\"]\n");
    let mut errors = String::new();
    let mut record = |code: i32, args: &[&str]| {
        errors += &format!(
            "$ automaton {}  # exit {code}\n{}\n",
            args.join(" "),
            env.fails(code, args)
        );
    };
    record(3, &["status", "ghost"]);
    record(2, &["pause", "Demo"]);
    record(1, &["new", "demo"]);
    record(10, &["approve", "demo"]);
    record(1, &["rm", "demo"]);
    let bad = env.root.join("bad.toml");
    fs::write(&bad, "step = \"true\"\novrlap = \"wait\"\n").unwrap();
    record(5, &["new", "x", "--from", bad.to_str().unwrap()]);
    fs::write(&bad, "step = \"true\"\ntimeout = \"soon\"\n").unwrap();
    record(5, &["new", "x", "--from", bad.to_str().unwrap()]);
    fs::write(env.loop_dir("demo").join(".state.loop"), "{\"schema\": 7}").unwrap();
    record(5, &["status", "demo"]);
    fs::write(
        env.loop_dir("demo").join(".state.loop"),
        "{\"schema\": 1, \"version\": ",
    )
    .unwrap();
    record(5, &["pause", "demo"]);
    env.new_loop("ran", "step = \"true\"\n");
    record(1, &["logs", "ran"]);
    env.ok(&["tick", "ran"]);
    record(1, &["logs", "ran", "--verifier"]);
    record(1, &["logs", "ran", "7"]);
    fs::write(&bad, "step = \"true\"\n[schedule]\ncron = \"0 0 32 * *\"\n").unwrap();
    record(5, &["validate", bad.to_str().unwrap()]);
    record(1, &["schedule", "remove", "ran"]);
    let edit = env
        .cmd()
        .args(["edit", "ran"])
        .env("EDITOR", "sh -c 'echo \"stpe = 1\" > \"$1\"' sh")
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(edit.status.code(), Some(5));
    errors += &format!(
        "$ EDITOR=... automaton edit ran  # exit 5\n{}\n",
        String::from_utf8_lossy(&edit.stderr)
    );
    settings(&env).bind(|| insta::assert_snapshot!("errors", errors));
}

#[test]
fn a_failed_tick_and_its_output() {
    let env = crate::files_only!("edits loop.toml by hand");
    env.new_loop(
        "flaky",
        "description = \"fails on purpose\"\nstep = \"echo building; echo 'no space left' >&2; exit 3\"\n\
         [schedule]\nevery = \"10m\"\njitter = \"30s\"\n",
    )
    .new_loop("broken", "step = \"true\"\n")
    .new_loop("idle", "description = \"never ticked\"\nstep = \"true\"\n");
    let tick = env.run(&["tick", "flaky"]);
    assert_eq!(tick.status.code(), Some(6));
    let config = env.loop_dir("broken").join("loop.toml");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(&config, format!("{text}ovrlap = \"wait\"\n")).unwrap();
    settings(&env).bind(|| {
        insta::assert_snapshot!("tick_failed", String::from_utf8_lossy(&tick.stdout));
        insta::assert_snapshot!("status_failed", env.ok(&["status", "flaky"]));
        insta::assert_snapshot!("status_invalid", env.ok(&["status", "broken"]));
        insta::assert_snapshot!("list", env.ok(&["list"]));
        insta::assert_snapshot!("logs", env.ok(&["logs", "flaky"]));
        insta::assert_snapshot!("logs_stderr", env.ok(&["logs", "flaky", "1", "--stderr"]));
    });
}

/// The shape of a JSON answer: each field's path and kind, one a line,
/// the first element standing for an array's others. Values change from
/// run to run; the shape is what a script reading them relies on.
pub(crate) fn shape(v: &serde_json::Value) -> String {
    fn walk(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        use serde_json::Value;
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        out.push(format!("{path}: {kind}"));
        match v {
            Value::Array(items) => {
                if let Some(first) = items.first() {
                    walk(first, &format!("{path}[]"), out);
                }
            }
            Value::Object(fields) => {
                for (k, f) in fields {
                    walk(f, &format!("{path}.{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out.join("\n") + "\n"
}

/// The `--json` of each verb that changes a loop, by shape: what the
/// console's API answers too.
#[test]
fn the_verbs_json_shapes() {
    let env = Env::new();
    env.new_loop("plain", "step = \"true\"\n");
    crate::serve::awaiting(&env, "gated", "");
    let json = |args: &[&str]| -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&env.ok(&all)).unwrap()
    };
    let mut shapes = String::new();
    let mut pin = |what: &str, v: serde_json::Value| shapes += &format!("## {what}\n{}\n", shape(&v));
    pin("pause", json(&["pause", "plain", "--reason", "freeze"]));
    pin("pause, already paused", json(&["pause", "plain"]));
    pin("resume", json(&["resume", "plain"]));
    pin("tick", json(&["tick", "plain"]));
    pin("cancel, nothing in flight", json(&["cancel", "plain"]));
    pin("approve", json(&["approve", "gated", "--note", "ship it"]));
    pin("approve --ahead", json(&["approve", "gated", "--ahead"]));
    pin(
        "reject --halt",
        json(&["reject", "gated", "--halt", "--reason", "no"]),
    );
    pin("rm --force", json(&["rm", "plain", "--force"]));
    settings(&env).bind(|| insta::assert_snapshot!("verbs_json", shapes));
}

/// The shape of a JSON value: each path with the kinds of value found
/// there (an array's items merged under `[]`), one line a path.
fn merged_shape(v: &serde_json::Value) -> String {
    use std::collections::{BTreeMap, BTreeSet};
    fn walk(v: &serde_json::Value, path: String, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
        use serde_json::Value;
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(items) => {
                for i in items {
                    walk(i, format!("{path}[]"), out);
                }
                "array"
            }
            Value::Object(m) => {
                for (k, item) in m {
                    walk(item, format!("{path}.{k}"), out);
                }
                "object"
            }
        };
        out.entry(path).or_default().insert(kind);
    }
    let mut found = BTreeMap::new();
    walk(v, String::new(), &mut found);
    found
        .iter()
        // The database role an actor acted with is the PostgreSQL store's
        // alone: the shape is the same on both stores without it.
        .filter(|(path, _)| !path.ends_with(".actor.db_role"))
        .map(|(path, kinds)| {
            format!(
                "{path}: {}\n",
                kinds.iter().copied().collect::<Vec<_>>().join("|")
            )
        })
        .collect()
}

#[test]
fn the_json_of_every_view_keeps_its_shape() {
    let env = Env::new();
    env.new_loop(
        "flaky",
        "description = \"fails on purpose\"\nstep = \"echo building; echo 'no space left' >&2; exit 3\"\n\
         [schedule]\nevery = \"10m\"\n",
    )
    .new_loop(
        "gated",
        "step = \"echo hello\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    )
    .new_loop("nightly", "step = \"true\"\n");
    assert_eq!(env.run(&["tick", "flaky"]).status.code(), Some(6));
    env.ok(&["tick", "gated"]);
    env.ok(&["tick", "gated"]);
    env.ok(&["approve", "nightly", "--ahead", "--note", "go"]);
    env.ok(&["pause", "nightly", "--reason", "release freeze"]);
    let json = |args: &[&str]| -> serde_json::Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&env.ok(&args)).unwrap()
    };
    let mut shapes = String::new();
    for args in [
        &["list"][..],
        &["status", "flaky"],
        &["status", "gated"],
        &["status", "nightly"],
        &["review", "gated"],
        &["history", "flaky"],
        &["history", "gated"],
        &["fires", "flaky"],
    ] {
        shapes += &format!(
            "$ automaton {} --json\n{}\n",
            args.join(" "),
            merged_shape(&json(args))
        );
    }
    settings(&env).bind(|| insta::assert_snapshot!("json_shapes", shapes));
}
