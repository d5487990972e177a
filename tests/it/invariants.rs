//! What must hold of a loop after any crash, read only through what the CLI
//! shows (`status --json`, `history --json`) and the files in the loop dir,
//! so the checks hold whatever the store's internals are. Shared by the
//! crash-at-every-point, torture and full-disk tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use tempfile::TempDir;

use crate::common::{BIN, share_cache, warm_stock_gates};

/// A name no other command of this run acts as: each scratch command is
/// its own person, so approvals given one after another all count (one
/// person counts once for an await).
pub(crate) fn person() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("operator-{n}")
}

/// A root in a temporary directory, possibly copied from a template.
pub(crate) struct Scratch {
    _dir: Option<TempDir>,
    pub root: PathBuf,
}

impl Scratch {
    /// A fresh, initialised root on the run's shared gate cache.
    pub(crate) fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let s = Scratch::at(dir.path().join("root"));
        let s = Scratch { _dir: Some(dir), ..s };
        s.ok(&["init"]);
        // As in `Env`: the suite's user may act for the people commands name.
        let delegates = format!("delegates = [{:?}]\n", automaton::who::os_user());
        std::fs::write(s.root.join("automaton.toml"), delegates).unwrap();
        s.ok(&["delegate", "add", &automaton::who::os_user()]);
        share_cache(&s.root);
        s
    }

    /// A root at `root`, which the caller owns.
    pub(crate) fn at(root: PathBuf) -> Scratch {
        Scratch { _dir: None, root }
    }

    /// A copy of `template`'s root, its loops and their state, on the same
    /// gate cache.
    pub(crate) fn copy_of(template: &Scratch) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        copy_tree(&template.root, &root);
        Scratch {
            _dir: Some(dir),
            root,
        }
    }

    /// The binary with `--root` set and a clean environment.
    pub(crate) fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--root").arg(&self.root);
        crate::common::isolate(&mut c)
            .env("AUTOMATON_USER", person())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs and insists on exit 0; returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "automaton {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Creates a loop from loop.toml text.
    pub(crate) fn new_loop(&self, name: &str, toml: &str) {
        warm_stock_gates(toml);
        let file = self.root.join(format!("{name}.toml"));
        std::fs::write(&file, toml).unwrap();
        self.ok(&["new", name, "--from", file.to_str().unwrap()]);
        std::fs::remove_file(file).unwrap();
    }

    pub(crate) fn loop_dir(&self, name: &str) -> PathBuf {
        self.root.join("loops").join(name)
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&e.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(e.path(), &target).unwrap();
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &target).unwrap();
        }
    }
}

/// The id an `approve` that exited 0 printed: `approved loop x as y (ap-7)`.
pub(crate) fn approval_id(stdout: &str) -> Option<String> {
    let start = stdout.find("(ap-")? + 1;
    let end = start + stdout[start..].find(')')?;
    Some(stdout[start..end].to_owned())
}

/// A loop as its readers see it.
pub(crate) struct Audit {
    pub state: Value,
    pub events: Vec<Value>,
    /// Problems found while reading, before any invariant is checked.
    pub read_errors: Vec<String>,
}

impl Audit {
    /// Reads `name` with `status --json` and `history --json`.
    pub(crate) fn read(s: &Scratch, name: &str) -> Audit {
        let mut read_errors = Vec::new();
        let status = s.run(&["status", name, "--json"]);
        let state = if status.status.success() {
            serde_json::from_slice(&status.stdout).unwrap_or_else(|e| {
                read_errors.push(format!("status --json is not JSON: {e}"));
                Value::Null
            })
        } else {
            read_errors.push(format!(
                "status exited {:?}: {}",
                status.status.code(),
                String::from_utf8_lossy(&status.stderr).trim()
            ));
            Value::Null
        };
        let history = s.run(&["history", name, "--json"]);
        let events = if history.status.success() {
            serde_json::from_slice(&history.stdout).unwrap_or_else(|e| {
                read_errors.push(format!("history --json is not JSON: {e}"));
                Vec::new()
            })
        } else {
            read_errors.push(format!(
                "history exited {:?}: {}",
                history.status.code(),
                String::from_utf8_lossy(&history.stderr).trim()
            ));
            Vec::new()
        };
        let stderr = String::from_utf8_lossy(&history.stderr);
        if let Some(line) = stderr.lines().find(|l| l.contains("unreadable")) {
            read_errors.push(format!("torn history: {}", line.trim()));
        }
        Audit {
            state,
            events,
            read_errors,
        }
    }

    pub(crate) fn version(&self) -> u64 {
        self.state["version"].as_u64().unwrap_or(0)
    }

    /// How many approvals are pending.
    pub(crate) fn pending(&self) -> usize {
        self.state["pending_approvals"].as_array().map_or(0, Vec::len)
    }

    pub(crate) fn tick(&self) -> u64 {
        self.state["tick"].as_u64().unwrap_or(0)
    }

    fn kind(e: &Value) -> &str {
        e["kind"].as_str().unwrap_or("")
    }

    /// Every invariant a loop must keep after a crash at any instant and a
    /// recovering command. `acked`: ids of approvals whose `approve` exited
    /// 0; `min_version`: the highest version any reader saw before.
    pub(crate) fn violations(&self, acked: &[String], min_version: u64, loop_dir: &Path) -> Vec<String> {
        let mut v = self.read_errors.clone();
        if self.state.is_null() {
            return v;
        }
        if self.version() < min_version {
            v.push(format!(
                "version went back from {min_version} to {}",
                self.version()
            ));
        }
        if !self.state["in_flight"].is_null() {
            v.push(format!(
                "in_flight (tick {}) still set after a command took the lock",
                self.state["in_flight"]["tick"]
            ));
        }
        v.extend(self.tick_violations());
        v.extend(self.approval_violations(acked));
        let tmps = stray_temps(loop_dir);
        if !tmps.is_empty() {
            v.push(format!("{} stray temp file(s) after recovery", tmps.len()));
        }
        v
    }

    /// Each counted tick (1..=state.tick) has exactly one `tick` event that
    /// counted it or one `crashed` event; none counts a tick the state does
    /// not.
    fn tick_violations(&self) -> Vec<String> {
        let mut per_tick: BTreeMap<u64, usize> = BTreeMap::new();
        for e in &self.events {
            // A tick counts when its step ran, or when it failed getting
            // ready to run it (its worktree or run directory could not be
            // made): it took its number and any approval it used.
            let counted = match Audit::kind(e) {
                "crashed" => true,
                "tick" => e.get("step").is_some_and(|s| !s.is_null()) || e["outcome"] == "failed",
                _ => false,
            };
            if counted && let Some(n) = e["tick"].as_u64() {
                *per_tick.entry(n).or_default() += 1;
            }
        }
        let mut v = Vec::new();
        for n in 1..=self.tick() {
            match per_tick.get(&n).copied().unwrap_or(0) {
                1 => {}
                0 => v.push(format!("tick {n} is counted but has no tick or crashed event")),
                k => v.push(format!("tick {n} has {k} tick/crashed events")),
            }
        }
        for (&n, _) in per_tick.range(self.tick() + 1..) {
            v.push(format!(
                "history records tick {n} but the state counts {} ticks",
                self.tick()
            ));
        }
        v
    }

    /// Acknowledged approvals are pending, used, or dropped (by a later
    /// rejection, or recorded as dropped); none is used twice; each one
    /// pending or used was recorded.
    fn approval_violations(&self, acked: &[String]) -> Vec<String> {
        let mut v = Vec::new();
        let pending: BTreeSet<String> = self.state["pending_approvals"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut approved_at: BTreeMap<String, usize> = BTreeMap::new();
        let mut used: BTreeMap<String, usize> = BTreeMap::new();
        let mut recorded_dropped: BTreeSet<String> = BTreeSet::new();
        let mut last_reject = None;
        for (i, e) in self.events.iter().enumerate() {
            match Audit::kind(e) {
                "approved" => {
                    if let Some(id) = e["id"].as_str() {
                        approved_at.insert(id.to_owned(), i);
                    }
                }
                "approvals-used" => {
                    for id in e["ids"].as_array().into_iter().flatten() {
                        if let Some(id) = id.as_str() {
                            *used.entry(id.to_owned()).or_default() += 1;
                        }
                    }
                }
                "approvals-dropped" => {
                    for id in e["ids"].as_array().into_iter().flatten() {
                        if let Some(id) = id.as_str() {
                            recorded_dropped.insert(id.to_owned());
                        }
                    }
                }
                "rejected" => last_reject = Some(i),
                _ => {}
            }
        }
        for (id, n) in &used {
            if *n > 1 {
                v.push(format!("approval {id} used {n} times"));
            }
            if pending.contains(id) {
                v.push(format!("approval {id} is both used and pending"));
            }
            if !approved_at.contains_key(id) {
                v.push(format!(
                    "approval {id} was used but its approval is not in history"
                ));
            }
        }
        for id in &pending {
            if !approved_at.contains_key(id) {
                v.push(format!("approval {id} is pending but not in history"));
            }
        }
        for id in acked {
            let dropped = match (approved_at.get(id), last_reject) {
                (Some(&a), Some(r)) => r > a,
                _ => false,
            } || recorded_dropped.contains(id);
            if !pending.contains(id) && !used.contains_key(id) && !dropped {
                v.push(format!(
                    "acknowledged approval {id} is neither pending nor used{}",
                    if approved_at.contains_key(id) {
                        ""
                    } else {
                        " (nor in history)"
                    }
                ));
            } else if !approved_at.contains_key(id) {
                v.push(format!("acknowledged approval {id} is not in history"));
            }
        }
        v
    }
}

/// `.tmp-*` files anywhere under a loop's directory.
pub(crate) fn stray_temps(dir: &Path) -> Vec<String> {
    crate::common::tree(dir)
        .into_iter()
        .filter(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".tmp-"))
        })
        .collect()
}
