//! Links planted in and around a loop never lead automaton outside it: a
//! `runs/` that points elsewhere is refused and nothing behind it is
//! pruned, and a link the step leaves as `runs/<tick>/cancel` is replaced,
//! not written through.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common::{Env, tree, wait_for};

/// Nine numbered directories, each with a file: what a `runs/` link
/// points at.
fn nine_runs(dir: &Path) -> Vec<String> {
    for tick in 1..=9 {
        let d = dir.join(tick.to_string());
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("step.out"), "not the loop's\n").unwrap();
    }
    tree(dir)
}

fn outside(env: &Env) -> PathBuf {
    let dir = env.root.with_file_name("outside");
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_runs_link_out_of_the_loop_is_refused_and_nothing_behind_it_is_pruned() {
    let env = Env::new();
    for keep in [2, 0] {
        let name = format!("keep{keep}");
        env.new_loop(&name, &format!("step = \"true\"\n[runs]\nkeep = {keep}\n"));
        env.ok(&["tick", &name]);
        let target = outside(&env).join(&name);
        let before = nine_runs(&target);
        let runs = env.loop_dir(&name).join("runs");
        fs::remove_dir_all(&runs).unwrap();
        symlink(&target, &runs).unwrap();

        env.fails(6, &["tick", &name]);
        assert_eq!(tree(&target), before, "keep = {keep}: the outside was touched");
        let last = env.history(&name).pop().unwrap();
        assert_eq!(last["outcome"], "failed");
        let reason = last["reason"].as_str().unwrap();
        assert!(reason.contains(&runs.display().to_string()), "{reason}");
        assert!(reason.contains("symbolic link"), "{reason}");
        assert!(runs.symlink_metadata().unwrap().file_type().is_symlink());
    }
}

#[test]
fn cancel_never_writes_through_a_link_the_step_left_as_its_note() {
    let env = Env::new();
    let signals = outside(&env);
    let precious = signals.join("precious");
    fs::write(&precious, "precious\n").unwrap();
    let step = format!(
        "step = \"ln -s '{0}' \\\"$AUTOMATON_RUN_DIR/cancel\\\"; touch '{1}/started'; while :; do sleep 0.05; done\"\n",
        precious.display(),
        signals.display()
    );
    env.new_loop("demo", &step);
    let mut tick = env
        .cmd()
        .args(["tick", "demo"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&signals.join("started"));
    let out = env
        .cmd()
        .args(["cancel", "demo", "--grace", "5s"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tick.wait().unwrap().code(), Some(6));
    assert_eq!(fs::read_to_string(&precious).unwrap(), "precious\n");
    let last = env.history("demo").pop().unwrap();
    let reason = last["reason"].as_str().unwrap();
    assert!(reason.starts_with("cancelled by ann"), "{last}");
}
