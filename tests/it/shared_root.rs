//! A root shared by the members of an OS group (`init --group`): each uses
//! it as themselves, whatever their umask, and is recorded so; someone
//! outside the group is kept out by the OS; `doctor` names a path the
//! members could not use or that anyone could write, and its owner's
//! `--fix` mends it. The tests make real OS users and a group and run the
//! binary as them: they need root, and say so when skipped.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::access::{LEAD, OPS, QA, code, stderr, users};
use crate::common::{BIN, isolate};

/// The group [`LEAD`] and [`QA`] share roots with; [`OPS`] is not in it.
const GROUP: &str = "atmshare";

/// Makes [`GROUP`] with [`LEAD`] and [`QA`] in it, once per run; false
/// when the users cannot be made (the suite does not run as root).
fn group() -> bool {
    static MADE: OnceLock<bool> = OnceLock::new();
    *MADE.get_or_init(|| {
        if !users() {
            return false;
        }
        let known = Command::new("getent").args(["group", GROUP]).output().unwrap();
        if !known.status.success() {
            let made = Command::new("groupadd").arg(GROUP).status().unwrap();
            assert!(made.success(), "groupadd {GROUP}");
        }
        for user in [LEAD, QA] {
            let added = Command::new("usermod")
                .args(["-a", "-G", GROUP, user])
                .status()
                .unwrap();
            assert!(added.success(), "usermod -aG {GROUP} {user}");
        }
        true
    })
}

/// A group's root not yet made, in a directory every user may pass.
struct Shared {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Shared {
    /// `automaton init --group` run by root, as an administrator would.
    fn new() -> Shared {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path().join("root");
        // An editor that sets the step's timeout.
        let editor = dir.path().join("editor");
        std::fs::write(&editor, "#!/bin/sh\nsed -i '1i timeout = \"5m\"' \"$1\"\n").unwrap();
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
        let shared = Shared { dir, root };
        let out = shared.cmd(None, "022", &["init", "--group", GROUP]);
        assert_eq!(code(&out), Some(0), "{}", stderr(&out));
        shared
    }

    /// The binary run as `user` (this process's, root, when `None`) with
    /// umask `umask`, on the root.
    fn cmd(&self, user: Option<&str>, umask: &str, args: &[&str]) -> Output {
        let script = format!("umask {umask}; exec \"$@\"");
        let mut c = if let Some(user) = user {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--", "sh", "-c", &script, "sh"]);
            c
        } else {
            let mut c = Command::new("sh");
            c.args(["-c", &script, "sh"]);
            c
        };
        c.arg(BIN).arg("--root").arg(&self.root).args(args);
        isolate(&mut c);
        c.env_remove("AUTOMATON_USER")
            .env("VISUAL", self.dir.path().join("editor"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs as `user` with a umask that would keep everything private,
    /// and must succeed; its standard output.
    fn ok(&self, user: &str, args: &[&str]) -> String {
        let out = self.cmd(Some(user), "077", args);
        assert_eq!(code(&out), Some(0), "{user} {args:?}: {}", stderr(&out));
        for refusal in ["not using the gate cache", "cached gate not used"] {
            assert!(
                !stderr(&out).contains(refusal),
                "{user} {args:?}: {}",
                stderr(&out)
            );
        }
        String::from_utf8(out.stdout).unwrap()
    }

    /// A loop made by `user`, from `toml`.
    fn new_loop(&self, user: &str, name: &str, toml: &str) {
        let file = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, toml).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        self.ok(user, &["new", name, "--from", file.to_str().unwrap()]);
    }

    fn loop_dir(&self, name: &str) -> PathBuf {
        self.root.join("loops").join(name)
    }

    fn history(&self, name: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.loop_dir(name).join("history.jsonl")).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn doctor(&self, user: Option<&str>, fix: bool) -> Vec<Value> {
        let mut args = vec!["doctor", "--json"];
        if fix {
            args.push("--fix");
        }
        let out = self.cmd(user, "077", &args);
        let report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        report["root"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "modes" && f["level"] != "ok")
            .cloned()
            .collect()
    }
}

fn gid() -> u32 {
    nix::unistd::Group::from_name(GROUP)
        .unwrap()
        .unwrap()
        .gid
        .as_raw()
}

/// Every path under `dir` that is not its group's to use: a directory
/// not 02770 at least, a file not 0660 at least, or another group's; a
/// user's own gate cache (`cache/gates/<uid>`) is theirs alone.
fn not_the_groups(dir: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = path.symlink_metadata().unwrap();
            if path.parent().is_some_and(|p| p.ends_with("cache/gates")) && meta.is_dir() {
                continue;
            }
            let want = if meta.is_dir() { 0o2770 } else { 0o660 };
            if meta.is_dir() {
                stack.push(path.clone());
            }
            if meta.gid() != gid() || meta.mode() & want != want || meta.mode() & 0o002 != 0 {
                wrong.push(format!(
                    "{} {:o} gid {}",
                    path.display(),
                    meta.mode() & 0o7777,
                    meta.gid()
                ));
            }
        }
    }
    wrong
}

#[test]
fn two_members_of_the_group_tick_approve_and_pause_one_loop_each_as_themselves() {
    if !group() {
        return;
    }
    let shared = Shared::new();
    let meta = shared.root.metadata().unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o2770, gid()));
    shared.new_loop(
        LEAD,
        "demo",
        "step = \"echo out; echo err >&2\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    let tick = |user| {
        let v: Value = serde_json::from_str(&shared.ok(user, &["tick", "demo", "--json"])).unwrap();
        v["outcome"].as_str().unwrap().to_owned()
    };
    assert_eq!(tick(LEAD), "ran");
    assert_eq!(tick(QA), "awaiting-approval");
    shared.ok(QA, &["approve", "demo", "--note", "looks fine"]);
    assert_eq!(tick(LEAD), "ran");
    shared.ok(QA, &["pause", "demo"]);
    shared.ok(LEAD, &["resume", "demo"]);
    shared.ok(LEAD, &["edit", "demo"]);
    let config = std::fs::read_to_string(shared.loop_dir("demo").join("loop.toml")).unwrap();
    assert!(config.contains("timeout = \"5m\""), "{config}");
    let by: Vec<(String, String)> = shared
        .history("demo")
        .iter()
        .map(|e| {
            let kind = e["kind"].as_str().unwrap().to_owned();
            (kind, e["actor"]["user"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    for (kind, user) in [
        ("created", LEAD),
        ("awaiting", QA),
        ("tick", LEAD),
        ("approved", QA),
        ("paused", QA),
        ("resumed", LEAD),
    ] {
        assert!(
            by.iter().any(|(k, u)| k == kind && u == user),
            "no {kind} by {user} in {by:?}"
        );
    }
    // Whatever each umask, everything made is the group's to use.
    assert_eq!(not_the_groups(&shared.root), Vec::<String>::new());
    // Someone outside the group is kept out by the OS, and changes nothing.
    let before = std::fs::read(shared.loop_dir("demo").join(".state.loop")).unwrap();
    for args in [&["status", "demo"][..], &["pause", "demo"]] {
        let out = shared.cmd(Some(OPS), "022", args);
        assert_ne!(code(&out), Some(0), "{OPS} {args:?}");
        assert!(stderr(&out).contains("Permission denied"), "{}", stderr(&out));
    }
    assert_eq!(
        std::fs::read(shared.loop_dir("demo").join(".state.loop")).unwrap(),
        before
    );
    // Nor may they make a root of the group's.
    let theirs = shared.dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    nix::unistd::chown(
        &theirs,
        Some(nix::unistd::User::from_name(OPS).unwrap().unwrap().uid),
        None,
    )
    .unwrap();
    let mut c = Command::new("runuser");
    c.args(["-u", OPS, "--", BIN, "--root"])
        .arg(&theirs)
        .args(["init", "--group", GROUP]);
    let out = isolate(&mut c).output().unwrap();
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot share"), "{}", stderr(&out));
}

#[test]
fn doctor_names_a_path_made_world_writable_or_closed_to_the_group_and_its_owner_fixes_it() {
    if !group() {
        return;
    }
    let shared = Shared::new();
    shared.new_loop(LEAD, "demo", "step = \"true\"\n");
    shared.ok(LEAD, &["tick", "demo"]);
    assert_eq!(shared.doctor(Some(QA), false), Vec::<Value>::new());
    let history = shared.loop_dir("demo").join("history.jsonl");
    let state = shared.loop_dir("demo").join(".state.loop");
    std::fs::set_permissions(&history, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
    let found = shared.doctor(Some(QA), false);
    let said = |path: &Path, what: &str| {
        found.iter().any(|f| {
            let m = f["message"].as_str().unwrap();
            m.contains(path.to_str().unwrap()) && m.contains(what)
        })
    };
    assert!(said(&history, "can be written by anyone"), "{found:#?}");
    assert!(said(&state, "lacks the group's read and write"), "{found:#?}");
    assert!(
        found
            .iter()
            .all(|f| f["action"].as_str().unwrap().contains(LEAD) && f["fixable"] == false),
        "{found:#?}"
    );
    // The other member cannot mend them; their owner can.
    assert_eq!(shared.doctor(Some(QA), true).len(), 2);
    assert_eq!(shared.doctor(Some(LEAD), true), Vec::<Value>::new());
    assert_eq!(history.metadata().unwrap().mode() & 0o7777, 0o660);
    assert_eq!(state.metadata().unwrap().mode() & 0o7777, 0o660);
    shared.ok(QA, &["tick", "demo"]);
}

/// Every compiled gate (`.cwasm`) under `dir`.
fn cwasm_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "cwasm") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `sh -c script` run as `user` with `args`, feeding it `input`; whether
/// it succeeded, and its output.
fn sh_as(user: &str, script: &str, args: &[&Path], input: &[u8]) -> (bool, Vec<u8>) {
    use std::io::Write;
    let mut c = Command::new("runuser");
    c.args(["-u", user, "--", "sh", "-c", script, "sh"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), out.stdout)
}

/// What a member of the group can do to another's compiled gate: as
/// `user`, copy `donor` over `entry`, then seal it again with the key
/// beside it, as the cache would have (its seal binds the file's inode,
/// size and times). True when every step was allowed.
fn reseal_as(user: &str, entry: &Path, donor: &Path) -> bool {
    use hmac::{Hmac, Mac};
    let (copied, _) = sh_as(
        user,
        "cp \"$1\" \"$2.new\" && mv -f \"$2.new\" \"$2\"",
        &[donor, entry],
        b"",
    );
    let key_path = entry.parent().unwrap().join("key");
    let (read, key) = sh_as(user, "cat \"$1\"", &[&key_path], b"");
    if !copied || !read {
        return false;
    }
    let seal_path = entry.with_extension("seal");
    let old = std::fs::read_to_string(&seal_path).unwrap();
    let meta = std::fs::symlink_metadata(entry).unwrap();
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    let file = format!(
        "file {} {} {} {} {}\n",
        meta.dev(),
        meta.ino(),
        meta.size(),
        ns(meta.mtime(), meta.mtime_nsec()),
        ns(meta.ctime(), meta.ctime_nsec())
    );
    let body: String = old
        .lines()
        .filter(|l| !l.starts_with("mac "))
        .map(|l| match l.starts_with("file ") {
            true => file.clone(),
            false => format!("{l}\n"),
        })
        .collect();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(body.as_bytes());
    let sealed = format!("{body}mac {:x}\n", mac.finalize().into_bytes());
    sh_as(user, "cat > \"$1\"", &[&seal_path], sealed.as_bytes()).0
}

#[test]
fn a_members_compiled_gate_never_loads_in_another_members_command_nor_in_roots() {
    if !group() {
        return;
    }
    let shared = Shared::new();
    let tick = |user: Option<&str>| {
        let out = shared.cmd(user, "077", &["tick", "capped", "--json"]);
        assert_eq!(code(&out), Some(0), "{user:?}: {}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["outcome"].as_str().unwrap().to_owned()
    };
    // The lead's loop, whose gate lets every tick run (up to five).
    shared.new_loop(
        LEAD,
        "capped",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 5 }\n",
    );
    assert_eq!(tick(Some(LEAD)), "ran");
    let cache = shared.root.join("cache");
    let leads = cwasm_files(&cache);
    assert_eq!(leads.len(), 1, "{leads:?}");
    // The other member compiles a gate that would stop every tick...
    shared.new_loop(
        QA,
        "asks",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    shared.ok(QA, &["tick", "asks"]);
    let donor = cwasm_files(&cache)
        .into_iter()
        .find(|p| !leads.contains(p))
        .expect("the other member's compiled gate");
    // ...and puts it in place of the lead's, sealed again, if they can.
    let resealed = reseal_as(QA, &leads[0], &donor);
    // Neither the lead's commands nor root's run the other member's code.
    assert_eq!(
        tick(Some(LEAD)),
        "ran",
        "resealed by the other member: {resealed}"
    );
    assert_eq!(tick(None), "ran", "resealed by the other member: {resealed}");
    assert!(!resealed, "a member could write another's compiled gate");
    // Each user's cache is their own: 0700, the key 0600.
    for uid in [
        nix::unistd::User::from_name(LEAD).unwrap().unwrap().uid.as_raw(),
        0,
    ] {
        let own = cache.join("gates").join(uid.to_string());
        let dir = own.metadata().unwrap();
        assert_eq!((dir.uid(), dir.mode() & 0o777), (uid, 0o700), "{}", own.display());
        let key = own.join("key").metadata().unwrap();
        assert_eq!((key.uid(), key.mode() & 0o777), (uid, 0o600));
    }
    // And `doctor --fix` leaves them so.
    shared.doctor(Some(LEAD), true);
    let own = cache.join("gates").join(
        nix::unistd::User::from_name(LEAD)
            .unwrap()
            .unwrap()
            .uid
            .as_raw()
            .to_string(),
    );
    assert_eq!(own.metadata().unwrap().mode() & 0o777, 0o700);
}

#[test]
fn a_members_notify_command_runs_as_that_member_only() {
    if !group() {
        return;
    }
    let shared = Shared::new();
    let told = shared.dir.path().join("told");
    std::fs::write(&told, "").unwrap();
    std::fs::set_permissions(&told, std::fs::Permissions::from_mode(0o666)).unwrap();
    shared.new_loop(
        LEAD,
        "told",
        &format!(
            "step = \"true\"\n[notify]\ncommand = \"sh -c 'id -un >> {}'\"\non = [\"operator\"]\n",
            told.display()
        ),
    );
    let out = shared.cmd(Some(QA), "077", &["pause", "told"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("its notify command is not run"),
        "{}",
        stderr(&out)
    );
    assert_eq!(code(&shared.cmd(None, "077", &["resume", "told"])), Some(0));
    shared.ok(LEAD, &["pause", "told"]);
    assert_eq!(std::fs::read_to_string(&told).unwrap(), format!("{LEAD}\n"));
}
