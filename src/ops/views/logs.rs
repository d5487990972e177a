//! The view of a tick's output (`logs`): the step's or verifier's file in
//! `runs/<tick>/`, as the tick wrote it: its standard output, or its
//! standard error when that is all it wrote; and whether the other stream
//! has output too. The file is reached from the loop's directory without
//! following a link, and one that is not a regular file (a FIFO the step
//! left) is refused at once. The output is never held whole: it is
//! streamed from the file, or read up to a bound ([`Output::bounded`],
//! [`Output::last`]).

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsx::Dir;
use crate::history::EventKind;
use crate::ops::Ctx;
use crate::runs::{self, Runs};
use crate::state::State;
use crate::store::LoopStore;

/// Which output of which tick.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Request {
    /// The tick; by default the running one, else the last.
    pub tick: Option<u64>,
    /// The verifier's output rather than the step's.
    pub verifier: bool,
    /// Standard error rather than standard output.
    pub stderr: bool,
}

/// A tick's output, as `logs` prints it.
pub(crate) struct Output {
    pub tick: u64,
    /// `step` or `verifier`.
    pub what: &'static str,
    /// Whether `text` is standard error: asked for, or all it wrote.
    pub stderr: bool,
    /// Whether standard error is shown because standard output is empty.
    pub stderr_instead: bool,
    /// The file shown, open, and its path; none when it said nothing.
    file: Option<(File, PathBuf)>,
    /// How many bytes the file held when it was opened.
    pub bytes: u64,
    /// How many bytes the stream not shown holds (0: none).
    pub other_bytes: u64,
}

/// The most bytes of a tick's output an answer holds ([`Output::bounded`]).
pub(crate) const MAX_OUTPUT: u64 = 1024 * 1024;

impl Output {
    /// Streams the output to `out`, whole (as far as it was written when
    /// it was opened), never holding more than a buffer of it.
    pub(crate) fn write_to(self, out: &mut dyn io::Write) -> Result<()> {
        if let Some((file, path)) = self.file {
            copy_some(file, &path, 0, self.bytes, out)?;
        }
        Ok(())
    }

    /// At most `limit` bytes of the output, then `[truncated, N bytes
    /// more]` on a line of its own when it held more.
    pub(crate) fn bounded(self, limit: u64) -> Result<Vec<u8>> {
        let mut text = Vec::new();
        let kept = self.bytes.min(limit);
        if let Some((file, path)) = self.file {
            copy_some(file, &path, 0, kept, &mut text)?;
        }
        let more = self.bytes - text.len() as u64;
        if more > 0 {
            if !text.ends_with(b"\n") {
                text.push(b'\n');
            }
            text.extend_from_slice(format!("[truncated, {more} bytes more]\n").as_bytes());
        }
        Ok(text)
    }

    /// The last `n` bytes of the output.
    pub(crate) fn last(self, n: u64) -> Result<Vec<u8>> {
        let mut text = Vec::new();
        if let Some((file, path)) = self.file {
            let from = self.bytes.saturating_sub(n);
            copy_some(file, &path, from, self.bytes - from, &mut text)?;
        }
        Ok(text)
    }
}

/// `logs NAME [N]`: the output a request names, opened.
pub(crate) fn logs(ctx: &Ctx, name: &str, req: Request) -> Result<Output> {
    let found = find(ctx, name, req, false)?;
    let (mut file_name, mut path) = (found.wanted.name(), found.wanted.path());
    let other = runs::output_name(found.wanted.what, !req.stderr);
    let mut other_bytes = size(&found.run, &other)?;
    let mut stderr_instead = false;
    if !req.stderr && size(&found.run, &file_name)? == 0 && other_bytes > 0 {
        stderr_instead = true;
        file_name = other;
        path = found.wanted.run_path.join(&file_name);
        other_bytes = 0;
    }
    let (file, bytes) = match found.run.open_read(&file_name)? {
        Some((file, bytes)) => (Some((file, path)), bytes),
        None => (None, 0),
    };
    Ok(Output {
        tick: found.wanted.tick,
        what: found.wanted.what,
        stderr: req.stderr || stderr_instead,
        stderr_instead,
        file,
        bytes,
        other_bytes,
    })
}

/// A tick's run directory, found, and the output in it a request names.
pub(crate) struct Found {
    pub wanted: Wanted,
    pub run: Dir,
}

/// Finds the output `req` names, waiting for its run directory with
/// `follow` (the tick may not have made it yet); an error saying why there
/// is no output when the process did not run (or ran on another host).
pub(crate) fn find(ctx: &Ctx, name: &str, req: Request, follow: bool) -> Result<Found> {
    let dir = ctx.stores.get(name)?;
    super::may_view(ctx, dir.as_ref())?;
    let state = dir.load()?;
    let running = state.in_flight.as_ref().map(|f| f.tick);
    let Some(tick) = req
        .tick
        .or(running)
        .or(state.last_tick.as_ref().map(|t| t.number))
    else {
        return Err(Error::Refused {
            name: dir.name().to_string(),
            message: "no tick has run its step yet, so there is no output".into(),
        });
    };
    let wanted = Wanted::new(dir, tick, req);
    let run = wanted.find_run(follow, running == Some(tick), &state)?;
    Ok(Found { wanted, run })
}

/// The output file of one tick that `logs` reads.
pub(crate) struct Wanted {
    dir: Box<dyn LoopStore>,
    pub tick: u64,
    verifier: bool,
    /// `step` or `verifier`, and whether standard error was asked for.
    pub what: &'static str,
    pub stderr: bool,
    /// The path of the tick's run directory.
    pub run_path: PathBuf,
}

impl Wanted {
    fn new(dir: Box<dyn LoopStore>, tick: u64, req: Request) -> Wanted {
        Wanted {
            run_path: runs::run_path(dir.base_dir(), tick),
            dir,
            tick,
            verifier: req.verifier,
            what: if req.verifier { "verifier" } else { "step" },
            stderr: req.stderr,
        }
    }

    /// The name of the file asked for in the run directory.
    pub(crate) fn name(&self) -> String {
        runs::output_name(self.what, self.stderr)
    }

    /// The path of the file asked for.
    pub(crate) fn path(&self) -> PathBuf {
        self.run_path.join(self.name())
    }

    /// The tick's run directory, if it has one yet.
    fn open_run(&self) -> Result<Option<Dir>> {
        match Runs::open(self.dir.base_dir())? {
            Some(runs) => runs.run(self.tick),
            None => Ok(None),
        }
    }

    /// Whether the tick is running now.
    pub(crate) fn in_flight(&self) -> bool {
        self.dir
            .load()
            .is_ok_and(|s| s.in_flight.is_some_and(|f| f.tick == self.tick))
    }

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
        let ran = run.is_some() && (!self.verifier || running || verifier_ran(self.dir.as_ref(), self.tick));
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
            self.path()
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
}

/// How often a follower looks for more output.
pub(crate) const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How many bytes `name` in the run directory holds (0 when it is missing).
pub(crate) fn size(run: &Dir, name: &str) -> Result<u64> {
    Ok(run.open_read(name)?.map_or(0, |(_, size)| size))
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
pub(crate) fn copy_from(f: File, path: &Path, offset: u64, out: &mut dyn io::Write) -> Result<u64> {
    copy_some(f, path, offset, u64::MAX, out)
}

/// Copies at most `limit` bytes of what `f` (the file at `path`) holds
/// past `offset` to `out`, a buffer at a time; returns the new offset.
fn copy_some(mut f: File, path: &Path, offset: u64, limit: u64, out: &mut dyn io::Write) -> Result<u64> {
    io::Seek::seek(&mut f, io::SeekFrom::Start(offset)).map_err(Error::io("reading", path))?;
    let mut f = f.take(limit);
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
