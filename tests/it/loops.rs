//! Creating, reading and removing loops: `init`, `new`, `status`, `list`,
//! `rm`, and what bad input does to them.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::{Env, isolate, tree};

#[test]
fn new_builds_a_loop_without_a_lock_file() {
    let env = crate::files_only!("looks at the loop directory's files");
    env.ok(&["new", "demo", "--step", "echo hi"]);
    let dir = env.loop_dir("demo");
    assert!(dir.join("loop.toml").is_file());
    assert!(dir.join("history.jsonl").is_file());
    assert!(
        !dir.join(".state.lock").exists(),
        "new must not create the lock file"
    );
    let s = env.state("demo");
    assert_eq!((s["schema"].as_u64(), s["version"].as_u64()), (Some(1), Some(1)));
    assert_eq!(s["status"], "active");
    assert_eq!(env.history_kinds("demo"), ["created"]);
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(".state.loop")), 0o600);
    assert_eq!(mode(&dir.join("loop.toml")), 0o600);
    // Nothing temporary is left beside it.
    assert_eq!(
        tree(&env.root.join("loops"))
            .iter()
            .filter(|p| !p.starts_with("demo"))
            .count(),
        0
    );
}

#[test]
fn new_refuses_an_existing_loop_and_keeps_it() {
    let env = crate::files_only!("compares loop.toml bytes");
    env.ok(&["new", "demo", "--step", "first"]);
    let before = fs::read(env.loop_dir("demo").join("loop.toml")).unwrap();
    let err = env.fails(1, &["new", "demo", "--step", "second"]);
    assert!(err.contains("loop \"demo\" already exists"), "{err}");
    assert_eq!(fs::read(env.loop_dir("demo").join("loop.toml")).unwrap(), before);
}

#[test]
fn refused_names_create_nothing_anywhere() {
    let env = Env::new();
    let outside = env.root.parent().unwrap().to_path_buf();
    let before = tree(&outside);
    for bad in ["../x", "A", "a/b", "", ".x", "x/../../y"] {
        for args in [
            vec!["new", bad],
            vec!["pause", bad],
            vec!["approve", bad],
            vec!["status", bad],
        ] {
            let err = env.fails(2, &args);
            assert!(err.contains("invalid loop name"), "{args:?}: {err}");
        }
    }
    assert_eq!(tree(&outside), before);
}

#[test]
fn unknown_loops_exit_3_and_create_no_lock_file() {
    let env = Env::new();
    let before = tree(&env.root);
    for cmd in ["status", "pause", "resume", "approve", "reject", "rm", "history"] {
        let err = env.fails(3, &[cmd, "ghost"]);
        assert!(err.contains("no loop named \"ghost\""), "{cmd}: {err}");
    }
    assert_eq!(tree(&env.root), before);
}

#[test]
fn a_root_that_was_never_initialised_is_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let out = isolate(&mut std::process::Command::new(crate::common::BIN))
        .args(["--root", dir.path().join("nowhere").to_str().unwrap(), "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("automaton init"));
}

#[test]
fn unknown_config_key_is_named_with_its_line() {
    let env = Env::new();
    let file = env.root.join("bad.toml");
    fs::write(
        &file,
        "step = \"true\"\n\n[verifier]\ncommand = \"true\"\ntimeuot = \"1m\"\n",
    )
    .unwrap();
    let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
    assert!(err.contains("bad.toml:5:1"), "{err}");
    assert!(err.contains("unknown field `timeuot`"), "{err}");
    assert!(!env.loop_dir("bad").exists());
}

#[test]
fn a_bad_loop_toml_edited_later_is_exit_5_for_approve() {
    let env = crate::files_only!("edits loop.toml by hand");
    env.new_loop("demo", "step = \"true\"\n");
    fs::write(
        env.loop_dir("demo").join("loop.toml"),
        "step = \"true\"\nstep2 = 1\n",
    )
    .unwrap();
    let before = fs::read(env.loop_dir("demo").join(".state.loop")).unwrap();
    let err = env.fails(5, &["approve", "demo"]);
    assert!(err.contains("loop.toml:2:1") && err.contains("step2"), "{err}");
    assert_eq!(
        fs::read(env.loop_dir("demo").join(".state.loop")).unwrap(),
        before
    );
}

#[test]
fn corrupt_state_is_exit_5_and_never_overwritten() {
    let env = crate::files_only!("corrupts .state.loop by hand");
    env.new_loop("demo", "step = \"true\"\n");
    let path = env.loop_dir("demo").join(".state.loop");
    let good = fs::read(&path).unwrap();
    let truncated = good[..good.len() / 2].to_vec();
    let cases: [(&str, Vec<u8>); 4] = [
        ("garbage", b"not json at all".to_vec()),
        ("truncated", truncated),
        ("empty", Vec::new()),
        (
            "unknown schema",
            String::from_utf8(good.clone())
                .unwrap()
                .replace("\"schema\": 1", "\"schema\": 99")
                .into_bytes(),
        ),
    ];
    for (what, bytes) in cases {
        fs::write(&path, &bytes).unwrap();
        for args in [
            &["status", "demo"][..],
            &["status"],
            &["pause", "demo"],
            &["approve", "demo"],
            &["resume", "demo"],
        ] {
            let err = env.fails(5, args);
            assert!(err.contains(".state.loop"), "{what} {args:?}: {err}");
            assert!(err.contains("left untouched"), "{what} {args:?}: {err}");
            assert_eq!(
                fs::read(&path).unwrap(),
                bytes,
                "{what}: {args:?} changed the file"
            );
        }
        if what == "unknown schema" {
            assert!(env.fails(5, &["status", "demo"]).contains("schema 99"));
        }
    }
}

#[test]
fn status_lists_every_readable_loop_even_when_one_is_corrupt() {
    let env = crate::files_only!("corrupts .state.loop by hand");
    env.new_loop("good", "step = \"true\"\n")
        .new_loop("bad", "step = \"true\"\n");
    fs::write(env.loop_dir("bad").join(".state.loop"), "{").unwrap();
    let out = env.cmd().args(["status", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["name"], "bad");
    assert!(v[0]["error"].as_str().unwrap().contains("not valid JSON"));
    assert_eq!(v[1]["name"], "good");
    assert_eq!(v[1]["status"], "active");
}

#[test]
fn status_json_has_the_documented_fields() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["approve", "demo", "--ahead", "--note", "go"]);
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["status", "demo", "--json"])).unwrap();
    for key in [
        "name",
        "status",
        "status_reason",
        "tick",
        "version",
        "pending_approvals",
        "consecutive_failures",
        "updated_at",
        "lock",
        "description",
        "config_error",
        "schedule",
        "next_due",
        "last_run_dir",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    let a = &v["pending_approvals"][0];
    assert_eq!((a["id"].as_str(), a["note"].as_str()), (Some("ap-2"), Some("go")));
    assert!(a["by"].is_string() && a["at"].is_string());
    let list: serde_json::Value = serde_json::from_str(&env.ok(&["list", "--json"])).unwrap();
    assert_eq!(list[0]["name"], "demo");
}

#[test]
fn rm_refuses_an_active_loop_unless_forced() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let err = env.fails(1, &["rm", "demo"]);
    assert!(err.contains("pause it first"), "{err}");
    assert!(env.loop_dir("demo").exists());
    env.ok(&["pause", "demo"]);
    env.ok(&["rm", "demo"]);
    assert!(!env.loop_dir("demo").exists());
    env.new_loop("other", "step = \"true\"\n");
    env.ok(&["rm", "other", "--force"]);
    assert_eq!(tree(&env.root.join("loops")), Vec::<String>::new());
}

/// `history --kind` (repeatable) and `--since` narrow the events; the
/// JSON keeps its shape.
#[test]
fn history_kind_and_since_narrow_the_events() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["pause", "demo", "--reason", "night"]);
    env.ok(&["resume", "demo"]);
    env.ok(&["tick", "demo"]);
    let kinds = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["history", "demo", "--json"];
        all.extend_from_slice(args);
        let v: serde_json::Value = serde_json::from_str(&env.ok(&all)).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kinds(&["--kind", "paused", "--kind", "tick"]), ["paused", "tick"]);
    assert_eq!(kinds(&["--kind", "resumed"]), ["resumed"]);
    assert!(kinds(&["--since", "2099-01-01T00:00:00Z"]).is_empty());
    assert_eq!(kinds(&["--since", "1h"]).len(), kinds(&[]).len());
    let text = env.ok(&["history", "demo", "--kind", "tick"]);
    assert_eq!(text.lines().count(), 1, "{text}");
    let err = env.fails(2, &["history", "demo", "--kind", "tock"]);
    assert!(err.contains("tock") && err.contains("tick"), "{err}");
}

/// `history --follow` prints the events so far, then each new one as it
/// is committed, until it is stopped.
#[test]
fn history_follow_prints_new_events_as_they_are_committed() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let out = env
        .root
        .with_file_name(format!("follow-{}.out", fastrand::u32(..)));
    let mut child = env
        .cmd()
        .args(["history", "demo", "--follow", "--kind", "paused"])
        .stdout(fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    env.ok(&["pause", "demo", "--reason", "lunch"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while !fs::read_to_string(&out).unwrap_or_default().contains("lunch") {
        assert!(std::time::Instant::now() < deadline, "never printed the pause");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    env.ok(&["resume", "demo"]);
    env.ok(&["pause", "demo", "--reason", "tea"]);
    while !fs::read_to_string(&out).unwrap_or_default().contains("tea") {
        assert!(
            std::time::Instant::now() < deadline,
            "never printed the second pause"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(child.try_wait().unwrap().is_none(), "it follows until stopped");
    child.kill().unwrap();
    child.wait().unwrap();
    let text = fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 2, "only the pauses, each once: {text}");
}

#[test]
fn history_limit_and_json() {
    let env = crate::files_only!("tears history.jsonl by hand");
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["pause", "demo", "--reason", "night"]);
    env.ok(&["resume", "demo"]);
    let v: serde_json::Value =
        serde_json::from_str(&env.ok(&["history", "demo", "--limit", "2", "--json"])).unwrap();
    let kinds: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["paused", "resumed"]);
    assert!(v[0]["at"].is_string());
    assert_eq!(v[0]["reason"], "night");
    assert_eq!(v[1]["from"], "paused");
    // A torn last line (a commit cut short) is not part of the record:
    // readers pass over it, and the next command cuts it before it commits,
    // so its event is never glued onto the torn one.
    let path = env.loop_dir("demo").join("history.jsonl");
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str("{\"v\": 99, \"at\": \"2026");
    fs::write(&path, text).unwrap();
    env.as_if_a_writer_died("demo");
    let out = env.run(&["history", "demo"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    env.ok(&["pause", "demo"]);
    let out = env.run(&["history", "demo"]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no line was glued");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 4);
    assert!(fs::read_to_string(&path).unwrap().ends_with("}\n"));
}

/// What bash offers with the printed completion script loaded, for the
/// command line `words` (the last one being completed).
fn bash_completes(env: &Env, script: &str, words: &[&str]) -> Vec<String> {
    let bin_dir = std::path::Path::new(crate::common::BIN).parent().unwrap();
    let script_file = env.root.with_file_name("completion.bash");
    fs::write(&script_file, script).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
    let body = format!(
        "source {file:?}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_TYPE=9; \
         _clap_complete_automaton automaton {cur:?} {prev:?}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file = script_file,
        words = quoted.join(" "),
        cword = words.len() - 1,
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let mut bash = std::process::Command::new("bash");
    // The environment the test's own commands get (its store among it).
    for (k, v) in env.cmd().get_envs() {
        match v {
            Some(v) => bash.env(k, v),
            None => bash.env_remove(k),
        };
    }
    let out = bash
        .args(["--norc", "-c", &body])
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .env("AUTOMATON_ROOT", &env.root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    got.sort();
    got
}

/// The bash script completes subcommands and, for commands on a loop, the
/// root's loop names (asking the binary), in a real bash.
#[test]
fn completions_complete_commands_and_loop_names_in_bash() {
    let env = Env::new();
    for name in ["demo", "deploy", "other"] {
        env.new_loop(name, "step = \"true\"\n");
    }
    let script = env.ok(&["completions", "bash"]);
    assert_eq!(
        bash_completes(&env, &script, &["automaton", "status", "de"]),
        ["demo", "deploy"]
    );
    assert_eq!(bash_completes(&env, &script, &["automaton", "pau"]), ["pause"]);
    env.fails(2, &["completions", "tcsh-ish"]);
}

#[test]
fn the_example_loops_are_valid() {
    let env = Env::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for example in ["loops/coding-agent.toml", "quickstart/hello.toml"] {
        let path = dir.join(example);
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        env.ok(&["new", &name, "--from", path.to_str().unwrap()]);
    }
}

/// `history --follow` prints a refusal as it is recorded (kept apart from
/// the history, it moves no version), then the next commit, each once.
#[test]
fn history_follow_prints_a_refusal_as_it_is_recorded() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n[access]\noperators = [\"operator\"]\n");
    let out = env
        .root
        .with_file_name(format!("follow-{}.out", fastrand::u32(..)));
    let mut child = env
        .cmd()
        .args(["history", "demo", "--follow", "--json"])
        .stdout(fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    let printed = |what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
        while !fs::read_to_string(&out).unwrap_or_default().contains(what) {
            assert!(std::time::Instant::now() < deadline, "never printed {what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    printed("\"created\"");
    let refused = env
        .cmd()
        .args(["pause", "demo"])
        .env("AUTOMATON_USER", "mallory")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(10));
    printed("\"refused\"");
    env.ok(&["pause", "demo", "--reason", "tea"]);
    printed("tea");
    child.kill().unwrap();
    child.wait().unwrap();
    let kinds: Vec<String> = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["created", "refused", "paused"]);
}
