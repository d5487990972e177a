//! Who acts and what they may do: the actor is the OS user (a name in
//! `AUTOMATON_USER` counts only for a delegate), every command that changes
//! a loop checks its role and records a refusal, and approvals are bound to
//! the await (and with `bind = "commit"` the commit) they were given for.
//! The tests that act as other people make real OS users and run the
//! binary as them; they need root, and say so when skipped.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{BIN, Env, isolate};

/// The OS users these tests act as.
pub(crate) const LEAD: &str = "atmlead";
pub(crate) const QA: &str = "atmqa";
pub(crate) const OPS: &str = "atmops";

/// Makes [`LEAD`], [`QA`] and [`OPS`] once per run; false (and the test is
/// skipped, said on stderr) when the suite does not run as root, unless
/// `AUTOMATON_REQUIRE_USERS=1` (as CI sets) makes that a failure.
pub(crate) fn users() -> bool {
    static MADE: OnceLock<bool> = OnceLock::new();
    *MADE.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var("AUTOMATON_REQUIRE_USERS").as_deref() != Ok("1"),
                "AUTOMATON_REQUIRE_USERS=1, but acting as other OS users needs root (useradd, runuser)"
            );
            eprintln!("skipped: acting as other OS users needs root (useradd, runuser)");
            return false;
        }
        for user in [LEAD, QA, OPS] {
            let known = Command::new("id").arg(user).output().unwrap().status.success();
            if !known {
                let made = Command::new("useradd")
                    .args(["--no-create-home", "--shell", "/usr/sbin/nologin", user])
                    .status()
                    .unwrap();
                assert!(made.success(), "useradd {user}");
            }
        }
        true
    })
}

/// A root other OS users may use: its directories and files open to all
/// (the tests' stand-in for a root shared by a group).
pub(crate) fn shared(env: &Env) {
    let mut dir = env.root.clone();
    while let Some(parent) = dir.parent() {
        if parent == Path::new("/tmp") || parent == Path::new("/") {
            break;
        }
        let mut mode = std::fs::metadata(parent).unwrap().permissions();
        mode.set_mode(mode.mode() | 0o755);
        std::fs::set_permissions(parent, mode).unwrap();
        dir = parent.to_path_buf();
    }
    open_up(&env.root);
}

/// Files another user wrote are theirs and private: open them again, as a
/// shared root's group modes would.
fn open_up(root: &Path) {
    // The root's cache is a link to the run's shared cache: not followed.
    let status = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(root)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Runs the binary as OS user `user`, with no `AUTOMATON_USER`.
pub(crate) fn run_as(env: &Env, user: &str, args: &[&str]) -> Output {
    let mut c = Command::new("runuser");
    c.args(["-u", user, "--", BIN, "--root"])
        .arg(&env.root)
        .args(args);
    isolate(&mut c);
    let out = c
        .env_remove("AUTOMATON_USER")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    open_up(&env.root);
    out
}

/// Runs the binary as this process's user with `AUTOMATON_USER` = `named`.
fn run_named(env: &Env, named: &str, args: &[&str]) -> Output {
    env.cmd()
        .args(args)
        .env("AUTOMATON_USER", named)
        .output()
        .unwrap()
}

pub(crate) fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tick(env: &Env, name: &str) -> String {
    let v: Value = serde_json::from_str(&env.ok(&["tick", name, "--json"])).unwrap();
    v["outcome"].as_str().unwrap().to_owned()
}

/// A loop that runs one tick, then awaits approval before each next one.
fn awaiting_loop(env: &Env, name: &str, extra: &str) {
    env.new_loop(
        name,
        &format!("step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n{extra}"),
    );
    assert_eq!(tick(env, name), "ran");
    assert_eq!(tick(env, name), "awaiting-approval");
}

fn last(env: &Env, name: &str, kind: &str) -> Value {
    env.history(name)
        .into_iter()
        .rev()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {:?}", env.history_kinds(name)))
}

#[test]
fn a_name_in_the_environment_counts_only_for_a_delegate() {
    let env = Env::new();
    let me = automaton::who::os_user();
    env.root_config("");
    awaiting_loop(
        &env,
        "agent",
        "[access]\napprovers = [\"lead\", \"qa\"]\n[approval]\nrequired = 2\n",
    );
    // Not a delegate: the name is a record, and the OS user is who asks.
    let spoof = run_named(&env, "lead", &["approve", "agent"]);
    assert_eq!(code(&spoof), Some(10), "{}", stderr(&spoof));
    let said = stderr(&spoof);
    assert!(
        said.contains(&format!("{me} may not `approve`")) && said.contains("approvers (lead, qa)"),
        "{said}"
    );
    let refused = last(&env, "agent", "refused");
    assert_eq!(refused["by"], me.as_str());
    assert_eq!(refused["actor"]["via"], "os");
    assert_eq!(refused["actor"]["on_behalf_of"], "lead");
    assert!(
        env.state("agent")["pending_approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // A delegate acts for the person named, and the record says both.
    env.root_config(&format!("delegates = [{me:?}]\n"));
    let out = run_named(&env, "lead", &["approve", "agent"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let approved = last(&env, "agent", "approved");
    assert_eq!(approved["by"], "lead");
    assert_eq!(approved["actor"]["via"], "delegated");
    assert_eq!(approved["actor"]["os_user"], me.as_str());
    if env.pg.is_some() {
        assert!(approved["actor"]["db_role"].is_string(), "{approved}");
    }
    assert_eq!(tick(&env, "agent"), "awaiting-approval", "one of two");
    let out = run_named(&env, "qa", &["approve", "agent"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(tick(&env, "agent"), "ran");
}

#[test]
fn one_person_counts_once_for_an_await() {
    if !users() {
        return;
    }
    let env = crate::files_only!("other OS users use the root's files");
    env.root_config("");
    awaiting_loop(
        &env,
        "agent",
        &format!("[access]\napprovers = [{LEAD:?}, {QA:?}]\n[approval]\nrequired = 2\n"),
    );
    shared(&env);
    let first = run_as(&env, LEAD, &["approve", "agent"]);
    assert_eq!(code(&first), Some(0), "{}", stderr(&first));
    let again = run_as(&env, LEAD, &["approve", "agent"]);
    assert_eq!(code(&again), Some(1), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("one person counts once"),
        "{}",
        stderr(&again)
    );
    let approved = last(&env, "agent", "approved");
    assert_eq!(
        (approved["by"].as_str(), approved["actor"]["via"].as_str()),
        (Some(LEAD), Some("os"))
    );
    assert_eq!(tick(&env, "agent"), "awaiting-approval", "one person is not two");
    let out = run_as(&env, QA, &["approve", "agent"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(tick(&env, "agent"), "ran");
    let used = last(&env, "agent", "approvals-used");
    assert_eq!(used["by"], serde_json::json!([LEAD, QA]));
    // The next await starts with nothing: no approval carries over.
    assert_eq!(tick(&env, "agent"), "awaiting-approval");
    let s = env.state("agent");
    assert!(s["pending_approvals"].as_array().unwrap().is_empty(), "{s}");
    assert_ne!(s["awaiting"]["id"], used["await"]);
}

#[test]
fn approvals_left_when_an_await_is_released_are_dropped() {
    let env = Env::new();
    awaiting_loop(&env, "agent", "");
    for who in ["ann", "bob"] {
        let out = run_named(&env, who, &["approve", "agent"]);
        assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    }
    let awaiting = env.state("agent")["awaiting"]["id"].clone();
    assert!(awaiting.is_string());
    assert_eq!(tick(&env, "agent"), "ran");
    let dropped = last(&env, "agent", "approvals-dropped");
    assert_eq!(dropped["why"], "released");
    assert_eq!(dropped["by"], serde_json::json!(["bob"]));
    assert_eq!(dropped["await"], awaiting);
    assert!(
        env.state("agent")["pending_approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        tick(&env, "agent"),
        "awaiting-approval",
        "bob's approval did not carry over"
    );
}

#[test]
fn approve_names_the_await_it_approves() {
    let env = Env::new();
    awaiting_loop(&env, "agent", "");
    let id = env.state("agent")["awaiting"]["id"].as_str().unwrap().to_owned();
    let wrong = env.fails(1, &["approve", "agent", "--await", "aw-1"]);
    assert!(
        wrong.contains(&format!("await aw-1 is not pending; {id} is")),
        "{wrong}"
    );
    let said = env.ok(&["approve", "agent", "--await", &id]);
    assert!(
        said.contains(&format!("approved await {id} of loop agent")),
        "{said}"
    );
    assert_eq!(last(&env, "agent", "approved")["await"], id.as_str());
    let asked = last(&env, "agent", "awaiting");
    assert_eq!(asked["id"], id.as_str());
    assert_eq!(asked["gates"][0]["gate"], "stock:approve-every");
    assert!(
        asked["gates"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("approval needed"),
        "{asked}"
    );
}

#[test]
fn reject_is_refused_without_a_pending_await_unless_told_to_halt() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let (state, history) = (env.state("demo"), env.history("demo"));
    let err = env.fails(1, &["reject", "demo"]);
    assert!(
        err.contains("no await is pending") && err.contains("--halt"),
        "{err}"
    );
    assert_eq!((env.state("demo"), env.history("demo")), (state, history));
    env.ok(&["reject", "demo", "--halt", "--reason", "stop"]);
    assert_eq!(env.state("demo")["status"], "halted");
    // Rejecting an await names it.
    awaiting_loop(&env, "agent", "");
    let id = env.state("agent")["awaiting"]["id"].as_str().unwrap().to_owned();
    let said = env.ok(&["reject", "agent"]);
    assert!(said.contains(&format!("rejected await {id}")), "{said}");
    assert_eq!(last(&env, "agent", "rejected")["await"], id.as_str());
}

#[test]
fn a_non_operators_pause_is_refused_and_recorded() {
    if !users() {
        return;
    }
    let env = crate::files_only!("other OS users use the root's files");
    env.root_config("");
    env.new_loop(
        "demo",
        &format!("step = \"true\"\n[access]\noperators = [{OPS:?}]\n"),
    );
    shared(&env);
    let state = env.state("demo");
    let out = run_as(&env, LEAD, &["pause", "demo"]);
    assert_eq!(code(&out), Some(10), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("{LEAD} may not `pause`")) && said.contains(&format!("operators ({OPS})")),
        "{said}"
    );
    let after = env.state("demo");
    assert_eq!(after["status"], "active");
    assert_eq!(
        after["version"], state["version"],
        "a refusal is no commit: it is kept apart"
    );
    let refused = env.history("demo").pop().unwrap();
    assert_eq!(refused["kind"], "refused");
    assert_eq!(
        (
            refused["by"].as_str(),
            refused["action"].as_str(),
            refused["role"].as_str()
        ),
        (Some(LEAD), Some("pause"), Some("operators"))
    );
    assert_eq!(refused["actor"]["user"], LEAD);
    let ok = run_as(&env, OPS, &["pause", "demo"]);
    assert_eq!(code(&ok), Some(0), "{}", stderr(&ok));
    assert_eq!(env.state("demo")["status"], "paused");
    // A name in the environment changes nothing of who asks.
    let mut spoof = Command::new("runuser");
    spoof
        .args(["-u", LEAD, "--", BIN, "--root"])
        .arg(&env.root)
        .args(["resume", "demo"]);
    isolate(&mut spoof);
    let spoof = spoof.env("AUTOMATON_USER", OPS).output().unwrap();
    assert_eq!(code(&spoof), Some(10), "{}", stderr(&spoof));
}

#[test]
fn root_wide_roles_hold_for_every_loop_that_sets_none() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    env.new_loop(
        "own",
        &format!(
            "step = \"true\"\n[access]\noperators = [{:?}]\n",
            automaton::who::os_user()
        ),
    );
    env.root_config("[access]\noperators = [\"nobody\"]\n");
    for args in [
        &["pause", "demo"][..],
        &["resume", "demo"],
        &["tick", "demo"],
        &["check-gate", "demo", "--apply"],
        &["rm", "demo", "--force"],
        &["cancel", "demo"],
        &["edit", "demo"],
    ] {
        let err = env.fails(10, args);
        assert!(err.contains("operators (nobody)"), "{args:?}: {err}");
    }
    let kinds = env.history_kinds("demo");
    assert_eq!(kinds.iter().filter(|k| *k == "refused").count(), 7, "{kinds:?}");
    // Read-only commands and check-gate without --apply need no role.
    env.ok(&["status", "demo"]);
    env.ok(&["check-gate", "demo"]);
    // A loop's own list wins.
    env.ok(&["pause", "own"]);
}

/// A git repository with one commit, and the environment git needs to
/// commit in it.
pub(crate) fn repo(env: &Env) -> PathBuf {
    let repo = env.root.parent().unwrap().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "first"]);
    repo
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(GIT_ENV.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub(crate) const GIT_ENV: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "agent"),
    ("GIT_AUTHOR_EMAIL", "agent@example.com"),
    ("GIT_COMMITTER_NAME", "agent"),
    ("GIT_COMMITTER_EMAIL", "agent@example.com"),
];

#[test]
fn a_new_commit_voids_an_approval_bound_to_the_commit() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = repo(&env);
    awaiting_loop(
        &env,
        "agent",
        &format!(
            "[worktree]\nrepo = {:?}\nbranch = \"loop/agent\"\n[approval]\nbind = \"commit\"\n",
            repo.display().to_string()
        ),
    );
    let worktree = env.loop_dir("agent").join("worktree");
    let head = git(&worktree, &["rev-parse", "HEAD"]);
    assert_eq!(env.state("agent")["awaiting"]["head"], head.as_str());
    env.ok(&["approve", "agent"]);
    assert_eq!(last(&env, "agent", "approved")["head"], head.as_str());
    git(
        &worktree,
        &["commit", "-q", "--allow-empty", "-m", "after the approval"],
    );
    let new_head = git(&worktree, &["rev-parse", "HEAD"]);
    assert_eq!(
        tick(&env, "agent"),
        "awaiting-approval",
        "the approval was for the old commit"
    );
    let void = last(&env, "agent", "approvals-dropped");
    assert_eq!(
        (void["why"].as_str(), void["head"].as_str()),
        (Some("new-commit"), Some(new_head.as_str()))
    );
    assert!(
        env.state("agent")["pending_approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    env.ok(&["approve", "agent"]);
    assert_eq!(tick(&env, "agent"), "ran");
}

#[test]
fn each_tick_records_the_worktrees_head_before_and_after_its_step() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = repo(&env);
    let envs: String = GIT_ENV.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    env.new_loop(
        "agent",
        &format!(
            "step = \"{envs}git commit -q --allow-empty -m work\"\n[worktree]\nrepo = {:?}\nbranch = \"loop/agent\"\n",
            repo.display().to_string()
        ),
    );
    let before = git(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(tick(&env, "agent"), "ran");
    let after = git(&env.loop_dir("agent").join("worktree"), &["rev-parse", "HEAD"]);
    assert_ne!(before, after);
    let head = &env.state("agent")["last_tick"]["head"];
    assert_eq!(
        (
            head["branch"].as_str(),
            head["before"].as_str(),
            head["after"].as_str()
        ),
        (Some("loop/agent"), Some(before.as_str()), Some(after.as_str()))
    );
    assert_eq!(&last(&env, "agent", "tick")["head"], head);
}

#[test]
fn review_shows_the_await_the_ticks_and_the_work_since_the_last_approval() {
    let env = crate::files_only!("the worktree and run output are this host's");
    let repo = repo(&env);
    let envs: String = GIT_ENV.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    let step = format!(
        "for i in $(seq 1 30); do echo out $i; done; echo cost_usd=0.5 > \\\"$AUTOMATON_METRICS\\\"; \
         echo $AUTOMATON_TICK >> f; git add f; {envs}git commit -q -m tick-$AUTOMATON_TICK"
    );
    awaiting_loop(
        &env,
        "agent",
        &format!(
            "[worktree]\nrepo = {:?}\nbranch = \"loop/agent\"\n",
            repo.display().to_string()
        ),
    );
    // The loop above runs `true`; give it the committing step from here on.
    let config = env.loop_dir("agent").join("loop.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replacen("step = \"true\"", &format!("step = \"{step}\""), 1),
    )
    .unwrap();
    env.ok(&["approve", "agent"]);
    assert_eq!(tick(&env, "agent"), "ran");
    assert_eq!(tick(&env, "agent"), "awaiting-approval");
    let v: Value = serde_json::from_str(&env.ok(&["review", "agent", "--json"])).unwrap();
    let id = env.state("agent")["awaiting"]["id"].clone();
    assert_eq!(v["awaiting"]["id"], id);
    assert_eq!(v["awaiting"]["gates"][0]["gate"], "stock:approve-every");
    let ticks: Vec<u64> = v["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tick"].as_u64().unwrap())
        .collect();
    assert_eq!(ticks, [2, 3], "the ticks since the approval that released tick 2");
    let out = &v["ticks"][0]["output"]["step.out"];
    assert_eq!(out.as_array().unwrap().len(), 20);
    assert_eq!(out[19], "out 30");
    assert_eq!(v["ticks"][1]["gates"][0]["decision"], "await-approval");
    assert_eq!(v["metrics_since"]["cost_usd"], 0.5);
    assert_eq!(v["totals"]["cost_usd"], 0.5);
    assert_eq!(v["work"]["commits"].as_array().unwrap().len(), 1, "{v}");
    assert!(v["work"]["commits"][0].as_str().unwrap().ends_with("tick-2"));
    assert!(v["work"]["diffstat"].as_str().unwrap().contains("f | 1 +"), "{v}");
    let mut pinned = crate::snapshots::settings(&env);
    pinned.add_filter(r"\b[0-9a-f]{12}\b", "[COMMIT]");
    pinned.add_filter(r"(?m)^  [0-9a-f]{7,} ", "  [COMMIT] ");
    pinned.bind(|| insta::assert_snapshot!("review", env.ok(&["review", "agent"])));
    let text = env.ok(&["review", "agent", "--diff"]);
    assert!(
        text.lines()
            .take_while(|l| !l.starts_with("diff --git"))
            .all(|l| l.chars().count() <= 80),
        "{text}"
    );
    assert!(
        text.contains(&format!("await {}", id.as_str().unwrap())),
        "{text}"
    );
    assert!(text.contains("\n+2\n"), "the patch: {text}");
}

#[test]
fn review_links_to_the_consoles_page_when_a_server_url_is_set() {
    let env = Env::new();
    awaiting_loop(&env, "plain", "");
    assert!(!env.ok(&["review", "plain"]).contains("console"));
    let v: Value = serde_json::from_str(&env.ok(&["review", "plain", "--json"])).unwrap();
    assert!(v.get("link").is_none(), "{v}");

    awaiting_loop(
        &env,
        "linked",
        "[server]\nurl = \"https://console.example.com/\"\n",
    );
    let page = "https://console.example.com/loops/linked/review";
    let text = env.ok(&["review", "linked"]);
    assert!(text.contains(&format!("review in the console: {page}")), "{text}");
    let v: Value = serde_json::from_str(&env.ok(&["review", "linked", "--json"])).unwrap();
    assert_eq!(v["link"], page);
}

/// A daemon this test started, killed if the test ends before it stops it.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The daemon run as OS user `user` on `env`'s root, its stderr in `log`:
/// this test's own child (not runuser's), so a signal reaches it.
fn daemon_as(env: &Env, user: &str, log: &Path) -> Running {
    use std::os::unix::process::CommandExt;
    let user = nix::unistd::User::from_name(user).unwrap().unwrap();
    let mut c = Command::new(BIN);
    c.arg("--root").arg(&env.root).arg("daemon");
    c.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    isolate(&mut c);
    c.env_remove("AUTOMATON_USER")
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    Running(c.spawn().unwrap())
}

/// Stops a daemon with SIGTERM; its exit code.
fn stop(mut daemon: Running) -> Option<i32> {
    let pid = nix::unistd::Pid::from_raw(daemon.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    daemon.0.wait().unwrap().code()
}

fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn fires(env: &Env, name: &str) -> Vec<Value> {
    serde_json::from_str(&env.ok(&["fires", name, "--json"])).unwrap()
}

/// The daemon's ticks are its user's, checked as `tick` run by that user
/// is: a daemon run by someone who is not one of the loop's operators
/// ticks nothing, says so once, and records each firing as refused.
#[test]
fn a_daemon_ticks_only_the_loops_its_user_operates() {
    if !users() {
        return;
    }
    let env = crate::files_only!("other OS users use the root's files");
    env.root_config("");
    env.new_often_loop(
        "ops-only",
        &format!("step = \"true\"\n[schedule]\nevery = \"100ms\"\n[access]\noperators = [{OPS:?}]\n"),
    );
    shared(&env);
    let log = env.root.with_file_name("daemon-lead.log");
    let lead = daemon_as(&env, LEAD, &log);
    until("three firings refused", || {
        fires(&env, "ops-only")
            .last()
            .is_some_and(|r| r["why"] == "refused" && r["count"].as_u64() >= Some(3))
    });
    assert_eq!(stop(lead), Some(0));
    open_up(&env.root);
    assert_eq!(env.state("ops-only")["tick"], 0, "not ticked");
    let said = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("is not ticked by this daemon"))
        .collect();
    assert_eq!(lines.len(), 1, "said once: {said}");
    assert!(
        lines[0].contains("\"ops-only\"")
            && lines[0].contains(&format!("runs as {LEAD}"))
            && lines[0].contains(&format!("operators ({OPS})")),
        "{said}"
    );
    let record = fires(&env, "ops-only").pop().unwrap();
    assert_eq!(
        (&record["kind"], &record["why"]),
        (&"skipped".into(), &"refused".into())
    );
    let status = env.ok(&["status", "ops-only"]);
    assert!(
        status.contains("not ticked") && status.contains(&format!("the daemon runs as {LEAD}")),
        "{status}"
    );
    // One of its operators runs the daemon: it ticks.
    let ops = daemon_as(&env, OPS, &env.root.with_file_name("daemon-ops.log"));
    until("a tick", || env.state("ops-only")["tick"].as_u64() >= Some(1));
    assert_eq!(stop(ops), Some(0));
    open_up(&env.root);
    let ran = fires(&env, "ops-only");
    assert!(ran.iter().any(|r| r["kind"] == "ran"), "{ran:?}");
    assert!(!env.ok(&["status", "ops-only"]).contains("not ticked"));
}

/// On the file store the root-wide access is automaton.toml's: nothing to
/// record, and `access show` says where it is read from.
#[test]
fn the_file_stores_root_wide_access_is_its_automaton_toml() {
    let env = Env::file();
    env.root_config(&format!(
        "delegates = [{:?}]\n[access]\napprovers = [\"ann\"]\n",
        automaton::who::os_user()
    ));
    let err = env.fails(2, &["access", "import"]);
    assert!(
        err.contains("the root-wide access of a root on the file store is its ")
            && err.contains("automaton.toml: there is nothing to record"),
        "{err}"
    );
    let shown: Value = serde_json::from_str(&env.ok(&["access", "show", "--json"])).unwrap();
    assert_eq!(shown["from"], "file");
    assert_eq!(shown["access"]["approvers"], serde_json::json!(["ann"]));
    assert!(shown["recorded"].is_null());
    let text = env.ok(&["access", "show"]);
    assert!(
        text.starts_with("root-wide access (from ")
            && text.contains("approvers: ann; operators: anyone; viewers: anyone"),
        "{text}"
    );
}
