//! Tests for worktrees, against real git repositories in temporary
//! directories (configured locally, independent of the user's git config).

use std::path::Path;
use std::process::Command;

use super::*;

/// Runs git for the test's own setup, ignoring global and system config.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A temporary directory holding `repo/`, a repository with one commit on `main`.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["symbolic-ref", "HEAD", "refs/heads/main"]);
    for (k, v) in [
        ("user.name", "Test"),
        ("user.email", "test@example.com"),
        ("commit.gpgsign", "false"),
    ] {
        git(&repo, &["config", k, v]);
    }
    commit(&repo, "a.txt", "one\n");
    (dir, repo)
}

fn commit(dir: &Path, file: &str, content: &str) {
    std::fs::write(dir.join(file), content).unwrap();
    git(dir, &["add", file]);
    git(dir, &["commit", "-q", "-m", file]);
}

#[test]
fn creates_the_branch_and_worktree_then_reuses_them() {
    let (dir, repo) = repo();
    let wt = dir.path().join("wts/loop");
    assert_eq!(ensure(&repo, "loop/x", &wt).unwrap(), Ensured::Created);
    assert_eq!(git(&wt, &["symbolic-ref", "--short", "HEAD"]), "loop/x");
    assert_eq!(
        git(&wt, &["rev-parse", "HEAD"]),
        git(&repo, &["rev-parse", "main"])
    );
    assert_eq!(ensure(&repo, "loop/x", &wt).unwrap(), Ensured::Existed);
    assert_eq!(
        ensure(&repo, "loop/x", &wt.join("../loop")).unwrap(),
        Ensured::Existed
    );
}

#[test]
fn an_existing_branch_is_checked_out_not_recreated() {
    let (dir, repo) = repo();
    git(&repo, &["branch", "loop/x"]);
    let at_branch = git(&repo, &["rev-parse", "loop/x"]);
    commit(&repo, "b.txt", "two\n");
    let wt = dir.path().join("wt");
    assert_eq!(ensure(&repo, "loop/x", &wt).unwrap(), Ensured::Created);
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]), at_branch);
}

#[test]
fn a_worktree_deleted_by_hand_is_added_again() {
    let (dir, repo) = repo();
    let wt = dir.path().join("wt");
    ensure(&repo, "loop/x", &wt).unwrap();
    std::fs::remove_dir_all(&wt).unwrap();
    assert_eq!(ensure(&repo, "loop/x", &wt).unwrap(), Ensured::Created);
    assert_eq!(git(&wt, &["symbolic-ref", "--short", "HEAD"]), "loop/x");
}

#[test]
fn a_directory_that_is_not_a_repository_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for repo in [dir.path().to_owned(), dir.path().join("missing")] {
        let err = ensure(&repo, "loop/x", &dir.path().join("wt")).unwrap_err();
        assert!(
            matches!(&err, WorktreeError::NotARepo { repo: r, .. } if *r == repo),
            "{err:?}"
        );
        assert!(err.to_string().contains(&repo.display().to_string()), "{err}");
    }
}

#[test]
fn a_branch_checked_out_elsewhere_is_refused() {
    let (dir, repo) = repo();
    let err = ensure(&repo, "main", &dir.path().join("wt")).unwrap_err();
    match err {
        WorktreeError::CheckedOutElsewhere { branch, at } => {
            assert_eq!(branch, "main");
            assert!(same_path(&at, &repo), "{}", at.display());
        }
        other => panic!("{other:?}"),
    }
    let wt = dir.path().join("wt");
    ensure(&repo, "loop/a", &wt).unwrap();
    let err = ensure(&repo, "loop/b", &wt).unwrap_err();
    assert!(
        matches!(&err, WorktreeError::OtherBranch { found, .. } if found.contains("loop/a")),
        "{err:?}"
    );
}

#[test]
fn bad_branch_names_are_refused() {
    let (dir, repo) = repo();
    for branch in ["-f", "a..b", "x y", ""] {
        let err = ensure(&repo, branch, &dir.path().join("wt")).unwrap_err();
        assert!(
            matches!(&err, WorktreeError::BadBranch { branch: b } if b == branch),
            "{err:?}"
        );
    }
}

#[test]
fn missing_git_is_a_typed_error() {
    let (dir, repo) = repo();
    let git = Git {
        program: "automaton-no-such-git".into(),
        ..Git::default()
    };
    let err = ensure_with(&git, &repo, "loop/x", &dir.path().join("wt")).unwrap_err();
    assert!(
        matches!(&err, WorktreeError::GitNotFound { program } if program == "automaton-no-such-git"),
        "{err:?}"
    );
    assert!(matches!(
        snapshot_with(&git, &repo),
        Err(WorktreeError::GitNotFound { .. })
    ));
}

#[test]
fn snapshots_differ_exactly_when_the_worktree_changed() {
    let (_dir, repo) = repo();
    let clean = snapshot(&repo).unwrap();
    assert_eq!(clean, snapshot(&repo).unwrap());
    assert!(clean.head.is_some() && clean.status.is_empty() && clean.contents.is_empty());

    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    let edited = snapshot(&repo).unwrap();
    assert_ne!(edited, clean);
    assert_eq!(edited, snapshot(&repo).unwrap());

    // Same status line (" M a.txt"), different content.
    std::fs::write(repo.join("a.txt"), "three\n").unwrap();
    let edited_again = snapshot(&repo).unwrap();
    assert_eq!(edited_again.status, edited.status);
    assert_ne!(edited_again, edited);

    std::fs::create_dir(repo.join("new")).unwrap();
    std::fs::write(repo.join("new/file"), "x").unwrap();
    let untracked = snapshot(&repo).unwrap();
    assert_ne!(untracked, edited_again);

    std::fs::remove_file(repo.join("a.txt")).unwrap();
    let deleted = snapshot(&repo).unwrap();
    assert_ne!(deleted, untracked);

    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "more"]);
    let committed = snapshot(&repo).unwrap();
    assert_ne!(committed.head, clean.head);
    assert!(committed.status.is_empty());
}

#[test]
fn an_unborn_branch_has_no_head() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    let snap = snapshot(dir.path()).unwrap();
    assert_eq!(snap.head, None);
    std::fs::write(dir.path().join("f"), "x").unwrap();
    assert_ne!(snapshot(dir.path()).unwrap(), snap);
}

#[test]
fn snapshot_outside_a_repository_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = snapshot(dir.path()).unwrap_err();
    assert!(
        matches!(&err, WorktreeError::Git { dir: d, .. } if d == dir.path()),
        "{err:?}"
    );
}

#[test]
fn a_non_empty_directory_in_the_way_is_gits_error_with_its_message() {
    let (dir, repo) = repo();
    let wt = dir.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    std::fs::write(wt.join("keep"), "mine").unwrap();
    match ensure(&repo, "loop/x", &wt).unwrap_err() {
        WorktreeError::Git { args, stderr, .. } => {
            assert!(args.starts_with("worktree add"), "{args}");
            assert!(!stderr.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read_to_string(wt.join("keep")).unwrap(), "mine");
}

/// An executable shell script `name` in `dir` running `body`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn the_repositorys_hooks_filters_fsmonitor_and_diff_programs_never_run() {
    let (dir, repo) = repo();
    std::fs::write(repo.join(".gitattributes"), "* filter=mark diff=mark\n").unwrap();
    git(&repo, &["add", ".gitattributes"]);
    git(&repo, &["commit", "-q", "-m", "attributes"]);
    let first = git(&repo, &["rev-parse", "HEAD~1"]);
    let last = git(&repo, &["rev-parse", "HEAD"]);
    // From here on the repository is what a step could make of it: every
    // program it names leaves a marker when it runs.
    let markers = dir.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let m = markers.display();
    let hooks = repo.join(".git/hooks");
    for hook in ["post-checkout", "reference-transaction", "post-index-change"] {
        script(&hooks, hook, &format!("touch {m}/hook-{hook}"));
    }
    let prog = |name: &str, body: &str| script(&bin, name, &format!("touch {m}/{name}\n{body}"));
    let settings = [
        ("core.fsmonitor", prog("fsmonitor", "exit 0")),
        ("filter.mark.clean", prog("clean", "cat")),
        ("filter.mark.smudge", prog("smudge", "cat")),
        ("filter.mark.required", "true".into()),
        ("diff.mark.textconv", prog("textconv", "cat \"$1\"")),
        ("diff.mark.command", prog("diff-command", "exit 0")),
        ("diff.external", prog("diff-external", "exit 0")),
        ("core.pager", prog("pager", "cat")),
        ("log.showSignature", "true".into()),
    ];
    for (key, value) in &settings {
        git(&repo, &["config", key, &value.display().to_string()]);
    }

    let wt = dir.path().join("wt");
    ensure(&repo, "loop/x", &wt).unwrap();
    std::fs::write(wt.join("a.txt"), "edited\n").unwrap();
    std::fs::write(wt.join("new.txt"), "untracked\n").unwrap();
    let snap = snapshot(&wt).unwrap();
    assert_eq!(snap.dirty(), [" M a.txt", "?? new.txt"]);
    let patch = uncommitted_diff(&wt, &snap).unwrap();
    assert!(
        patch.contains("+edited") && patch.contains("+untracked"),
        "{patch}"
    );
    assert!(
        diff(&wt, &first, &last, false)
            .unwrap()
            .contains("+* filter=mark")
    );
    assert_eq!(log(&wt, &first, &last).unwrap().len(), 1);

    let ran: Vec<_> = std::fs::read_dir(&markers)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(ran.is_empty(), "these ran: {ran:?}");
}

/// Whether process `pid` is gone (or a zombie left to be reaped), waiting
/// for it a while: a killed process takes a moment to be reaped.
fn gone(pid: i32) -> bool {
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
        if matches!(state, None | Some("Z")) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn what_git_starts_is_killed_with_it_and_a_git_past_its_time_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let started = |name: &str, then: &str| Git {
        program: script(
            dir.path(),
            name,
            &format!("sleep 1000 &\necho $! >> {}\n{then}", pids.display()),
        )
        .into(),
        timeout: std::time::Duration::from_millis(500),
        ..Git::default()
    };
    // Ends at once, leaving a child behind holding its output.
    let out = started("quick", "echo done")
        .run(dir.path(), &["status"])
        .unwrap();
    assert_eq!(out, b"done\n");
    // Never ends.
    let err = started("stuck", "sleep 1000")
        .run(dir.path(), &["status"])
        .unwrap_err();
    assert!(
        matches!(&err, WorktreeError::Timeout { args, .. } if args == "status"),
        "{err:?}"
    );
    assert!(err.to_string().contains("`git status`"), "{err}");
    let pids = std::fs::read_to_string(&pids).unwrap();
    for pid in pids.lines() {
        assert!(gone(pid.parse().unwrap()), "process {pid} outlived its git");
    }
}

#[test]
fn files_git_is_told_not_to_look_at_are_still_seen() {
    let (_dir, repo) = repo();
    commit(&repo, "b.txt", "two\n");
    let clean = snapshot(&repo).unwrap();
    git(&repo, &["update-index", "--assume-unchanged", "a.txt"]);
    git(&repo, &["update-index", "--skip-worktree", "b.txt"]);
    assert_eq!(snapshot(&repo).unwrap(), clean, "flags alone change nothing");

    std::fs::write(repo.join("a.txt"), "evil\n").unwrap();
    std::fs::write(repo.join("b.txt"), "evil too\n").unwrap();
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "status is blind to them"
    );
    let edited = snapshot(&repo).unwrap();
    assert_ne!(edited.digest(), clean.digest());
    assert_eq!(
        edited.dirty(),
        [
            " M a.txt (marked assume-unchanged)",
            " M b.txt (marked skip-worktree)"
        ]
    );

    // A skip-worktree file that is not there is a sparse checkout's.
    std::fs::remove_file(repo.join("b.txt")).unwrap();
    std::fs::remove_file(repo.join("a.txt")).unwrap();
    assert_eq!(
        snapshot(&repo).unwrap().dirty(),
        [" D a.txt (marked assume-unchanged)"]
    );
}

#[test]
fn a_worktrees_config_cannot_point_git_at_another_directory() {
    let (dir, repo) = repo();
    let wt = dir.path().join("wt");
    ensure(&repo, "loop/x", &wt).unwrap();
    let clean = snapshot(&wt).unwrap();
    // A frozen copy, and the worktree's own config pointing git at it.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::write(copy.join("a.txt"), "one\n").unwrap();
    git(&wt, &["config", "extensions.worktreeConfig", "true"]);
    git(
        &wt,
        &["config", "--worktree", "core.worktree", copy.to_str().unwrap()],
    );
    std::fs::write(wt.join("a.txt"), "evil\n").unwrap();
    assert_eq!(git(&wt, &["status", "--porcelain"]), "", "git looks at the copy");
    let edited = snapshot(&wt).unwrap();
    assert_ne!(edited, clean);
    assert_eq!(edited.dirty(), [" M a.txt"]);
}

#[test]
fn a_change_is_seen_even_with_its_size_and_mtime_put_back_by_its_ctime() {
    let (_dir, repo) = repo();
    let clean = snapshot(&repo).unwrap();
    git(&repo, &["config", "core.trustctime", "false"]);
    git(&repo, &["config", "core.checkStat", "minimal"]);
    let file = repo.join("a.txt");
    let set_mtime = |t| {
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(t)
            .unwrap();
    };
    // An hour old in the index, so git does not think it racy.
    let mtime = std::time::SystemTime::now() - std::time::Duration::from_hours(1);
    set_mtime(mtime);
    git(&repo, &["update-index", "--refresh"]);
    // Index entries keep whole seconds: the change's ctime is another.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&file, "evi\n").unwrap();
    set_mtime(mtime);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "", "git trusts the stat");
    assert_eq!(snapshot(&repo).unwrap().dirty(), [" M a.txt"]);
    assert_ne!(snapshot(&repo).unwrap(), clean);
}
