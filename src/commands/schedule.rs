//! `schedule install|remove|show`: hand a loop's cadence to an OS scheduler,
//! take it back, and say what is installed. `--dry-run` prints the files and
//! commands without touching anything.

use std::io::Write;

use serde::Serialize;

use super::render::safe;
use crate::cli::{ScheduleCommand, ScheduleInstallArgs, ScheduleRemoveArgs, ScheduleShowArgs};
use crate::config::LoopConfig;
use crate::error::{Exit, Result};
use crate::root::{LoopName, Root};
use crate::schedule::{self, Action, Record, record};

pub(super) fn run(root: &Root, cmd: &ScheduleCommand, out: &mut dyn Write) -> Result<Exit> {
    match cmd {
        ScheduleCommand::Install(args) => install(root, args, out),
        ScheduleCommand::Remove(args) => remove(root, args, out),
        ScheduleCommand::Show(args) => show(root, args, out),
    }
}

/// What `--dry-run --json` prints.
#[derive(Serialize)]
struct Plan<'a> {
    record: &'a Record,
    files: Vec<File<'a>>,
    deletes: Vec<&'a std::path::Path>,
    commands: Vec<Vec<String>>,
    crontab: Vec<String>,
}

#[derive(Serialize)]
struct File<'a> {
    path: &'a std::path::Path,
    text: &'a str,
}

fn plan<'a>(record: &'a Record, actions: &'a [Action]) -> Plan<'a> {
    let mut p = Plan {
        record,
        files: Vec::new(),
        deletes: Vec::new(),
        commands: Vec::new(),
        crontab: Vec::new(),
    };
    for a in actions {
        match a {
            Action::Write { path, text } => p.files.push(File { path, text }),
            Action::Delete(path) => p.deletes.push(path),
            Action::Run(argv) | Action::RunLenient(argv) => p.commands.push(argv.clone()),
            Action::Crontab(_) => p.crontab.push(a.to_string().trim_end().to_owned()),
        }
    }
    p
}

fn dry_run(record: &Record, actions: &[Action], verb: &str, json: bool, out: &mut dyn Write) -> Result<Exit> {
    if json {
        super::emit_json(out, &plan(record, actions))?;
        return Ok(Exit::Ok);
    }
    let mut text = format!(
        "would {verb} the {} schedule {} of loop {} ({}):\n",
        record.backend, record.name, record.loop_name, record.cadence
    );
    for a in actions {
        text += &a.to_string();
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}

/// The loop `name` and its loop.toml, read from the store `root` uses.
fn loop_config(root: &Root, name: &str) -> Result<(LoopName, LoopConfig)> {
    let dir = crate::store::open(root, name)?;
    Ok((dir.name().clone(), dir.config()?))
}

fn install(root: &Root, args: &ScheduleInstallArgs, out: &mut dyn Write) -> Result<Exit> {
    if args.dry_run {
        let (name, config) = loop_config(root, &args.name)?;
        let (record, actions) = schedule::plan_install(root, &name, &config, args.backend.map(Into::into))?;
        return dry_run(&record, &actions, "install", args.json.json, out);
    }
    let backend = args
        .backend
        .map_or_else(schedule::Backend::default_here, Into::into);
    let r = loop_config(root, &args.name)
        .and_then(|(name, config)| schedule::install(root, &name, &config, Some(backend)))
        .map_err(|e| match e {
            // A scheduler command or a write failed part-way: something may be
            // left behind with no record of it. (Refusals come before any write.)
            crate::Error::Schedule(
                schedule::ScheduleError::Command { .. } | schedule::ScheduleError::Spawn { .. },
            )
            | crate::Error::Io { .. } => crate::Error::InstallFailed {
                name: args.name.clone(),
                backend,
                error: Box::new(e),
            },
            e => e,
        })?;
    if args.json.json {
        super::emit_json(out, &r)?;
    } else {
        super::emit(
            out,
            &format!(
                "installed the {} schedule {} of loop {} ({})\n",
                r.backend, r.name, r.loop_name, r.cadence
            ),
        )?;
    }
    Ok(Exit::Ok)
}

fn remove(root: &Root, args: &ScheduleRemoveArgs, out: &mut dyn Write) -> Result<Exit> {
    let recorded = match record::read(root, LoopName::new(&args.name)?.as_str()) {
        // An unreadable record is replaced by what the named backend says.
        Err(crate::Error::Schedule(schedule::ScheduleError::BadRecord { .. })) if args.backend.is_some() => {
            None
        }
        other => other?,
    };
    let (r, actions) = match (recorded, args.backend.map(schedule::Backend::from)) {
        (Some(r), Some(b)) if r.backend != b => {
            return Err(crate::Error::Refused {
                name: args.name.clone(),
                message: format!("its schedule was installed with {}, not {b}", r.backend),
            });
        }
        // Nothing recorded, but the operator names the backend: remove what
        // an install there would have made.
        (None, Some(b)) => {
            let (name, config) = loop_config(root, &args.name)?;
            let (r, _) = schedule::plan_fresh(root, &name, &config, b)?;
            let actions = schedule::removal(&r);
            (r, actions)
        }
        _ => schedule::plan_remove(root, &args.name)?,
    };
    if args.dry_run {
        return dry_run(&r, &actions, "remove", args.json.json, out);
    }
    schedule::perform_removal(root, &r, &actions)?;
    if args.json.json {
        super::emit_json(
            out,
            &serde_json::json!({ "loop": r.loop_name, "removed": true, "backend": r.backend, "name": r.name }),
        )?;
    } else {
        super::emit(
            out,
            &format!(
                "removed the {} schedule {} of loop {}\n",
                r.backend, r.name, r.loop_name
            ),
        )?;
    }
    Ok(Exit::Ok)
}

fn show(root: &Root, args: &ScheduleShowArgs, out: &mut dyn Write) -> Result<Exit> {
    let records = match &args.name {
        Some(name) => {
            let dir = crate::store::open(root, name)?;
            if let Some(r) = record::read(root, dir.name().as_str())? {
                vec![r]
            } else {
                let cadence = dir.config()?.schedule.map(|s| schedule::describe(&s));
                if args.json.json {
                    super::emit_json(
                        out,
                        &serde_json::json!({ "loop": name, "installed": null, "cadence": cadence }),
                    )?;
                } else {
                    let how = match cadence {
                        Some(c) => format!("`automaton daemon` would tick it ({c})"),
                        None => "it has no [schedule]".to_owned(),
                    };
                    super::emit(out, &format!("loop {name}: no OS schedule installed; {how}\n"))?;
                }
                return Ok(Exit::Ok);
            }
        }
        None => record::all(root)?,
    };
    if args.json.json {
        match &args.name {
            Some(_) => super::emit_json(out, &records[0])?,
            None => super::emit_json(out, &records)?,
        }
        return Ok(Exit::Ok);
    }
    if let (Some(name), [r]) = (&args.name, records.as_slice()) {
        return detail(r, ignores_jitter(root, name, r.backend), out);
    }
    if records.is_empty() {
        super::emit(out, "no OS schedules installed\n")?;
        return Ok(Exit::Ok);
    }
    let mut rows = vec![
        ["LOOP", "BACKEND", "STATE", "NAME", "CADENCE"]
            .map(String::from)
            .to_vec(),
    ];
    for r in &records {
        let state = if r.enabled { "enabled" } else { "disabled" };
        rows.push(vec![
            r.loop_name.clone(),
            r.backend.to_string(),
            state.to_owned(),
            r.name.clone(),
            r.cadence.clone(),
        ]);
    }
    let text = super::render::table(&rows);
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}

/// Whether loop `name`'s config has a jitter `backend` does not apply; a
/// config that does not load says nothing here (`status` says why).
fn ignores_jitter(root: &Root, name: &str, backend: schedule::Backend) -> bool {
    crate::store::open(root, name)
        .and_then(|dir| dir.config())
        .is_ok_and(|c| c.schedule.is_some_and(|s| schedule::ignores_jitter(&s, backend)))
}

/// `show NAME`: one installed schedule in full, and that its backend leaves
/// out the loop's jitter when it does.
fn detail(r: &Record, jitter_ignored: bool, out: &mut dyn Write) -> Result<Exit> {
    let mut text = format!(
        "loop       {}\nbackend    {}\nname       {}\nstate      {}\ncadence    {}\nruns       {}\n",
        safe(&r.loop_name),
        r.backend,
        safe(&r.name),
        if r.enabled {
            "enabled"
        } else {
            "disabled (the loop halted or completed; `resume` enables it)"
        },
        safe(&r.cadence),
        safe(&r.command.join(" ")),
    );
    if jitter_ignored {
        text += &format!("jitter     not applied ({} has none)\n", r.backend);
    }
    for f in &r.files {
        text += &format!("file       {}\n", safe(&f.display().to_string()));
    }
    text += &format!(
        "installed  {}\n",
        r.installed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    );
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}
