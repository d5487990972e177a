//! What commands print for people: `logs` when the step wrote only to
//! standard error, the man pages, durations and numbers, JSON that leaves
//! out what it has nothing to say about, every problem of a refused edit,
//! and log lines that name their loop.

use std::fs;
use std::process::Stdio;

use crate::common::{Env, wait_for};

#[test]
fn logs_shows_standard_error_when_that_is_all_the_step_wrote() {
    let env = Env::new();
    env.new_loop("flaky", "step = \"echo 'no space left' >&2; exit 3\"\n");
    assert_eq!(env.run(&["tick", "flaky"]).status.code(), Some(6));
    // The command `status` names prints the output.
    let status = env.ok(&["status", "flaky"]);
    let hint = status.lines().find(|l| l.starts_with("output")).unwrap();
    assert!(hint.ends_with("automaton logs flaky 1"), "{status}");
    let out = env.run(&["logs", "flaky", "1"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no space left\n");
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(note.contains("standard error (step.err)"), "{note}");
    // Asked for, standard error is shown as it is, without a note.
    let out = env.run(&["logs", "flaky", "--stderr"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no space left\n");
    assert!(out.stderr.is_empty());
}

#[test]
fn logs_says_when_the_other_stream_has_output_and_how_to_see_it() {
    let env = Env::new();
    env.new_loop(
        "flaky",
        "step = \"echo building; echo 'no space left' >&2; exit 3\"\n",
    );
    assert_eq!(env.run(&["tick", "flaky"]).status.code(), Some(6));
    let out = env.run(&["logs", "flaky"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "building\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("standard error") && said.contains("automaton logs flaky 1 --stderr"),
        "{said}"
    );
    let err = env.run(&["logs", "flaky", "1", "--stderr"]);
    assert_eq!(String::from_utf8_lossy(&err.stdout), "no space left\n");
    let said = String::from_utf8_lossy(&err.stderr);
    assert!(
        said.contains("standard output") && said.contains("automaton logs flaky 1\n"),
        "{said}"
    );
    // A stream alone says nothing of the other.
    env.new_loop("quiet", "step = \"echo fine\"\n");
    env.ok(&["tick", "quiet"]);
    let out = env.run(&["logs", "quiet"]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn a_failed_ticks_status_shows_the_last_lines_of_both_streams() {
    let env = Env::new();
    env.new_loop(
        "flaky",
        "step = \"echo building; echo step two; echo 'no space left on device' >&2; exit 3\"\n",
    );
    assert_eq!(env.run(&["tick", "flaky"]).status.code(), Some(6));
    let status = env.ok(&["status", "flaky"]);
    let row = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .map(|l| l[key.len()..].trim().to_owned())
    };
    assert_eq!(
        row("step stderr").as_deref(),
        Some("no space left on device"),
        "{status}"
    );
    assert_eq!(row("step stdout").as_deref(), Some("building"), "{status}");
    assert!(status.lines().any(|l| l.trim() == "step two"), "{status}");
    // The command that shows standard error is named beside the one that
    // shows standard output.
    assert_eq!(
        row("output").as_deref(),
        Some("automaton logs flaky 1 (standard error: automaton logs flaky 1 --stderr)"),
        "{status}"
    );
    // JSON has them too, by file; a tick that ran has none.
    let v = env.status("flaky");
    assert_eq!(
        v["last_output"]["step.err"],
        serde_json::json!(["no space left on device"])
    );
    env.new_loop("fine", "step = \"echo ok\"\n");
    env.ok(&["tick", "fine"]);
    assert!(env.status("fine").get("last_output").is_none());
}

#[test]
fn logs_follow_follows_both_streams() {
    let env = Env::new();
    let dir = env.scratch().join("signals");
    fs::create_dir_all(&dir).unwrap();
    let step = format!(
        "step = \"echo out1; echo err1 >&2; touch '{0}/started'; while [ ! -e '{0}/go' ]; do sleep 0.02; done; echo out2; echo err2 >&2\"\n",
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
    let follow = env
        .cmd()
        .args(["logs", "demo", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fs::write(dir.join("go"), "").unwrap();
    let out = follow.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(tick.wait().unwrap().success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out1\nout2\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err1\nerr2\n");
}

#[test]
fn status_says_when_a_tick_wrote_nothing() {
    let env = Env::new();
    env.new_loop("quiet", "step = \"exit 1\"\n");
    assert_eq!(env.run(&["tick", "quiet"]).status.code(), Some(6));
    let status = env.ok(&["status", "quiet"]);
    let hint = status.lines().find(|l| l.starts_with("output")).unwrap();
    assert!(hint.contains("none: the step wrote nothing"), "{status}");
}

#[test]
fn the_man_page_has_exit_status_environment_and_files_and_every_page_it_names() {
    let env = Env::new();
    let page = env.ok(&["man"]);
    for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH FILES"] {
        assert!(page.contains(section), "{section} missing");
    }
    for word in [
        "AUTOMATON_ROOT",
        "AUTOMATON_STORE",
        "AUTOMATON_USER",
        "NO_COLOR",
        "RUST_LOG",
        ".state.loop",
    ] {
        assert!(page.contains(word), "{word} missing");
    }
    // Roff's own escapes, not control characters.
    assert!(!page.contains('\x0c'), "a form feed in the page");
    assert!(
        page.contains("the root, when \\fB\\-\\-root\\fR is not given"),
        "{page}"
    );
    let approve = env.ok(&["man", "approve"]);
    assert!(approve.contains("\n.TH automaton-approve 1"), "{approve}");
    assert_eq!(approve.matches(".el .ds Aq").count(), 1, "{approve}");
    assert!(approve.contains("\\-\\-ahead"), "{approve}");
    let gate_test = env.ok(&["man", "gate", "test"]);
    assert!(gate_test.contains("\n.TH automaton-gate-test 1"), "{gate_test}");

    let dir = env.root.join("man1");
    fs::create_dir_all(&dir).unwrap();
    env.ok(&["man", "--dir", dir.to_str().unwrap()]);
    // Every page a page refers to is there.
    let mut pages = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let text = fs::read_to_string(entry.unwrap().path()).unwrap();
        pages += 1;
        let text = text.replace("\\-", "-");
        for word in text.split(|c: char| c.is_whitespace()) {
            if let Some(name) = word.strip_suffix("(1)").filter(|n| n.starts_with("automaton")) {
                assert!(
                    dir.join(format!("{name}.1")).is_file(),
                    "{name}(1) is named but not written"
                );
            }
        }
    }
    assert!(pages > 20, "{pages} pages");
}

#[test]
fn tick_json_leaves_out_a_step_that_did_not_run() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    let ran: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
    assert!(ran["step"].is_object(), "{ran}");
    assert!(ran.get("verifier").is_none(), "{ran}");
    let waited: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
    assert_eq!(waited["outcome"], "awaiting-approval");
    assert!(waited.get("step").is_none(), "{waited}");
}

#[test]
fn a_refused_edit_reports_every_problem() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let edited = "step = \"true\"\n[[gate]]\nstock = \"budgt\"\n\
        [[gate]]\nstock = \"max-failures\"\nparams = { max = 0 }\n[[gate]]\npath = \"gates/missing.wasm\"\n";
    let script = env.root.join("editor.sh");
    fs::write(&script, format!("cat > \"$1\" <<'EOF'\n{edited}EOF\n")).unwrap();
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env("EDITOR", format!("sh {}", script.display()))
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 problems"), "{err}");
    assert!(err.contains("[[gate]] 3 (gates/missing.wasm)"), "{err}");
    assert!(
        err.contains("[[gate]] 1 (stock:budgt)") && err.contains("did you mean \"budget\"?"),
        "{err}"
    );
    assert!(err.contains("[[gate]] 2 (stock:max-failures)"), "{err}");
}

#[test]
fn gate_log_lines_name_their_loop() {
    let env = Env::new();
    env.new_loop(
        "watched",
        "step = \"true\"\n[[gate]]\nstock = \"no-progress\"\nparams = { max = 3 }\n",
    );
    env.ok(&["tick", "watched"]);
    let out = env.run(&["-v", "tick", "watched"]);
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    let line = log
        .lines()
        .find(|l| l.contains("no worktree"))
        .unwrap_or_else(|| panic!("no gate line:\n{log}"));
    assert!(
        line.contains("loop \"watched\": gate stock:no-progress:"),
        "{line}"
    );
}
