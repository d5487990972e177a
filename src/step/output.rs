//! Capturing one output stream of a step into its file, bounded: past the
//! limit the stream is still read (so the step never blocks on a full pipe)
//! but dropped, and a one-line truncation marker is appended at the end.
//! The file is made when the first byte arrives: most ticks of most steps
//! say nothing on one stream or both, and a file made and later pruned for
//! nothing is a cost every tick pays.

use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Starts a thread copying `src` into the file at `path`.
///
/// The thread ends at EOF, or once `stop` becomes readable (its write end is
/// closed) and what is already in the pipe has been read: a process that
/// escaped the step's group and still holds the pipe cannot hang the runner.
pub(super) fn spawn(
    src: OwnedFd,
    path: PathBuf,
    limit: u64,
    stop: Arc<OwnedFd>,
) -> io::Result<JoinHandle<io::Result<()>>> {
    std::thread::Builder::new()
        .name("step-output".into())
        .spawn(move || drain(src, path, limit, &stop))
}

fn drain(src: OwnedFd, path: PathBuf, limit: u64, stop: &OwnedFd) -> io::Result<()> {
    let mut sink = Sink {
        path,
        file: None,
        limit,
        written: 0,
        dropped: 0,
        ends_with_newline: true,
        error: None,
    };
    let mut stopping = false;
    let mut src = File::from(src);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !stopping {
            let mut fds = [
                PollFd::new(src.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            if !ready(&fds[0]) {
                if ready(&fds[1]) {
                    // Read what is left without waiting for writers to go away.
                    let flags = OFlag::from_bits_retain(fcntl(&src, FcntlArg::F_GETFL)?);
                    fcntl(&src, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
                    stopping = true;
                }
                continue;
            }
        }
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => sink.take(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if stopping && e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    sink.finish()
}

struct Sink {
    path: PathBuf,
    /// Made at the first byte kept (or the marker).
    file: Option<File>,
    limit: u64,
    written: u64,
    dropped: u64,
    ends_with_newline: bool,
    error: Option<io::Error>,
}

impl Sink {
    fn take(&mut self, data: &[u8]) {
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

    /// The output file, created (mode 0600, truncated) on first use.
    fn file(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&self.path)?;
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("just made"))
    }

    fn finish(mut self) -> io::Result<()> {
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
pub const MARKER_MAX_LEN: u64 = 100;
