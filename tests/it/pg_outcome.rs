//! What is said when a write to the PostgreSQL store fails: a commit whose
//! answer was lost may have been made (exit 9, and the command that tells
//! which is named), and the next command reads what was; a commit whose
//! connection the server ended is tried once more on a new one, made
//! once; and the daemon's log says the server's reason for a tick it could
//! not record. A commit is held at the server by a trigger on `loops` that
//! waits for an advisory lock the test holds, so each case happens at the
//! moment of the commit, whatever the machine's speed.

use std::process::Stdio;

use crate::common::{Env, PgStore};

/// Makes every update of `loops` in the test's schema wait, inside the
/// commit's statement, until the returned session lets go of its
/// advisory lock ([`let_go`]).
fn hold_commits(pg: &PgStore) -> postgres::Client {
    let mut admin = pg.client();
    admin
        .batch_execute(
            "CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 PERFORM pg_advisory_lock(hashtext(current_schema()));
                 PERFORM pg_advisory_unlock(hashtext(current_schema()));
                 RETURN NEW;
             END $$;
             CREATE TRIGGER hold AFTER UPDATE ON loops FOR EACH ROW EXECUTE FUNCTION hold();
             SELECT pg_advisory_lock(hashtext(current_schema()));",
        )
        .unwrap();
    admin
}

fn let_go(admin: &mut postgres::Client) {
    admin
        .batch_execute("SELECT pg_advisory_unlock(hashtext(current_schema()))")
        .unwrap();
}

/// The server process of the session named `app` once it waits in the
/// trigger.
fn held_backend(admin: &mut postgres::Client, app: &str) -> i32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let row = admin
            .query_opt(
                "SELECT pid FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'
                   AND wait_event = 'advisory'",
                &[&app],
            )
            .unwrap();
        if let Some(row) = row {
            return row.get(0);
        }
        assert!(std::time::Instant::now() < deadline, "no commit was held");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn paused(env: &Env, name: &str) -> usize {
    env.history_kinds(name).iter().filter(|k| *k == "paused").count()
}

/// The commit's answer is lost (the command's bound passes while the
/// server still works on it; the server is not asked to give up of its
/// own accord): `pause` says the change may or may not have been made,
/// names the command that tells which, and exits 9. The server then makes
/// it, once, and `status` reads it; the loop goes on as usual.
#[test]
fn a_commit_whose_answer_is_lost_is_said_to_be_maybe_made_and_read_after() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("calm", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    let before = env.state("calm")["version"].as_u64().unwrap();
    let mut admin = hold_commits(pg);
    let url = format!("{}%20-c%20statement_timeout%3D0%20-c%20lock_timeout%3D0", pg.url);
    let out = crate::pg_bounds::bounded(
        env.cmd()
            .env("AUTOMATON_STORE", &url)
            .args(["pause", "calm", "--timeout", "2s"]),
        "pause",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{err}");
    assert!(
        err.contains(&format!(
            "loop \"calm\": PostgreSQL store {}",
            pg.url.split('?').next().unwrap()
        )) && err.contains(&format!(
            "version {} of the loop's state may or may not have been made",
            before + 1
        )) && err.contains("before `automaton status calm` says which")
            && err.contains("the server did not answer within 2s"),
        "{err}"
    );
    let_go(&mut admin);
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while env.state("calm")["status"] != "paused" {
        assert!(std::time::Instant::now() < deadline, "the commit never landed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = env.status("calm");
    assert_eq!(status["status"], "paused", "{status}");
    assert_eq!(status["version"], before + 1, "{status}");
    assert_eq!(paused(&env, "calm"), 1);
    env.ok(&["resume", "calm", "--timeout", "20s"]);
    assert_eq!(env.state("calm")["status"], "active");
}

/// The server ends the session while the commit is under way
/// (`pg_terminate_backend`): the commit was not made, and is tried once
/// more on a new connection, under the version check. `pause` succeeds,
/// and the loop is paused once.
#[test]
fn a_commit_whose_session_is_terminated_is_tried_once_more_and_made_once() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("calm", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    let before = env.state("calm")["version"].as_u64().unwrap();
    let mut admin = hold_commits(pg);
    let app = format!("pause-{}", pg.schema);
    let pause = env
        .cmd()
        .env("AUTOMATON_STORE", format!("{}&application_name={app}", pg.url))
        .args(["pause", "calm", "--timeout", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = held_backend(&mut admin, &app);
    admin.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    let_go(&mut admin);
    let out = crate::pg_bounds::within_a_minute(pause, "pause");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let status = env.status("calm");
    assert_eq!(status["status"], "paused", "{status}");
    assert_eq!(status["version"], before + 1, "{status}");
    assert_eq!(paused(&env, "calm"), 1);
}

/// The server refuses every commit of a loop and every record of its
/// ledger (triggers that raise): the daemon's log line for the tick it
/// could not record, and its warning about the ledger, say the server's
/// reason, not only what was being done.
#[test]
fn the_daemons_log_says_the_servers_reason() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("refused", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    let pg = env.pg.as_ref().unwrap();
    pg.client()
        .batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'the test refuses % of %', TG_OP, TG_TABLE_NAME; END $$;
             CREATE TRIGGER refuse BEFORE UPDATE ON loops FOR EACH ROW EXECUTE FUNCTION refuse();
             CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON fires
                 FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .unwrap();
    let log = env.root.with_file_name("daemon.log");
    let mut daemon = env
        .cmd()
        .arg("daemon")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let said = |what: &str| std::fs::read_to_string(&log).unwrap_or_default().contains(what);
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while !(said("tick failed") && said("not in its ledger")) {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop(&mut daemon);
    let text = std::fs::read_to_string(&log).unwrap();
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned()
    };
    let tick = line("tick failed");
    assert!(
        tick.contains("refused: tick failed: loop \"refused\": PostgreSQL store")
            && tick.contains("the test refuses UPDATE of loops"),
        "{tick}"
    );
    let ledger = line("not in its ledger");
    assert!(ledger.contains("the test refuses INSERT of fires"), "{ledger}");
}

fn stop(daemon: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
}
