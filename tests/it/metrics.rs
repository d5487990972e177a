//! `/metrics`: the exposition `automaton serve` and `automaton daemon
//! --metrics` answer, checked with the real Prometheus tools (Debian's
//! `prometheus` package: `promtool` and the server). Without them the
//! tests are skipped, saying so, unless `AUTOMATON_REQUIRE_PROMETHEUS=1`
//! (as CI sets) makes that a failure.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Env;
use crate::serve::{Server, agent, answer, get, user};

/// The path of `tool` (`promtool`, `prometheus`), or `None` (the test is
/// skipped) when it is not installed.
fn prometheus_tool(tool: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("AUTOMATON_REQUIRE_PROMETHEUS").as_deref() != Ok("1"),
            "AUTOMATON_REQUIRE_PROMETHEUS=1, but {tool} is not installed (apt-get install prometheus)"
        );
        eprintln!("skipped: {tool} is not installed (apt-get install prometheus)");
    }
    found
}

/// A tick's outcome (a failed step's tick exits nonzero, and says so).
fn tick(env: &Env, name: &str) -> String {
    let out = env.run(&["tick", name, "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("tick {name}: {}", String::from_utf8_lossy(&out.stderr)));
    v["outcome"].as_str().unwrap().to_owned()
}

/// The status and body of a GET, or `None` when nothing answers.
fn try_get(url: &str) -> Option<(u16, String)> {
    let mut r = agent().get(url).call().ok()?;
    Some((
        r.status().as_u16(),
        r.body_mut().read_to_string().unwrap_or_default(),
    ))
}

/// A root with a loop in each status: one never fired (with `[labels]`),
/// one that ran, one failing, one paused, one awaiting approval, one
/// halted, one completed, and (in the file store) one whose loop.toml no
/// longer loads.
fn every_state(env: &Env) {
    env.new_loop(
        "never",
        "step = \"true\"\n[schedule]\nevery = \"1h\"\n[labels]\nteam = \"infra\"\ntier = \"gold\"\n",
    );
    env.new_loop(
        "ran",
        "step = \"echo '{\\\"cost\\\": 0.25, \\\"tokens\\\": 1200}' > \\\"$AUTOMATON_METRICS\\\"\"\n[schedule]\nevery = \"15m\"\n",
    );
    assert_eq!(tick(env, "ran"), "ran");
    env.new_loop(
        "failing",
        "step = \"false\"\n[schedule]\ncron = \"*/5 * * * *\"\n",
    );
    assert_eq!(tick(env, "failing"), "failed");
    env.new_loop("paused", "step = \"true\"\n");
    env.ok(&["pause", "paused"]);
    env.new_loop(
        "awaiting",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    assert_eq!(tick(env, "awaiting"), "ran");
    assert_eq!(tick(env, "awaiting"), "awaiting-approval");
    env.new_loop(
        "halted",
        "step = \"false\"\n[[gate]]\nstock = \"max-failures\"\nparams = { max = 1 }\n",
    );
    assert_eq!(tick(env, "halted"), "failed");
    assert_eq!(tick(env, "halted"), "halted");
    env.new_loop(
        "completed",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 1 }\n",
    );
    assert_eq!(tick(env, "completed"), "ran");
    assert_eq!(tick(env, "completed"), "completed");
    env.new_loop(
        "approved",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    assert_eq!(tick(env, "approved"), "ran");
    assert_eq!(tick(env, "approved"), "awaiting-approval");
    env.ok(&["approve", "approved"]);
    if env.pg.is_none() {
        env.new_loop("invalid", "step = \"true\"\n");
        std::fs::write(env.loop_dir("invalid").join("loop.toml"), "step = [\n").unwrap();
    }
}

/// The exposition's lines that start with `prefix`.
fn series<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn metrics_of_loops_in_every_state_pass_promtool_and_leave_out_what_was_never_measured() {
    let Some(promtool) = prometheus_tool("promtool") else {
        return;
    };
    let env = Env::new();
    every_state(&env);
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (code, text) = get(&s, "/metrics", &token);
    assert_eq!(code, 200, "{text}");

    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Each loop has one status series set to 1, its own.
    let statuses = [
        ("never", "active"),
        ("ran", "active"),
        ("paused", "paused"),
        ("awaiting", "awaiting_approval"),
        ("halted", "halted"),
        ("completed", "completed"),
    ];
    for (name, status) in statuses {
        let ones: Vec<_> = series(&text, "automaton_loop_status{")
            .into_iter()
            .filter(|l| l.contains(&format!("loop=\"{name}\"")) && l.ends_with(" 1"))
            .collect();
        assert_eq!(ones.len(), 1, "{name}: {ones:?}\n{text}");
        assert!(
            ones[0].contains(&format!("status=\"{status}\"")),
            "{name}: {ones:?}"
        );
    }
    if env.pg.is_none() {
        assert!(
            text.contains("automaton_loop_status{loop=\"invalid\",status=\"invalid\"} 1"),
            "{text}"
        );
    }
    // [labels] are on every series of the loop.
    assert!(
        text.contains(
            "automaton_loop_status{loop=\"never\",team=\"infra\",tier=\"gold\",status=\"active\"} 1"
        ),
        "{text}"
    );
    // A loop that never fired has no last firing, success or failure count.
    for name in [
        "automaton_loop_last_firing_timestamp_seconds{",
        "automaton_loop_last_success_timestamp_seconds{",
        "automaton_loop_consecutive_failures{",
        "automaton_loop_ticks_total{",
    ] {
        let never: Vec<_> = series(&text, name)
            .into_iter()
            .filter(|l| l.contains("loop=\"never\""))
            .collect();
        assert!(never.is_empty(), "{name}: {never:?}");
    }
    assert!(
        text.contains(
            "automaton_loop_expected_interval_seconds{loop=\"never\",team=\"infra\",tier=\"gold\"} 3600"
        ),
        "{text}"
    );
    assert!(
        text.contains("automaton_loop_expected_interval_seconds{loop=\"failing\"} 300"),
        "{text}"
    );
    // What was measured is there.
    assert!(
        text.contains("automaton_loop_ticks_total{loop=\"ran\",outcome=\"ran\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("automaton_loop_consecutive_failures{loop=\"failing\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("automaton_loop_step_metric_total{loop=\"ran\",metric=\"cost\"} 0.25"),
        "{text}"
    );
    assert!(
        text.contains("automaton_loop_step_metric_total{loop=\"ran\",metric=\"tokens\"} 1200"),
        "{text}"
    );
    assert!(
        text.contains("automaton_loop_awaits_open{loop=\"awaiting\"} 1"),
        "{text}"
    );
    assert_eq!(
        series(&text, "automaton_loop_await_age_seconds{loop=\"awaiting\"}").len(),
        1,
        "{text}"
    );
    assert!(
        text.contains("automaton_loop_gate_decisions_total{loop=\"halted\",gate=\"stock:max-failures\",decision=\"halt\"} 1"),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "automaton_loop_gate_evaluation_seconds_count{loop=\"completed\",gate=\"stock:max-ticks\"}"
        )
        .len(),
        1,
        "{text}"
    );
    // One await was approved; the other not yet: it has no approval times.
    assert_eq!(
        series(
            &text,
            "automaton_loop_await_to_approval_seconds_count{loop=\"approved\"} 1"
        )
        .len(),
        1,
        "{text}"
    );
    assert!(
        !text.contains("automaton_loop_await_to_approval_seconds_count{loop=\"awaiting\"}"),
        "{text}"
    );
    // No daemon fired anything: no lateness.
    assert!(!text.contains("automaton_loop_firing_lateness_seconds"), "{text}");
}

#[test]
fn metrics_are_refused_to_anyone_not_signed_in_and_answer_openmetrics_when_asked() {
    let env = Env::new();
    env.new_loop("one", "step = \"true\"\n");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (code, body) = answer(agent().get(s.url("/metrics")).call());
    assert_eq!(code, 401, "{body}");
    let (code, body) = answer(
        agent()
            .get(s.url("/metrics"))
            .header("Authorization", format!("Bearer {token}"))
            .header(
                "Accept",
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
            )
            .call(),
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("# TYPE automaton_loop_status gauge"), "{body}");
}

#[test]
fn a_viewer_scrapes_only_the_loops_they_may_view_and_the_scrape_token_all() {
    let env = Env::new();
    env.new_loop("open", "step = \"true\"\n");
    env.new_loop("secret", "step = \"true\"\n[access]\nviewers = [\"bob\"]\n");
    let token = user(&env, "ann");
    let scrape = "a-scrape-token-of-some-length";
    let digest: String = {
        use sha2::Digest;
        sha2::Sha256::digest(scrape.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let file = env.root.join("automaton.toml");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text += &format!("[metrics]\ntoken_sha256 = \"{digest}\"\n");
    std::fs::write(&file, text).unwrap();
    let s = Server::start(&env, &[]);
    let (code, body) = get(&s, "/metrics", &token);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("loop=\"open\""), "{body}");
    assert!(!body.contains("loop=\"secret\""), "{body}");
    let (code, body) = get(&s, "/metrics", scrape);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("loop=\"secret\""), "{body}");
    let (code, _) = get(&s, "/metrics", "not-the-token");
    assert_eq!(code, 401);
}

/// A free TCP port of 127.0.0.1 (free when asked: another process may
/// take it before it is used, which fails the test plainly).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus server, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Prometheus scraping `target` (`HOST:PORT`) every second with
    /// bearer `token`, on a free port, with its data in a directory of its own.
    fn start(bin: &std::path::Path, target: &str, token: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), token).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: automaton\n    authorization:\n      credentials_file: {}\n    static_configs:\n      - targets: ['{target}']\n",
            dir.path().join("token").display()
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let child = Command::new(bin)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
            .spawn()
            .unwrap();
        Prometheus { child, port, dir }
    }

    /// The result of an instant query, once it has one, within a minute.
    fn query_until_found(&self, query: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_mins(1);
        loop {
            let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
            if let Ok(mut r) = agent().get(&url).query("query", query).call()
                && r.status() == 200
            {
                let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
                let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
                if !result.is_empty() {
                    return result;
                }
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
                panic!("Prometheus never had {query}:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_serve_and_answers_a_loops_series() {
    let Some(bin) = prometheus_tool("prometheus") else {
        return;
    };
    let env = Env::new();
    env.new_loop(
        "nightly",
        "step = \"true\"\n[schedule]\nevery = \"1h\"\n[labels]\nteam = \"infra\"\n",
    );
    assert_eq!(tick(&env, "nightly"), "ran");
    assert_eq!(tick(&env, "nightly"), "ran");
    let token = user(&env, "prometheus");
    let s = Server::start(&env, &[]);
    let target = s
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let prometheus = Prometheus::start(&bin, &target, &token);
    let found = prometheus.query_until_found("automaton_loop_ticks_total{loop=\"nightly\"}");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["metric"]["team"], "infra", "{found:?}");
    assert_eq!(found[0]["metric"]["outcome"], "ran", "{found:?}");
    assert_eq!(found[0]["value"][1], "2", "{found:?}");
    let up = prometheus.query_until_found("up{job=\"automaton\"}");
    assert_eq!(up[0]["value"][1], "1", "{up:?}");
}

#[test]
fn the_daemon_answers_metrics_with_its_own_figures_and_guards_other_hosts() {
    let env = Env::new();
    env.new_often_loop("often", "step = \"true\"\n[schedule]\nevery = \"200ms\"\n");
    // Reached from other hosts with nothing to guard it: refused, said why.
    let out = env.fails(2, &["daemon", "--metrics", "0.0.0.0:0"]);
    assert!(out.contains("token_sha256"), "{out}");
    let port = free_port();
    let mut daemon = env
        .cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .args(["daemon", "--metrics", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + Duration::from_mins(1);
    let body = loop {
        if let Some((200, body)) = try_get(&url)
            && body.contains("automaton_loop_firing_lateness_seconds_count{loop=\"often\"}")
        {
            break body;
        }
        assert!(Instant::now() < deadline, "the daemon never answered its figures");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The ledger read again once it grew: a later scrape counts more runs.
    let ran = |body: &str| -> u64 {
        let prefix = "automaton_loop_firings_total{loop=\"often\",kind=\"ran\",why=\"ran\"} ";
        body.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map_or(0, |n| n.parse().unwrap())
    };
    let first = ran(&body);
    assert!(first > 0, "{body}");
    loop {
        if let Some((200, later)) = try_get(&url)
            && ran(&later) > first
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a later scrape never counted more runs than {first}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let other = try_get(&format!("http://127.0.0.1:{port}/other"));
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(other.map(|(code, _)| code), Some(404));
    assert!(body.contains("automaton_daemon_ticks_started_total "), "{body}");
    assert!(body.contains("automaton_daemon_busy_skips_total "), "{body}");
    assert!(
        body.contains("automaton_loop_firings_total{loop=\"often\",kind=\"ran\",why=\"ran\"}"),
        "{body}"
    );
    // Claims are timed where daemons share the store, and only there.
    let claims = body.contains("automaton_daemon_claim_duration_seconds_count ");
    assert_eq!(claims, env.pg.is_some(), "{body}");
}

#[test]
fn the_example_alert_rules_pass_promtool_check_and_their_tests() {
    let Some(promtool) = prometheus_tool("promtool") else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/prometheus");
    for args in [
        &["check", "rules", "alerts.yml"][..],
        &["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bad_labels_are_refused_naming_the_file_line_and_cause() {
    let env = Env::new();
    let file = env.scratch().join("loop.toml");
    std::fs::write(&file, "step = \"true\"\n\n[labels]\n\"team-name\" = \"infra\"\n").unwrap();
    let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
    assert!(err.contains("loop.toml:3"), "{err}");
    assert!(err.contains("`team-name` is not a label name"), "{err}");
    std::fs::write(&file, "step = \"true\"\n[labels]\nstatus = \"x\"\n").unwrap();
    let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
    assert!(err.contains("automaton's own series"), "{err}");
    assert!(env.run(&["status", "bad"]).status.code() != Some(0));
}
