//! What a gate author meets: a gate that returns a decision the host does
//! not know fails closed, naming the gate and what it should have returned.

use std::path::{Path, PathBuf};

use automaton::domain::{Context, GateSource, Limits};
use automaton::gate::{GateErrorKind, GateHost};

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

/// Returns decision tag 9 (there are five).
fn bad_tag() -> Vec<u8> {
    fx::WatGate::new("(call $decide (i32.const 9) (i32.const 1024) (i32.const 4))")
        .data(1024, "nine")
        .build()
}

#[test]
fn an_unknown_decision_tag_is_an_error_not_proceed() {
    let tmp = tempfile::tempdir().unwrap();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&write(tmp.path(), "nine.wasm", &bad_tag())))
        .unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::WrongValue { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("nine.wasm (test-gate 0.1.0)"), "{text}");
    assert!(text.contains("returned a value of the wrong type"), "{text}");
    assert!(
        text.contains("expected a decision: proceed | skip(reason)"),
        "{text}"
    );

    // Through the binary, with on_error = "proceed" only the policy lets
    // the tick go on; by default the loop halts rather than run the step.
    let env = crate::common::Env::new();
    let dir = tmp.path();
    std::fs::copy(dir.join("nine.wasm"), dir.join("gate.wasm")).unwrap();
    let out = env.fails(1, &["gate", "test", dir.join("gate.wasm").to_str().unwrap()]);
    assert!(out.contains("returned a value of the wrong type"), "{out}");
}

#[test]
fn a_tick_whose_gate_returns_an_unknown_decision_does_not_run_the_step() {
    let env = crate::common::Env::new();
    let marker = env.scratch().join("step-ran");
    env.new_loop(
        "nine",
        &format!(
            "step = \"touch {}\"\n[[gate]]\npath = \"gates/nine.wasm\"\n",
            marker.display()
        ),
    );
    let dir = env.loop_dir("nine");
    std::fs::create_dir_all(dir.join("gates")).unwrap();
    std::fs::write(dir.join("gates/nine.wasm"), bad_tag()).unwrap();
    let out = env.run(&["tick", "nine", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let error = v["decisions"][0]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("returned a value of the wrong type"),
        "{v} {out:?}"
    );
    assert!(!marker.exists(), "the step ran");
}

#[test]
fn a_gate_built_against_another_wit_names_both_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let host = GateHost::new(None).unwrap();
    let newer = fx::WatGate::new("(call $decide (i32.const 0) (i32.const 0) (i32.const 0))")
        .build_against("0.9.0", str::to_owned);
    let err = host
        .load(&file(&write(tmp.path(), "newer.wasm", &newer)))
        .unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::WrongWorld { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(
            "gate {}/newer.wasm was built against automaton:gate@0.9.0; this automaton offers automaton:gate@0.1.0, @0.2.0 and @0.3.0 ("
                .replace("{}", &tmp.path().display().to_string())
                .as_str()
        ),
        "{text}"
    );
}

#[test]
fn a_gate_built_against_an_edited_wit_says_which_export_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let host = GateHost::new(None).unwrap();
    let edited = fx::WatGate::new("(call $decide (i32.const 0) (i32.const 0) (i32.const 0))")
        .build_against("0.1.0", |t| {
            t.replace("totals: string,", "totals: string,\nextra: string,")
        });
    let err = host
        .load(&file(&write(tmp.path(), "edited.wasm", &edited)))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(
            "does not target the automaton:gate@0.1.0/gate world: record `context` has a field \
             `extra` (string) after `totals`, which automaton:gate@0.1.0's has not ("
        ),
        "{text}"
    );
    assert!(text.contains("export func `evaluate`"), "{text}");

    // A field of another type, deeper down; a decision case renamed.
    for (edit, says) in [
        (
            ("exit-code: option<s32>,", "exit-code: option<u32>,"),
            "field `exit-code` of record `run-result` is u32 here; automaton:gate@0.1.0's is s32",
        ),
        (
            ("await-approval(string),", "wait(string),"),
            "variant `decision` has a case `wait` (string) after `skip`, which \
             automaton:gate@0.1.0's has not (it has `await-approval` (string) there)",
        ),
    ] {
        let edited = fx::WatGate::new("(call $decide (i32.const 0) (i32.const 0) (i32.const 0))")
            .build_against("0.1.0", |t| t.replace(edit.0, edit.1));
        let err = host
            .load(&file(&write(tmp.path(), "edited2.wasm", &edited)))
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(says), "{text}");
    }
}

#[test]
fn new_refuses_an_existing_loop_before_compiling_its_gates() {
    let env = crate::common::Env::new();
    env.new_loop("cc", "step = \"true\"\n");
    // A gate that would fail to load: `new` must not get that far.
    let toml = env.loop_dir("cc").with_file_name("cc.toml");
    std::fs::write(&toml, "step = \"true\"\n[[gate]]\npath = \"gates/notes.wasm\"\n").unwrap();
    std::fs::create_dir_all(env.loop_dir("cc").join("gates")).unwrap();
    std::fs::write(env.loop_dir("cc").join("gates/notes.wasm"), "not wasm").unwrap();
    let err = env.fails(1, &["new", "cc", "--from", toml.to_str().unwrap()]);
    assert!(err.contains("loop \"cc\" already exists"), "{err}");
    assert!(!err.contains("notes.wasm"), "{err}");
}

#[test]
fn new_names_a_directory_that_holds_gates_but_no_loop() {
    let Some(env) = crate::common::Env::files_only("the file store's directories") else {
        return;
    };
    let dir = env.loop_dir("cc");
    std::fs::create_dir_all(dir.join("gates")).unwrap();
    std::fs::write(dir.join("gates/good.wasm"), fx::good()).unwrap();
    let toml = dir.with_file_name("cc.toml");
    std::fs::write(&toml, "step = \"true\"\n[[gate]]\npath = \"gates/good.wasm\"\n").unwrap();
    let err = env.fails(1, &["new", "cc", "--from", toml.to_str().unwrap()]);
    assert!(
        err.contains("exists without a loop in it (it holds gates/)"),
        "{err}"
    );
    assert!(dir.join("gates/good.wasm").exists(), "nothing is lost");
    let tick = env.fails(3, &["tick", "cc"]);
    assert!(tick.contains("no loop named \"cc\""), "{tick}");
}

#[test]
fn a_gates_log_lines_are_kept_in_history_and_shown_by_logs() {
    let env = crate::common::Env::new();
    env.new_loop(
        "logged",
        "step = \"true\"\n[[gate]]\npath = \"gates/good.wasm\"\n",
    );
    let dir = env.loop_dir("logged");
    std::fs::create_dir_all(dir.join("gates")).unwrap();
    std::fs::write(dir.join("gates/good.wasm"), fx::good()).unwrap();
    env.ok(&["tick", "logged"]);
    let gate = env
        .history("logged")
        .into_iter()
        .find(|e| e["kind"] == "gate")
        .expect("a gate event");
    assert_eq!(gate["logs"], serde_json::json!(["info: hello, host"]), "{gate}");
    let out = env.ok(&["logs", "logged", "--gates"]);
    assert_eq!(out, "gates/good.wasm (before-step): info: hello, host\n");
}

#[test]
fn a_failing_gates_output_is_kept_with_its_error_under_on_error_skip() {
    let env = crate::common::Env::new();
    env.new_loop(
        "skipper",
        "step = \"true\"\n[[gate]]\npath = \"gates/panic.wasm\"\non_error = \"skip\"\n",
    );
    let dir = env.loop_dir("skipper");
    std::fs::create_dir_all(dir.join("gates")).unwrap();
    std::fs::write(dir.join("gates/panic.wasm"), fx::panics()).unwrap();
    env.ok(&["tick", "skipper"]);
    let gate = env
        .history("skipper")
        .into_iter()
        .find(|e| e["kind"] == "gate")
        .expect("a gate event");
    assert!(
        gate["error"].as_str().unwrap_or_default().contains("panic.wasm"),
        "{gate}"
    );
    assert!(
        gate["logs"][0]
            .as_str()
            .unwrap_or_default()
            .starts_with("stderr: thread panicked"),
        "{gate}"
    );
    let out = env.ok(&["logs", "skipper", "--gates"]);
    assert!(out.contains("boom!!"), "{out}");
}

/// A loop whose stock gate is given params it does not take (`every` is a
/// count, not a word), on line 3 of its loop.toml.
const BAD_PARAMS: &str =
    "step = \"true\"\n[[gate]]\nparams = { every = \"five\" }\nstock = \"approve-every\"\n";

/// Makes loop `name` (`new` refuses params its gate rejects), then gives it
/// `toml` as an edit by hand would.
fn loop_edited_to(env: &crate::common::Env, name: &str, toml: &str) {
    env.new_loop(name, "step = \"true\"\n");
    std::fs::write(env.loop_dir(name).join("loop.toml"), toml).unwrap();
}

#[test]
fn params_a_gate_rejects_are_named_by_their_line_in_loop_toml() {
    // `edit` and `new` refuse such params: only a hand edit of the file gives them.
    let env = crate::files_only!("loop.toml edited by hand");
    loop_edited_to(&env, "p", BAD_PARAMS);
    let out = env.fails(5, &["validate", "p"]);
    assert!(
        out.contains("loop.toml:3: [[gate]] 1 (stock:approve-every)"),
        "{out}"
    );
    assert!(out.contains("rejected its params"), "{out}");
    assert!(!out.contains("column"), "a position in JSON the host made: {out}");

    // A tick says the same of them (not "refused to decide"), and halts.
    let out = env.run(&["tick", "p", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let error = v["decisions"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("rejected its params (loop.toml line 3): every: invalid type"),
        "{v} {out:?}"
    );
    assert_eq!(env.state("p")["status"], "halted");
}

#[test]
fn status_of_one_loop_calls_its_config_invalid_when_validate_does() {
    // `edit` and `new` refuse such params: only a hand edit of the file gives them.
    let env = crate::files_only!("loop.toml edited by hand");
    loop_edited_to(&env, "p", BAD_PARAMS);
    let v = env.status("p");
    let error = v["config_error"].as_str().unwrap_or_default();
    assert!(error.contains("rejected its params"), "{v}");
    let text = env.ok(&["status", "p"]);
    assert!(text.contains("invalid"), "{text}");
}

#[test]
fn a_gate_failure_its_policy_let_pass_is_shown_by_status_until_it_answers() {
    // `edit` and `new` refuse such params: only a hand edit of the file gives them.
    let env = crate::files_only!("loop.toml edited by hand");
    loop_edited_to(&env, "p", &format!("{BAD_PARAMS}on_error = \"skip\"\n"));
    env.ok(&["tick", "p"]);
    let failure = &env.state("p")["gate_error"];
    assert_eq!(failure["gate"], "stock:approve-every", "{failure}");
    assert!(
        failure["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rejected its params"),
        "{failure}"
    );
    let since = failure["since"].clone();
    let text = env.ok(&["status", "p"]);
    assert!(text.contains("gate error"), "{text}");

    // The same failure again keeps when it began.
    env.ok(&["tick", "p"]);
    assert_eq!(env.state("p")["gate_error"]["since"], since);

    // Mended, the next tick's gates answer and the failure is gone.
    let toml = env.loop_dir("p").join("loop.toml");
    std::fs::write(
        &toml,
        "step = \"true\"\n[[gate]]\nparams = { every = 5 }\nstock = \"approve-every\"\n",
    )
    .unwrap();
    env.ok(&["tick", "p"]);
    assert!(env.state("p").get("gate_error").is_none(), "{}", env.state("p"));
}
