//! A step runs confined (Landlock): from inside a real tick's shell step,
//! the root's files that grant power can be neither written nor read, the
//! `automaton` commands that would release its own await fail, a console's
//! port is out of reach and the runner cannot be signalled; `confine =
//! "off"` is recorded and shown, and a kernel that cannot confine makes
//! the tick refuse to run the step.

use std::path::Path;

use serde_json::Value;

use crate::common::{BIN, Env};

/// The last tick event of `name`.
fn last_tick(env: &Env, name: &str) -> Value {
    env.history(name)
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "tick")
        .expect("a tick event")
}

/// What the step of tick `tick` printed.
fn step_out(env: &Env, name: &str, tick: u64) -> String {
    let path = env.loop_dir(name).join(format!("runs/{tick}/step.out"));
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A step that tries to append to each of `paths` and prints, a line
/// each, `path: wrote` or `path: <the shell's complaint>`.
fn try_writes(paths: &[&Path]) -> String {
    let list: Vec<String> = paths.iter().map(|p| format!("'{}'", p.display())).collect();
    format!(
        "step = \"\"\"for f in {}; do if (echo x >> \\\"$f\\\") 2>\\\"$AUTOMATON_RUN_DIR/e\\\"; then echo \\\"$f: wrote\\\"; else echo \\\"$f: $(cat \\\"$AUTOMATON_RUN_DIR/e\\\")\\\"; fi; done\"\"\"\n",
        list.join(" ")
    )
}

#[test]
fn a_step_cannot_write_the_loops_config_the_roots_files_or_another_loops_state() {
    if crate::common::test_store().is_some() {
        eprintln!("skipped against PostgreSQL: the file store's own files are written at");
        return;
    }
    // A cache of its own, whose key a step must not be able to spoil.
    let env = Env::with_own_cache();
    env.ok(&["user", "add", "alice"]);
    env.new_loop(
        "other",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 5 }\n",
    );
    env.ok(&["tick", "other"]);
    let root = &env.root;
    let own = env.loop_dir("agent");
    let targets = [
        own.join("loop.toml"),
        root.join("automaton.toml"),
        root.join("users.json"),
        root.join("cache/gates/key"),
        root.join("cache/gates/planted"),
        env.loop_dir("other").join(".state.loop"),
        env.loop_dir("other").join("history.jsonl"),
        env.loop_dir("other").join("loop.toml"),
    ];
    let refs: Vec<&Path> = targets.iter().map(std::path::PathBuf::as_path).collect();
    env.new_loop("agent", &try_writes(&refs));
    let before: Vec<Option<Vec<u8>>> = targets.iter().map(|p| std::fs::read(p).ok()).collect();

    env.ok(&["tick", "agent"]);

    let out = step_out(&env, "agent", 1);
    assert_eq!(out.lines().count(), targets.len(), "{out}");
    for line in out.lines() {
        assert!(line.ends_with("Permission denied"), "not denied (EACCES): {line}");
    }
    let after: Vec<Option<Vec<u8>>> = targets.iter().map(|p| std::fs::read(p).ok()).collect();
    assert_eq!(before, after, "a file changed");
}

#[test]
fn a_step_writes_its_run_directory_and_its_workdir_outside_the_root() {
    let env = Env::new();
    let work = tempfile::tempdir().unwrap();
    env.new_loop(
        "agent",
        &format!(
            "workdir = '{}'\nstep = 'echo a > \"$AUTOMATON_RUN_DIR/mine\" && echo b > made-here && mktemp'\n",
            work.path().display()
        ),
    );
    env.ok(&["tick", "agent"]);
    let tick = last_tick(&env, "agent");
    assert_eq!(
        (&tick["outcome"], &tick["confinement"]["by"]),
        (&"ran".into(), &"landlock".into())
    );
    assert!(env.loop_dir("agent").join("runs/1/mine").exists());
    assert!(work.path().join("made-here").exists());
}

#[test]
fn a_step_cannot_read_the_users_or_the_caches_sealing_key() {
    if crate::common::test_store().is_some() {
        eprintln!("skipped against PostgreSQL: the file store's users.json is read at");
        return;
    }
    // A cache of its own: the key is made once a gate was compiled.
    let env = Env::with_own_cache();
    env.ok(&["user", "add", "alice"]);
    env.new_loop(
        "gated",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 5 }\n",
    );
    env.ok(&["tick", "gated"]);
    let key = env.root.join("cache/gates/key");
    assert!(key.exists(), "the cache has its key");
    let users = env.root.join("users.json");
    env.new_loop(
        "agent",
        &format!(
            "step = \"\"\"for f in '{}' '{}'; do cat \\\"$f\\\" >/dev/null 2>\\\"$AUTOMATON_RUN_DIR/e\\\" && echo \\\"$f: read\\\" || echo \\\"$f: $(cat \\\"$AUTOMATON_RUN_DIR/e\\\")\\\"; done\"\"\"\n",
            users.display(),
            key.display()
        ),
    );
    env.ok(&["tick", "agent"]);
    let out = step_out(&env, "agent", 1);
    assert_eq!(out.lines().count(), 2, "{out}");
    for line in out.lines() {
        assert!(line.ends_with("Permission denied"), "not denied (EACCES): {line}");
    }
}

#[test]
fn automaton_run_from_a_step_cannot_add_a_user_nor_approve_its_await() {
    let env = Env::new();
    env.new_loop(
        "gated",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    env.ok(&["tick", "gated"]);
    env.ok(&["tick", "gated"]);
    assert_eq!(env.state("gated")["status"], "awaiting_approval");
    let users_before = env.ok(&["user", "list"]);
    env.new_loop(
        "agent",
        &format!(
            "step = \"\"\"'{BIN}' --root \\\"$AUTOMATON_ROOT\\\" user add mallory; echo \\\"add: $?\\\"; '{BIN}' --root \\\"$AUTOMATON_ROOT\\\" approve gated; echo \\\"approve: $?\\\"\"\"\"\n"
        ),
    );

    env.ok(&["tick", "agent"]);

    let out = step_out(&env, "agent", 1);
    assert!(out.contains("add: ") && !out.contains("add: 0"), "{out}");
    assert!(out.contains("approve: ") && !out.contains("approve: 0"), "{out}");
    assert_eq!(env.ok(&["user", "list"]), users_before);
    assert_eq!(env.state("gated")["status"], "awaiting_approval");
    assert!(
        env.state("gated")["pending_approvals"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
}

#[test]
fn a_step_cannot_connect_to_the_consoles_port_but_may_to_others() {
    let env = Env::new();
    let server = crate::serve::Server::start(&env, &[]);
    let console = server.url("");
    let console_port = console
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let connect = |port: &str| {
        format!(
            "if bash -c 'echo > /dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo '{port}: connected'; else echo '{port}: refused'; fi"
        )
    };
    env.new_loop(
        "agent",
        &format!(
            "step = [\"sh\", \"-c\", \"{}; {}\"]\n",
            connect(&console_port),
            connect(&other_port.to_string())
        ),
    );

    env.ok(&["tick", "agent"]);

    let out = step_out(&env, "agent", 1);
    assert!(out.contains(&format!("{console_port}: refused")), "{out}");
    assert!(out.contains(&format!("{other_port}: connected")), "{out}");
    let enforces = &last_tick(&env, "agent")["confinement"]["enforces"];
    assert!(
        enforces.as_array().unwrap().contains(&"tcp-connect".into()),
        "{enforces}"
    );
    drop(server);
}

#[test]
fn a_step_cannot_signal_its_runner() {
    let env = Env::new();
    // sh is the step itself: its parent is the runner.
    env.new_loop("agent", "step = [\"sh\", \"-c\", \"kill -CONT $PPID\"]\n");
    env.fails(6, &["tick", "agent"]);
    let tick = last_tick(&env, "agent");
    assert_eq!(tick["outcome"], "failed", "{tick}");
    let enforces = &tick["confinement"]["enforces"];
    assert!(
        enforces.as_array().unwrap().contains(&"signals".into()),
        "{enforces}"
    );
}

#[test]
fn the_tick_records_how_its_step_was_confined() {
    let env = Env::new();
    env.new_loop("agent", "step = \"true\"\n");
    env.ok(&["tick", "agent"]);
    let c = &last_tick(&env, "agent")["confinement"];
    assert_eq!(c["by"], "landlock", "{c}");
    assert!(c["abi"].as_u64().unwrap() >= 1, "{c}");
    assert!(
        c["enforces"].as_array().unwrap().contains(&"filesystem".into()),
        "{c}"
    );
}

#[test]
fn an_unconfined_loop_is_recorded_and_shown_as_unconfined() {
    let env = Env::new();
    let side = env.root.parent().unwrap().join("side");
    env.new_loop(
        "agent",
        &format!(
            "[step]\ncommand = \"echo x > '{}'\"\nconfine = \"off\"\n",
            side.display()
        ),
    );
    env.ok(&["tick", "agent"]);
    assert!(side.exists(), "an unconfined step writes where it likes");
    assert_eq!(last_tick(&env, "agent")["confinement"]["by"], "unconfined");
    let status = env.ok(&["status", "agent"]);
    assert!(status.contains("unconfined"), "{status}");
    assert_eq!(env.status("agent")["unconfined"], true);
    let review = env.ok(&["review", "agent"]);
    assert!(review.contains("unconfined"), "{review}");

    let v: Value = serde_json::from_str(&env.ok(&["user", "add", "ann", "--json"])).unwrap();
    let token = v["token"].as_str().unwrap();
    let server = crate::serve::Server::start(&env, &[]);
    for page in ["/loops/agent", "/loops/agent/review"] {
        let (code, body) = crate::serve::get(&server, page, token);
        assert_eq!(code, 200, "{page}: {body}");
        assert!(body.contains("unconfined"), "{page}: {body}");
    }
}

#[test]
fn where_the_kernel_cannot_confine_the_tick_refuses_to_run_the_step() {
    let env = Env::new();
    let marker = env.root.parent().unwrap().join("ran");
    let step = format!("command = \"touch '{}'\"\n", marker.display());
    env.new_loop("agent", &format!("[step]\n{step}"));
    env.new_loop("open", &format!("[step]\n{step}confine = \"off\"\n"));

    let out = env
        .cmd()
        .env("AUTOMATON_LANDLOCK_ABI", "0")
        .args(["tick", "agent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("agent"), "{said}");
    assert!(
        said.contains("cannot confine") && said.contains("confine = \"off\""),
        "{said}"
    );
    assert!(!marker.exists(), "the step ran");
    let tick = last_tick(&env, "agent");
    assert_eq!(tick["outcome"], "failed");
    assert!(tick.get("step").is_none(), "{tick}");

    let out = env
        .cmd()
        .env("AUTOMATON_LANDLOCK_ABI", "0")
        .args(["tick", "open"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(marker.exists());
    assert_eq!(last_tick(&env, "open")["confinement"]["by"], "unconfined");
}

#[test]
fn a_bad_step_table_is_refused_naming_the_key() {
    let env = Env::new();
    let file = env.root.parent().unwrap().join("bad.toml");
    std::fs::write(&file, "[step]\ncommand = \"true\"\nconfine = \"maybe\"\n").unwrap();
    let refused = |text: &str| {
        std::fs::write(&file, text).unwrap();
        let out = env.run(&["new", "bad", "--from", file.to_str().unwrap()]);
        assert!(!out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused("[step]\ncommand = \"true\"\nconfine = \"maybe\"\n");
    assert!(err.contains("bad.toml:3") && err.contains("maybe"), "{err}");
    let err = refused("[step]\ncommand = \"true\"\nwritabel = []\n");
    assert!(err.contains("writabel"), "{err}");
    let err = refused("[step]\nconfine = \"off\"\n");
    assert!(err.contains("command"), "{err}");
}

#[test]
fn run_as_runs_the_step_as_that_os_user() {
    if !crate::access::users() {
        return;
    }
    let env = Env::new();
    // A workdir the step's user may enter and write, outside the root.
    let work = tempfile::tempdir().unwrap();
    let open = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o777);
    std::fs::set_permissions(work.path(), open).unwrap();
    env.new_loop(
        "agent",
        &format!(
            "workdir = '{}'\n[step]\ncommand = 'id -un > whoami'\nrun_as = \"{}\"\n",
            work.path().display(),
            crate::access::QA
        ),
    );
    env.ok(&["tick", "agent"]);
    let who = std::fs::read_to_string(work.path().join("whoami")).unwrap();
    assert_eq!(who.trim(), crate::access::QA);
}

#[test]
fn run_as_a_user_that_does_not_exist_is_refused_and_the_step_does_not_run() {
    let env = Env::new();
    let marker = env.scratch().join("ran");
    env.new_loop(
        "agent",
        &format!(
            "[step]\ncommand = \"touch '{}'\"\nrun_as = \"automaton-no-such-user\"\n",
            marker.display()
        ),
    );
    let out = env.run(&["tick", "agent"]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let reason = last_tick(&env, "agent")["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("run_as = \"automaton-no-such-user\""), "{reason}");
    assert!(!marker.exists());
}

#[test]
fn run_as_from_a_runner_that_cannot_switch_users_is_refused() {
    if !crate::access::users() {
        return;
    }
    let env = Env::new();
    let marker = env.scratch().join("ran");
    env.new_loop(
        "agent",
        &format!(
            "[step]\ncommand = \"touch '{}'\"\nrun_as = \"{}\"\n",
            marker.display(),
            crate::access::QA
        ),
    );
    // Root without the two capabilities: dropped from the bounding set,
    // the runner execs without them.
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--bounding-set", "-setuid,-setgid", "--"]).arg(BIN);
    crate::common::isolate(&mut cmd);
    if let Some(pg) = &env.pg {
        cmd.env("AUTOMATON_STORE", &pg.url);
    }
    let out = cmd
        .args(["--root"])
        .arg(&env.root)
        .args(["tick", "agent"])
        .env("AUTOMATON_USER", "operator")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let reason = last_tick(&env, "agent")["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("CAP_SETUID"), "{reason}");
    assert!(!marker.exists(), "the step ran");
}
