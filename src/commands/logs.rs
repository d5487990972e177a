//! `logs`: a tick's step or verifier output from `runs/<tick>/`, as the
//! tick wrote it: its standard output, or its standard error when that is
//! all it wrote; `--follow` keeps printing while that tick runs, standard
//! error to standard error. The file
//! is reached from the loop's directory without following a link, and one
//! that is not a regular file (a FIFO the step left) is refused at once.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::LogsArgs;
use crate::error::{Error, Exit, Result};
use crate::fsx::Dir;
use crate::history::EventKind;
use crate::runs::{self, Runs};
use crate::state::State;
use crate::store::{LoopStore, Stores};

/// How often `--follow` looks for more output.
const POLL: Duration = Duration::from_millis(100);

pub fn run(stores: &Stores, args: &LogsArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = stores.get(&args.name)?;
    if args.gates {
        return gate_lines(dir.as_ref(), args.tick, out);
    }
    let state = dir.load()?;
    let running = state.in_flight.as_ref().map(|f| f.tick);
    let Some(tick) = args
        .tick
        .or(running)
        .or(state.last_tick.as_ref().map(|t| t.number))
    else {
        return Err(Error::Refused {
            name: dir.name().to_string(),
            message: "no tick has run its step yet, so there is no output".into(),
        });
    };
    let wanted = Wanted::new(dir.as_ref(), tick, args);
    let run = wanted.find_run(args.follow, running == Some(tick), &state)?;
    wanted.print(&run, args.follow, out)?;
    Ok(Exit::Ok)
}

/// The output file of one tick that `logs` prints.
struct Wanted<'a> {
    dir: &'a dyn LoopStore,
    tick: u64,
    verifier: bool,
    /// `step` or `verifier`, and whether standard error was asked for.
    what: &'static str,
    stderr: bool,
    /// Its name in the run directory, and the paths of both.
    name: String,
    run_path: PathBuf,
    file_path: PathBuf,
}

impl<'a> Wanted<'a> {
    fn new(dir: &'a dyn LoopStore, tick: u64, args: &LogsArgs) -> Wanted<'a> {
        let what = if args.verifier { "verifier" } else { "step" };
        let run_path = runs::run_path(dir.base_dir(), tick);
        let name = runs::output_name(what, args.stderr);
        Wanted {
            dir,
            tick,
            verifier: args.verifier,
            what,
            stderr: args.stderr,
            file_path: run_path.join(&name),
            name,
            run_path,
        }
    }

    /// The tick's run directory, if it has one yet.
    fn open_run(&self) -> Result<Option<Dir>> {
        match Runs::open(self.dir.base_dir())? {
            Some(runs) => runs.run(self.tick),
            None => Ok(None),
        }
    }

    /// Whether the tick is running now.
    fn in_flight(&self) -> bool {
        self.dir
            .load()
            .is_ok_and(|s| s.in_flight.is_some_and(|f| f.tick == self.tick))
    }

    /// The run directory to print from, waiting for it with `follow` (the
    /// tick may not have made it yet); an error saying why there is no
    /// output when the process did not run (or ran on another host).
    fn find_run(&self, follow: bool, running: bool, state: &State) -> Result<Dir> {
        let mut run = self.open_run()?;
        if follow {
            while run.is_none() && self.in_flight() {
                std::thread::sleep(POLL);
                run = self.open_run()?;
            }
        }
        // A stream that said nothing leaves no file (it is made at its first
        // byte), so a missing file is no output when the process ran.
        let ran = run.is_some() && (!self.verifier || running || verifier_ran(self.dir, self.tick));
        match run.filter(|_| ran) {
            Some(run) => Ok(run),
            None => Err(self.missing(state)?),
        }
    }

    /// Why there is no output: the tick ran on another host, or the run
    /// directory (or the file in it) is not there.
    fn missing(&self, state: &State) -> Result<Error> {
        let tick = self.tick;
        let elsewhere = state
            .last_tick
            .as_ref()
            .filter(|t| t.number == tick)
            .and_then(|t| t.host.clone())
            .filter(|h| *h != crate::who::host());
        if let Some(host) = elsewhere {
            return Ok(Error::Refused {
                name: self.dir.name().to_string(),
                message: format!(
                    "tick {tick} ran on host {host}; its output is in {} there",
                    self.run_path.display()
                ),
            });
        }
        let missing = if self.open_run()?.is_some() {
            self.file_path.clone()
        } else {
            self.run_path.clone()
        };
        Ok(Error::NoOutput {
            name: self.dir.name().to_string(),
            tick,
            what: if self.verifier {
                "verifier output"
            } else {
                "step output"
            },
            path: missing,
        })
    }

    /// Prints the file, and with `follow` what it gains until the tick ends.
    /// Standard error, beside standard output: followed to this process's
    /// standard error, or shown instead when it is all there is.
    fn print(&self, run: &Dir, follow: bool, out: &mut dyn Write) -> Result<()> {
        let (mut name, mut file_path) = (self.name.clone(), self.file_path.clone());
        let err_name = runs::output_name(self.what, true);
        let err_path = self.run_path.join(&err_name);
        let mut follow_err = None;
        if !self.stderr {
            if follow {
                follow_err = Some(0);
            } else if size(run, &name)? == 0 && size(run, &err_name)? > 0 {
                tracing::warn!(
                    "tick {}'s {} wrote nothing to standard output; this is its standard error ({err_name})",
                    self.tick,
                    self.what
                );
                name = err_name.clone();
                file_path = err_path.clone();
            }
        }
        let mut offset = 0;
        loop {
            let running = follow && self.in_flight();
            // Opened again each time: the step's file is made at its first
            // byte. Never through a link, never a FIFO (refused at once).
            if let Some((file, _)) = run.open_read(&name)? {
                offset = copy_from(file, &file_path, offset, out)?;
            }
            if let Some(at) = follow_err
                && let Some((file, _)) = run.open_read(&err_name)?
            {
                follow_err = Some(copy_from(file, &err_path, at, &mut io::stderr().lock())?);
            }
            if !running {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    }
}

/// How many bytes `name` in the run directory holds (0 when it is missing).
fn size(run: &Dir, name: &str) -> Result<u64> {
    Ok(run.open_read(name)?.map_or(0, |(_, size)| size))
}

/// What each gate of tick `tick` (default: the last evaluated) logged, from
/// its gate events, under the gate's label and phase (gates that logged
/// nothing print nothing).
fn gate_lines(dir: &dyn LoopStore, tick: Option<u64>, out: &mut dyn Write) -> Result<Exit> {
    let history = dir.history()?;
    let last = history.events.iter().rev().find_map(|e| match &e.kind {
        EventKind::Gate { tick, .. } => Some(*tick),
        _ => None,
    });
    let Some(tick) = tick.or(last) else {
        return Err(Error::Refused {
            name: dir.name().to_string(),
            message: "no gate has been evaluated yet".into(),
        });
    };
    let mut text = String::new();
    for e in &history.events {
        if let EventKind::Gate { tick: t, verdict, .. } = &e.kind
            && *t == tick
        {
            for line in &verdict.logs {
                text.push_str(&format!("{} ({}): {line}\n", verdict.gate, verdict.phase));
            }
        }
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}

/// Whether the history records a verifier for tick `tick`.
fn verifier_ran(dir: &dyn LoopStore, tick: u64) -> bool {
    dir.history().is_ok_and(|h| {
        h.events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Tick { tick: t, verifier: Some(_), .. } if *t == tick))
    })
}

/// Copies what `f` (the file at `path`) holds past `offset` to `out`;
/// returns the new offset.
fn copy_from(mut f: File, path: &Path, offset: u64, out: &mut dyn Write) -> Result<u64> {
    io::Seek::seek(&mut f, io::SeekFrom::Start(offset)).map_err(Error::io("reading", path))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = offset;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("reading", path)(e)),
        };
        out.write_all(&buf[..n]).map_err(Error::Output)?;
        at += n as u64;
    }
    out.flush().map_err(Error::Output)?;
    Ok(at)
}
