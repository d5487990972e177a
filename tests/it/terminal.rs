//! What a loop keeps reaches a terminal shown, never obeyed: reasons a
//! gate or an operator wrote with ESC, BEL, NUL, `\r` and `\n` in them come
//! out of `status`, `list`, `tick`, `history`, `check-gate`, `doctor` and
//! the logs as visible escapes, while `--json` keeps them exact; the names
//! of who acts are kept to their bound; a notify command runs whatever the
//! reason holds.

use std::fs;

use crate::common::Env;
use crate::gate_fixtures::WatGate;

/// A clear screen, a carriage return, a forged line, a bell and a NUL.
const HOSTILE: &str = "\x1b[2J\r\nstatus     active\x07\0 (forged)";

/// A gate that logs `HOSTILE` and halts with it as the reason.
fn hostile_gate(env: &Env) -> std::path::PathBuf {
    let len = HOSTILE.len();
    let gate = WatGate::new(&format!(
        "(call $log (i32.const 2) (i32.const 1024) (i32.const {len}))
         (call $decide (i32.const 3) (i32.const 1024) (i32.const {len}))"
    ))
    .data(1024, HOSTILE)
    .build();
    let path = env.root.join("hostile.wasm");
    fs::write(&path, gate).unwrap();
    path
}

/// Fails when `text` holds a control character other than the layout's
/// newlines, or a line the hostile text forged, or does not show the
/// hostile text's escapes.
#[track_caller]
fn assert_shown(what: &str, text: &str) {
    assert_safe(what, text);
    assert!(
        text.contains("\\x1b[2J\\r\\n"),
        "{what} did not show the escapes:\n{text}"
    );
}

/// Fails when `text` holds a control character other than the layout's
/// newlines, or more than one `status` line (the forged one).
#[track_caller]
fn assert_safe(what: &str, text: &str) {
    let raw = text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    });
    assert_eq!(raw, None, "{what} printed a raw control character:\n{text:?}");
    let status_lines = text
        .lines()
        .filter(|l| l.trim_start().starts_with("status "))
        .count();
    assert!(status_lines <= 1, "{what} let a reason forge a line:\n{text}");
}

#[test]
fn control_characters_in_reasons_are_shown_as_escapes_and_kept_exact_in_json() {
    let env = Env::new();
    let gate = hostile_gate(&env);
    env.new_loop(
        "gated",
        &format!("step = \"true\"\n[[gate]]\npath = \"{}\"\n", gate.display()),
    );
    env.new_loop(
        "paused",
        "description = \"\\u001b[2J\\r\\nstatus     active\\u0007\\u202e (forged)\"\nstep = \"true\"\n",
    );

    let tick = env.cmd().args(["-v", "tick", "gated"]).output().unwrap();
    assert_eq!(tick.status.code(), Some(7), "{tick:?}");
    assert_shown("tick", &String::from_utf8(tick.stdout).unwrap());
    assert_shown("tick's log", &String::from_utf8(tick.stderr).unwrap());
    let pause_reason = HOSTILE.replace('\0', "");
    env.ok(&["pause", "paused", "--reason", &pause_reason]);

    assert_safe("status", &env.ok(&["status"]));
    assert_shown("list", &env.ok(&["list"]));
    for args in [
        &["status", "gated"][..],
        &["status", "paused"],
        &["history", "gated"],
        &["history", "paused"],
        &["check-gate", "gated"],
    ] {
        assert_shown(&args.join(" "), &env.ok(args));
    }
    let already = env.ok(&["pause", "paused", "--reason", "again"]);
    assert_shown("pause", &already);

    // JSON keeps the exact text.
    assert_eq!(env.status("gated")["status_reason"], HOSTILE);
    assert_eq!(env.status("paused")["status_reason"], pause_reason.as_str());
    let ticks: Vec<_> = env
        .history("gated")
        .into_iter()
        .filter(|e| e["kind"] == "tick")
        .collect();
    assert_eq!(ticks[0]["reason"], HOSTILE);
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["check-gate", "gated", "--json"])).unwrap();
    assert_eq!(json["decisions"][0]["reason"], HOSTILE);
}

#[test]
fn an_error_quoting_a_holder_is_one_line() {
    let env = crate::files_only!("writes the lock file by hand");
    env.new_loop("demo", "step = \"true\"\n");
    // The lock held here, its record naming a holder on a hostile host.
    let holder = serde_json::json!({
        "pid": std::process::id(),
        "host": HOSTILE,
        "command": "tick\r\nstatus     active",
        "since": "2026-01-01T00:00:00Z",
    });
    let lock = env.loop_dir("demo").join(".state.lock");
    fs::write(&lock, format!("{holder}\n")).unwrap();
    let held = fs::File::open(&lock).unwrap();
    held.lock().unwrap();
    let err = env.fails(4, &["pause", "demo", "--no-wait"]);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_shown("pause's error", &err);
    assert_shown("status", &env.ok(&["status", "demo"]));
    assert_shown(
        "doctor",
        &String::from_utf8(env.run(&["doctor", "demo"]).stdout).unwrap(),
    );
    drop(held);
}

#[test]
fn a_huge_user_name_is_kept_cut_to_its_bound() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let huge = "u".repeat(100_000);
    let out = env
        .cmd()
        .args(["approve", "demo", "--ahead"])
        .env("AUTOMATON_USER", &huge)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let by = env.status("demo")["pending_approvals"][0]["by"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(by.len() <= 256, "{}", by.len());
    assert!(by.starts_with("uuu") && by.ends_with("more bytes cut]"), "{by}");
    let approved = env.history("demo").pop().unwrap();
    assert_eq!(approved["by"], by.as_str());
}

#[test]
fn notify_runs_with_a_nul_in_the_reason() {
    let env = Env::new();
    let gate = hostile_gate(&env);
    let heard = env.root.join("heard");
    env.new_loop(
        "gated",
        &format!(
            "step = \"true\"\n[[gate]]\npath = \"{}\"\n\
             [notify]\ncommand = \"printf '%s|%s' \\\"$AUTOMATON_STATUS\\\" \\\"$AUTOMATON_REASON\\\" > '{}'\"\n",
            gate.display(),
            heard.display()
        ),
    );
    assert_eq!(env.run(&["tick", "gated"]).status.code(), Some(7));
    let said = fs::read_to_string(&heard).expect("the notify command did not run");
    assert_eq!(said, format!("halted|{}", HOSTILE.replace('\0', "\u{fffd}")));
}
