//! Daemons on several hosts serving one PostgreSQL root claim the due
//! firings between them: each firing runs once, on one host, no daemon
//! locks a loop only to find its firing done (`busy`), and the claims of
//! a daemon killed mid-tick run out for the others to take.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{BIN, Env, isolate};

/// The lease (and claim) length the daemons run with: short, so a killed
/// daemon's claims run out within the test.
const TTL: &str = "2s";

/// A daemon as runner host `host`, on a root of its own sharing `env`'s
/// store, its stderr kept in a file.
struct HostDaemon {
    child: Child,
    log: PathBuf,
}

impl HostDaemon {
    fn start(env: &Env, host: &str) -> HostDaemon {
        let root = env.root.with_file_name(format!("root-{host}"));
        let url = &env.pg.as_ref().unwrap().url;
        let cmd = |root: &Path| {
            let mut c = Command::new(BIN);
            isolate(&mut c)
                .arg("--root")
                .arg(root)
                .env("AUTOMATON_STORE", url)
                .env("AUTOMATON_HOST", host)
                .env("AUTOMATON_LEASE_TTL", TTL)
                .env("AUTOMATON_MIN_EVERY", "100ms")
                .env("NO_COLOR", "1")
                .stdin(Stdio::null());
            c
        };
        let init = cmd(&root).arg("init").output().unwrap();
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        let log = env.root.with_file_name(format!("daemon-{host}.log"));
        let child = cmd(&root)
            .arg("daemon")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        HostDaemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops it with SIGTERM; the ticks it started and how many were busy,
    /// from its last line.
    fn stop(mut self) -> (u64, u64) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        assert_eq!(self.child.wait().unwrap().code(), Some(0), "{}", self.log());
        let log = self.log();
        let line = log
            .lines()
            .find(|l| l.contains("ticks started,"))
            .unwrap_or_else(|| panic!("no summary in the daemon's log:\n{log}"));
        let numbers: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        let n = numbers.len();
        assert!(n >= 2, "{line}");
        (numbers[n - 2], numbers[n - 1])
    }
}

impl Drop for HostDaemon {
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

/// The loops' tick numbers, each loop's counted from its history: every
/// tick recorded once (as run or as crashed), in order, with no gap.
fn recorded(env: &Env, name: &str) -> u64 {
    let history = env.pg.as_ref().unwrap().history(name);
    let ticks: Vec<u64> = history
        .iter()
        .filter(|e| e["kind"] == "tick" || e["kind"] == "crashed")
        .map(|e| e["tick"].as_u64().unwrap())
        .collect();
    let n = ticks.len() as u64;
    assert_eq!(
        ticks,
        (1..=n).collect::<Vec<_>>(),
        "loop {name}: one record a tick"
    );
    n
}

/// What the steps wrote: one line `LOOP TICK NANOS` each time a step
/// began, NANOS its start by the wall clock.
fn steps_ran(log: &Path) -> Vec<(String, u64, u128)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w[0].to_owned(), w[1].parse().unwrap(), w[2].parse().unwrap())
        })
        .collect()
}

#[test]
fn daemons_on_three_hosts_claim_each_firing_once_and_take_over_a_killed_ones_claims() {
    let Some(env) = Env::postgres() else { return };
    const LOOPS: usize = 12;
    let log = env.scratch().join("steps.log");
    let names: Vec<String> = (0..LOOPS).map(|i| format!("l{i}")).collect();
    for name in &names {
        let toml = format!(
            "step = \"echo \\\"$AUTOMATON_LOOP $AUTOMATON_TICK $(date +%s%N)\\\" >> '{}'; sleep 0.2\"\n\
             [schedule]\nevery = \"500ms\"\n",
            log.display()
        );
        env.new_often_loop(name, &toml);
    }
    let hosts = ["host-a", "host-b", "host-c"];
    let mut daemons: Vec<HostDaemon> = hosts.iter().map(|h| HostDaemon::start(&env, h)).collect();

    // A few seconds of firings, shared by the three.
    let total = |env: &Env| names.iter().map(|n| recorded(env, n)).sum::<u64>();
    until("every loop ticked 4 times", 60, || {
        names.iter().all(|n| recorded(&env, n) >= 4)
    });

    // host-a is killed while it holds claims of running ticks.
    let pg = env.pg.as_ref().unwrap();
    let mut client = pg.client();
    let owned = |client: &mut postgres::Client| -> Vec<String> {
        client
            .query(
                "SELECT loop FROM firings WHERE owner LIKE 'host-a %' AND claim_expires > clock_timestamp()",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let mut held = Vec::new();
    until("host-a holds a claim", 60, || {
        held = owned(&mut client);
        !held.is_empty()
    });
    let a = daemons.remove(0);
    kill(Pid::from_raw(a.child.id() as i32), Signal::SIGKILL).unwrap();
    let at_kill: Vec<u64> = names.iter().map(|n| recorded(&env, n)).collect();
    drop(a);

    // Its claims run out by the server's clock and the others take them:
    // every loop goes on ticking, those it held included.
    until("every loop ticked 3 more times after the kill", 60, || {
        names
            .iter()
            .zip(&at_kill)
            .all(|(n, before)| recorded(&env, n) >= before + 3)
    });
    until("no live claim is host-a's", 30, || owned(&mut client).is_empty());
    let before_stop = total(&env);
    let mut started = 0;
    let mut busy = 0;
    for d in daemons {
        let (s, b) = d.stop();
        started += s;
        busy += b;
    }
    let recorded_total = total(&env);
    assert!(recorded_total >= before_stop);

    // Every tick recorded ran its step once, and every step that began is
    // a recorded tick (a step of a tick recorded as crashed may have begun
    // before its daemon was killed, or not).
    let ran = steps_ran(&log);
    for name in &names {
        let mut ticks: Vec<u64> = ran
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, t, _)| *t)
            .collect();
        ticks.sort_unstable();
        let before = ticks.len();
        ticks.dedup();
        assert_eq!(
            ticks.len(),
            before,
            "loop {name}: a tick's step ran twice: {ticks:?}"
        );
        let history = pg.history(name);
        for e in &history {
            let tick = e["tick"].as_u64();
            match e["kind"].as_str() {
                Some("tick") => assert!(
                    ticks.contains(&tick.unwrap()),
                    "loop {name}: tick {tick:?} recorded but its step never began"
                ),
                Some("crashed") => {}
                _ => continue,
            }
        }
    }
    // Every firing offered to one daemon: hardly any found the lock held.
    eprintln!("{started} ticks started by the surviving daemons, {busy} busy; {recorded_total} recorded");
    assert!(started > 0);
    assert!(
        busy * 20 <= started,
        "{busy} of {started} ticks the surviving daemons started were busy"
    );
}
