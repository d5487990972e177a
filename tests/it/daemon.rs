//! `automaton daemon`: it ticks scheduled loops in-process, catches up at
//! most once, picks up new loops, leaves paused and busy loops alone, and
//! on SIGTERM lets running ticks finish (or, after the grace, stops their
//! steps) and exits 0. Every test sequences on what the processes did and
//! asserts on the final state and history.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{Env, gated_step, gone, wait_for};

/// A running daemon, its stderr kept in a file.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// A daemon on `env`'s root; cadences down to 100ms are allowed, so
    /// tests need not wait on whole seconds.
    fn start(env: &Env, args: &[&str]) -> Daemon {
        Daemon::start_with(env, args, &[])
    }

    /// A daemon as [`Daemon::start`], with `vars` in its environment.
    fn start_with(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Daemon {
        let log = env
            .root
            .with_file_name(format!("daemon-{}.log", fastrand::u32(..)));
        let child = env
            .cmd()
            .env("AUTOMATON_MIN_EVERY", "100ms")
            .envs(vars.iter().copied())
            .arg("daemon")
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and returns the exit code.
    fn terminate(mut self) -> Option<i32> {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        eprintln!("daemon log:\n{}", self.log());
        status.code()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A test that failed while the daemon ran shows what it said.
        if std::thread::panicking() {
            eprintln!("daemon log:\n{}", self.log());
        }
    }
}

/// Waits until `cond` holds; fails the test if it never does.
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_mins(1);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ticks(env: &Env, name: &str) -> u64 {
    env.state(name)["tick"].as_u64().unwrap()
}

fn tick_events(env: &Env, name: &str) -> usize {
    env.history_kinds(name).iter().filter(|k| *k == "tick").count()
}

fn scheduled(step: &str, every: &str) -> String {
    format!("step = {step:?}\n[schedule]\nevery = {every:?}\n")
}

/// The cadence of loops that tick "often" here: well under the 1s an
/// operator may ask for, so tests wait on tenths of seconds, not seconds.
const OFTEN: &str = "100ms";

fn new_loop(env: &Env, name: &str, toml: &str) {
    env.new_often_loop(name, toml);
}

/// A loop that ticks often: the daemon's clock in tests.
fn clock(env: &Env) {
    new_loop(env, "clock", &scheduled("true", OFTEN));
}

fn dir(env: &Env) -> PathBuf {
    env.scratch()
}

#[test]
fn ticks_a_loop_on_its_cadence_and_exits_0_on_sigterm() {
    let env = Env::new();
    new_loop(&env, "often", &scheduled("true", OFTEN));
    let d = Daemon::start(&env, &[]);
    until("two ticks", || ticks(&env, "often") >= 2);
    assert!(d.log().contains("often tick 1: ran"), "{}", d.log());
    assert_eq!(d.terminate(), Some(0));
    let s = env.state("often");
    assert!(s["in_flight"].is_null());
    assert_eq!(s["last_tick"]["outcome"], "ran");
}

#[test]
fn sigterm_lets_a_running_tick_finish() {
    let env = Env::new();
    let d = dir(&env);
    new_loop(
        &env,
        "blocked",
        &format!("{}[schedule]\nevery = \"1h\"\n", gated_step(&d)),
    );
    let daemon = Daemon::start(&env, &[]);
    wait_for(&d.join("started"));
    kill(Pid::from_raw(daemon.child.id() as i32), Signal::SIGTERM).unwrap();
    until("the daemon heard the signal", || {
        daemon.log().contains("no more ticks")
    });
    std::fs::write(d.join("go"), "").unwrap();
    let mut daemon = daemon;
    let status = daemon.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
    let s = env.state("blocked");
    assert_eq!(s["tick"], 1);
    assert!(s["in_flight"].is_null());
    assert_eq!(s["last_tick"]["outcome"], "ran");
}

#[test]
fn after_the_grace_a_step_that_never_ends_is_killed() {
    let env = Env::new();
    let d = dir(&env);
    let step = format!(
        "echo $$ > '{0}/pid'; touch '{0}/started'; while true; do sleep 0.05; done",
        d.display()
    );
    new_loop(&env, "forever", &scheduled(&step, "1h"));
    let daemon = Daemon::start(&env, &["--grace", "200ms"]);
    wait_for(&d.join("started"));
    let pid: i32 = std::fs::read_to_string(d.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(daemon.terminate(), Some(0));
    assert!(gone(pid), "the step outlived the daemon");
    let s = env.state("forever");
    assert_eq!(s["tick"], 1);
    assert!(s["in_flight"].is_null(), "{s}");
    assert_eq!(s["last_tick"]["outcome"], "failed");
    assert!(s["last_tick"]["step"]["signal"].is_number(), "{s}");
}

/// Sets the loop's last tick to long ago, as after a long downtime.
fn age_last_tick(env: &Env, name: &str) {
    let path = env.loop_dir(name).join(".state.loop");
    let mut s: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    s["last_tick"]["started_at"] = "2020-01-01T00:00:00Z".into();
    s["last_tick"]["ended_at"] = "2020-01-01T00:00:01Z".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&s).unwrap()).unwrap();
}

#[test]
fn after_downtime_a_loop_gets_exactly_one_catch_up_tick() {
    let env = crate::files_only!("ages .state.loop by hand");
    new_loop(&env, "hourly", &scheduled("true", "1h"));
    env.ok(&["tick", "hourly"]);
    age_last_tick(&env, "hourly");
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("the catch-up tick and a few clock ticks", || {
        ticks(&env, "hourly") >= 2 && ticks(&env, "clock") >= 4
    });
    assert_eq!(d.terminate(), Some(0));
    assert_eq!(ticks(&env, "hourly"), 2, "one catch-up tick, not a burst");
    assert_eq!(tick_events(&env, "hourly"), 2);
}

#[test]
fn a_loop_not_yet_due_is_left_alone() {
    let env = Env::new();
    new_loop(&env, "hourly", &scheduled("true", "1h"));
    env.ok(&["tick", "hourly"]);
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("a few clock ticks", || ticks(&env, "clock") >= 3);
    assert_eq!(d.terminate(), Some(0));
    assert_eq!(ticks(&env, "hourly"), 1, "its hour has not passed");
}

#[test]
fn a_loop_added_while_the_daemon_runs_is_ticked() {
    let env = Env::new();
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("the clock ticks", || ticks(&env, "clock") >= 1);
    new_loop(&env, "late", &scheduled("true", "1h"));
    until("the new loop ticks", || ticks(&env, "late") >= 1);
    assert_eq!(d.terminate(), Some(0));
    assert_eq!(ticks(&env, "late"), 1);
}

#[test]
fn a_paused_loop_is_not_ticked() {
    let env = Env::new();
    new_loop(&env, "resting", &scheduled("true", OFTEN));
    env.ok(&["pause", "resting"]);
    let version = env.state("resting")["version"].clone();
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("a few clock ticks", || ticks(&env, "clock") >= 3);
    assert_eq!(d.terminate(), Some(0));
    let s = env.state("resting");
    assert_eq!((s["tick"].as_u64(), &s["version"]), (Some(0), &version));
    assert_eq!(tick_events(&env, "resting"), 0);
}

#[test]
fn a_loop_busy_in_another_process_is_skipped_not_waited_for() {
    let env = crate::files_only!("a shared store logs a busy loop at debug level");
    let d = dir(&env);
    // Even a loop that asks ticks to wait for its lock is skipped: the
    // daemon never blocks a worker on a lock.
    new_loop(
        &env,
        "shared",
        &format!(
            "{}overlap = \"wait\"\n[schedule]\nevery = \"100ms\"\n",
            gated_step(&d)
        ),
    );
    let mut outside = env
        .cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .args(["tick", "shared"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&d.join("started"));
    clock(&env);
    let daemon = Daemon::start(&env, &["--max-concurrent", "1"]);
    until("the clock ticks past the busy loop", || ticks(&env, "clock") >= 3);
    assert!(daemon.log().contains("shared tick 1: busy"), "{}", daemon.log());
    std::fs::write(d.join("go"), "").unwrap();
    assert!(outside.wait().unwrap().success());
    until("the daemon ticks it once it is free", || {
        ticks(&env, "shared") >= 2
    });
    assert_eq!(daemon.terminate(), Some(0));
    assert!(env.state("shared")["in_flight"].is_null());
    // The ledger names the firings the held lock cost, then the ones
    // that ran; the tick run from outside was no firing.
    let fires = fires(&env, "shared");
    let busy: Vec<&serde_json::Value> = fires.iter().filter(|r| r["why"] == "busy").collect();
    assert!(!busy.is_empty(), "{fires:#?}");
    assert!(busy.iter().all(|r| r["kind"] == "skipped"), "{fires:#?}");
    let ran = fires.iter().filter(|r| r["kind"] == "ran").count() as u64;
    assert_eq!(ran, ticks(&env, "shared") - 1, "{fires:#?}");
}

/// The loop's ledger of firings, as `fires --json` gives it.
fn fires(env: &Env, name: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(&env.ok(&["fires", name, "--json"])).unwrap()
}

#[test]
fn every_firing_under_the_daemon_is_in_the_ledger_with_its_tick() {
    let env = Env::new();
    new_loop(&env, "often", &scheduled("true", OFTEN));
    let d = Daemon::start(&env, &[]);
    until("four ticks", || ticks(&env, "often") >= 4);
    assert_eq!(d.terminate(), Some(0));
    let fires = fires(&env, "often");
    let ticks_recorded: Vec<u64> = fires.iter().filter_map(|r| r["tick"].as_u64()).collect();
    let expected: Vec<u64> = (1..=ticks(&env, "often")).collect();
    assert_eq!(ticks_recorded, expected, "{fires:#?}");
    // Each firing ran its tick, or (a tick that outlasted the 100ms
    // cadence on a busy machine) was skipped while the one before ran.
    for r in &fires {
        let why = (&r["kind"], &r["why"]);
        if why == (&"skipped".into(), &"overlap".into()) {
            assert!(r["tick"].is_null(), "{r}");
        } else {
            assert_eq!(why, (&"ran".into(), &"ran".into()), "{r}");
            assert_eq!(r["count"], 1, "{r}");
        }
        assert_eq!(r["schedule"], "every = \"100ms\"");
    }
    let text = env.ok(&["fires", "often", "-n", "1"]);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains(&format!("ran      tick {}", expected.len())),
        "{text}"
    );
}

#[test]
fn a_daemon_that_was_down_leaves_one_record_of_the_firings_it_missed() {
    let env = Env::new();
    new_loop(&env, "often", &scheduled("true", "200ms"));
    let d = Daemon::start(&env, &[]);
    until("two ticks", || ticks(&env, "often") >= 2);
    assert_eq!(d.terminate(), Some(0));
    let before = ticks(&env, "often");
    // Down for at least ten cadences.
    std::thread::sleep(Duration::from_secs(2));
    let d = Daemon::start(&env, &[]);
    until("two more ticks", || ticks(&env, "often") >= before + 2);
    assert_eq!(d.terminate(), Some(0));

    let fires = fires(&env, "often");
    let down: Vec<&serde_json::Value> = fires.iter().filter(|r| r["why"] == "down").collect();
    assert_eq!(down.len(), 1, "one record for the whole downtime: {fires:#?}");
    let missed = down[0];
    assert_eq!(missed["kind"], "missed");
    let count = missed["count"].as_u64().unwrap();
    assert!(count >= 8, "2s down at 200ms is at least 8 missed: {fires:#?}");
    // It lies between the last firing before and the first after.
    let at = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    let i = fires.iter().position(|r| r["why"] == "down").unwrap();
    // The last tick before (and, on a busy machine, the firings skipped
    // while it outlasted its cadence).
    let last_ran = fires[..i].iter().rposition(|r| r["kind"] == "ran").unwrap();
    assert_eq!(fires[last_ran]["tick"].as_u64(), Some(before), "{fires:#?}");
    assert!(
        fires[last_ran + 1..i].iter().all(|r| r["why"] == "overlap"),
        "{fires:#?}"
    );
    assert!(at(&fires[i - 1], "at") < at(missed, "at"));
    assert!(at(missed, "until") < at(&fires[i + 1], "at"));
    assert!(
        fires[i + 1..]
            .iter()
            .any(|r| r["tick"].as_u64() == Some(before + 1)),
        "{fires:#?}"
    );

    let status = env.status("often");
    assert_eq!(status["last_missed"]["count"].as_u64(), Some(count), "{status:#}");
    let text = env.ok(&["status", "often"]);
    assert!(
        text.contains("last missed")
            && text.contains(&format!("{count} firings, "))
            && text.contains("no daemon was running"),
        "{text}"
    );
}

/// A daemon killed mid-tick: the firing that tick filled is recorded as
/// ran and crashed, with its tick, once a later tick finds it dead; not as
/// missed while no daemon ran, nor left out when a shared store's claim of
/// it is taken again. Every firing and every tick is recorded once.
#[test]
fn a_firing_whose_tick_crashed_is_recorded_as_crashed_not_missed() {
    let env = Env::new();
    let d = dir(&env);
    std::fs::write(d.join("go"), "").unwrap();
    new_loop(
        &env,
        "fragile",
        &format!("{}[schedule]\nevery = \"4s\"\n", gated_step(&d)),
    );
    let mut daemon = Daemon::start_with(&env, &[], SHORT_LEASE);
    until("a first tick in the ledger", || {
        !fires(&env, "fragile").is_empty()
    });
    std::fs::remove_file(d.join("go")).unwrap();
    std::fs::remove_file(d.join("started")).unwrap();
    until("the next step started", || d.join("started").exists());
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    // Down for longer than a lease and less than a cadence: against
    // PostgreSQL the next daemon takes the crashed tick's claim again.
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(d.join("go"), "").unwrap();
    let daemon = Daemon::start_with(&env, &[], SHORT_LEASE);
    let crashed_event = || {
        env.history("fragile")
            .into_iter()
            .find(|e| e["kind"] == "crashed")
    };
    until("the crash recorded", || crashed_event().is_some());
    let crashed = crashed_event().unwrap()["tick"].as_u64().unwrap();
    until("a tick after the crash", || ticks(&env, "fragile") > crashed);
    assert_eq!(daemon.terminate(), Some(0));
    let fires = fires(&env, "fragile");
    let record = fires
        .iter()
        .find(|r| r["why"] == "crashed")
        .unwrap_or_else(|| panic!("no crashed firing: {fires:#?}"));
    assert_eq!(record["kind"], "ran", "{fires:#?}");
    assert_eq!(record["tick"].as_u64(), Some(crashed), "{fires:#?}");
    assert_eq!(record["count"].as_u64(), Some(1), "{fires:#?}");
    once_each(&fires);
}

/// A lease (and a claim) shorter than the loop's cadence.
const SHORT_LEASE: &[(&str, &str)] = &[("AUTOMATON_LEASE_TTL", "1s")];

/// No tick in two records; no firing time in two, but for a firing taken
/// again after its tick crashed (the crash, then the tick that took it).
fn once_each(fires: &[serde_json::Value]) {
    let mut ats: Vec<&str> = fires
        .iter()
        .filter(|r| r["why"] != "crashed")
        .filter_map(|r| r["at"].as_str())
        .collect();
    ats.sort_unstable();
    let n = ats.len();
    ats.dedup();
    assert_eq!(ats.len(), n, "a firing recorded twice: {fires:#?}");
    let mut ticks: Vec<u64> = fires.iter().filter_map(|r| r["tick"].as_u64()).collect();
    ticks.sort_unstable();
    let n = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), n, "a tick recorded twice: {fires:#?}");
}

#[test]
fn the_firings_of_a_paused_loop_fold_into_one_record() {
    let env = Env::new();
    new_loop(&env, "resting", &scheduled("true", OFTEN));
    env.ok(&["pause", "resting"]);
    let d = Daemon::start(&env, &[]);
    let inactive = |fires: &[serde_json::Value]| -> u64 {
        fires
            .iter()
            .filter(|r| r["why"] == "inactive")
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    until("five firings passed over", || {
        inactive(&fires(&env, "resting")) >= 5
    });
    assert_eq!(d.terminate(), Some(0));
    let fires = fires(&env, "resting");
    // One record for the firings passed over: a busy machine may split
    // it where a tick outlasted the 100ms cadence (a firing skipped as an
    // overlap, or missed as late), but two records in a row never say
    // the same.
    assert_eq!(
        (&fires[0]["kind"], &fires[0]["why"]),
        (&"skipped".into(), &"inactive".into()),
        "{fires:#?}"
    );
    assert!(fires[0]["until"].is_string(), "{fires:#?}");
    for pair in fires.windows(2) {
        assert!(pair[0]["why"] != pair[1]["why"], "{fires:#?}");
    }
    assert!(
        fires
            .iter()
            .all(|r| r["kind"] != "ran"
                && ["inactive", "overlap", "late"].contains(&r["why"].as_str().unwrap())),
        "{fires:#?}"
    );
    assert_eq!(ticks(&env, "resting"), 0);
    // `--since` a time after them all finds none.
    let later = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(60))
        .unwrap();
    let text = env.ok(&["fires", "resting", "--since", &later.to_string()]);
    assert!(
        text.starts_with("no firings of loop \"resting\" recorded since"),
        "{text}"
    );
    let bad = env.fails(2, &["fires", "resting", "--since", "yesterday-ish"]);
    assert!(bad.contains("--since") && bad.contains("not a time"), "{bad}");
}

#[test]
fn a_halted_loop_stays_halted_and_the_daemon_keeps_going() {
    let env = Env::new();
    // A gate that cannot load halts the loop (fail closed).
    new_loop(
        &env,
        "broken",
        "step = \"true\"\n[schedule]\nevery = \"100ms\"\n[[gate]]\npath = \"missing.wasm\"\n",
    );
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("the loop halts and the clock goes on", || {
        env.state("broken")["status"] == "halted" && ticks(&env, "clock") >= 3
    });
    assert_eq!(d.terminate(), Some(0));
    assert_eq!(
        env.history_kinds("broken")
            .iter()
            .filter(|k| *k == "tick")
            .count(),
        1
    );
}

#[test]
fn a_changed_cadence_is_picked_up() {
    let env = crate::files_only!("edits loop.toml by hand");
    new_loop(&env, "slow", &scheduled("true", "1h"));
    let d = Daemon::start(&env, &[]);
    until("the first tick", || ticks(&env, "slow") >= 1);
    std::fs::write(env.loop_dir("slow").join("loop.toml"), scheduled("true", OFTEN)).unwrap();
    until("ticks on the new cadence", || ticks(&env, "slow") >= 3);
    assert_eq!(d.terminate(), Some(0));
}

#[test]
fn a_schedule_the_daemon_cannot_read_is_logged_and_the_rest_go_on() {
    let env = crate::files_only!("edits loop.toml by hand");
    // `new` refuses it; a config edited by hand can still say it. Beside it,
    // a cron loop that does fire: both ticked once long ago, so the one
    // gets its catch-up tick and the other, with no date to come, none.
    for (name, cron) in [("odd", "0 0 31 2 *"), ("minutely", "* * * * *")] {
        new_loop(&env, name, &scheduled("true", "1h"));
        env.ok(&["tick", name]);
        age_last_tick(&env, name);
        std::fs::write(
            env.loop_dir(name).join("loop.toml"),
            format!("step = \"true\"\n[schedule]\ncron = {cron:?}\n"),
        )
        .unwrap();
    }
    new_loop(&env, "broken", &scheduled("true", OFTEN));
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("a clock tick and the cron loop's catch-up", || {
        ticks(&env, "clock") >= 1 && ticks(&env, "minutely") >= 2
    });
    std::fs::write(
        env.loop_dir("broken").join("loop.toml"),
        "step = \"true\"\nbogus = 1\n",
    )
    .unwrap();
    until("the broken config is logged", || {
        d.log().contains("loop \"broken\" is not scheduled")
    });
    let clock_then = ticks(&env, "clock");
    until("more clock ticks", || ticks(&env, "clock") >= clock_then + 2);
    let log = d.log();
    assert_eq!(d.terminate(), Some(0));
    let (_, said) = log.split_once("loop \"broken\" is not scheduled").unwrap();
    assert!(said.lines().next().unwrap().contains("bogus"), "{log}");
    assert!(
        log.contains("loop \"odd\" is not scheduled") && log.contains("it never fires"),
        "{log}"
    );
    assert_eq!(ticks(&env, "odd"), 1, "February 31st never comes");
}

#[test]
fn max_concurrent_bounds_the_ticks_running_at_once() {
    let env = Env::new();
    let d = dir(&env);
    // Each step holds a directory while it runs; a second step that finds
    // it taken marks an overlap.
    let step = format!(
        "mkdir '{0}/one' 2>/dev/null || touch '{0}/overlap'; sleep 0.2; rmdir '{0}/one' 2>/dev/null; true",
        d.display()
    );
    for name in ["a", "b", "c"] {
        new_loop(&env, name, &scheduled(&step, OFTEN));
    }
    let daemon = Daemon::start(&env, &["--max-concurrent", "1"]);
    until("each loop ticks twice", || {
        ["a", "b", "c"].iter().all(|n| ticks(&env, n) >= 2)
    });
    assert_eq!(daemon.terminate(), Some(0));
    assert!(
        !d.join("overlap").exists(),
        "two ticks ran at once under --max-concurrent 1"
    );
}

/// CPU time (user + system) the process has used so far, from
/// `/proc/PID/stat`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    // After the command name: state is field 3, utime 14 and stime 15.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn the_dispatcher_idles_while_every_worker_is_busy_and_more_loops_are_due() {
    let env = Env::new();
    let d = dir(&env);
    // Two loops due every 100 ms, one worker: while the first tick's step
    // blocks, the second loop is overdue and cannot start.
    for name in ["a", "b"] {
        new_loop(
            &env,
            name,
            &format!("{}[schedule]\nevery = \"100ms\"\n", gated_step(&d)),
        );
    }
    let daemon = Daemon::start(&env, &["--max-concurrent", "1"]);
    wait_for(&d.join("started"));
    let pid = daemon.child.id();
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(pid) - before;
    std::fs::write(d.join("go"), "").unwrap();
    until("both loops ticked", || {
        ticks(&env, "a") >= 1 && ticks(&env, "b") >= 1
    });
    assert_eq!(daemon.terminate(), Some(0));
    // /proc counts in USER_HZ, which Linux fixes at 100 a second. A spinning
    // dispatcher uses most of the second (up to 100 ticks, half that with
    // the machine busy); an idle one almost nothing. 15 ticks is generous
    // for a busy machine and far below a spin.
    assert!(
        used < 15,
        "the daemon used {used} hundredths of a second of CPU in 1 s while waiting for a worker"
    );
}

/// Rewrites `name`'s schedule by hand (as an operator edits loop.toml), to
/// a cadence `new` would refuse outside tests.
fn reschedule(env: &Env, name: &str, every: &str) {
    std::fs::write(env.loop_dir(name).join("loop.toml"), scheduled("true", every)).unwrap();
}

#[test]
fn a_removed_loop_is_logged_and_never_ticked_again() {
    let env = crate::files_only!("edits loop.toml by hand");
    new_loop(&env, "doomed", &scheduled("true", OFTEN));
    new_loop(&env, "clock", &scheduled("true", OFTEN));
    let d = Daemon::start(&env, &[]);
    until("the loop ticks", || ticks(&env, "doomed") >= 2);
    env.ok(&["rm", "doomed", "--force"]);
    until("the removal is logged", || {
        d.log()
            .contains("loop \"doomed\" was removed: it is no longer ticked")
    });
    let clock_then = ticks(&env, "clock");
    until("more clock ticks", || ticks(&env, "clock") >= clock_then + 5);
    let log = d.log();
    assert_eq!(d.terminate(), Some(0));
    let (_, after) = log.split_once("loop \"doomed\" was removed").unwrap();
    assert!(!after.contains("doomed tick"), "ticked after its removal:\n{log}");
    assert!(!env.loop_dir("doomed").exists(), "nothing brought it back");
}

#[test]
fn a_shorter_cadence_is_picked_up_at_once() {
    let env = crate::files_only!("edits loop.toml by hand");
    new_loop(&env, "slow", &scheduled("true", "1h"));
    let d = Daemon::start(&env, &[]);
    until("the first tick", || ticks(&env, "slow") >= 1);
    reschedule(&env, "slow", "200ms");
    until("ticks on the new cadence", || ticks(&env, "slow") >= 4);
    let log = d.log();
    assert_eq!(d.terminate(), Some(0));
    assert!(
        log.contains("loop \"slow\" scheduled (every = \"200ms\")"),
        "{log}"
    );
}

/// Saves `name`'s config as most editors and `automaton edit` do: a new
/// file renamed over the old one.
fn replace_config(env: &Env, name: &str, text: &str) {
    let dir = env.loop_dir(name);
    std::fs::write(dir.join("loop.toml.new"), text).unwrap();
    std::fs::rename(dir.join("loop.toml.new"), dir.join("loop.toml")).unwrap();
}

// On Linux a watched config is looked at only when its watch tells of a
// change: an edit no watch told of would never be seen.
#[test]
fn a_config_replaced_by_a_rename_is_picked_up_and_its_new_file_watched() {
    let env = crate::files_only!("edits loop.toml by hand");
    new_loop(&env, "slow", &scheduled("true", "1h"));
    let d = Daemon::start(&env, &[]);
    until("the first tick", || ticks(&env, "slow") >= 1);
    replace_config(&env, "slow", &scheduled("true", "200ms"));
    until("ticks on the new cadence", || ticks(&env, "slow") >= 3);
    // The file renamed in is the one watched now.
    replace_config(&env, "slow", "step = \"true\"\nbogus = 1\n");
    until("the second edit is seen", || {
        d.log().contains("loop \"slow\" is not scheduled")
    });
    // And a file written in place after it.
    std::fs::write(env.loop_dir("slow").join("loop.toml"), scheduled("true", "300ms")).unwrap();
    until("the third edit is seen", || {
        d.log().contains("loop \"slow\" scheduled (every = \"300ms\")")
    });
    assert_eq!(d.terminate(), Some(0));
}

#[test]
fn past_the_watches_to_be_had_configs_are_looked_at_in_turns() {
    let env = crate::files_only!("edits loop.toml by hand");
    for name in ["a", "b", "c"] {
        new_loop(&env, name, &scheduled("true", "1h"));
    }
    // One watch to be had: one config is watched, the other two looked at
    // in turns; an edit of each is seen.
    let d = Daemon::start_with(&env, &[], &[("AUTOMATON_WATCHES", "1")]);
    until("the loops are scheduled", || {
        let log = d.log();
        ["a", "b", "c"]
            .iter()
            .all(|n| log.contains(&format!("loop {n:?} scheduled")))
    });
    for name in ["a", "b", "c"] {
        reschedule(&env, name, "200ms");
    }
    until("ticks on the new cadence", || {
        ["a", "b", "c"].iter().all(|n| ticks(&env, n) >= 3)
    });
    let log = d.log();
    assert_eq!(d.terminate(), Some(0));
    #[cfg(target_os = "linux")]
    assert!(
        log.contains("1 loop's config is watched and no more watches are to be had"),
        "{log}"
    );
    #[cfg(not(target_os = "linux"))]
    let _ = log;
}

#[test]
fn daemon_status_names_the_daemon_serving_the_root_and_a_second_one_is_told() {
    let env = crate::files_only!("edits loop.toml by hand");
    new_loop(&env, "clock", &scheduled("true", OFTEN));
    let out = env.run(&["daemon", "--status"]);
    assert_eq!(out.status.code(), Some(1), "no daemon yet");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no daemon serves this root"));
    let first = Daemon::start(&env, &[]);
    until("the daemon's record", || {
        env.run(&["daemon", "--status"]).status.code() == Some(0)
    });
    let status: serde_json::Value = serde_json::from_str(&env.ok(&["daemon", "--status", "--json"])).unwrap();
    assert_eq!(status["serving"], true);
    assert_eq!(status["pid"], first.child.id());
    assert_eq!(status["scheduled"], 1);
    let listing = env.ok(&["status"]);
    assert!(
        listing.contains(&format!("daemon pid {}", first.child.id())),
        "{listing}"
    );
    // Its start in local time with its offset, as every other line says a time.
    let line = env.ok(&["daemon", "--status"]);
    let since = line.split("since ").nth(1).unwrap_or_default();
    let shape: String = since
        .chars()
        .take(26)
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert!(
        shape == "9999-99-99 99:99:99 +99:99" || shape == "9999-99-99 99:99:99 -99:99",
        "{line}"
    );
    let second = Daemon::start(&env, &[]);
    until("the second daemon is told", || {
        second.log().contains("another daemon serves this root")
    });
    assert!(second.log().contains(&format!("pid {}", first.child.id())));
    assert_eq!(second.terminate(), Some(0));
    assert_eq!(first.terminate(), Some(0));
    let out = env.run(&["daemon", "--status"]);
    assert_eq!(out.status.code(), Some(1), "a stopped daemon leaves no record");
}

#[test]
fn many_loops_found_due_at_once_are_spread_over_their_cadence() {
    let env = crate::files_only!("copies loop directories by hand");
    new_loop(&env, "l0", &scheduled("true", "1h"));
    for i in 1..8 {
        let from = env.loop_dir("l0");
        let to = env.loop_dir(&format!("l{i}"));
        std::fs::create_dir(&to).unwrap();
        for f in std::fs::read_dir(&from).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
    new_loop(&env, "clock", &scheduled("true", OFTEN));
    let d = Daemon::start(&env, &[]);
    until("a few clock ticks", || ticks(&env, "clock") >= 5);
    let log = d.log();
    assert_eq!(d.terminate(), Some(0));
    assert!(
        log.contains("9 loops scheduled; 9 due now, spread over their cadence"),
        "{log}"
    );
    // The first of the hourly loops fires now; the others over the hour.
    let ticked: Vec<u64> = (0..8).map(|i| ticks(&env, &format!("l{i}"))).collect();
    assert_eq!(ticked, [1, 0, 0, 0, 0, 0, 0, 0], "{log}");
}

#[test]
fn cancel_returns_once_the_tick_is_recorded_though_the_next_tick_takes_the_lock() {
    let env = Env::new();
    let signals = dir(&env).join("signals");
    std::fs::create_dir_all(&signals).unwrap();
    // A step that takes a moment to end once told to: the daemon's next
    // firing is due long before, and takes the lock the moment it is free.
    let step = format!(
        "trap 'sleep 0.3; exit 143' TERM; touch '{}/started-'$AUTOMATON_TICK; while :; do sleep 0.05; done",
        signals.display()
    );
    new_loop(&env, "busy", &scheduled(&step, OFTEN));
    let d = Daemon::start(&env, &["--grace", "1s"]);
    wait_for(&signals.join("started-1"));
    // Before, cancel waited for the lock, which the daemon's next tick
    // (its step as long as this one's) took first: exit 4 at the timeout.
    let out = env
        .cmd()
        .args(["cancel", "busy", "--grace", "5s", "--timeout", "20s"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(said.contains("cancelled tick 1"), "{said}");
    let cancelled = env
        .history("busy")
        .into_iter()
        .find(|e| e["kind"] == "tick" && e["tick"] == 1)
        .expect("tick 1 is recorded when cancel returns");
    assert_eq!(cancelled["outcome"], "failed");
    assert!(
        cancelled["reason"]
            .as_str()
            .unwrap()
            .starts_with("cancelled by ann"),
        "{cancelled}"
    );
    assert_eq!(d.terminate(), Some(0));
}

/// An approval that releases an await starts the loop's tick at once, not
/// at its next firing an hour away.
#[test]
fn an_approval_under_the_daemon_starts_the_tick_at_once() {
    let env = Env::new();
    let toml = "step = \"true\"\n[schedule]\nevery = \"1h\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n";
    crate::common::warm_stock_gates(toml);
    new_loop(&env, "gated", toml);
    // The first tick runs; the second awaits an approval. The next firing
    // is an hour away.
    env.ok(&["tick", "gated"]);
    env.ok(&["tick", "gated"]);
    assert_eq!(env.state("gated")["status"], "awaiting_approval");
    let daemon = Daemon::start(&env, &[]);
    until("the daemon read the loop's schedule", || {
        daemon.log().contains("loop \"gated\" scheduled")
    });
    env.ok(&["approve", "gated"]);
    until("the approved tick ran", || ticks(&env, "gated") == 2);
    let log = daemon.log();
    assert!(log.contains("approved; its tick starts now"), "{log}");
    assert_eq!(daemon.terminate(), Some(0));
}

/// The daemon's lines carry a short local time (`16:04:07`), the date once
/// on a line of its own; a gate of an awaiting loop fired again and again
/// says its line once, not at every firing.
#[test]
fn the_log_says_the_date_once_and_an_awaiting_loops_gate_line_once() {
    let env = Env::new();
    let toml = "step = \"echo cost_usd=0.37 > \\\"$AUTOMATON_METRICS\\\"\"\n\
         [schedule]\nevery = \"1s\"\n\
         [[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n\
         [[gate]]\nstock = \"budget\"\nparams = { metric = \"cost_usd\", max = 10.0 }\n";
    crate::common::warm_stock_gates(toml);
    new_loop(&env, "spender", toml);
    env.ok(&["tick", "spender"]);
    env.ok(&["tick", "spender"]);
    assert_eq!(env.state("spender")["status"], "awaiting_approval");
    let daemon = Daemon::start(&env, &[]);
    until("four firings of the awaiting loop", || {
        let fired = fires(&env, "spender");
        fired.iter().filter_map(|r| r["count"].as_u64()).sum::<u64>() >= 4
    });
    let log = daemon.log();
    assert_eq!(daemon.terminate(), Some(0));
    assert_eq!(
        log.matches("gate stock:budget: cost_usd 0.37 of 10 spent")
            .count(),
        1,
        "{log}"
    );
    let lines: Vec<&str> = log.lines().collect();
    let is_time = |l: &str| {
        let b = l.as_bytes();
        b.len() > 9
            && b[..8].iter().enumerate().all(|(i, c)| {
                if i % 3 == 2 {
                    *c == b':'
                } else {
                    c.is_ascii_digit()
                }
            })
            && b[8] == b' '
    };
    let dates = lines.iter().filter(|l| !is_time(l)).count();
    assert!(
        lines[0].len() < 30 && lines[0].as_bytes()[4] == b'-' && (1..=2).contains(&dates),
        "the date on a line of its own, once (twice past midnight): {log}"
    );
}

/// A daemon that starts reads `<root>/approved` whole: the approvals
/// already acted on are not news, and the one not yet acted on starts its
/// loop's tick once.
#[test]
fn a_daemon_start_acts_once_on_the_approval_not_yet_acted_on() {
    let env = crate::files_only!("the root's approved file is the file store's");
    let toml = "step = \"true\"\n[schedule]\nevery = \"1h\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n";
    crate::common::warm_stock_gates(toml);
    new_loop(&env, "gated", toml);
    env.ok(&["tick", "gated"]);
    for _ in 0..3 {
        env.ok(&["tick", "gated"]);
        env.ok(&["approve", "gated"]);
        env.ok(&["tick", "gated"]);
    }
    env.ok(&["tick", "gated"]);
    env.ok(&["approve", "gated"]);
    assert_eq!(env.state("gated")["status"], "awaiting_approval");
    let before = ticks(&env, "gated");
    let daemon = Daemon::start(&env, &[]);
    until("the approved tick ran", || ticks(&env, "gated") > before);
    until("the daemon read the loop's schedule", || {
        daemon.log().contains("loop \"gated\" scheduled")
    });
    let log = daemon.log();
    assert_eq!(daemon.terminate(), Some(0));
    assert_eq!(log.matches("approved; its tick starts now").count(), 1, "{log}");
    assert_eq!(ticks(&env, "gated"), before + 1);
}

/// An await the daemon did not see begin (a hand-run tick opened it while
/// the daemon ran, an hour from the loop's next firing) is released at
/// once too: the approval is heard of, whichever loop it is for.
#[test]
fn an_await_begun_outside_the_daemon_is_released_at_once_by_an_approval() {
    let env = Env::new();
    let toml = "step = \"true\"\n[schedule]\nevery = \"1h\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n";
    crate::common::warm_stock_gates(toml);
    new_loop(&env, "gated", toml);
    env.ok(&["tick", "gated"]);
    let daemon = Daemon::start(&env, &[]);
    until("the daemon read the loop's schedule", || {
        daemon.log().contains("loop \"gated\" scheduled")
    });
    // Awaiting by a tick from outside the daemon, which found it active.
    env.ok(&["tick", "gated"]);
    assert_eq!(env.state("gated")["status"], "awaiting_approval");
    let (before, events) = (ticks(&env, "gated"), tick_events(&env, "gated"));
    env.ok(&["approve", "gated"]);
    // Well before the next firing: a regression to it fails here.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ticks(&env, "gated") == before {
        assert!(
            Instant::now() < deadline,
            "not released at once: {}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(daemon.terminate(), Some(0));
    let state = env.state("gated");
    assert_eq!(state["tick"], before + 1, "{state}");
    assert_eq!(state["last_tick"]["outcome"], "ran", "{state}");
    assert_eq!(
        tick_events(&env, "gated"),
        events + 1,
        "ticked once, by the daemon"
    );
    let fired: Vec<serde_json::Value> = fires(&env, "gated");
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(
        (&fired[0]["kind"], &fired[0]["why"], &fired[0]["tick"]),
        (&"ran".into(), &"ran".into(), &(before + 1).into())
    );
}

#[test]
fn a_released_tick_waits_a_moment_for_a_lock_still_held() {
    // The approving command tells of its change before it lets the lock
    // go (PostgreSQL notifies in its commit): the tick it releases must
    // not answer `busy` and leave the loop to its next firing. Here the
    // lock is held by hand, a moment, as the daemon hears of the approval.
    let env = crate::files_only!("holds the lock file with flock(1)");
    let toml = "step = \"true\"\n[schedule]\nevery = \"1h\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n";
    crate::common::warm_stock_gates(toml);
    new_loop(&env, "gated", toml);
    env.ok(&["tick", "gated"]);
    let daemon = Daemon::start(&env, &[]);
    until("the daemon read the loop's schedule", || {
        daemon.log().contains("loop \"gated\" scheduled")
    });
    env.ok(&["tick", "gated"]);
    assert_eq!(env.state("gated")["status"], "awaiting_approval");
    let before = ticks(&env, "gated");
    let pid = Pid::from_raw(daemon.child.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    env.ok(&["approve", "gated"]);
    let lock = env.root.join("loops/gated/.state.lock");
    let mut holder = std::process::Command::new("flock")
        .arg(&lock)
        .args(["sleep", "2"])
        .spawn()
        .expect("flock(1) from util-linux");
    until("the lock is held by hand", || {
        !std::process::Command::new("flock")
            .args(["-n", lock.to_str().unwrap(), "true"])
            .status()
            .unwrap()
            .success()
    });
    kill(pid, Signal::SIGCONT).unwrap();
    until("the released tick ran", || ticks(&env, "gated") > before);
    holder.wait().unwrap();
    assert_eq!(daemon.terminate(), Some(0));
    let state = env.state("gated");
    assert_eq!(state["tick"], before + 1, "{state}");
    assert_eq!(state["last_tick"]["outcome"], "ran", "{state}");
    let fired = fires(&env, "gated");
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["kind"], "ran", "{fired:?}");
}

/// A `pause` run while a tick of `busy` runs, its stderr in a file; the
/// test returns once it says it waits for the lock.
fn pause_waiting(env: &Env) -> (Child, PathBuf) {
    let err = dir(env).join(format!("pause-{}.err", fastrand::u32(..)));
    let pause = env
        .cmd()
        .args(["pause", "busy", "--timeout", "60s"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    until("pause waits for the lock", || {
        std::fs::read_to_string(&err).is_ok_and(|e| e.contains("waiting for loop"))
    });
    (pause, err)
}

/// A loop whose ticks run back to back under the daemon (its step is
/// longer than its cadence), each step touching `started-<tick>`; returns
/// the daemon once tick 2 has started.
fn back_to_back(env: &Env) -> (Daemon, PathBuf) {
    let signals = dir(env).join("signals");
    std::fs::create_dir_all(&signals).unwrap();
    let step = format!("touch '{}/started-'$AUTOMATON_TICK; sleep 0.5", signals.display());
    new_loop(env, "busy", &scheduled(&step, OFTEN));
    clock(env);
    let d = Daemon::start(env, &[]);
    wait_for(&signals.join("started-2"));
    (d, signals)
}

/// The last tick whose step started.
#[allow(
    clippy::maybe_infinite_iter,
    reason = "the signal files are finite: take_while ends"
)]
fn started(signals: &std::path::Path) -> usize {
    (1..)
        .take_while(|n| signals.join(format!("started-{n}")).exists())
        .last()
        .unwrap_or(0)
}

/// The emergency brake: under ticks that run back to back, an operator
/// waiting for the loop's lock gets it before the daemon's next tick
/// starts. The waiting `pause` is stopped (SIGSTOP) once it waits, so it
/// cannot win a race for the lock: however long it takes to come back,
/// no tick starts meanwhile.
#[test]
fn pause_gets_in_before_the_next_of_back_to_back_ticks() {
    let env = Env::new();
    let (d, signals) = back_to_back(&env);
    let (mut pause, err) = pause_waiting(&env);
    let pid = Pid::from_raw(pause.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    // The tick pause waited for ends; the daemon goes on firing, the
    // clock's ticks running, the busy loop's giving way.
    let running = started(&signals);
    until("the running tick is recorded", || {
        tick_events(&env, "busy") >= running
    });
    let clock_then = ticks(&env, "clock");
    until("a few more clock ticks", || {
        ticks(&env, "clock") >= clock_then + 5
    });
    // Before, the daemon's next tick took the lock the moment it was
    // free: a stopped (or merely unlucky) pause waited tick after tick.
    let next = signals.join(format!("started-{}", running + 1));
    assert!(!next.exists(), "a tick started while pause waited");
    kill(pid, Signal::SIGCONT).unwrap();
    let status = pause.wait().unwrap();
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "{status:?}: {said}");
    assert_eq!(d.terminate(), Some(0));
    let kinds = env.history_kinds("busy");
    let paused = kinds.iter().position(|k| k == "paused").expect("pause recorded");
    assert_eq!(kinds[..paused].iter().filter(|k| *k == "tick").count(), running);
    assert!(kinds[paused..].iter().all(|k| k != "tick"), "{kinds:?}");
    assert!(!next.exists(), "a tick started after the pause");
    assert_eq!(env.state("busy")["status"], "paused");
}

/// A waiting operator that dies holds up no tick: its place in line is
/// a lock the OS lets go with it.
#[test]
fn a_waiting_operator_that_dies_holds_up_no_tick() {
    let env = Env::new();
    let (d, signals) = back_to_back(&env);
    let (mut pause, _) = pause_waiting(&env);
    let running = started(&signals);
    pause.kill().unwrap();
    pause.wait().unwrap();
    wait_for(&signals.join(format!("started-{}", running + 1)));
    assert_eq!(d.terminate(), Some(0));
    assert!(!env.history_kinds("busy").iter().any(|k| k == "paused"));
}

/// One scheduler per loop: a loop whose schedule is installed in an OS
/// scheduler is that scheduler's to fire. The daemon says so and leaves
/// it alone, and fires it again once the OS schedule is removed, each
/// tick saying the daemon fired it.
#[test]
fn a_loop_an_os_scheduler_fires_is_left_to_it() {
    let env = Env::new();
    let (bin, home) = (dir(&env).join("bin"), dir(&env).join("home"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let systemctl = bin.join("systemctl");
    std::fs::write(&systemctl, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&systemctl, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let schedule = |args: &[&str]| {
        let out = env
            .cmd()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .arg("schedule")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    new_loop(&env, "os", &scheduled("true", "1m"));
    schedule(&["install", "os", "--backend", "systemd"]);
    // Due at once for the daemon (it never ticked), were it the daemon's.
    clock(&env);
    let d = Daemon::start(&env, &[]);
    until("a few clock ticks", || ticks(&env, "clock") >= 3);
    assert_eq!(ticks(&env, "os"), 0, "{}", d.log());
    assert!(
        d.log().contains("loop \"os\" is fired by its systemd schedule"),
        "{}",
        d.log()
    );
    schedule(&["remove", "os"]);
    until("the daemon fires it", || ticks(&env, "os") >= 1);
    assert_eq!(d.terminate(), Some(0));
    let tick = env
        .history("os")
        .into_iter()
        .find(|e| e["kind"] == "tick")
        .unwrap();
    assert_eq!(tick["fired_by"], "daemon");
    assert!(fires(&env, "os").iter().all(|r| r["fired_by"] == "daemon"));
}

/// `daemon --service` is a Windows service's command line: on Unix it is
/// refused, saying what to do instead, and nothing runs.
#[test]
fn a_windows_service_is_refused_on_unix() {
    let env = Env::new();
    let err = env.fails(1, &["daemon", "--service"]);
    assert!(
        err.contains("daemon --service: a Windows service needs Windows"),
        "{err}"
    );
    assert_eq!(env.run(&["daemon", "--status"]).status.code(), Some(1));
}
