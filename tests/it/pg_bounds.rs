//! Every wait on the PostgreSQL store's server has its bound: a command
//! facing a listener that accepts and never answers, a server frozen
//! before or in the middle of a statement, or a table another session
//! keeps locked, gives up within its bound, says what it waited for and
//! exits 1 (4 for a lock, 9 for a commit whose answer was lost), never
//! hangs; a daemon whose server stops answering carries on once it
//! answers again. The bound is checked by the exit code and message of a
//! command that would otherwise never end (each runs under a guard that
//! kills it and fails the test past a minute); no test measures how long
//! a command took.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};

use crate::common::{BIN, Env, isolate};
use crate::pg::Cluster;

/// Runs `cmd` to its end, or kills it and fails the test if it is still
/// running after a minute: a command that never ends.
pub(crate) fn bounded(cmd: &mut Command, what: &str) -> Output {
    within_a_minute(spawn(cmd), what)
}

fn spawn(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child`, or kills it and fails the test if it is still
/// running after a minute.
pub(crate) fn within_a_minute(mut child: Child, what: &str) -> Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("{what}: still waiting after a minute: {err}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A listener on 127.0.0.1 that accepts connections and never answers
/// (nor closes them): the port.
fn silent_listener() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    port
}

#[test]
fn a_listener_that_never_answers_is_an_error_within_the_bound() {
    let port = silent_listener();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // A password holding `/` and `?`, which no message may show.
    let url = format!("postgres://ann:hunter2/x?y@127.0.0.1:{port}/automaton?connect_timeout=2");
    let run = |args: &[&str]| {
        bounded(
            isolate(&mut Command::new(BIN))
                .arg("--root")
                .arg(&root)
                .env("AUTOMATON_STORE", &url)
                .args(args),
            &format!("{args:?}"),
        )
    };
    let said = |args: &[&str], out: &Output, within: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "cannot connect: the server did not answer within {within}"
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("postgres://ann:***@127.0.0.1"), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{args:?}: {err}");
    };
    // `init` connects before it makes anything: it leaves nothing behind.
    said(&["init"], &run(&["init"]), "2s");
    assert!(!root.exists(), "init made {} all the same", root.display());
    crate::pg::file_root(&root);
    let cases: [(&[&str], &str); 4] = [
        (&["list"], "2s"),
        (&["status", "x"], "2s"),
        (&["tick", "x"], "2s"),
        // The command's own bound, shorter than the URL's.
        (&["pause", "x", "--timeout", "1s"], "1s"),
    ];
    for (args, within) in cases {
        said(args, &run(args), within);
    }
}

/// A server frozen (SIGSTOP) while commands start: each gives up within
/// its bound, and nothing is written; once thawed, everything works.
#[test]
fn a_frozen_server_is_an_error_within_the_bound_and_changes_nothing() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let url = format!("{}&connect_timeout=2", cluster.url());
    let cmd = |args: &[&str]| {
        let mut c = Command::new(BIN);
        isolate(&mut c)
            .arg("--root")
            .arg(&root)
            .env("AUTOMATON_STORE", &url)
            .args(args);
        bounded(&mut c, &format!("{args:?}"))
    };
    assert!(cmd(&["init"]).status.success());
    assert!(cmd(&["new", "calm", "--step", "true"]).status.success());
    let before: serde_json::Value =
        serde_json::from_slice(&cmd(&["status", "calm", "--json"]).stdout).unwrap();
    cluster.freeze(true);
    for args in [
        &["list"][..],
        &["status", "calm"],
        &["pause", "calm", "--timeout", "1s"],
        &["tick", "calm"],
    ] {
        let out = cmd(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("the server did not answer"), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{args:?}: {err}");
    }
    cluster.freeze(false);
    let out = cmd(&["status", "calm", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["status"], "active");
    assert_eq!(
        status["version"], before["version"],
        "nothing was written: {status}"
    );
}

/// Another session holds `loops` locked (ACCESS EXCLUSIVE, in an open
/// transaction): an operator's command gives up within its `--timeout`,
/// says what it waited for, and exits 4, as for a loop's lock not
/// obtained in time; the loop is untouched.
#[test]
fn a_table_locked_by_another_session_keeps_the_commands_bound() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("calm", "step = \"true\"\n");
    let before = env.state("calm");
    let pg = env.pg.as_ref().unwrap();
    let mut blocker = pg.client();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE loops IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let out = bounded(
        env.cmd().args(["pause", "calm", "--timeout", "1s"]),
        "pause behind a table lock",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    // The server gives up the lock wait before the statement (at half the
    // bound), and says so.
    assert!(
        err.contains("loop \"calm\"")
            && err.contains("cannot read the loop")
            && err.contains("canceling statement due to lock timeout"),
        "{err}"
    );
    tx.rollback().unwrap();
    let after = env.state("calm");
    assert_eq!(after["status"], "active");
    assert_eq!(after["version"], before["version"]);
}

/// A command on a cluster of the test's own: the binary, its root and URL.
struct Own {
    root: std::path::PathBuf,
    url: String,
    _dir: tempfile::TempDir,
}

impl Own {
    /// A root on `cluster`, whose server never gives up a statement nor a
    /// lock wait of its own accord (`statement_timeout` and
    /// `lock_timeout` off, as the URL may set them), as a frozen server
    /// never does: only the client's bound ends a wait.
    fn on(cluster: &Cluster) -> Own {
        let dir = tempfile::tempdir().unwrap();
        let own = Own {
            root: dir.path().join("root"),
            url: format!(
                "{}&options=-c%20statement_timeout%3D0%20-c%20lock_timeout%3D0",
                cluster.url()
            ),
            _dir: dir,
        };
        own.ok(&["init"]);
        own
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        isolate(&mut c)
            .arg("--root")
            .arg(&self.root)
            .env("AUTOMATON_STORE", &self.url)
            .env("AUTOMATON_MIN_EVERY", "100ms")
            .env("NO_COLOR", "1")
            .args(args);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = bounded(&mut self.cmd(args), &format!("{args:?}"));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// Each tick's number as its record says it (ran, or crashed).
    fn ticks_recorded(&self, name: &str) -> Vec<u64> {
        let history = self.json(&["history", name, "--json"]);
        let mut ticks: Vec<u64> = history
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "tick" || e["kind"] == "crashed")
            .map(|e| e["tick"].as_u64().unwrap())
            .collect();
        ticks.sort_unstable();
        ticks
    }
}

/// Thaws the cluster when dropped.
struct Thaw<'a>(&'a Cluster);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.freeze(false);
    }
}

/// Whether `n` of the cluster's sessions wait for a lock.
fn waiting_for_locks(client: &mut postgres::Client, n: i64) -> bool {
    let waiting: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND application_name = 'automaton'",
            &[],
        )
        .unwrap()
        .get(0);
    waiting >= n
}

/// Three commands whose connections are made and whose statements are
/// under way when the server freezes (each waits for a table another
/// session keeps locked, which the server would never give up): `pause`
/// and `tick` end within their `--timeout`, `status` within the readers'
/// default bound; each says what it waited for, exits 1, and changed
/// nothing.
#[test]
fn a_server_frozen_mid_statement_ends_each_command_within_its_bound() {
    let Some(cluster) = Cluster::start() else { return };
    let own = Own::on(&cluster);
    own.ok(&["new", "calm", "--step", "true"]);
    let before = own.json(&["status", "calm", "--json"]);
    let history = own.json(&["history", "calm", "--json"]);
    let mut blocker = postgres::Client::connect(&cluster.url(), postgres::NoTls).unwrap();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE loops IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["pause", "calm", "--timeout", "2s"], "2s"),
        (&["tick", "calm", "--timeout", "2s"], "2s"),
        // A reader keeps the documented default.
        (&["status", "calm"], "30s"),
    ];
    let children: Vec<Child> = cases.iter().map(|(args, _)| spawn(&mut own.cmd(args))).collect();
    let mut watcher = postgres::Client::connect(&cluster.url(), postgres::NoTls).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while !waiting_for_locks(&mut watcher, 3) {
        assert!(std::time::Instant::now() < deadline, "the commands never waited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(watcher);
    // Should the test fail with the server frozen, it is thawed before the
    // sessions above are closed.
    let _thaw = Thaw(&cluster);
    cluster.freeze(true);
    let outs: Vec<Output> = children
        .into_iter()
        .zip(&cases)
        .map(|(child, (args, _))| within_a_minute(child, &format!("{args:?}")))
        .collect();
    cluster.freeze(false);
    tx.rollback().unwrap();
    for (out, (args, within)) in outs.iter().zip(&cases) {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("loop \"calm\": PostgreSQL store postgresql://automaton:***@")
                && err.contains(&format!(
                    "cannot read the loop: the server did not answer within {within}"
                )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("hunter2"), "{args:?}: {err}");
    }
    let after = own.json(&["status", "calm", "--json"]);
    assert_eq!(after["status"], "active", "{after}");
    assert_eq!(after["version"], before["version"], "{after}");
    assert_eq!(own.json(&["history", "calm", "--json"]), history);
}

/// The server freezes while a tick's step runs: the tick's record is sent
/// to a server that does not answer. The tick gives up within its
/// `--timeout`, says that the record may or may not have been made (exit
/// 9: do not run it again), and the next tick settles it: the tick is
/// recorded exactly once, as run or as crashed.
#[test]
fn a_server_frozen_while_the_step_runs_leaves_the_tick_recorded_once() {
    let Some(cluster) = Cluster::start() else { return };
    let own = Own::on(&cluster);
    let marks = tempfile::tempdir().unwrap();
    let toml = own.root.with_file_name("solo.toml");
    std::fs::write(&toml, crate::common::gated_step(marks.path())).unwrap();
    own.ok(&["new", "solo", "--from", toml.to_str().unwrap()]);
    let tick = spawn(&mut own.cmd(&["tick", "solo", "--timeout", "2s"]));
    crate::common::wait_for(&marks.path().join("started"));
    cluster.freeze(true);
    std::fs::write(marks.path().join("go"), "").unwrap();
    let out = within_a_minute(tick, "the tick");
    cluster.freeze(false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{err}");
    assert!(
        err.contains("loop \"solo\": PostgreSQL store")
            && err.contains("of the loop's state may or may not have been made")
            && err.contains("`automaton status solo`")
            && err.contains("the server did not answer within 2s"),
        "{err}"
    );
    own.ok(&["tick", "solo", "--timeout", "20s"]);
    assert_eq!(own.ticks_recorded("solo"), [1, 2]);
    let state = own.json(&["status", "solo", "--json"]);
    assert_eq!(state["tick"], 2, "{state}");
    assert!(state["in_flight"].is_null(), "{state}");
}

/// The server freezes for a few seconds under a running daemon, then
/// thaws: the daemon keeps running, ticks again afterwards, and every
/// tick is recorded once (run, or crashed when its record was lost with
/// the server), no two steps of the loop ever at once.
#[test]
fn a_daemon_carries_on_once_a_frozen_server_answers_again() {
    let Some(cluster) = Cluster::start() else { return };
    let own = Own::on(&cluster);
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    let toml = own.root.with_file_name("often.toml");
    let text = crate::pg_lease::marked_step(&log, 0) + "[schedule]\nevery = \"300ms\"\n";
    std::fs::write(&toml, text).unwrap();
    own.ok(&["new", "often", "--from", toml.to_str().unwrap()]);
    let daemon_log = marks.path().join("daemon.log");
    let mut daemon = own
        .cmd(&["daemon"])
        .env("AUTOMATON_LEASE_TTL", "4s")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&daemon_log).unwrap())
        .spawn()
        .unwrap();
    let ticks = || own.json(&["status", "often", "--json"])["tick"].as_u64().unwrap();
    let until = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
        while !cond() {
            assert!(
                std::time::Instant::now() < deadline,
                "never happened: {what}\n{}",
                std::fs::read_to_string(&daemon_log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    until("two ticks", &|| ticks() >= 2);
    cluster.freeze(true);
    std::thread::sleep(std::time::Duration::from_secs(5));
    cluster.freeze(false);
    let thawed = ticks();
    until("three ticks after the thaw", &|| ticks() >= thawed + 3);
    assert!(
        daemon.try_wait().unwrap().is_none(),
        "the daemon ended: {}",
        std::fs::read_to_string(&daemon_log).unwrap_or_default()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
    // The last tick may be in flight no longer: any tick cut short by the
    // SIGTERM is recorded by the next command, as crashed.
    own.ok(&["tick", "often", "--timeout", "20s"]);
    let last = ticks();
    let recorded = own.ticks_recorded("often");
    assert_eq!(recorded, (1..=last).collect::<Vec<_>>(), "each tick once");
    crate::pg_lease::intervals(&log);
}
