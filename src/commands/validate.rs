//! `validate`: load a loop's config (or a loop.toml file) as a tick would,
//! and ask each gate whether it accepts its params. Nothing is changed.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cli::ValidateArgs;
use crate::config::LoopConfig;
use crate::error::{Exit, Result};
use crate::ops::check::check_config;
use crate::root::{Flags, LoopName, Root};
use crate::store::{self, LoopStore};

/// One config checked.
#[derive(Serialize)]
struct Checked {
    /// The loop, when a loop's config was checked.
    #[serde(rename = "loop")]
    name: Option<String>,
    path: PathBuf,
    valid: bool,
    error: Option<String>,
}

pub(crate) fn run(root_flag: Flags<'_>, args: &ValidateArgs, out: &mut dyn Write) -> Result<Exit> {
    let mut checked = Vec::new();
    let mut first_error = None;
    let mut record = |name: Option<String>, path: PathBuf, r: Result<()>| {
        let error = r.err();
        checked.push(Checked {
            name,
            path,
            valid: error.is_none(),
            error: error.as_ref().map(ToString::to_string),
        });
        if let Some(e) = error {
            first_error.get_or_insert(e);
        }
    };
    match &args.target {
        None => {
            let root = Root::open(root_flag)?;
            for dir in store::Stores::open(&root)?.list()? {
                record(
                    Some(dir.name().to_string()),
                    dir.config_path(),
                    check_loop(&root, dir.as_ref()),
                );
            }
        }
        Some(target) => {
            if let Some((root, dir)) = loop_named(root_flag, target)? {
                record(
                    Some(dir.name().to_string()),
                    dir.config_path(),
                    check_loop(&root, dir.as_ref()),
                );
            } else {
                let path = PathBuf::from(target);
                let (root, _) = Root::locate(root_flag)?;
                record(None, path.clone(), check_file(&root, &path));
            }
        }
    }
    if args.json.json {
        super::emit_json(out, &checked)?;
    } else {
        let mut text = String::new();
        for c in &checked {
            let what = c.name.clone().unwrap_or_else(|| c.path.display().to_string());
            match &c.error {
                None => text += &format!("ok       {what}\n"),
                Some(_) => text += &format!("invalid  {what}\n"),
            }
        }
        if checked.is_empty() {
            text += "no loops to validate\n";
        }
        super::emit(out, &text)?;
    }
    // Every config was checked and listed; the first invalid one is the error.
    match first_error {
        Some(e) => Err(e),
        None => Ok(Exit::Ok),
    }
}

/// The loop `target` names, when it is a loop name and the loop exists;
/// otherwise `target` is taken for a file.
fn loop_named(root_flag: Flags<'_>, target: &str) -> Result<Option<(Root, Box<dyn LoopStore>)>> {
    if LoopName::new(target).is_err() || Path::new(target).exists() {
        return Ok(None);
    }
    let root = Root::open(root_flag)?;
    let dir = store::open(&root, target)?;
    Ok(Some((root, dir)))
}

fn check_loop(root: &Root, dir: &dyn LoopStore) -> Result<()> {
    let path = dir.config_path();
    let config = dir.config()?;
    check_config(root, dir.base_dir(), &config, &path)
}

/// A loop.toml not (yet) a loop's: gate paths are relative to its directory.
fn check_file(root: &Root, path: &Path) -> Result<()> {
    let config = LoopConfig::load(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    check_config(root, base, &config, path)
}
