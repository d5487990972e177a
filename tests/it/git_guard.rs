//! The worktree's git, against what a step can do to its repository: its
//! config naming programs (fsmonitor, filters, textconv) and its hooks run
//! nothing of automaton's, nothing git starts outlives a tick, and an
//! approval with `bind = "commit"` is bound to the whole worktree, what is
//! not committed too.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::access::{GIT_ENV, git, repo};
use crate::common::{Env, gone};

/// An executable shell script at `path` running `body`.
fn script(path: &Path, body: &str) -> PathBuf {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_owned()
}

/// A git repository holding `a.txt`, with attributes that give every file
/// the filter and the diff driver `mark` (defined by no config yet).
fn marked_repo(env: &Env) -> PathBuf {
    let repo = repo(env);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    std::fs::write(repo.join(".gitattributes"), "* filter=mark diff=mark\n").unwrap();
    git(&repo, &["add", "a.txt", ".gitattributes"]);
    git(&repo, &["commit", "-q", "-m", "a.txt"]);
    repo
}

/// The git identity a step's own commits need, as a prefix of a command.
fn identity() -> String {
    GIT_ENV.iter().map(|(k, v)| format!("{k}={v} ")).collect()
}

fn worktree_toml(repo: &Path) -> String {
    format!(
        "[worktree]\nrepo = {:?}\nbranch = \"loop/agent\"\n",
        repo.display().to_string()
    )
}

fn tick(env: &Env, name: &str) -> String {
    let v: Value = serde_json::from_str(&env.ok(&["tick", name, "--json"])).unwrap();
    v["outcome"].as_str().unwrap().to_owned()
}

fn last(env: &Env, name: &str, kind: &str) -> Value {
    env.history(name)
        .into_iter()
        .rev()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {:?}", env.history_kinds(name)))
}

/// The names of the files in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn an_fsmonitor_the_step_sets_never_runs_and_the_tick_ends() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = repo(&env);
    let dir = env.root.parent().unwrap().to_owned();
    let pids = dir.join("fsmonitor-pids");
    // What the step sets: a monitor that never answers.
    let monitor = script(
        &dir.join("fsmonitor"),
        &format!("echo $$ >> {}\nexec sleep 100000", pids.display()),
    );
    env.new_loop(
        "agent",
        &format!(
            "step = \"git config core.fsmonitor {}\"\n{}",
            monitor.display(),
            worktree_toml(&repo)
        ),
    );
    let mut tick = env
        .cmd()
        .args(["tick", "agent"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A bound for the test itself, far past what a tick takes: a tick that
    // waits on the monitor never ends.
    let bound = Instant::now() + Duration::from_mins(2);
    while tick.try_wait().unwrap().is_none() && Instant::now() < bound {
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = tick.try_wait().unwrap().is_some();
    if !ended {
        tick.kill().unwrap();
        tick.wait().unwrap();
    }
    let started: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap_or_default()
        .lines()
        .map(|p| p.parse().unwrap())
        .collect();
    for pid in &started {
        // Leave nothing behind, whatever the outcome.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(ended, "the tick never ended");
    assert!(started.is_empty(), "the monitor ran: {started:?}");
    assert!(started.iter().all(|&p| gone(p)));
    let worktree = env.loop_dir("agent").join("worktree");
    assert_eq!(
        git(&worktree, &["config", "core.fsmonitor"]),
        monitor.display().to_string(),
        "the step did set it"
    );
    assert_eq!(last(&env, "agent", "tick")["outcome"], "ran");
    assert_eq!(env.state("agent")["tick"], 1);
    let status: Value = serde_json::from_str(&env.ok(&["status", "agent", "--json"])).unwrap();
    assert_eq!(status.get("lock"), Some(&Value::Null), "the lock is free");
    // And the next tick too.
    assert_eq!(self::tick(&env, "agent"), "ran");
}

#[test]
fn hooks_filters_and_textconv_of_the_repository_never_run() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = marked_repo(&env);
    let dir = env.root.parent().unwrap().to_owned();
    let markers = dir.join("markers");
    std::fs::create_dir(&markers).unwrap();
    let m = markers.display();
    let marking = |name: &str, then: &str| {
        script(&dir.join(name), &format!("touch {m}/{name}\n{then}"))
            .display()
            .to_string()
    };
    // Already there when the worktree is added: a hook and a smudge filter.
    script(
        &repo.join(".git/hooks/post-checkout"),
        &format!("touch {m}/post-checkout"),
    );
    git(
        &repo,
        &["config", "filter.mark.smudge", &marking("smudge", "cat")],
    );
    // Set by the step once it committed: a clean filter, a textconv and an
    // external diff, then a change left uncommitted.
    let arm = script(
        &dir.join("arm"),
        &format!(
            "git config filter.mark.clean {}\ngit config diff.mark.textconv {}\n\
             git config diff.mark.command {}\necho dirty >> a.txt\necho new > new.txt",
            marking("clean", "cat"),
            marking("textconv", "cat \"$1\""),
            marking("diff-command", "exit 0"),
        ),
    );
    env.new_loop(
        "agent",
        &format!(
            "step = \"echo $AUTOMATON_TICK >> a.txt && {}git commit -qam work-$AUTOMATON_TICK && {}\"\n{}",
            identity(),
            arm.display(),
            worktree_toml(&repo)
        ),
    );
    assert_eq!(tick(&env, "agent"), "ran");
    let review = env.ok(&["review", "agent", "--diff"]);
    assert_eq!(names(&markers), Vec::<String>::new(), "these ran");
    assert!(review.contains("+dirty") && review.contains("+new"), "{review}");
    assert!(review.contains("+1"), "the committed patch: {review}");
}

#[test]
fn an_approval_is_void_once_the_worktree_changes_uncommitted() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = repo(&env);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "a.txt"]);
    let flag = env.root.parent().unwrap().join("edit");
    env.new_loop(
        "agent",
        &format!(
            "step = \"if [ -e {} ]; then echo evil >> a.txt; echo run-me > new.sh; fi\"\n\
             [[gate]]\nstock = \"approve-every\"\nparams = {{ every = 2 }}\n{}\
             [approval]\nbind = \"commit\"\n",
            flag.display(),
            worktree_toml(&repo)
        ),
    );
    assert_eq!(tick(&env, "agent"), "ran");
    let worktree = env.loop_dir("agent").join("worktree");
    let head = git(&worktree, &["rev-parse", "HEAD"]);
    // Approved ahead on a clean worktree at this commit...
    env.ok(&["approve", "agent", "--ahead"]);
    let approved = last(&env, "agent", "approved");
    assert_eq!(approved["head"], head.as_str());
    // ...then the step changes files without committing.
    std::fs::write(&flag, "").unwrap();
    assert_eq!(tick(&env, "agent"), "ran");
    assert_eq!(git(&worktree, &["rev-parse", "HEAD"]), head, "no commit");
    assert_eq!(
        tick(&env, "agent"),
        "awaiting-approval",
        "the approval was for another worktree"
    );
    let snapshot = approved["snapshot"]
        .as_str()
        .expect("the snapshot it is bound to");
    assert_eq!(snapshot.len(), 64);
    let void = last(&env, "agent", "approvals-dropped");
    assert_eq!(
        (void["why"].as_str(), void["head"].as_str()),
        (Some("worktree-changed"), Some(head.as_str()))
    );
    assert_ne!(void["snapshot"], snapshot);
    assert_eq!(void["dirty"], serde_json::json!([" M a.txt", "?? new.sh"]));
    assert!(!env.history_kinds("agent").contains(&"approvals-used".to_owned()));
    let awaiting = &env.state("agent")["awaiting"];
    assert_eq!(awaiting["snapshot"], void["snapshot"]);

    // The review shows the uncommitted work, and its patch with --diff.
    let v: Value = serde_json::from_str(&env.ok(&["review", "agent", "--json"])).unwrap();
    assert_eq!(
        v["work"]["uncommitted"],
        serde_json::json!([" M a.txt", "?? new.sh"]),
        "{v}"
    );
    let text = env.ok(&["review", "agent", "--diff"]);
    assert!(text.contains("uncommitted in the worktree"), "{text}");
    assert!(text.contains("+evil") && text.contains("+run-me"), "{text}");

    // Approved on this worktree, it releases the await.
    env.ok(&["approve", "agent"]);
    assert_eq!(tick(&env, "agent"), "ran");
}

#[test]
fn a_patch_past_its_bound_is_cut_and_says_how_much_more_on_the_cli_and_the_api() {
    let env = crate::files_only!("the worktree is this host's");
    let repo = repo(&env);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "a.txt"]);
    // A commit of about 3 MB: its patch is past the 1 MiB bound.
    env.new_loop(
        "agent",
        &format!(
            "step = \"seq 1 400000 > big.txt && git add big.txt && {}git commit -qm big\"\n{}",
            identity(),
            worktree_toml(&repo)
        ),
    );
    assert_eq!(tick(&env, "agent"), "ran");
    let bound = 1024 * 1024;
    let check = |patch: &str| {
        let last = patch.lines().last().unwrap_or_default();
        let more: u64 = last
            .strip_prefix("[truncated, ")
            .and_then(|l| l.strip_suffix(" bytes more]"))
            .unwrap_or_else(|| panic!("no truncation line: {last:?}"))
            .parse()
            .unwrap();
        assert!(patch.len() <= bound + 64, "{} bytes", patch.len());
        assert!(more > 1_500_000, "{more} bytes more");
        assert!(
            patch.starts_with("diff --git a/big.txt b/big.txt"),
            "{}",
            &patch[..80]
        );
    };
    let review: Value = serde_json::from_str(&env.ok(&["review", "agent", "--diff", "--json"])).unwrap();
    check(review["work"]["patch"].as_str().unwrap());
    let token = crate::serve::user(&env, "ann");
    let s = crate::serve::Server::start(&env, &[]);
    let (status, body) = crate::serve::get(&s, "/api/loops/agent/review?diff=true", &token);
    assert_eq!(status, 200, "{body}");
    assert!(body.len() < 2 * bound, "{} bytes answered", body.len());
    let v: Value = serde_json::from_str(&body).unwrap();
    check(v["work"]["patch"].as_str().unwrap());
}
