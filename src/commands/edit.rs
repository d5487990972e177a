//! `edit`: change a loop's loop.toml as `crontab -e` does. The editor
//! ($VISUAL, else $EDITOR, else vi) works on a copy beside it; the copy is
//! checked as `validate` would, and only a valid one replaces loop.toml,
//! atomically. A refused edit leaves loop.toml as it was and keeps the copy.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::Command;

use super::new::{MissingGate, check_gates};
use super::validate::check_schedule;
use crate::cli::EditArgs;
use crate::config::LoopConfig;
use crate::error::{Error, Result};
use crate::root::Root;
use crate::store::{self, LoopStore, Stores};

pub fn run(root: &Root, args: &EditArgs, out: &mut dyn Write) -> Result<u8> {
    let stores = Stores::open(root)?;
    let dir = stores.get(&args.name)?;
    let config_path = dir.config_path();
    let read = || -> Result<Vec<u8>> {
        match stores.is_shared() {
            true => Ok(dir.config_text()?.into_bytes()),
            false => std::fs::read(&config_path).map_err(Error::io("reading", &config_path)),
        }
    };
    let original = read()?;
    // A shared store's loop may have no directory on this host yet.
    store::create_dirs(dir.base_dir())?;
    let copy = tempfile::Builder::new()
        .prefix(".loop.toml.edit-")
        .suffix(".toml")
        .tempfile_in(dir.base_dir())
        .map_err(Error::io("creating a temporary file in", dir.base_dir()))?;
    std::fs::write(copy.path(), &original).map_err(Error::io("writing", copy.path()))?;
    let edited = loop {
        run_editor(copy.path())?;
        let edited = std::fs::read(copy.path()).map_err(Error::io("reading", copy.path()))?;
        if edited == original {
            super::emit(out, &format!("no changes to {}\n", config_path.display()))?;
            return Ok(0);
        }
        match check(root, dir.as_ref(), copy.path(), &edited) {
            Ok(()) => break edited,
            Err(e) if ask_again(&e) => continue,
            Err(e) => {
                let (_, kept) = copy
                    .keep()
                    .map_err(|e| Error::io("keeping", e.file.path().to_owned())(e.error))?;
                return Err(Error::EditRejected {
                    error: Box::new(e),
                    config: config_path,
                    kept,
                });
            }
        }
    };
    // Someone else may have changed it meanwhile: theirs is not overwritten.
    let now = read()?;
    if now != original {
        let (_, kept) = copy
            .keep()
            .map_err(|e| Error::io("keeping", e.file.path().to_owned())(e.error))?;
        return Err(Error::Editor {
            action: format!("{} changed while it was being edited", config_path.display()),
            message: format!("it was left as it is now; the edit is kept in {}", kept.display()),
        });
    }
    match stores.set_config(dir.name(), &String::from_utf8_lossy(&edited)) {
        Some(saved) => saved?,
        None => store::write_file(dir.base_dir(), &config_path, &edited)?,
    }
    super::emit(out, &format!("saved {}\n", config_path.display()))?;
    Ok(0)
}

/// Checks edited loop.toml text as a tick would load it (errors name `copy`,
/// the file the editor saw, so line numbers match what was typed).
fn check(root: &Root, dir: &dyn LoopStore, copy: &Path, text: &[u8]) -> Result<()> {
    let text = String::from_utf8_lossy(text);
    let config = LoopConfig::parse(&text, copy)?;
    check_schedule(&config, copy)?;
    check_gates(root, dir.base_dir(), &config, copy, MissingGate::Error)
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
