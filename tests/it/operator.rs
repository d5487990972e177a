//! The operator's tools: a tick's output (`logs`), checking and editing a
//! config (`validate`, `edit`), filtering the list, removing a loop whatever
//! its state, completions and the man page, and the README's command table.

use std::collections::BTreeSet;
use std::fs;
use std::process::Stdio;

use clap::CommandFactory;

use crate::common::{Env, gone, wait_for};

#[test]
fn logs_prints_a_ticks_step_and_verifier_output() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"echo out $AUTOMATON_TICK; echo err >&2\"\n[verifier]\ncommand = \"echo verified\"\n",
    );
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    assert_eq!(env.ok(&["logs", "demo"]), "out 2\n");
    assert_eq!(env.ok(&["logs", "demo", "1"]), "out 1\n");
    assert_eq!(env.ok(&["logs", "demo", "1", "--stderr"]), "err\n");
    assert_eq!(env.ok(&["logs", "demo", "--verifier"]), "verified\n");
    let json = env.ok(&["status", "demo", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["last_run_dir"].as_str().unwrap().ends_with("loops/demo/runs/2"));
}

#[test]
fn logs_follow_prints_the_running_tick_until_it_ends() {
    let env = Env::new();
    let dir = env.scratch().join("signals");
    fs::create_dir_all(&dir).unwrap();
    let step = format!(
        "step = \"echo first; touch '{0}/started'; while [ ! -e '{0}/go' ]; do sleep 0.02; done; echo second\"\n",
        dir.display()
    );
    env.new_loop("demo", &step);
    let tick = env
        .cmd()
        .args(["tick", "demo"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
    let follow = env
        .cmd()
        .args(["logs", "demo", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    fs::write(dir.join("go"), "").unwrap();
    let out = follow.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "first\nsecond\n");
    let mut tick = tick;
    assert!(tick.wait().unwrap().success());
}

#[test]
fn validate_checks_a_loop_a_file_and_every_loop() {
    let env = crate::files_only!("edits loop.toml by hand");
    env.new_loop(
        "good",
        "step = \"true\"\n[[gate]]\nstock = \"max-failures\"\nparams = { max = 3 }\n",
    )
    .new_loop("bad", "step = \"true\"\n");
    assert!(env.ok(&["validate", "good"]).contains("ok"));
    let config = env.loop_dir("bad").join("loop.toml");
    fs::write(
        &config,
        "step = \"true\"\n[[gate]]\nstock = \"max-failures\"\nparams = { nope = 1 }\n",
    )
    .unwrap();
    let err = env.fails(5, &["validate", "bad"]);
    assert!(err.contains("[[gate]] 1 (stock:max-failures)"), "{err}");
    let all = env.cmd().args(["validate"]).output().unwrap();
    assert_eq!(all.status.code(), Some(5));
    let listed = String::from_utf8(all.stdout).unwrap();
    assert!(
        listed.contains("invalid  bad") && listed.contains("ok       good"),
        "{listed}"
    );
    // A file that is no loop's: its gate paths are relative to it.
    let file = env.root.join("candidate.toml");
    fs::write(&file, "step = \"true\"\n[[gate]]\npath = \"missing.wasm\"\n").unwrap();
    let err = env.fails(5, &["validate", file.to_str().unwrap()]);
    assert!(err.contains("missing.wasm does not exist"), "{err}");
    let json = env.cmd().args(["validate", "good", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[0]["valid"], true);
    assert_eq!(v[0]["loop"], "good");
}

#[test]
fn edit_refuses_a_bad_config_and_leaves_the_file_unchanged() {
    let env = crate::files_only!("compares loop.toml bytes");
    env.new_loop("demo", "step = \"true\"\n");
    let config = env.loop_dir("demo").join("loop.toml");
    let before = fs::read(&config).unwrap();
    // An editor that writes a typo.
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env(
            "EDITOR",
            "sh -c 'printf \"step = \\\"true\\\"\\novrlap = 1\\n\" > \"$1\"' sh",
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(":2:1: unknown field `ovrlap`"), "{err}");
    assert_eq!(fs::read(&config).unwrap(), before, "loop.toml changed");
    // The refused edit is kept, not lost.
    let kept: Vec<_> = fs::read_dir(env.loop_dir("demo"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(".loop.toml.edit-")
        })
        .collect();
    assert_eq!(kept.len(), 1);
    assert!(fs::read_to_string(&kept[0]).unwrap().contains("ovrlap"));
    assert!(err.contains(kept[0].to_str().unwrap()), "{err}");
    // VISUAL wins over EDITOR; a valid edit replaces the file.
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env(
            "VISUAL",
            "sh -c 'printf \"description = \\\"edited\\\"\\nstep = \\\"true\\\"\\n\" > \"$1\"' sh",
        )
        .env("EDITOR", "false")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fs::read_to_string(&config).unwrap().contains("edited"));
    assert!(env.ok(&["status", "demo"]).contains("edited"));
    // An editor that fails changes nothing.
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env("EDITOR", "sh -c 'echo junk > \"$1\"; exit 1' sh")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(fs::read_to_string(&config).unwrap().contains("edited"));
}

#[test]
fn list_filters_by_status_and_shows_an_invalid_config() {
    let env = crate::files_only!("edits loop.toml by hand");
    env.new_loop("a", "step = \"true\"\n")
        .new_loop("b", "step = \"exit 1\"\n")
        .new_loop("c", "step = \"true\"\n");
    env.ok(&["pause", "a"]);
    assert_eq!(env.run(&["tick", "b"]).status.code(), Some(6));
    fs::write(env.loop_dir("c").join("loop.toml"), "step = 1\n").unwrap();
    let names = |args: &[&str]| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&env.ok(args)).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&["list", "--json"]), ["a", "b", "c"]);
    assert_eq!(names(&["list", "--json", "--status", "paused"]), ["a"]);
    assert_eq!(names(&["list", "--json", "--status", "failing"]), ["b"]);
    assert_eq!(
        names(&["list", "--json", "--status", "invalid,paused"]),
        ["a", "c"]
    );
    // An invalid loop is not also listed under its stored status.
    assert_eq!(names(&["list", "--json", "--status", "active"]), ["b"]);
    let table = env.ok(&["list"]);
    assert!(table.contains("c: invalid config"), "{table}");
    let status = env.ok(&["status", "c"]);
    assert!(status.contains("invalid (stored status active)"), "{status}");
}

#[test]
fn list_and_status_json_agree_on_keys_and_their_order() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "description = \"d\"\nstep = \"true\"\n[schedule]\nevery = \"1h\"\n",
    );
    env.ok(&["tick", "demo"]);
    let keys = |text: &str| -> Vec<String> {
        // Top-level keys in the order printed: two-space indented lines.
        text.lines()
            .filter_map(|l| l.strip_prefix("  \""))
            .map(|l| l.split('"').next().unwrap().to_owned())
            .collect()
    };
    let one = env.ok(&["status", "demo", "--json"]);
    let list = env.ok(&["list", "--json"]);
    let list_keys: Vec<String> = list
        .lines()
        .filter_map(|l| l.strip_prefix("    \""))
        .map(|l| l.split('"').next().unwrap().to_owned())
        .collect();
    assert_eq!(keys(&one), list_keys);
    let v: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(v["schedule"], "every 1h");
    assert_eq!(v["description"], "d");
    // RFC 3339, in UTC.
    let due = v["next_due"].as_str().unwrap();
    assert!(
        due.ends_with('Z') && due.parse::<jiff::Timestamp>().is_ok(),
        "{due}"
    );
}

#[test]
fn rm_force_removes_a_loop_whose_state_is_corrupt() {
    let env = crate::files_only!("corrupts .state.loop by hand");
    env.new_loop("demo", "step = \"true\"\n");
    fs::write(env.loop_dir("demo").join(".state.loop"), "{\"sche").unwrap();
    let err = env.fails(5, &["rm", "demo"]);
    assert!(err.contains("rm --force"), "{err}");
    env.ok(&["rm", "demo", "--force"]);
    assert!(!env.loop_dir("demo").exists());
}

#[test]
fn a_closed_pipe_is_not_a_panic() {
    let env = Env::new();
    env.new_loop("demo", "step = \"echo hi\"\n");
    env.ok(&["tick", "demo"]);
    for args in [
        &["completions", "bash"][..],
        &["man"],
        &["--help"],
        &["list"],
        &["status", "demo", "--json"],
        &["history", "demo"],
        &["logs", "demo"],
        &["gate", "list"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = env.cmd().args(args).stdout(writer).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn completions_complete_loop_names() {
    let env = Env::new();
    env.new_loop("nightly", "step = \"true\"\n")
        .new_loop("weekly", "step = \"true\"\n");
    let script = env.ok(&["completions", "bash"]);
    assert!(script.contains("AUTOMATON_COMPLETE"), "{script}");
    let root = env.root.to_str().unwrap();
    let out = env
        .cmd()
        .env("AUTOMATON_COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", "4")
        .env("_CLAP_IFS", "\n")
        .args(["--", "automaton", "--root", root, "status", ""])
        .output()
        .unwrap();
    let words: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(words.contains(&"nightly".to_owned()), "{words:?}");
    assert!(words.contains(&"weekly".to_owned()), "{words:?}");
}

#[test]
fn the_man_page_is_generated_from_the_command_line() {
    let env = Env::new();
    let page = env.ok(&["man"]);
    assert!(page.contains(".TH automaton 1"), "{page}");
    for sub in ["logs", "validate", "edit", "completions"] {
        assert!(page.contains(sub), "{sub} missing");
    }
}

/// Every subcommand clap knows, and every flag of it, is in the README's
/// command table.
#[test]
fn the_readme_command_table_lists_every_subcommand_and_flag() {
    let readme = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let rows: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("| `automaton "))
        .collect();
    let mut missing = BTreeSet::new();
    let mut check = |path: &str, cmd: &clap::Command| {
        let prefix = format!("| `automaton {path}");
        let Some(row) = rows
            .iter()
            .find(|r| r.starts_with(&prefix) && r[prefix.len()..].starts_with([' ', '`']))
        else {
            missing.insert(format!("automaton {path}"));
            return;
        };
        for arg in cmd.get_arguments() {
            if arg.is_global_set() || arg.is_hide_set() {
                continue;
            }
            if let Some(long) = arg.get_long()
                && !["help", "version"].contains(&long)
                && !row.contains(&format!("--{long}"))
            {
                missing.insert(format!("automaton {path} --{long}"));
            }
        }
    };
    // Built, so each subcommand's (deferred) arguments are declared.
    let mut cli = automaton::cli::Cli::command();
    cli.build();
    for sub in cli.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        if sub.has_subcommands() {
            for leaf in sub.get_subcommands().filter(|s| s.get_name() != "help") {
                check(&format!("{} {}", sub.get_name(), leaf.get_name()), leaf);
            }
        } else {
            check(sub.get_name(), sub);
        }
    }
    assert!(missing.is_empty(), "README's command table lacks: {missing:#?}");
}

#[test]
fn cancel_ends_a_tick_whose_step_ignores_term() {
    let env = Env::new();
    let dir = env.scratch().join("signals");
    fs::create_dir_all(&dir).unwrap();
    let step = format!(
        "step = \"trap '' TERM; echo $$ > '{0}/pid'; touch '{0}/started'; while :; do sleep 0.05; done\"\n",
        dir.display()
    );
    env.new_loop("demo", &step);
    let mut tick = env
        .cmd()
        .args(["tick", "demo"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
    let step_pid: i32 = fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let out = env
        .cmd()
        .args(["cancel", "demo", "--grace", "1s"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(said.contains("SIGTERM, then SIGKILL"), "{said}");
    assert_eq!(tick.wait().unwrap().code(), Some(6));
    assert!(gone(step_pid), "the step outlived its cancel");
    // Recorded as cancelled, by whom; the lock is free and nothing is in flight.
    let last = env.history("demo").pop().unwrap();
    assert_eq!(last["outcome"], "failed");
    assert!(
        last["reason"].as_str().unwrap().starts_with("cancelled by ann"),
        "{last}"
    );
    assert!(env.state("demo")["in_flight"].is_null());
    env.ok(&["pause", "demo", "--no-wait"]);
}

/// `cancel --reason`: the reason is kept with the tick it cancels, in its
/// history event and its state, and `status` and `history` say it.
#[test]
fn cancel_keeps_its_reason_with_the_tick_and_status_and_history_say_it() {
    let env = Env::new();
    let dir = env.scratch().join("signals");
    fs::create_dir_all(&dir).unwrap();
    let step = format!(
        "step = \"touch '{0}/started'; while :; do sleep 0.05; done\"\n",
        dir.display()
    );
    env.new_loop("demo", &step);
    let mut tick = env
        .cmd()
        .args(["tick", "demo"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
    let out = env
        .cmd()
        .args(["cancel", "demo", "--reason", "deploy freeze", "--json"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["reason"], "deploy freeze", "{said}");
    assert_eq!(tick.wait().unwrap().code(), Some(6));
    let last = env.history("demo").pop().unwrap();
    assert_eq!(last["kind"], "tick");
    assert_eq!(
        last["cancelled"],
        serde_json::json!({"by": "ann", "reason": "deploy freeze"}),
        "{last}"
    );
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .starts_with("cancelled by ann: deploy freeze ("),
        "{last}"
    );
    assert_eq!(
        env.status("demo")["last_tick"]["cancelled"]["reason"],
        "deploy freeze"
    );
    let status = env.ok(&["status", "demo"]);
    assert!(
        status
            .lines()
            .any(|l| l.contains("cancelled by") && l.contains("ann: deploy freeze")),
        "{status}"
    );
    let history = env.ok(&["history", "demo", "--limit", "1"]);
    assert!(history.contains("cancelled by ann: deploy freeze"), "{history}");
}

#[test]
fn cancel_without_a_tick_in_flight_does_nothing() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let before = env.history("demo");
    let version = env.state("demo")["version"].clone();
    let said = env.ok(&["cancel", "demo"]);
    assert!(said.contains("nothing to cancel"), "{said}");
    assert_eq!(env.history("demo"), before);
    assert_eq!(env.state("demo")["version"], version);
}
