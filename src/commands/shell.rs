//! The shell's view of the command line: completion scripts that ask this
//! binary for candidates (so loop names complete), and the man page. Both
//! are generated from the clap definitions in `cli.rs`.

use std::io::Write;

use clap::CommandFactory;
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};

use crate::cli::Cli;
use crate::complete::COMPLETE_VAR;
use crate::error::{Error, Exit, Result};

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
