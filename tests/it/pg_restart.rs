//! Daemons on two hosts sharing one PostgreSQL server through its restarts
//! (fast, and immediate with the server down a while), under load: every
//! loop fires again, no firing stays claimed past its tick, and every tick
//! is recorded once.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{BIN, isolate};
use crate::pg::Cluster;

/// The binary on root `root` of store `url` as runner host `host`, with
/// short leases and claims (2 s), so what runs out does within the test.
fn cmd(root: &Path, url: &str, host: &str) -> Command {
    let mut c = Command::new(BIN);
    isolate(&mut c)
        .arg("--root")
        .arg(root)
        .env("AUTOMATON_STORE", url)
        .env("AUTOMATON_HOST", host)
        .env("AUTOMATON_LEASE_TTL", "2s")
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A daemon as runner host `host`, on a root of its own, its stderr kept.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(base: &Path, url: &str, host: &str) -> Daemon {
        let root = base.join(format!("root-{host}"));
        ok(cmd(&root, url, host).arg("init"));
        let log = base.join(format!("daemon-{host}.log"));
        let child = cmd(&root, url, host)
            .args(["daemon", "--max-concurrent", "4"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    fn stop(mut self) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert_eq!(status.code(), Some(0), "{log}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each loop's ticks recorded in its history (run, or recovered as crashed).
fn ticks(client: &mut postgres::Client, names: &[String]) -> Vec<u64> {
    names
        .iter()
        .map(|name| {
            let row = client
                .query_one(
                    "SELECT count(*) FROM events WHERE loop = $1 \
                     AND event->>'kind' IN ('tick', 'crashed')",
                    &[name],
                )
                .unwrap();
            row.get::<_, i64>(0) as u64
        })
        .collect()
}

fn client(url: &str) -> postgres::Client {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        match postgres::Client::connect(url, postgres::NoTls) {
            Ok(c) => return c,
            Err(e) => assert!(Instant::now() < deadline, "cannot connect: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every loop has recorded `more` ticks past `since`; the
/// names of those that have not when the wait is over.
fn stuck_after(url: &str, names: &[String], since: &[u64], more: u64, secs: u64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let now = ticks(&mut client(url), names);
        let stuck: Vec<String> = names
            .iter()
            .zip(since.iter().zip(&now))
            .filter(|(_, (before, now))| **now < **before + more)
            .map(|(n, _)| n.clone())
            .collect();
        if stuck.is_empty() || Instant::now() >= deadline {
            return stuck;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn every_loop_fires_again_after_fast_and_immediate_server_restarts_under_load() {
    let Some(cluster) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.url();
    let first = dir.path().join("root-host-a");
    ok(cmd(&first, &url, "host-a").arg("init"));
    const LOOPS: usize = 30;
    let names: Vec<String> = (0..LOOPS).map(|i| format!("l{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let every = if i % 2 == 0 { "1s" } else { "2s" };
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &file,
            format!("step = \"sleep 0.3\"\n[schedule]\nevery = \"{every}\"\n"),
        )
        .unwrap();
        ok(cmd(&first, &url, "host-a")
            .args(["new", name, "--from"])
            .arg(&file));
    }
    let daemons = [
        Daemon::start(dir.path(), &url, "host-a"),
        Daemon::start(dir.path(), &url, "host-b"),
    ];
    let none = vec![0; LOOPS];
    let stuck = stuck_after(&url, &names, &none, 2, 120);
    assert!(stuck.is_empty(), "never ticked twice: {stuck:?}");

    // Two fast restarts, then two immediate ones with the server down for a
    // while: ticks end, and claims are taken, while it does not answer.
    for _ in 0..2 {
        cluster.restart_fast();
        std::thread::sleep(Duration::from_secs(3));
    }
    for _ in 0..2 {
        cluster.crash();
        std::thread::sleep(Duration::from_millis(1500));
        cluster.up();
        std::thread::sleep(Duration::from_secs(3));
    }

    // Every loop fires again: a few more ticks each, within far more than
    // its cadence (a loop stuck for good never does).
    let since = ticks(&mut client(&url), &names);
    let stuck = stuck_after(&url, &names, &since, 3, 90);
    assert!(
        stuck.is_empty(),
        "{} of {LOOPS} loops stopped firing after the restarts: {stuck:?}",
        stuck.len()
    );
    for d in daemons {
        d.stop();
    }

    // The daemons stopped with every tick ended: no firing is claimed.
    let claimed: Vec<String> = client(&url)
        .query("SELECT loop FROM firings WHERE owner IS NOT NULL", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        claimed.is_empty(),
        "still claimed after the daemons stopped: {claimed:?}"
    );
}

/// The server's sessions of application `app` now.
fn sessions(url: &str, app: &str) -> i64 {
    client(url)
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .get(0)
}

/// The most sessions a daemon with `workers` workers holds while each of
/// them runs a long step, sampled until it stops.
fn sessions_of_a_busy_daemon(workers: usize) -> i64 {
    let Some(cluster) = Cluster::start() else {
        return -1;
    };
    let dir = tempfile::tempdir().unwrap();
    let app = format!("busy-{workers}");
    let url = format!("{}&application_name={app}", cluster.url());
    let root = dir.path().join("root-host-a");
    ok(cmd(&root, &url, "host-a").arg("init"));
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    for i in 0..workers {
        let file = dir.path().join("l.toml");
        std::fs::write(
            &file,
            format!(
                "step = \"touch '{}/'$AUTOMATON_LOOP; sleep 6\"\n[schedule]\nevery = \"1s\"\n",
                marks.display()
            ),
        )
        .unwrap();
        ok(cmd(&root, &url, "host-a")
            .args(["new", &format!("l{i}"), "--from"])
            .arg(&file));
    }
    let mut daemon = cmd(&root, &url, "host-a")
        .args(["daemon", "--max-concurrent", &workers.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    while std::fs::read_dir(&marks).unwrap().count() < workers {
        assert!(Instant::now() < deadline, "not every worker started a step");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Through the steps, their renewals (a quarter of the 2 s lease) and
    // their ends.
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        most = most.max(sessions(&cluster.url(), &app));
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();
    daemon.wait().unwrap();
    most
}

/// A daemon's running ticks keep their leases without a connection each:
/// every lease it holds is renewed on one connection, so a busy daemon
/// holds a session per running tick (its lock) and a few of its own, not
/// two per tick.
#[test]
fn a_running_tick_needs_no_connection_of_its_own_for_its_lease() {
    const WORKERS: usize = 8;
    let most = sessions_of_a_busy_daemon(WORKERS);
    if most < 0 {
        return;
    }
    eprintln!("{WORKERS} workers, each running a step: at most {most} sessions");
    // A lock session per tick, the listener, the renewals, and the few
    // the claims and the ledger share (a connection per tick for its
    // lease made it 2 × 8 + 2).
    let workers = WORKERS as i64;
    assert!(
        most <= workers + 2 + workers / 2,
        "{most} sessions for {WORKERS} running ticks"
    );
}
