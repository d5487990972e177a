//! `[notify]`: what is notified (`on`), what the command's environment and
//! the webhook's JSON say, and that a webhook never holds a tick: each
//! webhook here is received by a server the test runs on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use crate::access::{GIT_ENV, git, repo};
use crate::common::Env;

/// One request a receiver read.
struct Request {
    line: String,
    headers: Vec<String>,
    body: serde_json::Value,
}

/// Reads one HTTP request from `stream`.
fn read_request(stream: &TcpStream) -> Request {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        if h.trim().is_empty() {
            break;
        }
        headers.push(h.trim().to_ascii_lowercase());
    }
    let length: usize = headers
        .iter()
        .find_map(|h| h.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Request {
        line: line.trim().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap(),
    }
}

/// A receiver that answers one connection with each status in `answers`,
/// in order, then stops listening. Its URL, and the requests it read.
fn receiver(answers: Vec<u16>) -> (String, mpsc::Receiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for code in answers {
            let (mut stream, _) = listener.accept().unwrap();
            let request = read_request(&stream);
            let _ = tx.send(request);
            let reply = format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (url, rx)
}

/// A receiver that reads one request and never answers, until `release`
/// is sent (or a minute passes: `held` then says so, which fails the
/// test); `got` says when it has read the request.
struct Silent {
    url: String,
    got: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
    held: JoinHandle<bool>,
}

fn silent_receiver() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, wait) = mpsc::channel();
    let (got_tx, got) = mpsc::channel();
    let held = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let _ = read_request(&stream);
        let _ = got_tx.send(());
        let released = wait.recv_timeout(Duration::from_mins(1)).is_ok();
        drop(stream);
        released
    });
    Silent {
        url: format!("http://bot:s3cret@{addr}/hook?token=t0ken"),
        got,
        release,
        held,
    }
}

fn next(rx: &mpsc::Receiver<Request>) -> Request {
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the webhook was called")
}

/// The notice's shape as docs/notify.md shows it: its webhook section's
/// JSON examples, merged (a key one example shows as `null` takes its
/// value from another). Every example has every key.
fn documented_notice() -> Value {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/notify.md")).unwrap();
    let section = doc.split("\n## The webhook\n").nth(1).expect("a webhook section");
    let section = section.split("\n## ").next().unwrap();
    let examples: Vec<Value> = section
        .split("```json\n")
        .skip(1)
        .map(|block| {
            serde_json::from_str(block.split("```").next().unwrap()).expect("an example that parses")
        })
        .collect();
    assert!(examples.len() >= 2, "the await's and the operator's examples");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    for e in &examples {
        assert_eq!(keys(e), keys(&examples[0]), "every example has every key");
    }
    examples.into_iter().reduce(merged).unwrap()
}

fn merged(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Null, v) | (v, Value::Null) => v,
        (Value::Object(mut a), Value::Object(b)) => {
            for (k, v) in b {
                let mine = a.remove(&k).unwrap_or(Value::Null);
                a.insert(k, merged(mine, v));
            }
            Value::Object(a)
        }
        (a, _) => a,
    }
}

/// Objects whose keys are metrics' names, not the notice's.
const METRIC_MAPS: [&str; 2] = ["totals", "metrics_since"];
/// The keys an actor has when they apply, besides the example's.
const ACTOR_MAY_HAVE: [&str; 3] = ["os_user", "on_behalf_of", "db_role"];

/// Fails unless `got` (a posted notice) has exactly the keys the
/// documented example `doc` has, each of its type or `null`, at every
/// level: a key added, renamed or retyped without its doc fails here.
fn assert_documented(doc: &Value, got: &Value, at: &str) {
    let kind = |v: &Value| match v {
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
    };
    match (doc, got) {
        (Value::Null, _) => panic!("{at}: documented only as null"),
        (_, Value::Null) => {}
        (Value::Object(_), Value::Object(g)) if METRIC_MAPS.contains(&at) => {
            assert!(g.values().all(Value::is_number), "{at}: {got}");
        }
        (Value::Object(d), Value::Object(g)) => {
            let mut documented: Vec<&String> = d.keys().collect();
            let mut posted: Vec<&String> = g
                .keys()
                .filter(|k| !(at == "actor" && ACTOR_MAY_HAVE.contains(&k.as_str())))
                .collect();
            documented.sort();
            posted.sort();
            assert_eq!(
                posted,
                documented,
                "the keys of {}",
                if at.is_empty() { "the notice" } else { at }
            );
            for (k, v) in g.iter().filter(|(k, _)| d.contains_key(*k)) {
                assert_documented(&d[k], v, k);
            }
        }
        (d, g) => assert_eq!(kind(g), kind(d), "{at}: {got}"),
    }
}

/// A command that appends the variables `vars` to `log`, one line a notice.
fn logging(log: &std::path::Path, vars: &[&str]) -> String {
    let line: Vec<String> = vars.iter().map(|v| format!("${{{v}}}")).collect();
    format!(
        "command = [\"sh\", \"-c\", \"echo \\\"{}\\\" >> '{}'\"]\n",
        line.join("|"),
        log.display()
    )
}

fn read(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[test]
fn an_await_is_posted_as_json_and_told_to_the_command() {
    let env = Env::new();
    let (url, got) = receiver(vec![200]);
    let log = env.root.join("said");
    let root_toml = env.root.join("automaton.toml");
    let text = std::fs::read_to_string(&root_toml).unwrap();
    std::fs::write(
        &root_toml,
        text + "[server]\nurl = \"https://console.example.com/\"\n",
    )
    .unwrap();
    let vars = [
        "AUTOMATON_EVENT",
        "AUTOMATON_STATUS",
        "AUTOMATON_AWAIT",
        "AUTOMATON_REVIEW_URL",
    ];
    env.new_loop(
        "agent",
        &format!(
            "step = \"echo cost_usd=0.25 > \\\"$AUTOMATON_METRICS\\\"\"\n\
             [[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n\
             [notify]\nwebhook = {url:?}\n{}",
            logging(&log, &vars)
        ),
    );
    env.ok(&["tick", "agent"]);
    env.ok(&["tick", "agent"]);
    let request = next(&got);
    assert_eq!(request.line, "POST /hook HTTP/1.1");
    assert!(
        request
            .headers
            .iter()
            .any(|h| h == "content-type: application/json"),
        "{:?}",
        request.headers
    );
    let notice = request.body;
    let pending = env.state("agent")["awaiting"]["id"].clone();
    assert!(
        pending.as_str().is_some_and(|id| id.starts_with("aw-")),
        "{pending}"
    );
    assert_eq!(notice["event"], "await");
    assert_eq!(notice["loop"], "agent");
    assert_eq!(notice["status"], "awaiting_approval");
    assert_eq!(notice["tick"], 2);
    assert_eq!(notice["await"], pending);
    assert_eq!(notice["totals"], serde_json::json!({ "cost_usd": 0.25 }));
    assert_eq!(notice["consecutive_failures"], 0);
    assert_eq!(
        notice["review_url"],
        "https://console.example.com/loops/agent/review"
    );
    assert!(
        notice["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{notice}"
    );
    assert!(notice["head"].is_null() && notice["actor"].is_null() && notice["action"].is_null());
    assert_eq!(notice["root"], env.root.to_str().unwrap());
    assert!(notice["at"].is_string());
    assert_documented(&documented_notice(), &notice, "");
    assert_eq!(
        read(&log),
        format!(
            "await|awaiting_approval|{}|https://console.example.com/loops/agent/review\n",
            pending.as_str().unwrap()
        )
    );
}

#[test]
fn a_5xx_is_tried_again_and_the_tick_keeps_its_exit_code() {
    let env = Env::new();
    let (url, got) = receiver(vec![500, 200]);
    env.new_loop(
        "flaky",
        &format!("step = \"false\"\n[notify]\non = [\"failure\"]\nwebhook = {url:?}\n"),
    );
    env.fails(6, &["tick", "flaky"]);
    let (first, second) = (next(&got), next(&got));
    assert_eq!(first.body["event"], "failure");
    assert_eq!(first.body["status"], "active");
    assert_eq!(first.body["consecutive_failures"], 1);
    assert_eq!(first.body, second.body, "the same notice, sent again");
}

#[test]
fn a_receiver_that_never_answers_does_not_hold_the_tick() {
    let env = Env::new();
    let Silent {
        url, release, held, ..
    } = silent_receiver();
    env.new_loop(
        "flaky",
        &format!(
            "step = \"false\"\n[notify]\non = [\"failure\"]\nwebhook = {url:?}\nwebhook_timeout = \"1s\"\n"
        ),
    );
    let out = env.run(&["tick", "flaky"]);
    let _ = release.send(());
    assert!(
        held.join().unwrap(),
        "the tick waited for the receiver instead of giving up on it"
    );
    assert_eq!(
        out.status.code(),
        Some(6),
        "the step's failure, as without a webhook"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("flaky tick 1: failed"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loop \"flaky\": webhook http://…@127.0.0.1:") && err.contains("not delivered"),
        "{err}"
    );
    assert!(!err.contains("s3cret") && !err.contains("t0ken"), "{err}");
}

/// A command does not wait out a receiver that hangs, whatever its
/// `webhook_timeout`: it gives up after a short wait past its output, and
/// says the notice was left undelivered.
#[test]
fn a_command_gives_up_on_a_hanging_receiver_after_a_short_wait() {
    let env = Env::new();
    let Silent {
        url, release, held, ..
    } = silent_receiver();
    env.new_loop(
        "slow",
        &format!(
            "step = \"false\"\n[notify]\non = [\"failure\"]\nwebhook = {url:?}\nwebhook_timeout = \"1m\"\n"
        ),
    );
    let out = env.run(&["tick", "slow"]);
    let _ = release.send(());
    let _ = held.join();
    assert_eq!(out.status.code(), Some(6), "the step's failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loop \"slow\": webhook http://…@127.0.0.1:")
            && err.contains("not answered within 2s")
            && !err.contains("not delivered: timeout"),
        "{err}"
    );
    assert!(!err.contains("s3cret") && !err.contains("t0ken"), "{err}");
}

#[test]
fn failure_is_told_once_a_run_of_failures() {
    let env = Env::new();
    let log = env.root.join("said");
    let fail = env.root.join("fail");
    std::fs::write(&fail, "").unwrap();
    env.new_loop(
        "flaky",
        &format!(
            "step = \"! test -e '{}'\"\n[notify]\non = [\"failure\"]\n{}",
            fail.display(),
            logging(&log, &["AUTOMATON_EVENT", "AUTOMATON_TICK", "AUTOMATON_FAILURES"])
        ),
    );
    for _ in 0..3 {
        env.fails(6, &["tick", "flaky"]);
    }
    assert_eq!(read(&log), "failure|1|1\n", "the first failure only");
    std::fs::remove_file(&fail).unwrap();
    env.ok(&["tick", "flaky"]);
    std::fs::write(&fail, "").unwrap();
    env.fails(6, &["tick", "flaky"]);
    assert_eq!(
        read(&log),
        "failure|1|1\nfailure|5|1\n",
        "again after a tick that did not fail"
    );
}

#[test]
fn the_commit_range_is_told() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = repo(&env);
    let log = env.root.join("said");
    env.new_loop(
        "agent",
        &format!(
            "step = \"git commit -q --allow-empty -m work && false\"\n\
             [worktree]\nrepo = {:?}\nbranch = \"loop/agent\"\n\
             [notify]\non = [\"failure\"]\n{}",
            repo.display().to_string(),
            logging(
                &log,
                &[
                    "AUTOMATON_BRANCH",
                    "AUTOMATON_HEAD_BEFORE",
                    "AUTOMATON_HEAD_AFTER"
                ]
            )
        ),
    );
    let out = env
        .cmd()
        .args(["tick", "agent"])
        .envs(GIT_ENV.iter().copied())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let worktree = env.loop_dir("agent").join("worktree");
    let after = git(&worktree, &["rev-parse", "HEAD"]);
    let before = git(&worktree, &["rev-parse", "HEAD~1"]);
    assert_eq!(read(&log), format!("loop/agent|{before}|{after}\n"));
}

#[test]
fn an_await_tells_the_work_since_the_last_approval() {
    let env = crate::files_only!("the worktree and run output are this host's");
    let repo = repo(&env);
    let log = env.root.join("said");
    let (url, got) = receiver(vec![200, 200]);
    env.new_loop(
        "agent",
        &format!(
            "step = \"echo cost_usd=0.5 > \\\"$AUTOMATON_METRICS\\\"; \
             git commit -q --allow-empty -m tick-$AUTOMATON_TICK\"\n\
             [[gate]]\nstock = \"approve-every\"\nparams = {{ every = 2 }}\n\
             [worktree]\nrepo = {:?}\nbranch = \"loop/agent\"\n\
             [notify]\non = [\"await\"]\nwebhook = {url:?}\n{}",
            repo.display().to_string(),
            logging(
                &log,
                &[
                    "AUTOMATON_BRANCH",
                    "AUTOMATON_WORK_FROM",
                    "AUTOMATON_WORK_HEAD",
                    "AUTOMATON_WORK_COMMITS",
                    "AUTOMATON_METRICS_SINCE",
                    "AUTOMATON_TOTALS",
                ]
            )
        ),
    );
    let tick = |outcome: &str| {
        let out = env
            .cmd()
            .args(["tick", "agent", "--json"])
            .envs(GIT_ENV.iter().copied())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["outcome"], outcome, "{v}");
    };
    let worktree = env.loop_dir("agent").join("worktree");
    let base = git(&repo, &["rev-parse", "HEAD"]);
    tick("ran");
    tick("ran");
    tick("awaiting-approval");
    let first = git(&worktree, &["rev-parse", "HEAD"]);
    let told = format!("loop/agent|{base}|{first}|2|{{\"cost_usd\":1.0}}|{{\"cost_usd\":1.0}}\n");
    assert_eq!(
        read(&log),
        told,
        "both ticks' commits, from the first one's start"
    );
    let posted = next(&got).body;
    assert_documented(&documented_notice(), &posted, "");
    assert_eq!(
        posted["work"],
        serde_json::json!({ "branch": "loop/agent", "from": base, "head": first, "commit_count": 2 })
    );
    assert_eq!(posted["metrics_since"], serde_json::json!({ "cost_usd": 1.0 }));
    env.ok(&["approve", "agent"]);
    tick("ran");
    tick("ran");
    tick("awaiting-approval");
    let second = git(&worktree, &["rev-parse", "HEAD"]);
    assert_eq!(
        read(&log),
        format!("{told}loop/agent|{first}|{second}|2|{{\"cost_usd\":1.0}}|{{\"cost_usd\":2.0}}\n"),
        "the work since the approval, not before it"
    );
    let review: serde_json::Value = serde_json::from_str(&env.ok(&["review", "agent", "--json"])).unwrap();
    assert_eq!(
        (&review["work"]["from"], &review["work"]["head"]),
        (&first.as_str().into(), &second.as_str().into()),
        "the range review shows"
    );
}

#[test]
fn operator_tells_of_a_pause_a_resume_and_a_rejection_by_someone() {
    let env = Env::new();
    let (url, got) = receiver(vec![200, 200, 200]);
    let log = env.root.join("said");
    let vars = [
        "AUTOMATON_EVENT",
        "AUTOMATON_ACTION",
        "AUTOMATON_ACTOR",
        "AUTOMATON_VIA",
        "AUTOMATON_REASON",
    ];
    env.new_loop(
        "agent",
        &format!(
            "step = \"true\"\n[notify]\non = [\"operator\"]\nwebhook = {url:?}\n{}",
            logging(&log, &vars)
        ),
    );
    env.ok(&["tick", "agent"]);
    assert_eq!(read(&log), "", "a tick is not an operator's");
    let by = |who: &str, args: &[&str]| {
        let out = env.cmd().args(args).env("AUTOMATON_USER", who).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    by("ann", &["pause", "agent", "--reason", "lunch"]);
    by("ann", &["pause", "agent"]);
    by("bob", &["resume", "agent"]);
    by("cy", &["reject", "agent", "--halt", "--reason", "wrong turn"]);
    assert_eq!(
        read(&log),
        "operator|pause|ann|delegated|lunch\noperator|resume|bob|delegated|\n\
         operator|reject|cy|delegated|rejected by cy: wrong turn\n",
        "a pause that changed nothing is not told"
    );
    let paused = next(&got).body;
    assert_documented(&documented_notice(), &paused, "");
    assert_eq!(paused["event"], "operator");
    assert_eq!(paused["action"], "pause");
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["actor"]["user"], "ann");
    assert_eq!(paused["actor"]["via"], "delegated");
    assert_eq!(next(&got).body["action"], "resume");
    let rejected = next(&got).body;
    assert_eq!(
        (rejected["action"].as_str(), rejected["status"].as_str()),
        (Some("reject"), Some("halted"))
    );
}

#[test]
fn what_notify_says_is_checked() {
    let env = Env::new();
    for (toml, says) in [
        (
            "[notify]\non = [\"sometimes\"]\ncommand = \"true\"\n",
            "sometimes",
        ),
        ("[notify]\nwebhook = \"ftp://example.com/x\"\n", "not an http"),
        (
            "[notify]\ntimeout = \"1s\"\n",
            "needs a `command`, a `webhook` or both",
        ),
        ("[server]\nurl = \"console\"\n", "not an http"),
        (
            "[notify]\nwebhook = \"http://127.0.0.1:9/x\"\nwebhook_timeout = \"24h\"\n",
            "`webhook_timeout` is 24h, past the most a delivery may take (1m)",
        ),
    ] {
        let file = env.root.join("bad.toml");
        std::fs::write(&file, format!("step = \"true\"\n{toml}")).unwrap();
        let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
        assert!(err.contains(says), "{toml}: {err}");
    }
}

#[test]
fn a_console_change_whose_webhook_hangs_is_answered_once_committed() {
    let env = Env::new();
    let silent = silent_receiver();
    env.new_loop(
        "demo",
        &format!(
            "step = \"true\"\n[access]\noperators = [\"ann\"]\n[notify]\nwebhook = {:?}\n\
             on = [\"operator\"]\nwebhook_timeout = \"1m\"\n",
            silent.url
        ),
    );
    let token = crate::serve::user(&env, "ann");
    let s = crate::serve::Server::start(&env, &["--request-timeout", "3s"]);
    let (status, body) = crate::serve::post(&s, "/api/loops/demo/pause", &token, "{}");
    assert_eq!(status, 200, "{body}");
    assert_eq!(env.status("demo")["status"], "paused");
    // The notice is still delivered, from the server's queue.
    silent
        .got
        .recv_timeout(Duration::from_secs(30))
        .expect("the webhook was called");
    silent.release.send(()).unwrap();
    assert!(silent.held.join().unwrap(), "the receiver was released");
    drop(s);
}

/// A console change is answered before its notify command runs: the
/// command, which waits for a file the test makes only once it has the
/// answer, still runs after it, from the server's queue.
#[test]
fn a_console_changes_notify_command_runs_after_the_answer() {
    let env = Env::new();
    let (go, done) = (env.root.join("go"), env.root.join("done"));
    env.new_loop(
        "demo",
        &format!(
            "step = \"true\"\n[access]\noperators = [\"ann\"]\n[notify]\non = [\"operator\"]\n\
             timeout = \"1m\"\ncommand = \"while [ ! -e '{}' ]; do sleep 0.05; done; touch '{}'\"\n",
            go.display(),
            done.display()
        ),
    );
    let token = crate::serve::user(&env, "ann");
    let s = crate::serve::Server::start(&env, &["--request-timeout", "3s"]);
    let (status, body) = crate::serve::post(&s, "/api/loops/demo/pause", &token, "{}");
    assert_eq!(status, 200, "{body}");
    assert_eq!(env.status("demo")["status"], "paused");
    std::fs::write(&go, "").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the notify command never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(s);
}

#[test]
fn the_daemon_delivers_webhooks_off_its_workers() {
    let env = Env::new();
    let Silent {
        url, release, held, ..
    } = silent_receiver();
    let make = |name: &str, toml: &str| {
        env.new_often_loop(name, toml);
    };
    // A receiver that holds the one worker for ten minutes if the worker
    // delivers: the other loop would not tick again while it waits.
    make(
        "flaky",
        &format!(
            "step = \"false\"\n[schedule]\nevery = \"100ms\"\n\
             [notify]\non = [\"failure\"]\nwebhook = {url:?}\nwebhook_timeout = \"1m\"\n"
        ),
    );
    make("clock", "step = \"true\"\n[schedule]\nevery = \"100ms\"\n");
    let daemon = daemon(&env);
    let ticks = |name: &str| env.state(name)["tick"].as_u64().unwrap_or(0);
    let until = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_mins(1);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    until("the loop failed", &|| ticks("flaky") >= 1);
    let then = ticks("clock") + ticks("flaky");
    until(
        "the daemon ticked on while the receiver held its webhook",
        &|| ticks("clock") + ticks("flaky") >= then + 5,
    );
    let _ = release.send(());
    stop(daemon);
    assert!(held.join().unwrap(), "the receiver was released by the test");
}

/// A daemon that runs `--max-concurrent 1`, quietly; sent SIGTERM and
/// waited for by [`stop`].
fn daemon(env: &Env) -> std::process::Child {
    env.cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .args(["daemon", "--max-concurrent", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn stop(mut daemon: std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
}

#[test]
fn a_receiver_that_never_answers_holds_back_no_other_loops_webhook() {
    let env = Env::new();
    let silent = silent_receiver();
    let (url, got) = receiver(vec![200]);
    let go = env.root.join("go");
    env.new_often_loop(
        "stuck",
        &format!(
            "step = \"false\"\n[schedule]\nevery = \"100ms\"\n\
             [notify]\non = [\"failure\"]\nwebhook = {:?}\nwebhook_timeout = \"1m\"\n",
            silent.url
        ),
    );
    // Fails, and notifies, only once the stuck loop's receiver holds its notice.
    env.new_often_loop(
        "other",
        &format!(
            "step = \"! test -e '{}'\"\n[schedule]\nevery = \"100ms\"\n\
             [notify]\non = [\"failure\"]\nwebhook = {url:?}\n",
            go.display()
        ),
    );
    let daemon = daemon(&env);
    silent
        .got
        .recv_timeout(Duration::from_mins(1))
        .expect("the stuck loop's notice reached its receiver");
    std::fs::write(&go, "").unwrap();
    let told = got.recv_timeout(Duration::from_mins(1));
    let _ = silent.release.send(());
    let told = told.expect("the other loop's notice arrived while the first receiver held its own");
    assert_eq!(
        (told.body["loop"].as_str(), told.body["event"].as_str()),
        (Some("other"), Some("failure"))
    );
    stop(daemon);
    assert!(
        silent.held.join().unwrap(),
        "the receiver was released by the test"
    );
}

/// A `webhook_timeout` past a minute is refused when the loop is made,
/// naming the setting and the most it may be: a receiver that hangs never
/// holds a delivery longer.
#[test]
fn a_webhook_timeout_past_a_minute_is_refused() {
    let env = Env::new();
    let file = env.root.join("slow.toml");
    std::fs::write(
        &file,
        "step = \"true\"\n[notify]\nwebhook = \"http://127.0.0.1:9/\"\nwebhook_timeout = \"24h\"\n",
    )
    .unwrap();
    let err = env.fails(5, &["new", "slow", "--from", file.to_str().unwrap()]);
    assert!(
        err.contains("webhook_timeout") && err.contains("24h") && err.contains("1m"),
        "{err}"
    );
    assert!(!env.loop_dir("slow").exists());
}
