//! [`Dir`]: a directory held open, and what is beneath it opened, made,
//! unlinked, renamed and removed relative to it, following no symbolic
//! link anywhere on the way.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

use super::{Modes, check_regular, read_to_end};
use crate::error::{Error, Result};

/// A directory held open, and what is beneath it opened relative to it,
/// never following a symbolic link on the way: `openat2` with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it (Linux
/// 5.6 on), else one `openat` per component, each `O_NOFOLLOW`. A path
/// that would climb out (`..`, an absolute path) is refused as a link is.
/// Names are made, unlinked and renamed with the `*at` calls relative to
/// the directory, which never follow the last component.
///
/// A refusal is an I/O error that [`is_link`] recognises; [`Dir::error`]
/// turns any of them into the crate's error, naming the path.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How deep [`Dir::remove_tree`] goes before it gives up (one descriptor
/// is open per level).
const TREE_DEPTH: usize = 256;

/// Whether `e` is an open's refusal of a symbolic link (or of a path
/// climbing out of its directory).
pub(crate) fn is_link(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == Errno::ELOOP as i32 || code == Errno::EXDEV as i32)
}

/// The crate's error for `e`, met while `action` on `path`: a refused
/// link is named as such.
pub(crate) fn io_error(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
    let path = path.into();
    move |e| match is_link(&e) {
        true => Error::Link { path },
        false => Error::Io {
            action,
            path,
            source: e,
        },
    }
}

impl Dir {
    /// Opens the directory at `path`, refusing it when `path` itself is a
    /// symbolic link (the directories above it are the caller's, and are
    /// followed as any path's are).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = nix::fcntl::open(path, dir_flags(), Mode::empty()).map_err(|e| {
            // `O_DIRECTORY | O_NOFOLLOW` says a link is not a directory.
            let link =
                e == Errno::ENOTDIR && path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink());
            if link { Errno::ELOOP } else { e }
        })?;
        Ok(Dir {
            fd,
            path: path.to_owned(),
        })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `rel` beneath it, for messages.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// The crate's error for `e`, met while `action` on `rel`: a refused
    /// link is named as such.
    pub fn error(&self, action: &'static str, rel: impl AsRef<Path>) -> impl FnOnce(io::Error) -> Error {
        io_error(action, self.join(rel))
    }

    /// Whether `name` in this directory is a regular file (a link to one
    /// is not).
    pub(crate) fn has_file(&self, name: impl AsRef<Path>) -> bool {
        let flag = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
        nix::sys::stat::fstatat(self.fd.as_fd(), name.as_ref(), flag)
            .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG)
    }

    /// Opens `rel` beneath this directory with `flags` (`mode` for a file
    /// it creates), following no link.
    pub(crate) fn open_at(&self, rel: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
        open_beneath(
            self.fd.as_fd(),
            rel,
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            mode,
        )
    }

    /// Opens the file `rel` beneath this directory to read, without
    /// blocking on a FIFO, following no link.
    pub(crate) fn open_file(&self, rel: &Path) -> io::Result<File> {
        self.open_at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0)
            .map(File::from)
    }

    /// The directory `rel` beneath this one; `None` when it does not exist.
    pub(crate) fn open_dir(&self, rel: impl AsRef<Path>) -> io::Result<Option<Dir>> {
        let rel = rel.as_ref();
        match self.open_at(rel, dir_flags(), 0) {
            Ok(fd) => Ok(Some(Dir {
                fd,
                path: self.join(rel),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The modes of what is made in this directory ([`Modes`]).
    pub fn modes(&self) -> Modes {
        Modes::of_fd(&self.fd)
    }

    /// The directory `name` in this one, made (0700, or 02770 in a
    /// group's root) when missing. Something else there (a file, a link)
    /// is an error.
    pub(crate) fn make_dir(&self, name: &str) -> io::Result<Dir> {
        // Most often it is there: one call.
        if let Some(dir) = self.open_dir(name)? {
            return Ok(dir);
        }
        let modes = self.modes();
        let mode = Mode::from_bits_truncate(modes.dir() as nix::libc::mode_t);
        let made = match nix::sys::stat::mkdirat(self.fd.as_fd(), name, mode) {
            Ok(()) => true,
            Err(Errno::EEXIST) => false,
            Err(e) => return Err(e.into()),
        };
        let dir = self
            .open_dir(name)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if made {
            modes.set_dir(&dir.fd)?;
        }
        Ok(dir)
    }

    /// Opens the regular file `rel` to read, without blocking on a FIFO;
    /// `None` when it does not exist. With its length.
    pub(crate) fn open_read(&self, rel: impl AsRef<Path>) -> Result<Option<(File, u64)>> {
        let rel = rel.as_ref();
        let file = match self.open_at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0) {
            Ok(fd) => File::from(fd),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error("opening", rel)(e)),
        };
        let len = check_regular(&file, &self.join(rel))?;
        Ok(Some((file, len)))
    }

    /// Reads the whole regular file `rel` of at most `max` bytes; `None`
    /// when it does not exist.
    pub fn read(&self, rel: impl AsRef<Path>, max: u64) -> Result<Option<Vec<u8>>> {
        let rel = rel.as_ref();
        let Some((file, len)) = self.open_read(rel)? else {
            return Ok(None);
        };
        let path = self.join(rel);
        if len > max {
            return Err(Error::TooLarge { path, size: len, max });
        }
        let bytes = read_to_end(&file, len, max).map_err(Error::io("reading", &path))?;
        if bytes.len() as u64 > max {
            let size = bytes.len() as u64;
            return Err(Error::TooLarge { path, size, max });
        }
        Ok(Some(bytes))
    }

    /// Makes `name` an empty regular file of ours (0600, or 0660 in a
    /// group's root) and opens it to write. Whatever else is there under
    /// that name — a symbolic link planted there, a FIFO — is unlinked
    /// first and never written through; a directory there is an error.
    pub fn create(&self, name: &str) -> io::Result<File> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NONBLOCK;
        let modes = self.modes();
        match self.open_at(name.as_ref(), flags | OFlag::O_TRUNC, modes.file()) {
            Ok(fd) => {
                let file = File::from(fd);
                if file.metadata()?.file_type().is_file() {
                    modes.set_file(&file)?;
                    return Ok(file);
                }
            }
            // A link (refused), or a FIFO nobody reads (ENXIO).
            Err(e) if is_link(&e) || e.raw_os_error() == Some(Errno::ENXIO as i32) => {}
            Err(e) => return Err(e),
        }
        self.unlink(name)?;
        let fd = self.open_at(name.as_ref(), flags | OFlag::O_EXCL, modes.file())?;
        let file = File::from(fd);
        modes.set_file(&file)?;
        Ok(file)
    }

    /// Unlinks `name` (not a directory): a symbolic link itself, never
    /// what it points to. A name already gone is not an error.
    pub fn unlink(&self, name: impl AsRef<Path>) -> io::Result<()> {
        match nix::unistd::unlinkat(self.fd.as_fd(), name.as_ref(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes `name` and, when it is a directory, everything in it,
    /// through descriptors of the directories on the way: a symbolic link
    /// met anywhere is unlinked itself, never followed. A name already gone
    /// is not an error.
    pub(crate) fn remove_tree(&self, name: impl AsRef<Path>) -> io::Result<()> {
        self.remove_entry(name.as_ref(), 0)
    }

    fn remove_entry(&self, name: &Path, depth: usize) -> io::Result<()> {
        let sub = match self.open_dir(name) {
            Ok(Some(sub)) => sub,
            Ok(None) => return Ok(()),
            // Not a directory, or a link: unlinked as it is.
            Err(e) if is_link(&e) || e.raw_os_error() == Some(Errno::ENOTDIR as i32) => {
                return self.unlink(name);
            }
            Err(e) => return Err(e),
        };
        sub.remove_all_in(depth + 1)?;
        match nix::unistd::unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes everything in this directory, as [`Dir::remove_tree`] does.
    pub(crate) fn remove_all(&self) -> io::Result<()> {
        self.remove_all_in(0)
    }

    fn remove_all_in(&self, depth: usize) -> io::Result<()> {
        if depth > TREE_DEPTH {
            return Err(io::Error::other(format!(
                "{} is nested more than {TREE_DEPTH} directories deep",
                self.path.display()
            )));
        }
        for (name, is_dir) in self.entries()? {
            match is_dir {
                true => self.remove_entry(name.as_ref(), depth)?,
                false => self.unlink(&name)?,
            }
        }
        Ok(())
    }

    /// The names in this directory (`.` and `..` left out), each with
    /// whether it is a directory (a link to one is not).
    pub fn entries(&self) -> io::Result<Vec<(OsString, bool)>> {
        let fd = nix::fcntl::openat(self.fd.as_fd(), ".", dir_flags(), Mode::empty())?;
        let mut listing = nix::dir::Dir::from_fd(fd)?;
        let mut out = Vec::new();
        for entry in listing.iter() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_owned();
            let is_dir = if let Some(t) = entry.file_type() {
                t == nix::dir::Type::Directory
            } else {
                let flag = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
                match nix::sys::stat::fstatat(self.fd.as_fd(), name.as_os_str(), flag) {
                    Ok(st) => st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR,
                    Err(Errno::ENOENT) => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            out.push((name, is_dir));
        }
        Ok(out)
    }

    /// Renames `from` to `to`, both in this directory, only when nothing
    /// is at `to` (an `AlreadyExists` error otherwise).
    pub(crate) fn rename_noreplace(&self, from: &str, to: &str) -> io::Result<()> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use nix::fcntl::{RenameFlags, renameat2};
            let fd = self.fd.as_fd();
            renameat2(fd, from, fd, to, RenameFlags::RENAME_NOREPLACE).map_err(io::Error::from)
        }
        #[cfg(target_vendor = "apple")]
        {
            use std::ffi::CString;
            use std::os::fd::AsRawFd;
            let (from, to) = (CString::new(from)?, CString::new(to)?);
            let fd = self.fd.as_raw_fd();
            // SAFETY: a descriptor we own and two NUL-terminated names that
            // outlive the call.
            match unsafe {
                nix::libc::renameatx_np(fd, from.as_ptr(), fd, to.as_ptr(), nix::libc::RENAME_EXCL)
            } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
        {
            // As `rename_noreplace`: the name is claimed with an empty
            // directory that the rename then replaces.
            let fd = self.fd.as_fd();
            nix::sys::stat::mkdirat(fd, to, Mode::from_bits_truncate(0o700))?;
            nix::fcntl::renameat(fd, from, fd, to).map_err(|e| {
                let _ = nix::unistd::unlinkat(fd, to, UnlinkatFlags::RemoveDir);
                io::Error::from(e)
            })
        }
    }

    /// The same directory, known now by `path` (it was renamed).
    pub fn renamed(self, path: PathBuf) -> Dir {
        Dir { fd: self.fd, path }
    }

    /// Makes the directory's mode `mode` when it is not already.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        let st = nix::sys::stat::fstat(self.fd.as_fd())?;
        #[allow(clippy::useless_conversion)] // a u16 on macOS
        let current = u32::from(st.st_mode) & 0o7777;
        if current != mode {
            nix::sys::stat::fchmod(
                self.fd.as_fd(),
                Mode::from_bits_truncate(mode as nix::libc::mode_t),
            )?;
        }
        Ok(())
    }
}

/// Flags of a directory opened to work beneath it.
fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens `rel` beneath `dir`, following no link: `openat2` where the
/// kernel has it, else a walk of `openat`s.
fn open_beneath(dir: BorrowedFd<'_>, rel: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    match openat2(dir, rel, flags, mode) {
        // A link where a directory is wanted is "not a directory" there:
        // the walk below tells the two apart.
        Some(Err(e)) if e.raw_os_error() == Some(Errno::ENOTDIR as i32) => {}
        Some(opened) => return opened,
        None => {}
    }
    open_walk(dir, rel, flags, mode)
}

/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; `None` on a kernel
/// without it (before 5.6, or a sandbox that hides it), remembered.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn openat2(dir: BorrowedFd<'_>, rel: &Path, flags: OFlag, mode: u32) -> Option<io::Result<OwnedFd>> {
    use nix::libc;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::atomic::{AtomicBool, Ordering};

    static MISSING: AtomicBool = AtomicBool::new(false);
    if MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let path = match std::ffi::CString::new(rel.as_os_str().as_bytes()) {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    // SAFETY: a plain struct of integers, all zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags.bits() as u64;
    // The kernel refuses a mode without a file to create.
    if flags.intersects(OFlag::O_CREAT | OFlag::O_TMPFILE) {
        how.mode = u64::from(mode);
    }
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
    loop {
        // SAFETY: a descriptor we borrow, a NUL-terminated path and the
        // struct, all outliving the call; a non-negative result is a new
        // descriptor that we own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &raw const how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: see above.
            return Some(Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSYS) => {
                MISSING.store(true, Ordering::Relaxed);
                return None;
            }
            _ => return Some(Err(e)),
        }
    }
}

/// Opens `rel` beneath `dir` one component at a time, each `O_NOFOLLOW`:
/// a link anywhere is refused (`ELOOP`), as is `..` or an absolute path
/// (`EXDEV`, as `openat2` says it).
fn open_walk(dir: BorrowedFd<'_>, rel: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
    use std::path::Component;
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(n),
            Component::CurDir => {}
            _ => return Err(Errno::EXDEV.into()),
        }
    }
    let Some(last) = names.pop() else {
        return Ok(nix::fcntl::openat(
            dir,
            ".",
            flags,
            Mode::from_bits_truncate(mode as nix::libc::mode_t),
        )?);
    };
    let mut held: Option<OwnedFd> = None;
    for name in names {
        let at = held.as_ref().map_or(dir, |fd| fd.as_fd());
        let opened = nix::fcntl::openat(at, name, dir_flags(), Mode::empty());
        held = Some(opened.map_err(|e| link_or(e, at, name))?);
    }
    let at = held.as_ref().map_or(dir, |fd| fd.as_fd());
    let mode = Mode::from_bits_truncate(mode as nix::libc::mode_t);
    let opened = nix::fcntl::openat(at, last, flags | OFlag::O_NOFOLLOW, mode);
    Ok(opened.map_err(|e| link_or(e, at, last))?)
}

/// `ELOOP` for an open's `ENOTDIR` when `name` in `at` is a symbolic link
/// (`O_DIRECTORY | O_NOFOLLOW` says a link is not a directory); `e` else.
fn link_or(e: Errno, at: BorrowedFd<'_>, name: &OsStr) -> Errno {
    let flag = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
    let link = e == Errno::ENOTDIR
        && nix::sys::stat::fstatat(at, name, flag)
            .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK);
    if link { Errno::ELOOP } else { e }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_a_directory_no_link_is_followed_either_way_of_opening() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, outside) = (tmp.path().join("base"), tmp.path().join("outside"));
        std::fs::create_dir_all(base.join("a")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("x"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, base.join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.join("x"), base.join("file-link")).unwrap();
        std::fs::write(base.join("a/ok"), "ok").unwrap();
        let dir = Dir::open(&base).unwrap();
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for rel in [
            "a/link/x",
            "file-link",
            "../outside/x",
            "a/../../outside/x",
            "/etc/hostname",
        ] {
            let rel = Path::new(rel);
            let both = [
                open_beneath(dir.fd.as_fd(), rel, flags, 0),
                open_walk(dir.fd.as_fd(), rel, flags, 0),
            ];
            for opened in both {
                let e = opened.unwrap_err();
                assert!(is_link(&e), "{}: {e}", rel.display());
            }
        }
        assert!(open_walk(dir.fd.as_fd(), Path::new("a/ok"), flags, 0).is_ok());
        assert_eq!(dir.read("a/ok", 10).unwrap().unwrap(), b"ok");
        // A link where a directory is wanted is a link, not "not a directory".
        assert!(is_link(&dir.open_dir("a/link").unwrap_err()));
        assert!(is_link(&Dir::open(&base.join("a/link")).unwrap_err()));
        assert!(matches!(dir.read("file-link", 10), Err(Error::Link { .. })));
        // Removing a tree unlinks the links in it.
        dir.remove_tree("a").unwrap();
        dir.remove_tree("file-link").unwrap();
        assert!(dir.entries().unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(outside.join("x")).unwrap(), "outside");
    }
}
