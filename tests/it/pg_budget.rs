//! A daemon whose server refuses it connections (its role's or the
//! server's limit reached: "too many clients") stops starting ticks,
//! says so once, lets the running ones finish, and starts again once the
//! server lets it in; and what a daemon holds: one connection per running
//! tick, plus its own few.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{BIN, Env, isolate};

/// A role of the test server limited to `limit` connections, with what a
/// role doing everything needs on `env`'s schema; dropped at the end.
struct Limited {
    base: String,
    name: String,
}

impl Limited {
    fn new(env: &Env, limit: i32) -> Limited {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let pg = env.pg.as_ref().unwrap();
        let name = format!(
            "automaton_lim_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let schema = &pg.schema;
        pg.client()
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN CONNECTION LIMIT {limit};
                 GRANT USAGE ON SCHEMA {schema} TO {name};
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {name};
                 GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {name};"
            ))
            .unwrap();
        Limited {
            base: crate::common::test_store().unwrap(),
            name,
        }
    }

    fn url(&self, env: &Env) -> String {
        let url = &env.pg.as_ref().unwrap().url;
        let (scheme, rest) = url.split_once("://").unwrap();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let host = rest[..end].rsplit_once('@').map_or(&rest[..end], |(_, h)| h);
        format!("{scheme}://{}@{host}{}", self.name, &rest[end..])
    }

    fn set_limit(&self, limit: i32) {
        let mut c = postgres::Client::connect(&self.base, postgres::NoTls).unwrap();
        c.batch_execute(&format!("ALTER ROLE {} CONNECTION LIMIT {limit}", self.name))
            .unwrap();
    }

    /// The connections the role holds now.
    fn connections(&self) -> i64 {
        let mut c = postgres::Client::connect(&self.base, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1",
            &[&self.name],
        )
        .unwrap()
        .get(0)
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{0}';
                 DROP OWNED BY {0}; DROP ROLE {0}",
                self.name
            ));
        }
    }
}

struct Daemon {
    child: Child,
    log: std::path::PathBuf,
}

impl Daemon {
    fn start(env: &Env, url: &str, workers: u16) -> Daemon {
        let log = env.scratch().join("daemon.log");
        let mut c = Command::new(BIN);
        isolate(&mut c)
            .arg("--root")
            .arg(&env.root)
            .args(["-v", "daemon", "--max-concurrent", &workers.to_string()])
            .env("AUTOMATON_STORE", url)
            .env("AUTOMATON_MIN_EVERY", "100ms")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Daemon {
            child: c.spawn().unwrap(),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn stop(mut self) -> String {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        assert_eq!(self.child.wait().unwrap().code(), Some(0), "{}", self.log());
        self.log()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ticks(env: &Env, name: &str) -> u64 {
    env.state(name)["tick"].as_u64().unwrap_or(0)
}

#[test]
fn a_daemon_refused_connections_stops_starting_ticks_and_starts_again_when_let_in() {
    let Some(env) = Env::postgres() else { return };
    const LOOPS: usize = 8;
    for i in 0..LOOPS {
        env.new_often_loop(
            &format!("l{i}"),
            "step = \"sleep 0.3\"\n[schedule]\nevery = \"100ms\"\n",
        );
    }
    // Room for the daemon's own connections and a tick or two, not for
    // its eight workers.
    let role = Limited::new(&env, 4);
    let started = Instant::now();
    let daemon = Daemon::start(&env, &role.url(&env), 8);
    until("the server refuses the daemon", 30, || {
        daemon.log().contains("refuses new connections")
    });
    // A while at the limit: firings fall due every 100 ms for each loop.
    std::thread::sleep(Duration::from_secs(4));
    assert!(role.connections() <= 4);
    let at_limit = daemon.log();
    let seconds = started.elapsed().as_secs() + 1;
    role.set_limit(-1);
    until("the daemon starts ticks again", 60, || {
        daemon.log().contains("accepts connections again")
    });
    let before: Vec<u64> = (0..LOOPS).map(|i| ticks(&env, &format!("l{i}"))).collect();
    until("every loop ticks again", 60, || {
        (0..LOOPS).all(|i| ticks(&env, &format!("l{i}")) > before[i])
    });
    let log = daemon.stop();

    // Said once; the ticks turned away were the first burst and a few a
    // second at most (a try per pause, a tick whose connection the server
    // had not yet let go of), not one a firing (80 a second here). Under
    // load a try can run long enough to count as let in, and the pause
    // start again at 1 s: the bound is per second, not per run.
    assert_eq!(
        log.matches("refuses new connections (too many clients)").count(),
        1,
        "{log}"
    );
    let turned_away = at_limit
        .lines()
        .filter(|l| l.contains("tick failed") && l.contains("too many connections"))
        .count();
    assert!(
        turned_away as u64 <= 8 + 4 * seconds,
        "{turned_away} ticks started against a full server in {seconds} s:\n{at_limit}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("tick failed")),
        "no tick failed loudly:\n{log}"
    );
    // No step was stopped for a lease it could not keep.
    for i in 0..LOOPS {
        let history = env.history(&format!("l{i}"));
        assert!(
            history.iter().all(|e| e["kind"] != "crashed"),
            "l{i}: {history:?}"
        );
    }
}

/// The loop's ledger of firings, as `fires --json` gives it.
fn fires(env: &Env, name: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(&env.ok(&["fires", name, "--json"])).unwrap()
}

#[test]
fn a_full_server_refuses_no_ledger_record_nor_next_firing_of_a_tick_that_ran() {
    let Some(env) = Env::postgres() else { return };
    const LOOPS: usize = 8;
    for i in 0..LOOPS {
        env.new_often_loop(
            &format!("b{i}"),
            "step = \"sleep 0.2\"\n[schedule]\nevery = \"100ms\"\n",
        );
    }
    // The daemon's own connections and a tick or two: every connection
    // a tick's end could ask for is one the server has no room for.
    let role = Limited::new(&env, 5);
    let daemon = Daemon::start(&env, &role.url(&env), 8);
    until("the server refuses the daemon", 30, || {
        daemon.log().contains("refuses new connections")
    });
    until("a few ticks at the limit", 60, || {
        (0..LOOPS).map(|i| ticks(&env, &format!("b{i}"))).sum::<u64>() >= 30
    });
    let log = daemon.stop();
    assert!(
        !log.contains("not in its ledger") && !log.contains("cannot write the loop's next firing"),
        "every tick's bookkeeping was written:\n{log}"
    );
    for i in 0..LOOPS {
        let name = format!("b{i}");
        let recorded: Vec<u64> = fires(&env, &name)
            .iter()
            .filter(|r| r["kind"] == "ran")
            .filter_map(|r| r["tick"].as_u64())
            .collect();
        let ran: Vec<u64> = (1..=ticks(&env, &name)).collect();
        assert_eq!(recorded, ran, "{name}: every tick that ran is in its ledger once");
    }
}
