//! Capturing one output stream of a step into its file, bounded: past the
//! limit the stream is still read (so the step never blocks on a full pipe)
//! but dropped, and a one-line truncation marker is appended at the end.
//! The file is made when the first byte arrives: most ticks of most steps
//! say nothing on one stream or both, and a file made and later pruned for
//! nothing is a cost every tick pays.
//!
//! A [`Drain`] owns the read end of a stream's pipe, non-blocking; the
//! runner's one supervising loop polls both streams with the step's exit
//! and reads whatever is ready, so a step costs no thread of its own.

use std::fs::File;
use std::io::{self, Write};
#[cfg(unix)]
use std::io::{ErrorKind, Read};
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

#[cfg(unix)]
use nix::fcntl::{FcntlArg, OFlag, fcntl};

use crate::fsx::Dir;

#[cfg(unix)]
/// One stream being copied into its file.
pub(super) struct Drain<'a> {
    /// `None` once the stream has reached its end.
    src: Option<File>,
    sink: Sink<'a>,
}

#[cfg(unix)]
impl<'a> Drain<'a> {
    /// Takes the read end of the stream's pipe and makes it non-blocking;
    /// its file is `name` in `dir`.
    pub(super) fn new(src: OwnedFd, dir: &'a Dir, name: &'a str, limit: u64) -> io::Result<Drain<'a>> {
        // A pipe's read end just made: no status flag is set yet, so this
        // one call sets the only one wanted.
        fcntl(&src, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        Ok(Drain {
            src: Some(File::from(src)),
            sink: Sink::new(dir, name, limit),
        })
    }

    /// The pipe to poll, while the stream is open.
    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.src.as_ref().map(|f| f.as_fd())
    }

    /// Reads what the pipe holds now, into `buf`'s room at a time, until it
    /// would block; closes the stream at its end. A read error closes it
    /// too, and is reported by [`Drain::finish`].
    pub(super) fn read_ready(&mut self, buf: &mut [u8]) {
        let Some(src) = self.src.as_mut() else {
            return;
        };
        loop {
            match src.read(buf) {
                Ok(0) => break,
                Ok(n) => self.sink.take(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.sink.error.get_or_insert(e);
                    break;
                }
            }
        }
        self.src = None;
    }

    /// Reads what is left in the pipe without waiting for writers that are
    /// still there (a process that escaped the step's group cannot hang the
    /// runner), then writes the marker if anything was dropped.
    pub(super) fn finish(mut self, buf: &mut [u8]) -> io::Result<()> {
        self.read_ready(buf);
        self.sink.finish()
    }
}

pub(super) struct Sink<'a> {
    dir: &'a Dir,
    name: &'a str,
    /// Made at the first byte kept (or the marker).
    file: Option<File>,
    limit: u64,
    written: u64,
    dropped: u64,
    ends_with_newline: bool,
    error: Option<io::Error>,
}

impl<'a> Sink<'a> {
    /// A sink into the file `name` in `dir`, made on the first byte,
    /// keeping `limit` bytes.
    pub(super) fn new(dir: &'a Dir, name: &'a str, limit: u64) -> Sink<'a> {
        Sink {
            dir,
            name,
            file: None,
            limit,
            written: 0,
            dropped: 0,
            ends_with_newline: true,
            error: None,
        }
    }

    pub(super) fn take(&mut self, data: &[u8]) {
        let room = self.limit.saturating_sub(self.written);
        let keep = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.dropped += (data.len() - keep) as u64;
        if keep == 0 || self.error.is_some() {
            return;
        }
        match self.file().and_then(|f| f.write_all(&data[..keep])) {
            Ok(()) => {
                self.written += keep as u64;
                self.ends_with_newline = data[keep - 1] == b'\n';
            }
            // Keep draining so the step is never blocked; report at the end.
            Err(e) => self.error = Some(e),
        }
    }

    /// The output file, made (mode 0600, empty) on first use in the run
    /// directory, never through a link the step left under its name.
    fn file(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            self.file = Some(self.dir.create(self.name)?);
        }
        Ok(self.file.as_mut().expect("just made"))
    }

    pub(super) fn finish(mut self) -> io::Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.dropped > 0 {
            let sep = if self.ends_with_newline { "" } else { "\n" };
            let (limit, dropped) = (self.limit, self.dropped);
            writeln!(
                self.file()?,
                "{sep}[automaton: output truncated at {limit} bytes; {dropped} more bytes dropped]",
            )?;
        }
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// The truncation marker's longest possible length, for callers and tests
/// that bound a file's size.
#[cfg(all(test, unix))]
pub(crate) const MARKER_MAX_LEN: u64 = 100;
