//! The shell's view of the command line: completion scripts that ask this
//! binary for candidates (so loop names complete), and the man page. Both
//! are generated from the clap definitions in `cli.rs`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::engine::CompletionCandidate;
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};

use crate::cli::Cli;
use crate::error::{Error, Exit, Result};
use crate::root::Root;
use crate::store;

/// The variable that asks the binary for completions instead of running
/// a command (`main` answers it before parsing).
pub const COMPLETE_VAR: &str = "AUTOMATON_COMPLETE";

/// Writes the registration script for `shell`: a function that calls
/// `automaton` with `AUTOMATON_COMPLETE` set to get the candidates.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> Result<Exit> {
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Zsh => &Zsh,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::PowerShell => &Powershell,
        // `Shell` is non-exhaustive; a shell clap learns later gets the
        // static script until it is listed here.
        other => {
            let mut buf = Vec::new();
            clap_complete::generate(other, &mut Cli::command(), "automaton", &mut buf);
            return super::emit(out, &String::from_utf8_lossy(&buf)).map(|()| Exit::Ok);
        }
    };
    completer
        .write_registration(COMPLETE_VAR, "automaton", "automaton", "automaton", out)
        .map_err(Error::Output)?;
    Ok(Exit::Ok)
}

/// Writes the man page, in roff.
pub fn man(out: &mut dyn Write) -> Result<Exit> {
    clap_mangen::Man::new(Cli::command())
        .render(out)
        .map_err(Error::Output)?;
    Ok(Exit::Ok)
}

/// The loops of the root named on the line being completed (`--root DIR`),
/// else of the root found as every command finds it. Nothing when there is
/// no root: a completion never fails loudly.
pub fn complete_loop_names() -> Vec<CompletionCandidate> {
    let flag = root_flag(std::env::args_os());
    let flags = crate::root::Flags {
        root: flag.as_deref(),
        store: None,
    };
    let Ok(root) = Root::open(flags) else {
        return Vec::new();
    };
    // The root's store, so a root in PostgreSQL completes its loops too.
    store::Stores::open(&root)
        .and_then(|s| s.list())
        .unwrap_or_default()
        .into_iter()
        .map(|d| CompletionCandidate::new(d.name().as_str()))
        .collect()
}

/// The value of the last `--root DIR` or `--root=DIR` in `args`.
fn root_flag(args: impl IntoIterator<Item = OsString>) -> Option<PathBuf> {
    let mut found = None;
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let Some(s) = a.to_str() else { continue };
        if s == "--root" {
            found = args.next().map(PathBuf::from);
        } else if let Some(v) = s.strip_prefix("--root=") {
            found = Some(PathBuf::from(v));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_flag_is_read_from_the_line_being_completed() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(root_flag(args(&["automaton", "--", "automaton", "status"])), None);
        assert_eq!(
            root_flag(args(&["automaton", "--", "automaton", "--root", "/r", "status"])),
            Some(PathBuf::from("/r"))
        );
        assert_eq!(
            root_flag(args(&["automaton", "--", "automaton", "--root=/s", "status"])),
            Some(PathBuf::from("/s"))
        );
    }
}
