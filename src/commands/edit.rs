//! `edit`: change a loop's loop.toml as `crontab -e` does. The editor
//! ($VISUAL, else $EDITOR, else vi) works on a copy beside it; the copy is
//! checked as `validate` would, and only a valid one replaces loop.toml,
//! atomically. A refused edit leaves loop.toml as it was and keeps the copy;
//! the next edit reopens a copy that a refused or killed edit left, and
//! removes what an edit killed while saving left (see `store::edits`). The
//! save is made under the loop's lock and recorded as a `config-changed`
//! event with its actor (docs/ticks.md, "The record of config changes").

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::Command;

use tempfile::TempPath;

use crate::cli::EditArgs;
use crate::config::LoopConfig;
use crate::error::{Error, Exit, Result};
use crate::history::EventKind;
use crate::ops::Ctx;
use crate::ops::check::check_config;
use crate::root::Root;
use crate::rules::{self, Current, Via};
use crate::store::edits::{self, Left};
use crate::store::{LoopStore, Stores};

pub(super) fn run(root: &Root, args: &EditArgs, out: &mut dyn Write) -> Result<Exit> {
    let stores = Stores::open(root)?;
    let dir = stores.get(&args.name)?;
    let ctx = Ctx::own(root, &stores);
    ctx.allowed_on(dir.as_ref(), crate::access::Action::Edit)?;
    let config_path = dir.config_path();
    let original = dir.config_bytes()?;
    // A shared store's loop may have no directory on this host yet.
    crate::fsx::create_dirs(dir.base_dir())?;
    let copy = open_copy(dir.as_ref(), &original)?;
    let edited = loop {
        run_editor(&copy)?;
        let edited = edits::read_copy(&copy)?;
        if edited == original {
            super::emit(out, &format!("no changes to {}\n", config_path.display()))?;
            return Ok(Exit::Ok);
        }
        match check(root, dir.as_ref(), &copy, &edited) {
            Ok(()) => break edited,
            Err(e) if ask_again(&e) => continue,
            Err(e) => {
                return Err(Error::EditRejected {
                    error: Box::new(e),
                    config: config_path,
                    kept: keep(copy)?,
                });
            }
        }
    };
    if !save(&ctx, dir.as_ref(), &original, &edited)? {
        // Someone else changed it meanwhile: theirs is not overwritten.
        let kept = keep(copy)?;
        return Err(Error::Editor {
            action: format!("{} changed while it was being edited", config_path.display()),
            message: format!("it was left as it is now; the edit is kept in {}", kept.display()),
        });
    }
    super::emit(out, &format!("saved {}\n", config_path.display()))?;
    Ok(Exit::Ok)
}

/// Under the loop's lock (waiting for a running tick to end), replaces
/// loop.toml with `edited` if it still holds `original`, and records the
/// change as the actor's edit, after any change made outside automaton
/// before it. Whether it was saved.
fn save(ctx: &Ctx<'_>, dir: &dyn LoopStore, original: &[u8], edited: &[u8]) -> Result<bool> {
    let mut saved = false;
    let (root, by) = (ctx.root, ctx.actor.user.clone());
    ctx.update(dir, "edit", crate::lock::Wait::Forever, |state| {
        if dir.config_bytes()? != original {
            return Ok(Vec::new());
        }
        dir.save_config(edited)?;
        saved = true;
        let now = Current::read(root.path(), &String::from_utf8_lossy(edited));
        let policy = LoopConfig::parse(&now.text, &dir.config_path())?
            .approval
            .config_changes;
        let change = rules::take_in(state, &now, policy, Via::Edit, Some(by));
        Ok(change
            .map(|change| EventKind::ConfigChanged { change })
            .into_iter()
            .collect())
    })?;
    Ok(saved)
}

/// The copy to edit: the newest one an edit of this loop left (killed, or
/// refused and kept), reopened as `crontab -e` does, else a new one holding
/// `original`. A save that a killed edit never renamed in is removed.
fn open_copy(dir: &dyn LoopStore, original: &[u8]) -> Result<TempPath> {
    let base = dir.base_dir();
    let mut reopened = None;
    for left in edits::leftovers(base)? {
        match left.left {
            Left::Save => {
                if let Err(e) = std::fs::remove_file(&left.path) {
                    tracing::warn!("cannot remove {}: {e}", left.path.display());
                }
            }
            Left::Copy if reopened.is_none() => {
                reopened = edits::reopen(base, &left.path)?;
                if let Some(copy) = &reopened {
                    tracing::warn!(
                        "a previous edit of loop {:?} was interrupted or refused; reopening it ({})",
                        dir.name().as_str(),
                        copy.display()
                    );
                }
            }
            Left::Copy => {}
        }
    }
    match reopened {
        Some(copy) => Ok(copy),
        None => edits::new_copy(base, original),
    }
}

/// Keeps the copy (the edit is not lost); returns where it is.
fn keep(copy: TempPath) -> Result<std::path::PathBuf> {
    copy.keep()
        .map_err(|e| Error::io("keeping", e.path.to_path_buf())(e.error))
}

/// Checks edited loop.toml text as a tick would load it, reporting every
/// problem after it parses (errors name `copy`,
/// the file the editor saw, so line numbers match what was typed).
fn check(root: &Root, dir: &dyn LoopStore, copy: &Path, text: &[u8]) -> Result<()> {
    let text = String::from_utf8_lossy(text);
    let config = LoopConfig::parse(&text, copy)?;
    check_config(root, dir.base_dir(), &config, copy)
}

/// Runs the editor on `path`, through `sh` so `EDITOR="code --wait"` works.
fn run_editor(path: &Path) -> Result<()> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .map_err(|e| Error::Editor {
            action: format!("cannot run the editor {editor:?}"),
            message: e.to_string(),
        })?;
    if !status.success() {
        return Err(Error::Editor {
            action: format!("the editor {editor:?} failed ({status})"),
            message: "loop.toml was left unchanged".into(),
        });
    }
    Ok(())
}

/// On a terminal, shows the error and offers to edit again (as `crontab -e`
/// does); elsewhere, never.
fn ask_again(e: &Error) -> bool {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return false;
    }
    eprint!("error: {}\nedit again? [Y/n] ", crate::term::safe(&e.to_string()));
    let mut answer = String::new();
    if stdin.lock().read_line(&mut answer).is_err() {
        return false;
    }
    !answer.trim().eq_ignore_ascii_case("n")
}
