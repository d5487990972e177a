//! `doctor [NAME] [--fix]`: checks a root or one loop and says, for each
//! finding, what to do. The loop's record is checked by its store (state,
//! history, lock, a dead tick, temporary files); here: the config, gate
//! files against their pins, the installed schedule, the cache's
//! permissions, the modes of the root's files (a group's root: what its
//! members could not use; any root: what anyone could write), loop
//! directories that are links and leftovers of killed
//! `new`, `rm` and `edit`. `--fix` repairs
//! what is safe, the loop's record through the same recovery every locking
//! command runs, then the store's mending of what an older build left
//! (rotated history files with a gap in their numbers); a loop's repair is
//! its operators' to make, as any change to it is.

use std::io::Write;
#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::render::safe;
use crate::access::Action;
use crate::cli::DoctorArgs;
use crate::config::LoopConfig;
use crate::domain::GateSource;
use crate::error::{Exit, Result};
use crate::lock::{Holder, Wait};
use crate::ops::Ctx;
use crate::root::Root;
use crate::schedule::{self, record};
use crate::store::edits::{self, Left};
use crate::store::{self, Finding, Level, LoopStore};
use crate::who::Actor;

#[cfg(unix)]
pub(super) mod modes;
#[cfg(windows)]
#[path = "doctor/modes_windows.rs"]
pub(super) mod modes;

#[derive(Serialize)]
struct Report {
    loops: Vec<LoopReport>,
    root: Vec<Finding>,
}

#[derive(Serialize)]
struct LoopReport {
    name: String,
    findings: Vec<Finding>,
}

pub(super) fn run(root: &Root, args: &DoctorArgs, out: &mut dyn Write) -> Result<Exit> {
    let stores = store::Stores::open(root)?;
    let dirs = match &args.name {
        Some(name) => vec![stores.get(name)?],
        None => stores.list()?,
    };
    let mut loops = Vec::new();
    let mut refused = None;
    let ctx = Ctx::own(root, &stores);
    for dir in &dirs {
        let dir = dir.as_ref();
        let (findings, refusal) = check_and_fix(&ctx, dir, args.fix);
        refused = refused.or(refusal);
        loops.push(LoopReport {
            name: dir.name().to_string(),
            findings,
        });
    }
    let root_findings = check_root(root, &stores, args.fix, args.name.is_none());
    let report = Report {
        loops,
        root: root_findings,
    };
    if args.json.json {
        super::emit_json(out, &report)?;
    } else {
        super::emit(out, &human(&report))?;
    }
    // A loop its user may not repair: the report, then the refusal.
    if let Some(e) = refused {
        return Err(e);
    }
    let worst = report
        .loops
        .iter()
        .flat_map(|l| &l.findings)
        .chain(&report.root)
        .map(|f| f.level)
        .max()
        .unwrap_or(Level::Ok);
    Ok(if worst >= Level::Warning {
        Exit::Wanting
    } else {
        Exit::Ok
    })
}

/// What is wrong with the loop `dir`, and with `fix`, what is left once
/// what is safe is repaired: by one of its operators only (else the
/// refusal, recorded, is returned beside what was found).
fn check_and_fix(ctx: &Ctx<'_>, dir: &dyn LoopStore, fix: bool) -> (Vec<Finding>, Option<crate::Error>) {
    let root = ctx.root;
    let mut findings = check_loop(root, dir);
    let needs_fix = findings.iter().chain(&check_edits(dir, false)).any(|f| f.fixable);
    if !fix || !needs_fix {
        findings.extend(check_edits(dir, false));
        return (findings, None);
    }
    if let Err(e) = ctx.allowed_on(dir, Action::DoctorFix) {
        findings.extend(check_edits(dir, false));
        let action = format!(
            "one of its operators may run `automaton doctor {} --fix`",
            dir.name()
        );
        findings.push(Finding::new(
            "fix",
            Level::Error,
            "not repaired: not allowed",
            action,
        ));
        return (findings, Some(e));
    }
    if findings.iter().any(|f| f.fixable) {
        findings = match repair(dir, ctx.stores.me()) {
            Ok(()) => {
                let mut after = check_loop(root, dir);
                after.push(Finding::ok("fix", "recovered under the loop's lock"));
                after
            }
            Err(e) => {
                let action = "see the error; the next command on the loop tries the same recovery";
                findings.push(Finding::new("fix", Level::Error, e.to_string(), action));
                findings
            }
        };
    }
    findings.extend(check_edits(dir, true));
    (findings, None)
}

/// Takes the loop's lock and loads it: the recovery every locking command
/// runs (cut an unfinished commit, remove temporary files, record a dead
/// tick, as `me` found it); then mends what an older build left (rotated
/// history files with a gap), and nothing else.
fn repair(dir: &dyn LoopStore, me: &Actor) -> Result<()> {
    let mut session = dir.lock(Holder::me("doctor"), Wait::For(Duration::from_secs(10)))?;
    session.check_all();
    session.load(me)?;
    session.mend()
}

fn check_loop(root: &Root, dir: &dyn LoopStore) -> Vec<Finding> {
    let mut findings = dir.check();
    match LoopStore::config(dir) {
        Ok(config) => {
            findings.push(Finding::ok("config", "valid"));
            findings.extend(check_gates(dir.base_dir(), &config));
            findings.extend(check_schedule(root, dir, Some(&config)));
        }
        Err(e) => {
            findings.push(Finding::new(
                "config",
                Level::Error,
                e.to_string(),
                "correct loop.toml; ticks fail until it reads",
            ));
            findings.extend(check_schedule(root, dir, None));
        }
    }
    findings
}

/// Gate files that are missing, or differ from their `sha256` pin.
fn check_gates(loop_dir: &Path, config: &LoopConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in &config.gates {
        let GateSource::File { path, sha256 } = g.resolved_source(loop_dir) else {
            continue;
        };
        let shown = g.source.to_string();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                out.push(Finding::new(
                    "gate",
                    Level::Error,
                    format!("gate {shown}: cannot read {}: {e}", path.display()),
                    "put the component there (paths are relative to the loop directory); the next tick applies the gate's on_error",
                ));
                continue;
            }
        };
        let actual = crate::gate::sha256_hex(&bytes);
        match sha256 {
            Some(pin) if pin != actual => out.push(Finding::new(
                "gate",
                Level::Error,
                format!("gate {shown} has sha256 {actual}, but loop.toml pins {pin}"),
                "restore the pinned component, or pin the new one after reviewing it",
            )),
            _ => out.push(Finding::ok("gate", format!("gate {shown}: sha256 {actual}"))),
        }
    }
    out
}

/// What an `edit` of the loop left: a copy that was never saved (the next
/// `edit` reopens it) and a new loop.toml that was never renamed in (the
/// next `edit` removes it). `--fix` removes those ten minutes old.
fn check_edits(dir: &dyn LoopStore, fix: bool) -> Vec<Finding> {
    let left = match edits::leftovers(dir.base_dir()) {
        Ok(l) => l,
        Err(e) => {
            return vec![Finding::new(
                "edit",
                Level::Error,
                e.to_string(),
                "check the directory's permissions",
            )];
        }
    };
    let name = dir.name();
    let mut out = Vec::new();
    for l in left {
        let old = l
            .modified
            .is_some_and(|t| t.elapsed().unwrap_or_default() > LEFTOVER_AGE);
        let path = l.path.display();
        if fix && old && std::fs::remove_file(&l.path).is_ok() {
            out.push(Finding::ok("edit", format!("removed {path}")));
            continue;
        }
        let (message, action) = match l.left {
            Left::Copy => (
                format!(
                    "{path} holds an edit of loop.toml that was not saved (the edit was interrupted or refused)"
                ),
                format!("`automaton edit {name}` reopens it; `--fix` removes it once it is ten minutes old"),
            ),
            Left::Save => (
                format!(
                    "{path} was left by an `edit` killed while saving loop.toml (loop.toml was not changed)"
                ),
                format!("`automaton edit {name}` removes it; so does `--fix` once it is ten minutes old"),
            ),
        };
        let finding = Finding::new("edit", Level::Warning, message, action);
        out.push(if old { finding.fixable() } else { finding });
    }
    out
}

/// How old a leftover of a killed command is before `--fix` removes it: a
/// younger one may be a command at work.
const LEFTOVER_AGE: Duration = Duration::from_mins(10);

/// An installed OS schedule that no longer matches its loop.
fn check_schedule(root: &Root, dir: &dyn LoopStore, config: Option<&LoopConfig>) -> Vec<Finding> {
    let name = dir.name().as_str();
    let installed = match record::read(root, name) {
        Ok(Some(r)) => r,
        Ok(None) => return Vec::new(),
        Err(e) => {
            return vec![Finding::new(
                "schedule",
                Level::Error,
                e.to_string(),
                format!("`automaton schedule remove {name}`, then install it again"),
            )];
        }
    };
    let reinstall = format!("`automaton schedule install {name}` writes it again");
    let mut out = Vec::new();
    match config.map(|c| c.schedule.as_ref()) {
        Some(None) => out.push(Finding::new(
            "schedule",
            Level::Warning,
            format!(
                "a {} schedule is installed, but loop.toml has no [schedule]",
                installed.backend
            ),
            format!("`automaton schedule remove {name}`"),
        )),
        Some(Some(s)) if schedule::describe(s) != installed.cadence => out.push(Finding::new(
            "schedule",
            Level::Warning,
            format!(
                "the installed {} schedule runs {}, but loop.toml says {}",
                installed.backend,
                installed.cadence,
                schedule::describe(s)
            ),
            reinstall.clone(),
        )),
        _ => {}
    }
    if let Some(exe) = installed.command.first()
        && !Path::new(exe).exists()
    {
        out.push(Finding::new(
            "schedule",
            Level::Warning,
            format!("the installed schedule runs {exe}, which is not there any more"),
            reinstall,
        ));
    }
    if out.is_empty() {
        let state = if installed.enabled { "enabled" } else { "disabled" };
        out.push(Finding::ok(
            "schedule",
            format!("{} schedule {} ({state})", installed.backend, installed.cadence),
        ));
    }
    out
}

/// The root: the gate cache's permissions, schedules of loops that are
/// gone, loop directories that are links, leftovers of a killed `new` or
/// `rm`.
fn check_root(root: &Root, stores: &store::Stores, fix: bool, whole_root: bool) -> Vec<Finding> {
    let group = crate::fsx::Modes::of_dir(root.path()).group;
    let mut out = vec![check_cache(&root.cache_dir(), group, fix)];
    if !whole_root {
        return out;
    }
    out.extend(modes::findings(root.path(), &modes::walk(root.path(), fix)));
    if let Ok(records) = record::all(root) {
        for r in records {
            if matches!(
                stores.get(&r.loop_name),
                Err(crate::Error::NoSuchLoop { .. } | crate::Error::InvalidName { .. })
            ) {
                out.push(Finding::new(
                    "schedule",
                    Level::Warning,
                    format!(
                        "a {} schedule is installed for loop {:?}, which does not exist",
                        r.backend, r.loop_name
                    ),
                    format!("`automaton schedule remove {}`", r.loop_name),
                ));
            }
        }
    }
    out.extend(store::check_loops_dir(root, fix, LEFTOVER_AGE));
    out
}

/// The cache holds native code: a directory others can write (in a
/// group's root: others than the group) is refused by the gate host, and
/// made private (or the group's) again by `--fix` when it is ours.
#[cfg(unix)]
fn check_cache(cache: &Path, group: Option<u32>, fix: bool) -> Finding {
    let Ok(meta) = std::fs::metadata(cache) else {
        return Finding::ok("cache", format!("{} does not exist yet", cache.display()));
    };
    let mine = meta.uid() == nix::unistd::geteuid().as_raw();
    let open = match group {
        Some(g) => meta.mode() & 0o002 != 0 || (meta.mode() & 0o020 != 0 && meta.gid() != g),
        None => meta.mode() & 0o022 != 0,
    };
    let (private, said) = match group {
        Some(g) => (0o2770, format!("its group's ({})", modes::group_name(g))),
        None => (0o700, "private".to_owned()),
    };
    if mine && !open {
        return Finding::ok("cache", format!("{} is {said}", cache.display()));
    }
    let regroup = || group.is_none_or(|g| std::os::unix::fs::chown(cache, None, Some(g)).is_ok());
    if fix
        && mine
        && regroup()
        && std::fs::set_permissions(cache, std::fs::Permissions::from_mode(private)).is_ok()
    {
        return Finding::ok("cache", format!("made {} {said} ({private:o})", cache.display()));
    }
    let message = if mine {
        format!(
            "{} can be written by others (mode {:o})",
            cache.display(),
            meta.mode() & 0o777
        )
    } else {
        format!("{} belongs to another user (uid {})", cache.display(), meta.uid())
    };
    let action = if mine {
        format!("`--fix` makes it {private:o}")
    } else {
        format!("delete {} (it is safe to delete at any time)", cache.display())
    };
    let finding = Finding::new("cache", Level::Warning, message, action);
    if mine { finding.fixable() } else { finding }
}

/// The cache holds native code: on Windows it is made with an ACL for its
/// owner alone, which `--fix` sets again.
#[cfg(windows)]
fn check_cache(cache: &Path, _: Option<u32>, fix: bool) -> Finding {
    if !cache.exists() {
        return Finding::ok("cache", format!("{} does not exist yet", cache.display()));
    }
    if !fix {
        return Finding::ok("cache", format!("{} is private (its ACL)", cache.display()));
    }
    match crate::os::make_private(cache) {
        Ok(()) => Finding::ok("cache", format!("made {} private (its ACL)", cache.display())),
        Err(e) => Finding::new(
            "cache",
            Level::Warning,
            format!("cannot set the ACL of {}: {e}", cache.display()),
            format!("delete {} (it is safe to delete at any time)", cache.display()),
        ),
    }
}

fn human(r: &Report) -> String {
    let mut text = String::new();
    let mut section = |title: String, findings: &[Finding]| {
        text += &format!("{title}\n");
        for f in findings {
            let level = match f.level {
                Level::Ok => "ok",
                Level::Note => "note",
                Level::Warning => "warn",
                Level::Error => "error",
            };
            text += &format!("  {level:<5} {:<10} {}\n", f.check, safe(&f.message));
            if let Some(a) = &f.action
                && f.level != Level::Ok
            {
                text += &format!("  {:<16} what to do: {}\n", "", safe(a));
            }
        }
    };
    for l in &r.loops {
        section(format!("loop {}", l.name), &l.findings);
    }
    section("root".to_owned(), &r.root);
    text
}
