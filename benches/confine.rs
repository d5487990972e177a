//! What a step's confinement costs a tick: building the Landlock rulesets
//! (files alone; with the 65,535 port rules that deny one console's port,
//! built afresh and kept), and starting `true` unconfined (posix_spawn)
//! against confined (the files' ruleset built, fork, the ruleset applied
//! before exec), each run to its end.
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

/// A root where a user's is (outside the temporary directory, which is
/// then granted whole).
fn fixture() -> Fixture {
    fixture_in(tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap())
}

/// A root under /tmp, as the tests keep theirs: /tmp and the root's
/// parent are then granted entry by entry around it.
fn fixture_in_tmp() -> Fixture {
    fixture_in(tempfile::tempdir().unwrap())
}

fn fixture_in(dir: tempfile::TempDir) -> Fixture {
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
fn ruleset_files_root_in_tmp(b: divan::Bencher) {
    let f = fixture_in_tmp();
    b.bench(|| confine::prepare(&f.policy).unwrap());
}

/// With a console's port, a different one each time: the 65,535 port
/// rules built afresh (what a CLI tick pays while a console serves).
#[divan::bench]
fn ruleset_console_port_first(b: divan::Bencher) {
    let mut f = fixture();
    let mut port = 1000u16;
    b.bench_local(|| {
        port += 1;
        f.policy.connect = Some(Ports::AllBut(vec![port]));
        confine::prepare(&f.policy).unwrap()
    });
}

/// With the same console's port each time: the port rules kept from the
/// first (what a daemon's tick pays).
#[divan::bench]
fn ruleset_console_port_kept(b: divan::Bencher) {
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
