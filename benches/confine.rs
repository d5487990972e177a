//! What a step's confinement costs a tick: building the Landlock ruleset
//! (files alone, and with the 65,535 port rules that deny one console's
//! port), and starting `true` unconfined (posix_spawn) against confined
//! (fork, then the ruleset applied before exec), each run to its end.
//! Run with `cargo bench --bench confine` (Linux with Landlock).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use automaton::fsx::Dir;
use automaton::step::confine::{self, Policy, Ports, Prepared};
use automaton::step::{self, StepSpec};

fn main() {
    divan::main();
}

/// A root in a temporary directory with a loop's run directory in it,
/// and the policy a tick of that loop builds.
struct Fixture {
    _dir: tempfile::TempDir,
    run_dir: PathBuf,
    policy: Policy,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let run_dir = root.join("loops/bench/runs/1");
    std::fs::create_dir_all(&run_dir).unwrap();
    let root = confine::resolved(&root);
    let policy = Policy {
        own: vec![confine::resolved(&run_dir)],
        readable: vec![root.join("loops/bench")],
        writable: ["/tmp", "/var/tmp", "/dev/shm", "/dev/null"]
            .iter()
            .map(PathBuf::from)
            .collect(),
        hidden: Vec::new(),
        secrets: vec![root.join("users.json"), root.join("cache")],
        connect: None,
        root,
    };
    Fixture {
        _dir: dir,
        run_dir,
        policy,
    }
}

fn run_true(run_dir: &Path, confine: Option<&Prepared>) {
    let out = Dir::open(run_dir).unwrap();
    let spec = StepSpec {
        program: "true".as_ref(),
        args: &[] as &[OsString],
        cwd: run_dir,
        env: &[],
        timeout: Some(Duration::from_secs(10)),
        kill_grace: Duration::from_secs(1),
        out_dir: &out,
        stdout: "step.out",
        stderr: "step.err",
        output_limit: 1024,
        confine,
        run_as: None,
    };
    assert!(step::run(&spec).unwrap().success());
}

#[divan::bench]
fn ruleset_files(b: divan::Bencher) {
    let f = fixture();
    b.bench(|| confine::prepare(&f.policy).unwrap());
}

#[divan::bench]
fn ruleset_files_and_console_port(b: divan::Bencher) {
    let mut f = fixture();
    f.policy.connect = Some(Ports::AllBut(vec![8080]));
    b.bench(|| confine::prepare(&f.policy).unwrap());
}

#[divan::bench]
fn step_true_unconfined(b: divan::Bencher) {
    let f = fixture();
    b.bench(|| run_true(&f.run_dir, None));
}

#[divan::bench]
fn step_true_confined(b: divan::Bencher) {
    let f = fixture();
    b.bench(|| {
        let prepared = confine::prepare(&f.policy).unwrap();
        run_true(&f.run_dir, Some(&prepared));
    });
}
