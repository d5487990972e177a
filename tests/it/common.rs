//! A small builder for tests: a temporary root, loops in it, and the real
//! binary run against it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_automaton");

pub struct Env {
    _dir: TempDir,
    pub root: PathBuf,
}

impl Env {
    /// A fresh, initialised root.
    pub fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let env = Env { _dir: dir, root };
        env.ok(&["init"]);
        env
    }

    /// The binary with `--root` set and a clean environment.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--root").arg(&self.root);
        c.env_remove("AUTOMATON_ROOT")
            .env("AUTOMATON_USER", "operator")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs and insists on exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "automaton {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs and insists on exit `code`; returns stderr.
    pub fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "automaton {args:?}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Creates a loop from loop.toml text.
    pub fn new_loop(&self, name: &str, toml: &str) -> &Env {
        let file = self.root.join(format!("{name}.toml"));
        std::fs::write(&file, toml).unwrap();
        self.ok(&["new", name, "--from", file.to_str().unwrap()]);
        std::fs::remove_file(file).unwrap();
        self
    }

    pub fn loop_dir(&self, name: &str) -> PathBuf {
        self.root.join("loops").join(name)
    }

    pub fn state(&self, name: &str) -> serde_json::Value {
        let text = std::fs::read(self.loop_dir(name).join(".state.loop")).unwrap();
        serde_json::from_slice(&text).unwrap()
    }

    pub fn history(&self, name: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.loop_dir(name).join("history.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn history_kinds(&self, name: &str) -> Vec<String> {
        self.history(name)
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Every path under `dir`, relative, sorted: to show a command made nothing.
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}
