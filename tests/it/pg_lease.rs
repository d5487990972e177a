//! The PostgreSQL store's lock when its holder's session is lost while the
//! step runs: a backend terminated, an idle timeout shorter than the step,
//! a fast restart, a frozen server, a network cut. Two runners on two "hosts" tick one
//! loop; each step writes `start <pid> <time>` when it starts (and
//! `overlap <pid> <other>` if a step that started before it still runs)
//! and `end <pid> <time>` when it ends. Whatever the server does, no two
//! steps may overlap, and every tick is accounted for (ran, or recorded as
//! crashed). Tests skip (saying so) unless `AUTOMATON_TEST_STORE` names a
//! server; those that restart, freeze or cut one off start a cluster of
//! their own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{BIN, Env, isolate};
use crate::netns::NetNs;
use crate::pg::Cluster;

/// The lease the runners take where it must run out during the test:
/// short, so a lost one runs out soon...
const SHORT_TTL: &str = "4s";
/// ...and where the first runner must keep it through the test: long
/// enough that a loaded machine never delays a renewal past it.
const LONG_TTL: &str = "20s";

/// A step that marks its start and end in `log` and sleeps between for
/// the seconds [`step_takes`] last wrote, and touches `started.<pid>` in
/// `log`'s directory once it has started.
pub(crate) fn marked_step(log: &Path, secs: u32) -> String {
    step_takes(log, secs);
    let dir = log.parent().unwrap().display();
    let log = log.display();
    format!(
        r#"step = '''
echo "start $$ $(date +%s.%N)" >> '{log}'
for p in $(awk '$1 == "start" {{ print $2 }}' '{log}'); do
  if [ "$p" != "$$" ] && [ -e "/proc/$p" ] && [ "$(awk '{{ print $3 }}' "/proc/$p/stat" 2>/dev/null)" != Z ]; then
    echo "overlap $$ $p" >> '{log}'
  fi
done
touch '{dir}/started.'$$
sleep "$(cat '{dir}/secs')"
echo "end $$ $(date +%s.%N)" >> '{log}'
'''
overlap = "wait"
"#
    )
}

/// Makes the next steps of [`marked_step`] sleep `secs` seconds.
pub(crate) fn step_takes(log: &Path, secs: u32) {
    std::fs::write(log.with_file_name("secs"), secs.to_string()).unwrap();
}

/// One step's marks: its pid, start and (unless it was killed) end.
#[derive(Debug)]
pub(crate) struct Interval {
    pid: u32,
    start: f64,
    end: Option<f64>,
}

/// The steps `log` records, in the order they started; fails the test if
/// any two overlapped: a step found an earlier one still running, or one
/// started before the one before it ended.
pub(crate) fn intervals(log: &Path) -> Vec<Interval> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!text.contains("overlap"), "two steps ran at once:\n{text}");
    let mut steps: Vec<Interval> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (pid, at) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        match f[0] {
            "start" => steps.push(Interval {
                pid,
                start: at,
                end: None,
            }),
            "end" => {
                let step = steps.iter_mut().find(|s| s.pid == pid).unwrap();
                step.end = Some(at);
            }
            other => panic!("{other}"),
        }
    }
    for w in steps.windows(2) {
        if let Some(end) = w[0].end {
            assert!(end <= w[1].start, "two steps ran at once: {steps:?}\n{text}");
        }
    }
    steps
}

/// Waits until some step has touched its `started.<pid>` in `dir`; its pid.
fn wait_started(dir: &Path) -> i32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let started = std::fs::read_dir(dir).unwrap().find_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("started.")?.parse().ok()
        });
        if let Some(pid) = started {
            return pid;
        }
        assert!(std::time::Instant::now() < deadline, "no step started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How a test reaches its store: the suite's server (a schema of its own)
/// or a cluster of the test's own.
struct Runners {
    root: PathBuf,
    url: String,
    /// The lease the runners take (`AUTOMATON_LEASE_TTL`).
    ttl: &'static str,
    _dir: tempfile::TempDir,
    /// The suite's server, when the test uses it.
    env: Option<Env>,
}

impl Runners {
    fn on_suite_server(ttl: &'static str) -> Option<Runners> {
        let env = Env::postgres()?;
        Some(Runners {
            root: env.root.clone(),
            url: env.pg.as_ref().unwrap().url.clone(),
            ttl,
            _dir: tempfile::tempdir().unwrap(),
            env: Some(env),
        })
    }

    fn on(cluster: &Cluster, ttl: &'static str) -> Runners {
        let dir = tempfile::tempdir().unwrap();
        let r = Runners {
            root: dir.path().join("root"),
            url: cluster.url(),
            ttl,
            _dir: dir,
            env: None,
        };
        r.ok(&["init"]);
        r
    }

    /// The binary as runner host `host`, its URL `url`.
    fn cmd_with(&self, host: &str, url: &str) -> Command {
        let mut c = Command::new(BIN);
        self.runner(&mut c, host, url);
        c
    }

    /// `c` (the binary, or a command that runs it) as runner host `host`,
    /// its URL `url`.
    fn runner<'c>(&self, c: &'c mut Command, host: &str, url: &str) -> &'c mut Command {
        isolate(c)
            .arg("--root")
            .arg(&self.root)
            .env("AUTOMATON_STORE", url)
            .env("AUTOMATON_HOST", host)
            .env("AUTOMATON_LEASE_TTL", self.ttl)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
    }

    fn cmd(&self, host: &str) -> Command {
        self.cmd_with(host, &self.url)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd("ops").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn new_loop(&self, name: &str, toml: &str) {
        let file = self.root.join(format!("{name}.toml"));
        std::fs::write(&file, toml).unwrap();
        self.ok(&["new", name, "--from", file.to_str().unwrap()]);
    }

    #[allow(
        clippy::unused_self,
        reason = "a step of the test's runner, called as its other steps are"
    )]
    fn tick(&self, cmd: &mut Command) -> Child {
        cmd.args(["tick", "solo", "--timeout", "120s", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn history(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.ok(&["history", "solo", "--json"])).unwrap()
    }

    fn state(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "solo", "--json"])).unwrap()
    }
}

/// Waits for a runner; its exit code and stderr.
fn finish(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the two ticks left: every tick either ran and was recorded, or was
/// recorded as crashed by the next; the state is settled at tick 2.
fn two_ticks_accounted_for(r: &Runners) -> Vec<serde_json::Value> {
    let history = r.history();
    let ticks = history.iter().filter(|e| e["kind"] == "tick").count();
    let crashed = history.iter().filter(|e| e["kind"] == "crashed").count();
    assert_eq!(ticks + crashed, 2, "{history:?}");
    assert_eq!(ticks, 1 + usize::from(crashed == 0), "{history:?}");
    let state = r.state();
    assert_eq!(state["tick"], 2, "{state}");
    assert!(state["in_flight"].is_null(), "{state}");
    assert!(state["lock"].is_null(), "{state}");
    history
}

/// A runner's connections are all terminated by the server while its step
/// runs (`pg_terminate_backend`). The advisory lock is gone with them, but
/// the lease is not: the runner renews it on a new connection and records
/// its tick; the other runner waits for it, and runs after.
#[test]
fn a_terminated_backend_does_not_let_another_runner_overlap_the_step() {
    let Some(r) = Runners::on_suite_server(LONG_TTL) else {
        return;
    };
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 4));
    let app = format!("runner-a-{}", std::process::id());
    let a_url = format!("{}&application_name={app}", r.url);
    let a = r.tick(&mut r.cmd_with("host-a", &a_url));
    wait_started(marks.path());

    let pg = r.env.as_ref().unwrap().pg.as_ref().unwrap();
    let cut = pg
        .client()
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap();
    assert!(!cut.is_empty(), "the runner's session was terminated");
    let b = r.tick(&mut r.cmd("host-b"));

    let (a_code, a_err) = finish(a);
    let (b_code, b_err) = finish(b);
    assert_eq!(a_code, Some(0), "the first runner recorded its tick: {a_err}");
    assert_eq!(b_code, Some(0), "{b_err}");
    let steps = intervals(&log);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(steps.iter().all(|s| s.end.is_some()), "{steps:?}");
    let history = two_ticks_accounted_for(&r);
    let hosts: Vec<&str> = history
        .iter()
        .filter(|e| e["kind"] == "tick")
        .map(|e| e["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["host-a", "host-b"]);
}

/// The server ends sessions idle longer than the step takes
/// (`idle_session_timeout`, here set for the first runner's connections):
/// the lock's session is never ended for idling, the lease's renewals
/// make their connection again when it is, and the other runner waits.
#[test]
fn an_idle_session_timeout_shorter_than_the_step_does_not_free_the_lock() {
    let Some(r) = Runners::on_suite_server(LONG_TTL) else {
        return;
    };
    let pg = r.env.as_ref().unwrap().pg.as_ref().unwrap();
    let version: i32 = pg
        .client()
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .unwrap()
        .get(0);
    if version < 140000 {
        eprintln!("skipped: the server has no idle_session_timeout (PostgreSQL 14 and later)");
        return;
    }
    assert!(r.url.contains("options=-c%20search_path"), "{}", r.url);
    let a_url = format!("{}%20-c%20idle_session_timeout%3D300", r.url);
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 4));
    let a = r.tick(&mut r.cmd_with("host-a", &a_url));
    wait_started(marks.path());
    let b = r.tick(&mut r.cmd("host-b"));

    let (a_code, a_err) = finish(a);
    let (b_code, b_err) = finish(b);
    assert_eq!(a_code, Some(0), "{a_err}");
    assert_eq!(b_code, Some(0), "{b_err}");
    let steps = intervals(&log);
    assert_eq!(steps.len(), 2, "{steps:?}");
    two_ticks_accounted_for(&r);
}

/// The server is restarted with `-m fast` while the step runs: every
/// session ends at once. The runner either renews its lease once the
/// server is back and records its tick, or (back too late) kills its step
/// before the lease runs out; either way the other runner's step starts
/// only after the first has ended, and both ticks are accounted for.
#[test]
fn a_fast_restart_mid_step_never_lets_two_steps_overlap() {
    let Some(cluster) = Cluster::start() else { return };
    let r = Runners::on(&cluster, SHORT_TTL);
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 5));
    let a = r.tick(&mut r.cmd("host-a"));
    wait_started(marks.path());
    cluster.restart_fast();
    let b = r.tick(&mut r.cmd("host-b"));

    let (a_code, a_err) = finish(a);
    let (b_code, b_err) = finish(b);
    assert!(matches!(a_code, Some(0 | 8)), "{a_err}");
    assert_eq!(b_code, Some(0), "{b_err}");
    assert!(!format!("{a_err}{b_err}").contains("hunter2"));
    let steps = intervals(&log);
    assert_eq!(steps.len(), 2, "{steps:?}");
    two_ticks_accounted_for(&r);
}

/// The server is frozen (SIGSTOP to it and every backend) for longer than
/// the lease while the step runs, so no renewal is answered: the runner
/// kills its step before the lease runs out by the server's clock, its
/// late commit is refused (exit 8: the step ran, do not run it again),
/// and the other runner, started once the server is thawed, records the
/// tick as crashed and runs its own step after the first has died.
#[test]
fn a_frozen_server_makes_the_runner_kill_its_step_before_anyone_takes_the_lock() {
    let Some(cluster) = Cluster::start() else { return };
    let r = Runners::on(&cluster, SHORT_TTL);
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 30));
    let a = r.tick(&mut r.cmd("host-a"));
    wait_started(marks.path());
    cluster.freeze(true);
    // Longer than the lease: no renewal can be answered in it.
    std::thread::sleep(std::time::Duration::from_secs(6));
    cluster.freeze(false);
    let (a_code, a_err) = finish(a);
    assert_eq!(a_code, Some(8), "the step was killed, unrecorded: {a_err}");
    assert!(a_err.contains("lock was lost"), "{a_err}");
    assert!(!a_err.contains("hunter2"), "{a_err}");
    step_takes(&log, 0);
    let b = r.tick(&mut r.cmd("host-b"));
    let (b_code, b_err) = finish(b);
    assert_eq!(b_code, Some(0), "{b_err}");

    let steps = intervals(&log);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(steps[0].end.is_none(), "the first step was killed: {steps:?}");
    let history = two_ticks_accounted_for(&r);
    let crashed: Vec<_> = history.iter().filter(|e| e["kind"] == "crashed").collect();
    assert_eq!(crashed.len(), 1, "{history:?}");
    assert_eq!(crashed[0]["host"], "host-a");
}

/// Waits for a runner, or kills it and fails the test if it is still
/// running after a minute (it hangs); its exit code and stderr.
fn finish_within_a_minute(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_mins(1);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let (_, err) = finish(child);
            panic!("the runner still ran a minute on: {err}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    finish(child)
}

/// Whether process `pid` has ended (gone, or a zombie not yet reaped).
fn ended(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z")
    })
}

/// Waits until `cond` holds, failing the test after a minute.
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_mins(1);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether step `pid` of [`marked_step`] is asleep: it has read how long.
fn asleep(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1));
            stat.contains("(sleep)") && ppid == Some(pid.to_string().as_str())
        })
}

fn wall_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The network between a runner and the server is cut while its step
/// runs: the runner is in a network namespace of its own whose one route
/// to the server is a veth link, and the link's host end is set down, so
/// packets vanish and nothing is reset. The server keeps the runner's
/// sessions (and the advisory lock) until it notices; the runner's
/// renewals go unanswered. It kills its step before the lease runs out
/// and exits 8; the other runner, on the host, takes the lock once the
/// lease has run out by the server's clock, records the first tick as
/// crashed and runs its own. With the link back, nothing of the first
/// runner is left, and the lock is free from its namespace too.
#[test]
fn a_network_cut_makes_the_runner_kill_its_step_before_another_takes_the_lock() {
    let Some(ns) = NetNs::new() else { return };
    let Some(cluster) = Cluster::start_on_tcp(ns.host_addr(), &ns.network()) else {
        return;
    };
    let r = Runners::on(&cluster, SHORT_TTL);
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 120));
    let tcp = cluster.tcp_url();
    let a = r.tick(r.runner(&mut ns.command(BIN), "host-a", &tcp));
    let a_step = wait_started(marks.path());
    until("the first step sleeps", || asleep(a_step));
    step_takes(&log, 0);

    ns.link(false);
    let cut = wall_clock();
    let b = r.tick(&mut r.cmd("host-b"));
    until("the first step is killed", || ended(a_step));
    let killed = wall_clock();
    let (a_code, a_err) = finish_within_a_minute(a);
    let (b_code, b_err) = finish(b);
    assert_eq!(a_code, Some(8), "the step was killed, unrecorded: {a_err}");
    assert!(a_err.contains("lock was lost"), "{a_err}");
    assert!(!a_err.contains("hunter2"), "{a_err}");
    assert_eq!(b_code, Some(0), "{b_err}");

    let steps = intervals(&log);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0].pid, a_step as u32, "{steps:?}");
    assert!(steps[0].end.is_none(), "the first step was killed: {steps:?}");
    eprintln!(
        "network cut, lease {SHORT_TTL}: the first step was killed {:.2}s after the cut, \
         the second started {:.2}s after it",
        killed - cut,
        steps[1].start - cut
    );
    let history = two_ticks_accounted_for(&r);
    let crashed: Vec<_> = history.iter().filter(|e| e["kind"] == "crashed").collect();
    assert_eq!(crashed.len(), 1, "{history:?}");
    assert_eq!(crashed[0]["host"], "host-a");
    let ran: Vec<_> = history.iter().filter(|e| e["kind"] == "tick").collect();
    assert_eq!(ran[0]["host"], "host-b", "{history:?}");

    ns.link(true);
    assert_eq!(
        ns.pids(),
        Vec::<i32>::new(),
        "nothing of the first runner runs on"
    );
    // The link just came back: a first connection may not be answered
    // within the bound yet. Only that is tried again; a held lock is not.
    let tick_again = || {
        r.runner(&mut ns.command(BIN), "host-a", &tcp)
            .args(["tick", "solo", "--timeout", "1s", "--json"])
            .output()
            .unwrap()
    };
    let mut again = tick_again();
    for _ in 0..10 {
        if again.status.success() || !String::from_utf8_lossy(&again.stderr).contains("cannot connect") {
            break;
        }
        again = tick_again();
    }
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "the lock is free: {err}");
    assert_eq!(r.state()["tick"], 3);
    assert!(r.state()["lock"].is_null());
}

/// The runner is stopped (SIGSTOP) while its step runs, and its step is
/// not: nothing renews the lease, which runs out for the other runner.
/// The step's guard, a process of its own that the stop does not reach,
/// kills the step at the deadline the last renewal set, a quarter of a
/// lease before the server may give the lock away: the two steps never
/// overlap, and both ticks are accounted for.
#[test]
fn a_stopped_runner_does_not_let_its_step_outlive_the_lease() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Some(r) = Runners::on_suite_server(SHORT_TTL) else {
        return;
    };
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 20));
    let a = r.tick(&mut r.cmd("host-a"));
    let a_step = wait_started(marks.path());
    until("the first step sleeps", || asleep(a_step));
    let runner = Pid::from_raw(a.id() as i32);
    kill(runner, Signal::SIGSTOP).unwrap();
    step_takes(&log, 1);
    let b = r.tick(&mut r.cmd("host-b"));
    let (b_code, b_err) = finish(b);
    kill(runner, Signal::SIGCONT).unwrap();
    let (a_code, a_err) = finish(a);
    assert_eq!(b_code, Some(0), "{b_err}");
    assert_ne!(a_code, Some(0), "the stopped runner lost its lock: {a_err}");
    let steps = intervals(&log);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0].pid, a_step as u32, "{steps:?}");
    assert!(
        steps[0].end.is_none(),
        "the stopped runner's step was killed: {steps:?}"
    );
    two_ticks_accounted_for(&r);
}

/// Two runners with one host name, the second in a PID namespace of its
/// own (where the first one's pid names no process, as on another machine
/// of the same name). The first one's sessions are terminated while its
/// step runs, so the advisory lock is free and only the lease holds the
/// loop: the second waits for it to be let go instead of taking it from a
/// holder it cannot see, and the two steps never overlap. Needs root (for
/// the namespace); skipped without, unless `AUTOMATON_REQUIRE_USERS=1`.
#[test]
fn two_runners_with_one_host_name_never_overlap() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("AUTOMATON_REQUIRE_USERS").as_deref() != Ok("1"),
            "AUTOMATON_REQUIRE_USERS=1, but a PID namespace needs root"
        );
        eprintln!("skipped: a PID namespace needs root");
        return;
    }
    let Some(r) = Runners::on_suite_server(LONG_TTL) else {
        return;
    };
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("steps.log");
    r.new_loop("solo", &marked_step(&log, 4));
    let app = format!("runner-one-{}", std::process::id());
    let a_url = format!("{}&application_name={app}", r.url);
    let a = r.tick(&mut r.cmd_with("one-name", &a_url));
    let a_step = wait_started(marks.path());
    until("the first step sleeps", || asleep(a_step));

    let pg = r.env.as_ref().unwrap().pg.as_ref().unwrap();
    let cut = pg
        .client()
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap();
    assert!(!cut.is_empty(), "the first runner's sessions were terminated");
    let mut unshare = Command::new("unshare");
    unshare.args(["--pid", "--fork", "--mount-proc", BIN]);
    let b = r.tick(r.runner(&mut unshare, "one-name", &r.url));

    let (a_code, a_err) = finish(a);
    let (b_code, b_err) = finish(b);
    let steps = intervals(&log);
    assert_eq!(a_code, Some(0), "the first runner recorded its tick: {a_err}");
    assert_eq!(b_code, Some(0), "{b_err}");
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(steps.iter().all(|s| s.end.is_some()), "{steps:?}");
    two_ticks_accounted_for(&r);
}
