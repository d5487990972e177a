//! Tests for the run directories: pruning and reuse by number, and links
//! planted anywhere on the way never followed out of the loop.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use super::*;
use crate::error::Error;

/// A loop directory with `runs/` in it; the directory outside it that
/// links may point to.
struct Loop {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    outside: PathBuf,
}

impl Loop {
    fn new() -> Loop {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("loop");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(base.join(RUNS)).unwrap();
        std::fs::create_dir(&outside).unwrap();
        Loop {
            _tmp: tmp,
            base,
            outside,
        }
    }

    fn runs(&self) -> PathBuf {
        self.base.join(RUNS)
    }

    fn make(&self, tick: u64, keep: usize) -> Dir {
        Runs::make(&self.base).unwrap().make_for_tick(tick, keep).unwrap()
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn prune_keeps_the_newest_by_number() {
    let l = Loop::new();
    for name in ["1", "2", "3", "10", "11", "notes"] {
        std::fs::create_dir(l.runs().join(name)).unwrap();
    }
    std::fs::write(l.runs().join("4"), "").unwrap();
    assert_eq!(prune(&l.base, 2).unwrap(), 3);
    assert_eq!(names_in(&l.runs()), ["10", "11", "4", "notes"]);
    assert_eq!(prune(&l.base, 5).unwrap(), 0);
    std::fs::remove_dir_all(l.runs()).unwrap();
    assert_eq!(prune(&l.base, 1).unwrap(), 0);
}

#[test]
fn a_new_run_directory_reuses_the_oldest_emptied_and_keeps_keep() {
    let l = Loop::new();
    let runs = l.runs();
    l.make(1, 3);
    assert!(runs.join("1").is_dir());
    for tick in [2, 3] {
        l.make(tick, 3);
    }
    // What the oldest run left: output, a metrics file, a note, a folder.
    let oldest = runs.join("1");
    std::fs::write(oldest.join("step.out"), "old").unwrap();
    std::fs::write(oldest.join("metrics"), "cost=1").unwrap();
    std::fs::create_dir_all(oldest.join("deep/er")).unwrap();
    std::fs::set_permissions(&oldest, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(runs.join("notes"), "").unwrap();
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&p.symlink_metadata().unwrap());
    let was = inode(&oldest);

    let made = l.make(4, 3);
    assert_eq!(made.path(), runs.join("4"));
    assert_eq!(names_in(&runs), ["2", "3", "4", "notes"]);
    assert_eq!(inode(&runs.join("4")), was, "the oldest directory is reused");
    assert!(names_in(&runs.join("4")).is_empty(), "and emptied");
    let mode = runs.join("4").symlink_metadata().unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o700);

    // Fewer kept now: the oldest are removed, one reused.
    l.make(5, 1);
    assert_eq!(names_in(&runs), ["5", "notes"]);
}

#[test]
fn a_run_directory_made_first_by_cancel_is_kept_with_its_note() {
    let l = Loop::new();
    let runs = l.runs();
    for tick in [1, 2] {
        l.make(tick, 2);
    }
    let early = Runs::make(&l.base).unwrap().make_run(3).unwrap();
    write_note(&early, &ann(None)).unwrap();
    l.make(3, 2);
    assert_eq!(names_in(&runs), ["2", "3"]);
    assert_eq!(names_in(&runs.join("3")), ["cancel"]);
    assert_eq!(cancelled_by(&early), Some(ann(None)));
    // keep = 0: the new one is made (the tick removes it once recorded).
    l.make(4, 0);
    assert_eq!(names_in(&runs), ["4"]);
    // A file where the directory should be is an error, not a directory.
    std::fs::write(runs.join("5"), "").unwrap();
    assert!(Runs::make(&l.base).unwrap().make_for_tick(5, 2).is_err());
}

/// Nine numbered directories outside the loop, each with a file.
fn nine_outside(l: &Loop) -> Vec<String> {
    for tick in 1..=9 {
        let d = l.outside.join(tick.to_string());
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("keep-me"), "x").unwrap();
    }
    names_in(&l.outside)
}

#[test]
fn a_runs_folder_that_is_a_link_is_refused_and_nothing_behind_it_goes() {
    let l = Loop::new();
    let before = nine_outside(&l);
    std::fs::remove_dir(l.runs()).unwrap();
    symlink(&l.outside, l.runs()).unwrap();
    for refused in [
        Runs::make(&l.base).map(|_| ()),
        Runs::open(&l.base).map(|_| ()),
        prune(&l.base, 1).map(|_| ()),
    ] {
        match refused {
            Err(Error::Link { path }) => assert_eq!(path, l.runs()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(names_in(&l.outside), before);
    assert!(l.outside.join("1/keep-me").exists());

    // A loop directory that is a link is refused the same way.
    let linked = l.base.with_file_name("linked");
    symlink(&l.base, &linked).unwrap();
    assert!(matches!(Runs::make(&linked), Err(Error::Link { path }) if path == linked));
}

#[test]
fn links_inside_runs_are_unlinked_never_followed() {
    let l = Loop::new();
    let before = nine_outside(&l);
    let runs = l.runs();
    for tick in [1, 2, 3] {
        l.make(tick, 10);
    }
    // Links named like runs, and links inside a run, to the outside.
    symlink(l.outside.join("4"), runs.join("4")).unwrap();
    symlink(&l.outside, runs.join("1/escape")).unwrap();
    symlink(l.outside.join("5/keep-me"), runs.join("2/step.out")).unwrap();
    std::fs::create_dir(runs.join("3/deep")).unwrap();
    symlink(&l.outside, runs.join("3/deep/escape")).unwrap();
    assert_eq!(prune(&l.base, 1).unwrap(), 2);
    assert_eq!(names_in(&runs), ["3", "4"], "the link named 4 is not a run");
    Runs::make(&l.base).unwrap().make_for_tick(5, 1).unwrap();
    assert_eq!(names_in(&runs), ["4", "5"]);
    // A link planted under the next run's name is replaced by the run.
    symlink(l.outside.join("6"), runs.join("6")).unwrap();
    let six = l.make(6, 1);
    assert!(runs.join("6").symlink_metadata().unwrap().is_dir());
    six.create("step.out").unwrap();
    assert_eq!(names_in(&l.outside), before);
    for tick in 1..=9 {
        let d = l.outside.join(tick.to_string());
        assert_eq!(names_in(&d), ["keep-me"], "{}", d.display());
    }
}

#[test]
fn what_automaton_writes_in_a_run_replaces_a_planted_link() {
    let l = Loop::new();
    let run = l.make(1, 3);
    let target = l.outside.join("precious");
    std::fs::write(&target, "precious\n").unwrap();
    symlink(&target, l.runs().join("1").join(CANCEL)).unwrap();
    assert_eq!(cancelled_by(&run), None, "a link is no note");
    symlink(&target, l.runs().join("1/step.pgid")).unwrap();
    write_note(&run, &ann(Some("a freeze\nuntil Monday"))).unwrap();
    write_group(&run, "step", 4242, None).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
    assert_eq!(cancelled_by(&run), Some(ann(Some("a freeze\nuntil Monday"))));
    assert_eq!(read_group(&run, "step"), Some((4242, None)));
    let start = ProcessStart {
        ticks: 17,
        boot: "b00t".into(),
    };
    write_group(&run, "verifier", 7, Some(&start)).unwrap();
    assert_eq!(read_group(&run, "verifier"), Some((7, Some(start))));
    // A FIFO where a note should be is read as no note, at once.
    let fifo = l.runs().join("1").join(CANCEL);
    std::fs::remove_file(&fifo).unwrap();
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_eq!(cancelled_by(&run), None);
}

fn ann(reason: Option<&str>) -> Cancellation {
    Cancellation {
        by: "ann".into(),
        reason: reason.map(str::to_owned),
    }
}
