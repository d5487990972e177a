//! What only the PostgreSQL store has: runners on several hosts sharing one
//! loop, a runner killed mid-tick, a server that is down, a schema from a
//! newer automaton, credentials kept out of every message. Tests that need
//! a server skip (saying so) unless `AUTOMATON_TEST_STORE` names one.

use std::process::{Command, Stdio};

use crate::common::{BIN, Env, gated_step, gone, isolate, wait_for};

/// The binary against `env`'s root as runner host `host`.
fn on_host(env: &Env, host: &str) -> Command {
    let mut c = env.cmd();
    c.env("AUTOMATON_HOST", host);
    c
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn ticks_from_three_hosts_serialize_and_lose_nothing() {
    let Some(env) = Env::postgres() else { return };
    let log = env.scratch().join("ran.log");
    // Each step notes it began and ended: two steps at once would interleave.
    env.new_loop(
        "shared",
        &format!(
            "step = \"echo begin >> '{0}'; sleep 0.05; echo end >> '{0}'\"\noverlap = \"wait\"\n",
            log.display()
        ),
    );
    const EACH: usize = 6;
    std::thread::scope(|scope| {
        for host in ["host-a", "host-b", "host-c"] {
            let env = &env;
            scope.spawn(move || {
                for _ in 0..EACH {
                    let out = on_host(env, host)
                        .args(["tick", "shared", "--timeout", "120s"])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                }
            });
        }
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6 * EACH, "every step ran once");
    assert!(
        lines.chunks(2).all(|p| p == ["begin", "end"]),
        "steps never overlapped: {lines:?}"
    );
    let state = env.state("shared");
    assert_eq!(state["tick"], 3 * EACH as u64);
    let history = env.history("shared");
    let ticks: Vec<u64> = history
        .iter()
        .filter(|e| e["kind"] == "tick")
        .map(|e| e["tick"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ticks,
        (1..=3 * EACH as u64).collect::<Vec<_>>(),
        "one record a tick, in order"
    );
    for host in ["host-a", "host-b", "host-c"] {
        let ran = history
            .iter()
            .filter(|e| e["kind"] == "tick" && e["host"] == host)
            .count();
        assert_eq!(ran, EACH, "each host's ticks are recorded as its own: {host}");
    }
    let versions: Vec<u64> = history.iter().map(|e| e["v"].as_u64().unwrap()).collect();
    assert!(versions.windows(2).all(|w| w[0] <= w[1]), "{versions:?}");
    assert_eq!(*versions.last().unwrap(), state["version"].as_u64().unwrap());
}

#[test]
fn an_operator_on_a_third_host_sees_the_holder_and_waits_for_it() {
    let Some(env) = Env::postgres() else { return };
    let gate = tempfile::tempdir().unwrap();
    env.new_loop("busy", &gated_step(gate.path()));
    let mut runner = on_host(&env, "runner-1")
        .args(["tick", "busy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));

    let out = on_host(&env, "ops-laptop")
        .args(["pause", "busy", "--no-wait"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("held by pid {} on runner-1 (tick 1", runner.id())),
        "{err}"
    );
    let status = json(
        &String::from_utf8(
            on_host(&env, "ops-laptop")
                .args(["status", "busy", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap(),
    );
    assert_eq!(status["lock"]["host"], "runner-1");
    assert_eq!(status["lock"]["tick"], 1);
    assert_eq!(status["in_flight"]["host"], "runner-1");

    // A pause that waits lands after the tick, and both are recorded.
    let waiter = on_host(&env, "ops-laptop")
        .args(["pause", "busy", "--reason", "maintenance"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(gate.path().join("go"), "").unwrap();
    assert!(runner.wait().unwrap().success());
    assert!(waiter.wait_with_output().unwrap().status.success());
    let state = env.state("busy");
    assert_eq!(state["status"], "paused");
    assert_eq!(state["tick"], 1);
    assert!(state["in_flight"].is_null());
    assert_eq!(env.history_kinds("busy").last().unwrap(), "paused");
    assert!(json(&env.ok(&["status", "busy", "--json"]))["lock"].is_null());
}

#[test]
fn a_runner_killed_mid_tick_frees_the_lock_and_the_next_tick_records_the_crash() {
    let Some(env) = Env::postgres() else { return };
    let gate = tempfile::tempdir().unwrap();
    env.new_loop(
        "fragile",
        &format!("{}overlap = \"wait\"\n", gated_step(gate.path())),
    );
    // On another host, the lock is free once the dead runner's lease has
    // run out: a short one, here.
    let mut runner = on_host(&env, "doomed")
        .env("AUTOMATON_LEASE_TTL", "2s")
        .args(["tick", "fragile"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));
    let pid = runner.id() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    runner.wait().unwrap();
    assert!(gone(pid));
    // Let the orphaned step finish; the next tick's step passes at once.
    std::fs::write(gate.path().join("go"), "").unwrap();

    let out = on_host(&env, "survivor")
        .args(["tick", "fragile", "--timeout", "60s", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&String::from_utf8(out.stdout).unwrap())["outcome"], "ran");
    let history = env.history("fragile");
    let crashed: Vec<_> = history.iter().filter(|e| e["kind"] == "crashed").collect();
    assert_eq!(crashed.len(), 1, "{history:?}");
    assert_eq!(crashed[0]["tick"], 1);
    assert_eq!(crashed[0]["pid"], pid);
    assert_eq!(crashed[0]["host"], "doomed");
    let state = env.state("fragile");
    assert_eq!(state["tick"], 2, "the dead tick counts; the next is tick 2");
    assert!(state["in_flight"].is_null());
    assert_eq!(state["consecutive_failures"], 0, "the survivor's tick succeeded");
}

#[test]
fn a_server_that_is_down_is_a_clean_error_that_keeps_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let url = format!(
        "postgres://ann:hunter2secret@/automaton?host={}",
        dir.path().join("no-server-here").display()
    );
    // The root's directories (an `init` that cannot connect makes none).
    file_root(&root);
    for args in [vec!["init"], vec!["list"], vec!["status", "x"], vec!["tick", "x"]] {
        let out = isolate(&mut Command::new(BIN))
            .arg("--root")
            .arg(&root)
            .args(["--store", &url])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("PostgreSQL store postgres://ann:***@/automaton"),
            "{err}"
        );
        assert!(err.contains("cannot connect"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    }
    // The same URL from the environment.
    let out = isolate(&mut Command::new(BIN))
        .arg("--root")
        .arg(&root)
        .env("AUTOMATON_STORE", &url)
        .args(["list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
}

/// Makes a root at `root`, its loops in files.
pub(crate) fn file_root(root: &std::path::Path) {
    let out = isolate(&mut Command::new(BIN))
        .arg("--root")
        .arg(root)
        .args(["--store", "file", "init"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_unknown_store_is_a_usage_error() {
    let env = Env::new();
    let out = env.cmd().args(["--store", "mysql://x", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown store"));
}

/// A password however it is spelled — holding `/` or `?`, percent-encoded,
/// as a `password=` parameter, as a quoted `key=value` pair — is masked in
/// every message about a store that cannot be reached, and an unknown
/// store's value too.
#[test]
fn a_password_is_masked_however_it_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let socket = dir.path().join("no-server-here");
    let socket = socket.display();
    file_root(&root);
    let stores = [
        format!("postgres://ann:hunter2/x?y@/automaton?host={socket}"),
        format!("postgres://ann:%68unter2%2Fx@/automaton?host={socket}"),
        format!("postgresql:///automaton?host={socket}&password=hunter2/x?y&user=ann"),
        format!("host={socket} user=ann password='hunter2 x\\'y' dbname=automaton"),
        format!("host={socket} password=hunter2\\ x dbname=automaton"),
    ];
    for store in &stores {
        for args in [vec!["init"], vec!["list", "--json"], vec!["-vv", "tick", "x"]] {
            let out = isolate(&mut Command::new(BIN))
                .arg("--root")
                .arg(&root)
                .args(["--store", store])
                .args(&args)
                .output()
                .unwrap();
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(1), "{store} {args:?}: {all}");
            assert!(all.contains("PostgreSQL store"), "{store} {args:?}: {all}");
            assert!(all.contains("***"), "{store} {args:?}: {all}");
            assert!(!all.contains("unter2"), "{store} {args:?}: {all}");
        }
    }
    let env = Env::new();
    for store in ["mysql://ann:hunter2@db/x", "ann:hunter2 password=hunter2"] {
        let out = env.cmd().args(["--store", store, "list"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("unknown store"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// The step, its verifier and the notify command do not inherit the
/// store's secrets from the runner's environment, unless loop.toml passes
/// one on by name.
#[test]
fn the_step_and_notify_do_not_inherit_the_stores_secrets() {
    let env = Env::new();
    let seen = env.root.with_file_name("seen");
    std::fs::create_dir(&seen).unwrap();
    let config = |pass: &str| {
        format!(
            "step = \"env > '{0}/step'\"\n{pass}\
             [verifier]\ncommand = \"env > '{0}/verifier'\"\n\
             [[gate]]\nstock = \"max-ticks\"\nparams = {{ max = 1 }}\nphase = [\"after-step\"]\n\
             [notify]\ncommand = \"env > '{0}/notify'\"\n",
            seen.display()
        )
    };
    let tick = |name: &str| {
        let mut c = env.cmd();
        if env.pg.is_none() {
            c.env("AUTOMATON_STORE", "file");
        }
        let out = c
            .env("PGPASSWORD", "hunter2")
            .env("PGPASSFILE", "/secret/pgpass")
            .env("PGSERVICEFILE", "/secret/services")
            .args(["tick", name])
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ["step", "verifier", "notify"].map(|f| std::fs::read_to_string(seen.join(f)).unwrap())
    };
    env.new_loop("plain", &config(""));
    for (what, text) in ["step", "verifier", "notify"].iter().zip(tick("plain")) {
        assert!(text.contains("AUTOMATON_LOOP=plain"), "{what}: {text}");
        for secret in ["PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "AUTOMATON_STORE"] {
            assert!(!text.contains(secret), "{what} got {secret}: {text}");
        }
    }
    env.new_loop("passes", &config("pass_env = [\"PGPASSWORD\"]\n"));
    for (what, text) in ["step", "verifier", "notify"].iter().zip(tick("passes")) {
        assert!(text.contains("AUTOMATON_LOOP=passes"), "{what}: {text}");
        assert!(text.contains("PGPASSWORD=hunter2"), "{what}: {text}");
        assert!(!text.contains("PGPASSFILE"), "{what}: {text}");
    }
}

#[test]
fn credentials_are_never_printed_nor_stored() {
    let Some(env) = Env::postgres() else { return };
    let pg = env.pg.as_ref().unwrap();
    // Trust or password authentication alike: a password in the URL must
    // never be shown. (A server that checks it would refuse a wrong one.)
    // The URL's user, given a password; a URL without one names no user to
    // give it to.
    let (scheme, rest) = pg.url.split_once("://").unwrap();
    let Some((user, host)) = rest
        .split_once('@')
        .filter(|(u, _)| !u.is_empty() && !u.contains([':', '/']))
    else {
        eprintln!("skipped: the test store's URL names no user without a password");
        return;
    };
    let with_password = format!("{scheme}://{user}:hunter2secret@{host}");
    let run = |args: &[&str]| {
        let out = env
            .cmd()
            .env("AUTOMATON_STORE", &with_password)
            .args(args)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("hunter2"), "{args:?}: {all}");
        out
    };
    assert!(run(&["new", "quiet", "--step", "true"]).status.success());
    assert!(run(&["tick", "quiet", "--json"]).status.success());
    run(&["status", "quiet", "--json"]);
    run(&["history", "quiet", "--json"]);
    run(&["list", "-v"]);
    run(&["status", "no-such-loop"]);
    let mut client = pg.client();
    for table in ["loops", "events", "holders"] {
        let row = client
            .query_one(
                &format!("SELECT count(*) FROM {table} t WHERE t::text LIKE '%hunter2%'"),
                &[],
            )
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 0, "{table}");
    }
}

#[test]
fn a_schema_newer_than_the_binary_is_refused_untouched() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("kept", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    pg.client()
        .batch_execute("INSERT INTO automaton_schema (version) VALUES (999)")
        .unwrap();
    let err = env.fails(5, &["tick", "kept"]);
    assert!(err.contains("schema version 999"), "{err}");
    assert_eq!(env.state("kept")["tick"], 0, "nothing ran");
}

#[test]
fn a_daemon_stops_when_the_schema_is_upgraded_under_it() {
    let Some(env) = Env::postgres() else { return };
    env.new_often_loop("often", "step = \"true\"\n[schedule]\nevery = \"100ms\"\n");
    let log = env.scratch().join("daemon.log");
    let mut daemon = env
        .cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .arg("daemon")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let ticked = || env.state("often")["tick"].as_u64().unwrap_or(0);
    until(&log, "the daemon ticks", || ticked() >= 2);
    let pg = env.pg.as_ref().unwrap();
    pg.client()
        .batch_execute("INSERT INTO automaton_schema (version) VALUES (999)")
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = daemon.kill();
            panic!("the daemon ran on: {}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    // The code a command gives for the same store (5, as `tick` above).
    assert_eq!(status.code(), Some(5), "{said}");
    assert!(said.contains("schema version 999"), "{said}");
    assert_eq!(said.matches("schema version 999").count(), 1, "said once: {said}");
    let after = ticked();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(ticked(), after, "nothing ticks once it stopped");
}

#[test]
fn the_store_is_recorded_in_the_root_and_used_without_the_flag() {
    let Some(url) = crate::common::test_store() else {
        crate::common::skip_without_postgres();
        return;
    };
    // A schema of its own, through the harness.
    let env = Env::postgres().unwrap();
    let pg = env.pg.as_ref().unwrap();
    drop(url);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let cmd = |args: &[&str]| {
        isolate(&mut Command::new(BIN))
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .unwrap()
    };
    let out = cmd(&["--store", &pg.url, "init"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(root.join("automaton.toml").is_file());
    assert!(cmd(&["new", "via-config", "--step", "true"]).status.success());
    // The other root (the harness's) shares the database: it sees the loop.
    let listed = env.ok(&["list", "--json"]);
    assert!(listed.contains("via-config"), "{listed}");
    // And the file store, asked for by name, does not.
    let out = cmd(&["--store", "file", "status", "via-config"]);
    assert_eq!(out.status.code(), Some(3));
}

/// Loops moved from a root's files into PostgreSQL and back keep their
/// config, state, history and versions, and go on ticking where they were.
#[test]
fn migrate_moves_loops_to_postgres_and_back_keeping_state_history_and_versions() {
    let Some(pg) = Env::postgres() else { return };
    let url = pg.pg.as_ref().unwrap().url.clone();
    let files = Env::file();
    let dir = files.root.to_str().unwrap();
    files.new_loop("nightly", "step = \"echo nightly\"\n[runs]\nkeep = 5\n");
    files.ok(&["tick", "nightly"]);
    files.ok(&["tick", "nightly"]);
    files.ok(&["pause", "nightly", "--reason", "moving house"]);
    files.new_loop("stays", "step = \"true\"\n");
    let (state, history) = (files.state("nightly"), files.history("nightly"));
    let config = std::fs::read_to_string(files.loop_dir("nightly").join("loop.toml")).unwrap();

    let out = files.ok(&["migrate", "--from", dir, "--to", &url, "nightly"]);
    assert!(
        out.contains(&format!("moved loop nightly ({} events)", history.len())),
        "{out}"
    );
    assert_eq!(pg.state("nightly"), state, "the state, version and all");
    assert_eq!(
        pg.history("nightly"),
        history,
        "every event, each keeping its version"
    );
    let moved_config: String = pg
        .pg
        .as_ref()
        .unwrap()
        .client()
        .query_one("SELECT config FROM loops WHERE name = 'nightly'", &[])
        .unwrap()
        .get(0);
    assert_eq!(moved_config, config);
    assert_eq!(
        files.run(&["status", "nightly"]).status.code(),
        Some(3),
        "gone from the files"
    );
    assert!(
        files.loop_dir("nightly").join("runs/2").is_dir(),
        "its step output stays"
    );
    assert!(files.ok(&["list"]).contains("stays"), "only the loop named moved");

    // It goes on in PostgreSQL from where it was.
    pg.ok(&["resume", "nightly"]);
    pg.ok(&["tick", "nightly"]);
    let state = pg.state("nightly");
    assert_eq!(state["tick"], 3);
    let history = pg.history("nightly");

    // And back: every loop of the database, into the root's files.
    let out = files.ok(&["migrate", "--from", &url, "--to", dir, "--json"]);
    let moved = json(&out);
    assert_eq!(moved[0]["name"], "nightly", "{out}");
    assert_eq!(moved[0]["moved"], true, "{out}");
    assert_eq!(files.state("nightly"), state);
    assert_eq!(files.history("nightly"), history);
    assert_eq!(
        std::fs::read_to_string(files.loop_dir("nightly").join("loop.toml")).unwrap(),
        config
    );
    assert_eq!(
        pg.run(&["status", "nightly"]).status.code(),
        Some(3),
        "gone from the database"
    );
    files.ok(&["tick", "nightly"]);
    assert_eq!(files.state("nightly")["tick"], 4);
    assert_eq!(
        files.history("nightly").last().unwrap()["v"],
        files.state("nightly")["version"]
    );
}

/// `migrate` moves loops, not the console's users: it says which users of
/// the source the target lacks, and how to add them there.
#[test]
fn migrate_says_which_console_users_it_leaves_behind() {
    let Some(pg) = Env::postgres() else { return };
    let url = pg.pg.as_ref().unwrap().url.clone();
    let files = Env::file();
    let dir = files.root.to_str().unwrap();
    files.new_loop("nightly", "step = \"true\"\n");
    files.ok(&["user", "add", "ann"]);
    let out = files.run(&["migrate", "--from", dir, "--to", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("console users are not moved: ann") && err.contains("user add"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// A loop whose lock is held (a tick is running) is refused, in either
/// direction, and stays where it was, untouched; once free it moves.
#[test]
fn migrate_refuses_a_locked_loop_and_leaves_it_where_it_was() {
    let Some(pg) = Env::postgres() else { return };
    let url = pg.pg.as_ref().unwrap().url.clone();
    let files = Env::file();
    let dir = files.root.to_str().unwrap();
    let gate = tempfile::tempdir().unwrap();
    files.new_loop("busy", &gated_step(gate.path()));
    let mut runner = files
        .cmd()
        .args(["tick", "busy"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));
    let out = files.run(&["migrate", "--from", dir, "--to", &url]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loop \"busy\"") && err.contains(&format!("held by pid {}", runner.id())),
        "{err}"
    );
    // Said once, as the command's error, not in the report too.
    let said = format!("{err}{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(said.matches("held by pid").count(), 1, "{said}");
    assert_eq!(
        pg.run(&["status", "busy"]).status.code(),
        Some(3),
        "nothing reached the target"
    );
    std::fs::write(gate.path().join("go"), "").unwrap();
    assert!(runner.wait().unwrap().success());
    assert_eq!(files.state("busy")["tick"], 1, "the tick committed where it ran");
    assert!(files.state("busy")["in_flight"].is_null());

    // Moved once free; then locked in the database, it is refused back.
    files.ok(&["migrate", "--from", dir, "--to", &url, "busy"]);
    std::fs::remove_file(gate.path().join("started")).unwrap();
    std::fs::remove_file(gate.path().join("go")).unwrap();
    let mut runner = pg
        .cmd()
        .args(["tick", "busy"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));
    let err = files.fails(1, &["migrate", "--from", &url, "--to", dir, "busy"]);
    assert!(err.contains(&format!("held by pid {}", runner.id())), "{err}");
    assert_eq!(files.run(&["status", "busy"]).status.code(), Some(3));
    std::fs::write(gate.path().join("go"), "").unwrap();
    assert!(runner.wait().unwrap().success());
    let state = pg.state("busy");
    assert_eq!(state["tick"], 2);
    assert!(state["in_flight"].is_null());
}

/// A daemon on one host hears of what another host changes through the
/// store's notifications: a new cadence (which no rescan would find: a
/// loop's config in the database has no file whose time could move), a
/// new loop, and a pause, after which the loop never ticks again.
#[test]
fn a_daemon_hears_of_changes_made_on_another_host() {
    let Some(env) = Env::postgres() else { return };
    let other_dir = tempfile::tempdir().unwrap();
    let other_root = other_dir.path().join("root");
    let url = env.pg.as_ref().unwrap().url.clone();
    let other = |args: &[&str]| -> String {
        let out = isolate(&mut Command::new(BIN))
            .arg("--root")
            .arg(&other_root)
            .env("AUTOMATON_STORE", &url)
            .env("AUTOMATON_HOST", "ops-laptop")
            .env("AUTOMATON_MIN_EVERY", "100ms")
            .env(
                "EDITOR",
                format!("cp '{}'", other_dir.path().join("new.toml").display()),
            )
            .env_remove("VISUAL")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    other(&["init"]);
    let ticks = |name: &str| env.state(name)["tick"].as_u64().unwrap();
    env.new_loop("slow", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    let log = env.root.with_file_name("daemon.log");
    let mut daemon = on_host(&env, "runner-1")
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .arg("daemon")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    until(&log, "the first tick", || ticks("slow") >= 1);

    std::fs::write(
        other_dir.path().join("new.toml"),
        "step = \"true\"\n[schedule]\nevery = \"200ms\"\n",
    )
    .unwrap();
    other(&["edit", "slow"]);
    until(&log, "ticks on the cadence set on the other host", || {
        ticks("slow") >= 4
    });

    std::fs::write(
        other_dir.path().join("late.toml"),
        "step = \"true\"\n[schedule]\nevery = \"1h\"\n",
    )
    .unwrap();
    other(&[
        "new",
        "late",
        "--from",
        other_dir.path().join("late.toml").to_str().unwrap(),
    ]);
    until(&log, "the loop made on the other host ticks", || {
        ticks("late") >= 1
    });

    other(&["pause", "slow"]);
    let paused = env.state("slow");
    let (tick, version) = (paused["tick"].clone(), paused["version"].clone());
    // Until the daemon has seen the pause, the loop would tick 5 times a second.
    env.new_loop("clock", "step = \"true\"\n[schedule]\nevery = \"1s\"\n");
    until(&log, "a few ticks of another loop", || ticks("clock") >= 3);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
    let after = env.state("slow");
    assert_eq!(
        (&after["tick"], &after["version"]),
        (&tick, &version),
        "no tick after the pause"
    );
    assert_eq!(after["status"], "paused");
}

/// A daemon whose notification connection is cut listens again and then
/// reads every loop anew, so a change it could not hear in the gap is not
/// lost: here a cadence written straight into the database (which notifies
/// nobody) in the second before the daemon reconnects.
#[test]
fn a_daemon_whose_notifications_were_cut_reads_every_loop_again() {
    let Some(env) = Env::postgres() else { return };
    let pg = env.pg.as_ref().unwrap();
    let app = format!("automaton-{}", pg.schema);
    let ticks = |name: &str| env.state(name)["tick"].as_u64().unwrap();
    env.new_loop("slow", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    let log = env.root.with_file_name("daemon.log");
    let mut daemon = on_host(&env, "runner-1")
        .env("AUTOMATON_STORE", format!("{}&application_name={app}", pg.url))
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .arg("-v")
        .arg("daemon")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    until(&log, "the first tick", || ticks("slow") >= 1);
    let mut admin = pg.client();
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            &[&app],
        )
        .unwrap();
    assert_eq!(cut.len(), 1, "the daemon's one listening connection");
    admin
        .execute(
            "UPDATE loops SET config = $1 WHERE name = 'slow'",
            &[&"step = \"true\"\n[schedule]\nevery = \"200ms\"\n"],
        )
        .unwrap();
    until(&log, "ticks on the cadence changed in the gap", || {
        ticks("slow") >= 3
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("listening for changes again"), "{log}");
}

/// A DBA's `idle_session_timeout` (here 300 ms, in the URL's options)
/// does not end the daemon's notification connection, which idles by
/// design: the daemon neither listens again nor reads every loop's config
/// again each time, and a step longer than the timeout keeps its lease
/// (renewed on a connection that idles between rounds).
#[test]
fn an_idle_session_timeout_ends_neither_the_daemons_listening_nor_its_renewals() {
    let Some(env) = Env::postgres() else { return };
    let pg = env.pg.as_ref().unwrap();
    let version: i32 = pg
        .client()
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .unwrap()
        .get(0);
    if version < 140000 {
        eprintln!("skipped: the server has no idle_session_timeout (PostgreSQL 14 and later)");
        return;
    }
    assert!(pg.url.contains("options=-c%20search_path"), "{}", pg.url);
    let url = format!("{}%20-c%20idle_session_timeout%3D300", pg.url);
    let marks = env.scratch();
    env.new_loop(
        "slow",
        &format!(
            "step = \"sleep 3; touch '{}/done'\"\n[schedule]\nevery = \"1h\"\n",
            marks.display()
        ),
    );
    let log = env.root.with_file_name("daemon.log");
    let mut daemon = on_host(&env, "runner-1")
        .env("AUTOMATON_STORE", &url)
        .env("AUTOMATON_LEASE_TTL", "4s")
        .arg("-v")
        .arg("daemon")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    until(&log, "the first tick", || {
        env.state("slow")["tick"].as_u64() == Some(1)
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(marks.join("done").exists(), "the step ran to its end: {log}");
    let state = env.state("slow");
    assert_eq!(state["last_tick"]["outcome"], "ran", "{state}\n{log}");
    assert!(!log.contains("listening for changes again"), "{log}");
    assert!(!log.contains("lease was not renewed"), "{log}");
}

/// Waits until `cond` holds, or fails the test with the daemon's log.
fn until(log: &std::path::Path, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A PostgreSQL server of the test's own, which it stops and starts: a
/// throw-away cluster in a temporary directory on a Unix socket (and TCP
/// on one address, when asked), run as user `postgres` when the tests run
/// as root (initdb refuses root).
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    /// Who runs the server: `postgres` under root, else the test's user.
    owner: Option<(u32, u32)>,
    /// The address it listens on over TCP, if any, at [`TCP_PORT`].
    tcp: Option<std::net::Ipv4Addr>,
}

/// The port of a cluster that listens on TCP (and its socket's name): one
/// a server of the machine's own is unlikely to hold on every address.
const TCP_PORT: u16 = 54329;

impl Cluster {
    /// A running cluster, or `None` (skipped, said on stderr) when the
    /// suite has no PostgreSQL: like every test here, it runs when
    /// `AUTOMATON_TEST_STORE` is set, and needs the server's programs
    /// (`/usr/lib/postgresql/*/bin`, or `AUTOMATON_TEST_PGBIN`); without
    /// them it is skipped too, unless `AUTOMATON_REQUIRE_POSTGRES=1`.
    pub(crate) fn start() -> Option<Cluster> {
        Cluster::start_with(None)
    }

    /// A running cluster like [`Cluster::start`]'s that also listens on
    /// TCP at `addr` (an address of this host), trusting clients of the
    /// network `clients` (`a.b.c.d/n`).
    pub(crate) fn start_on_tcp(addr: std::net::Ipv4Addr, clients: &str) -> Option<Cluster> {
        Cluster::start_with(Some((addr, clients)))
    }

    fn start_with(tcp: Option<(std::net::Ipv4Addr, &str)>) -> Option<Cluster> {
        crate::common::test_store().or_else(|| {
            crate::common::skip_without_postgres();
            None
        })?;
        let bin = std::env::var_os("AUTOMATON_TEST_PGBIN")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                let mut found: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
                    .ok()?
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .collect();
                found.sort_unstable();
                Some(format!("/usr/lib/postgresql/{}/bin", found.last()?).into())
            })
            .filter(|b: &std::path::PathBuf| b.join("initdb").is_file());
        let Some(bin) = bin else {
            assert!(
                std::env::var("AUTOMATON_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "AUTOMATON_REQUIRE_POSTGRES=1, but there are no PostgreSQL server programs \
                 in /usr/lib/postgresql/*/bin: install them, or set AUTOMATON_TEST_PGBIN"
            );
            eprintln!(
                "skipped: no PostgreSQL server programs to start a cluster of the test's own \
                 (/usr/lib/postgresql/*/bin, or set AUTOMATON_TEST_PGBIN)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let owner = nix::unistd::getuid().is_root().then(|| {
            let pg = nix::unistd::User::from_name("postgres")
                .unwrap()
                .expect("a user postgres to run the server as");
            std::os::unix::fs::chown(dir.path(), Some(pg.uid.as_raw()), Some(pg.gid.as_raw())).unwrap();
            (pg.uid.as_raw(), pg.gid.as_raw())
        });
        let cluster = Cluster {
            dir,
            bin,
            owner,
            tcp: tcp.map(|(addr, _)| addr),
        };
        let data = cluster.dir.path().join("data");
        cluster.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "automaton",
                "--no-sync",
            ],
        );
        if let Some((_, clients)) = tcp {
            let hba = data.join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).unwrap();
            text.push_str(&format!("host all all {clients} trust\n"));
            std::fs::write(&hba, text).unwrap();
        }
        cluster.up();
        Some(cluster)
    }

    fn run(&self, program: &str, args: &[&str]) {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new(self.bin.join(program));
        c.args(args).current_dir(self.dir.path());
        if let Some((uid, gid)) = self.owner {
            c.uid(uid).gid(gid);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.dir.path().join("data");
        let mut all = vec!["-D", data.to_str().unwrap(), "-w"];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    /// Starts the server again after [`Cluster::crash`], with the options it had.
    pub(crate) fn up(&self) {
        let opts = match self.tcp {
            Some(addr) => format!(
                "-k {} -c listen_addresses='{addr}' -p {TCP_PORT} -c fsync=off",
                self.dir.path().display()
            ),
            None => format!(
                "-k {} -c listen_addresses='' -c fsync=off",
                self.dir.path().display()
            ),
        };
        let log = self.dir.path().join("server.log");
        self.pg_ctl(&["-l", log.to_str().unwrap(), "-o", &opts, "start"]);
    }

    /// Stops the server as a crash would: no checkpoint, every session cut.
    pub(crate) fn crash(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }

    /// Restarts the server as an operator would in a hurry: every session
    /// is ended, then it starts again with the options it had.
    pub(crate) fn restart_fast(&self) {
        let log = self.dir.path().join("server.log");
        self.pg_ctl(&["-l", log.to_str().unwrap(), "-m", "fast", "restart"]);
    }

    /// The server's processes: the postmaster and its children.
    fn processes(&self) -> Vec<i32> {
        let pidfile = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).unwrap();
        let postmaster: i32 = pidfile.lines().next().unwrap().trim().parse().unwrap();
        let mut all = vec![postmaster];
        for e in std::fs::read_dir("/proc").unwrap() {
            let Some(pid) = e
                .unwrap()
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1));
            if ppid.and_then(|p| p.parse::<i32>().ok()) == Some(postmaster) {
                all.push(pid);
            }
        }
        all
    }

    /// Freezes the server (SIGSTOP to it and every backend) or thaws it.
    pub(crate) fn freeze(&self, frozen: bool) {
        let signal = if frozen {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        };
        for pid in self.processes() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// Its URL, with a password (which trust authentication ignores) that
    /// no message may show.
    pub(crate) fn url(&self) -> String {
        let port = self.tcp.map_or(String::new(), |_| format!("&port={TCP_PORT}"));
        format!(
            "postgresql://automaton:hunter2secret@/postgres?host={}{port}",
            self.dir.path().display()
        )
    }

    /// Its URL over TCP, when it listens on TCP: like [`Cluster::url`]'s.
    pub(crate) fn tcp_url(&self) -> String {
        let addr = self.tcp.expect("a cluster listening on TCP");
        format!("postgresql://automaton:hunter2secret@{addr}:{TCP_PORT}/postgres")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        use std::os::unix::process::CommandExt;
        // A test that failed with the server frozen leaves it stoppable.
        if self.dir.path().join("data/postmaster.pid").exists() {
            self.freeze(false);
        }
        let mut c = Command::new(self.bin.join("pg_ctl"));
        c.arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"]);
        if let Some((uid, gid)) = self.owner {
            c.uid(uid).gid(gid);
        }
        let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// The server crashes and restarts while a step runs, and is back well
/// within the lock's lease: the step runs on, its lease is renewed on a new
/// connection, its result is recorded, and the lock stays its until then:
/// no other runner may take it while the server was down. While the server
/// is down, a command fails cleanly naming the cause; no message shows the
/// password.
#[test]
fn a_server_restart_mid_step_is_survived_by_the_lease_and_the_tick_is_recorded() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let gate = tempfile::tempdir().unwrap();
    let url = cluster.url();
    let cmd = || {
        let mut c = Command::new(BIN);
        isolate(&mut c)
            .arg("--root")
            .arg(&root)
            .env("AUTOMATON_STORE", &url)
            .stdin(Stdio::null());
        c
    };
    let ok = |args: &[&str]| {
        let out = cmd().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
        String::from_utf8(out.stdout).unwrap()
    };
    ok(&["init"]);
    let config = dir.path().join("fragile.toml");
    std::fs::write(&config, gated_step(gate.path())).unwrap();
    ok(&["new", "fragile", "--from", config.to_str().unwrap()]);
    let runner = cmd()
        .args(["tick", "fragile"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));

    cluster.crash();
    let down = cmd().args(["status", "fragile"]).output().unwrap();
    let err = String::from_utf8_lossy(&down.stderr);
    assert_eq!(down.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot connect") && err.contains("automaton:***@"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    cluster.up();

    // The restart ended the runner's session, not its lease.
    let status = json(&ok(&["status", "fragile", "--json"]));
    assert_eq!(status["lock"]["command"], "tick", "{status}");
    let out = cmd().args(["pause", "fragile", "--no-wait"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "the lock is still held");
    std::fs::write(gate.path().join("go"), "").unwrap();
    let out = runner.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the step ran and was recorded: {err}");
    assert!(!err.contains("hunter2"), "{err}");

    let history = json(&ok(&["history", "fragile", "--json"]));
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["created", "tick"]);
    let status = json(&ok(&["status", "fragile", "--json"]));
    assert!(
        status["in_flight"].is_null() && status["lock"].is_null(),
        "{status}"
    );
    assert_eq!(status["tick"], 1);
}

#[test]
fn a_store_upgraded_to_the_run_ledger_holds_the_runs_of_its_history() {
    let Some(env) = Env::postgres() else { return };
    // Every other run fails.
    let count = env.scratch().join("count");
    let step = format!(
        "step = \"echo '{{\\\"cost_usd\\\": 0.25}}' > \\\"$AUTOMATON_METRICS\\\"; echo >> {c}; exit $(( $(wc -l < {c}) % 2 ))\"\n",
        c = count.display()
    );
    env.new_loop("kept", &step);
    for _ in 0..4 {
        env.run(&["tick", "kept"]);
    }
    env.ok(&["pause", "kept"]);
    let pg = env.pg.as_ref().unwrap();
    let rows = || -> Vec<String> {
        pg.client()
            .query("SELECT row_to_json(r)::text FROM runs r ORDER BY loop, n", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let written = rows();
    assert_eq!(written.len(), 4, "{written:?}");
    assert!(written[3].contains(r#""f":2,"#), "{written:?}");
    assert!(written[3].contains(r#""sums":{"cost_usd": 1.00}"#), "{written:?}");
    // The store as a build before the ledger left it, with the same history.
    pg.client()
        .batch_execute(
            "DROP TRIGGER runs_record ON events;
             DROP FUNCTION runs_record_event(), run_record(text, json), run_outcome_ok(json);
             DROP TABLE runs;
             DELETE FROM automaton_schema WHERE version = 12;",
        )
        .unwrap();
    env.ok(&["status", "kept"]);
    assert_eq!(rows(), written, "made again from the history");
}
