//! Every wait on the PostgreSQL store's server has its bound: a command
//! facing a listener that accepts and never answers, a frozen server, or a
//! table another session keeps locked, gives up within its bound, says
//! what it waited for and exits 1, never hangs. The bound is checked by
//! the exit code and message of a command that would otherwise never end
//! (each runs under a guard that kills it and fails the test past a
//! minute); no test measures how long a command took.

use std::io::Read;
use std::process::{Command, Output, Stdio};

use crate::common::{BIN, Env, isolate};
use crate::pg::Cluster;

/// Runs `cmd` to its end, or kills it and fails the test if it is still
/// running after a minute: a command that never ends.
fn bounded(cmd: &mut Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
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
/// says what it waited for, and exits 1; the loop is untouched.
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
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The lock wait and the statement share the bound: either may say so.
    assert!(
        err.contains("cannot read the loop") && err.contains("due to") && err.contains("timeout"),
        "{err}"
    );
    tx.rollback().unwrap();
    let after = env.state("calm");
    assert_eq!(after["status"], "active");
    assert_eq!(after["version"], before["version"]);
}
