//! The shell's view of the command line: completion scripts that ask this
//! binary for candidates (so loop names complete), and the man page. Both
//! are generated from the clap definitions in `cli.rs`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};

use crate::cli::{Cli, ManArgs};
use crate::complete::COMPLETE_VAR;
use crate::error::{Error, Exit, Result};

/// Writes the registration script for `shell`: a function that calls
/// `automaton` with `AUTOMATON_COMPLETE` set to get the candidates.
pub(super) fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> Result<Exit> {
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

/// Writes the man page, in roff: automaton(1), or the page of the command
/// `args.command` names; with `--dir`, every page into that directory.
pub(super) fn man(args: &ManArgs, out: &mut dyn Write) -> Result<Exit> {
    let mut cli = Cli::command().disable_help_subcommand(true);
    cli.build();
    if let Some(dir) = &args.dir {
        let written = write_pages(&cli, dir)?;
        let text: String = written.iter().map(|p| format!("{}\n", p.display())).collect();
        return super::emit(out, &text).map(|()| Exit::Ok);
    }
    let mut cmd = &cli;
    for word in &args.command {
        cmd = cmd.find_subcommand(word).ok_or_else(|| {
            let names: Vec<&str> = cmd.get_subcommands().map(clap::Command::get_name).collect();
            Error::NoSuchCommand {
                name: word.clone(),
                hint: crate::suggest::hint(word, names),
            }
        })?;
    }
    let mut page = Vec::new();
    render_page(cmd, args.command.is_empty(), &mut page).map_err(Error::Output)?;
    out.write_all(&page).map_err(Error::Output)?;
    Ok(Exit::Ok)
}

/// Writes every page into `dir`: automaton.1 and one for each command
/// (automaton-gate-test.1 for `gate test`). Returns the files written.
fn write_pages(cli: &clap::Command, dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(cmd: &clap::Command, top: bool, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
        let path = dir.join(clap_mangen::Man::new(cmd.clone()).get_filename());
        let mut page = Vec::new();
        render_page(cmd, top, &mut page).map_err(Error::Output)?;
        std::fs::write(&path, page).map_err(Error::io("writing", &path))?;
        written.push(path);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, false, dir, written)?;
        }
        Ok(())
    }
    let mut written = Vec::new();
    walk(cli, true, dir, &mut written)?;
    Ok(written)
}

/// One page: clap's sections, and on automaton(1) what clap cannot say
/// (EXIT STATUS, ENVIRONMENT, FILES); a command's page points back to it.
fn render_page(cmd: &clap::Command, top: bool, page: &mut Vec<u8>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(page)?;
    man.render_name_section(page)?;
    man.render_synopsis_section(page)?;
    man.render_description_section(page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(page)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(page)?;
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(page)?;
    }
    if top {
        page.extend_from_slice(MAN_SECTIONS.as_bytes());
    } else {
        page.extend_from_slice(b".SH \"SEE ALSO\"\nautomaton(1): exit status, environment and files\n");
    }
    if cmd.get_version().is_some() {
        man.render_version_section(page)?;
    }
    // Each section rendered alone starts with the same prelude: once is enough.
    let text = String::from_utf8_lossy(page).into_owned();
    let mut rest = text.splitn(2, PRELUDE);
    let (head, tail) = (rest.next().unwrap_or_default(), rest.next());
    let deduped = match tail {
        Some(tail) => format!("{head}{PRELUDE}{}", tail.replace(PRELUDE, "")),
        None => text.clone(),
    };
    *page = deduped.into_bytes();
    Ok(())
}

/// What clap_mangen puts before each section it renders.
const PRELUDE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

/// automaton(1)'s EXIT STATUS, ENVIRONMENT and FILES (README, "Exit codes"
/// and "Layout on disk"), in roff.
const MAN_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
0
ok
.TP
1
error, including a refused request (not an approver, the loop exists, ...)
.TP
2
usage, or an invalid loop name
.TP
3
no such loop, or no root
.TP
4
the loop's lock was not obtained in time (its holder is named)
.TP
5
invalid config or state (the file, and for config the line and column, are named)
.TP
6
the step or verifier failed
.TP
7
the loop was halted by this tick
.TP
8
the step ran, but its result could not be recorded: do not run it again
.TP
9
the change was made, but the directory sync that makes it survive a power loss failed: do not repeat it
.SH ENVIRONMENT
.TP
AUTOMATON_ROOT
the root, when \fB\-\-root\fR is not given
.TP
AUTOMATON_STORE
where the root's loops live: file, or a postgres:// URL (\fB\-\-store\fR overrides it)
.TP
AUTOMATON_USER
the name recorded as acting (approvals, history), instead of the OS user
.TP
VISUAL, EDITOR
the editor \fBautomaton edit\fR runs (else vi)
.TP
COLUMNS
the width \fBautomaton list\fR fits its table to (else the terminal's; a pipe gets every cell whole)
.TP
NO_COLOR
no colour in log output
.TP
RUST_LOG
log filter, overriding \fB\-v\fR and \fB\-q\fR (e.g. automaton=debug)
.TP
XDG_DATA_HOME
the default root is $XDG_DATA_HOME/automaton (~/.local/share/automaton)
.PP
A step runs with AUTOMATON_LOOP, AUTOMATON_TICK, AUTOMATON_ROOT, AUTOMATON_WORKTREE and AUTOMATON_METRICS set.
.SH FILES
.TP
<root>/loops/<name>/loop.toml
the loop's config, written by \fBautomaton new\fR, edited by people
.TP
<root>/loops/<name>/.state.loop
the loop's state (JSON), replaced atomically
.TP
<root>/loops/<name>/.state.lock
the loop's lock file
.TP
<root>/loops/<name>/.state.flight
a running tick's in-flight record
.TP
<root>/loops/<name>/history.jsonl
the loop's events, one JSON object a line (rotated to history.<n>.jsonl)
.TP
<root>/loops/<name>/runs/<tick>/
a tick's step and verifier output (step.out, step.err, verifier.out, verifier.err) and metrics
.TP
<root>/cache/
precompiled gates; safe to delete at any time
.TP
<root>/schedules/<loop>.json
the OS schedule \fBautomaton schedule install\fR made
.TP
<root>/daemon.json, <root>/daemon.lock
the daemon serving the root, and its lock
.PP
The root is \fB\-\-root\fR, else $AUTOMATON_ROOT, else the nearest .automaton/ in the working directory or its parents, else $XDG_DATA_HOME/automaton.
"#;
