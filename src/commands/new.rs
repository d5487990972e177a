//! `new`: create a loop from a loop.toml, or from a step command.

use std::io::Write;

use crate::cli::NewArgs;
use crate::config::{ConfigError, LoopConfig};
use crate::error::{Exit, Result};
use crate::history::EventKind;
use crate::ops::check::{MissingGate, check_gates};
use crate::root::{LoopName, Root};
use crate::state::State;
use crate::store;

pub(super) fn run(root: &Root, args: &NewArgs, out: &mut dyn Write) -> Result<Exit> {
    let name = LoopName::new(&args.name)?;
    let text = match &args.from {
        Some(path) => std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?,
        None => template(args.step.as_deref().unwrap_or("true")),
    };
    // Refuse a bad config before anything is made; errors name the file the
    // operator wrote.
    let shown = args.from.clone().unwrap_or_else(|| "loop.toml".into());
    let config = LoopConfig::parse(&text, &shown)?;
    // An existing loop is refused before its gates are compiled.
    let stores = store::Stores::open(root)?;
    refuse_existing(root, &stores, &name)?;
    let problems = check_gates(
        root,
        &root.loops_dir().join(name.as_str()),
        &config,
        &shown,
        MissingGate::Later,
    )?;
    if let Some(e) = ConfigError::all(problems) {
        return Err(e.into());
    }

    let now = crate::clock::now();
    let mut state = State::new(now);
    state.version = 1;
    // The config it is made with is the first the record of the rules
    // compares with (a change before its first tick is recorded too).
    let first = crate::rules::Current::of(root.path(), &config);
    let policy = config.approval.config_changes;
    crate::rules::take_in(&mut state, &first, policy, crate::rules::Via::Outside, None);
    let me = stores.me();
    let created = EventKind::Created { by: me.user.clone() };
    let dir = stores.create(&name, &text, &state, vec![created], me)?;
    if args.json.json {
        super::emit_json(out, &super::status::view(dir.as_ref(), &state))?;
    } else {
        super::emit(out, &format!("created loop {name} in {}\n", dir.location()))?;
    }
    Ok(Exit::Ok)
}

/// A loop of this name is refused, and so (in the file store) is a
/// directory of its name that holds no loop, naming what it holds.
fn refuse_existing(root: &Root, stores: &store::Stores, name: &LoopName) -> Result<()> {
    match stores.get(name.as_str()) {
        Ok(_) => {
            return Err(crate::Error::LoopExists {
                name: name.to_string(),
                root: root.path().to_owned(),
            });
        }
        Err(crate::Error::NoSuchLoop { .. }) => {}
        Err(e) => return Err(e),
    }
    let dir = root.loops_dir().join(name.as_str());
    if stores.is_shared() {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut held: Vec<String> = entries
        .filter_map(std::result::Result::ok)
        .map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                format!("{n}/")
            } else {
                n
            }
        })
        .collect();
    held.sort();
    Err(crate::Error::NotALoop {
        dir,
        holds: if held.is_empty() {
            "nothing".to_owned()
        } else {
            held.join(", ")
        },
    })
}

/// The loop.toml `new` writes when not given one.
fn template(step: &str) -> String {
    let step = toml::Value::String(step.to_owned());
    format!(
        r#"# The loop's step: an argv array, or a string run by `sh -c`. It runs
# confined: it writes its run directory and worktree, never the root; a
# [step] table (command = ..., writable = [...], readable = [...]) grants
# more (docs/steps.md, "What a step can and cannot do").
step = {step}
# timeout = "30m"          # the step's whole process group is killed after it
# overlap = "skip"         # a tick that finds the loop busy: "skip" or "wait"

# [verifier]               # runs after a successful step
# command = "cargo test --quiet"

# [schedule]               # for `automaton schedule install` and `automaton daemon`
# every = "15m"

# [[gate]]                 # policy gates, evaluated before (or after) the step
# stock = "approve-every"
# params = {{ every = 5 }}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn template_is_valid_for_awkward_steps() {
        for step in ["true", "echo \"quoted\" 'and' \\back", "line\nbreak"] {
            let c = LoopConfig::parse(&template(step), Path::new("t")).unwrap();
            assert_eq!(c.step.command.argv()[2], step);
        }
    }
}
