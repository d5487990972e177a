//! Opening a loop's files (its lock among them) safely: never following a
//! symbolic link, never blocking on a FIFO or a device, refusing anything
//! that is not a regular file, and reading no more than a file of its kind
//! can hold. [`Dir`] holds a loop's directory (or `runs/`, or a run's)
//! open and opens, makes, unlinks and removes what is beneath it relative
//! to it, following no link anywhere on the way. What a loop's directory
//! contains then cannot stall a command (or the daemon), nor make it read,
//! write or remove anything outside the loop.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
#[cfg(unix)]
use std::os::unix::fs::FileTypeExt;
#[cfg(unix)]
use std::os::unix::fs::OpenOptionsExt;
#[cfg(windows)]
use std::os::windows::fs::OpenOptionsExt;
use std::path::Path;

#[cfg(unix)]
use nix::fcntl::OFlag;

use crate::error::{Error, Result};

mod atomic;
#[cfg(unix)]
mod beneath;
#[cfg(windows)]
#[path = "fsx/beneath_windows.rs"]
mod beneath;
#[cfg(unix)]
pub mod mode;
#[cfg(windows)]
#[path = "fsx/mode_windows.rs"]
pub mod mode;
pub(crate) use atomic::TMP_PREFIX;
pub(crate) use atomic::create_dirs;
pub use atomic::{Written, replace};
pub(crate) use atomic::{sync_dir, write_file};
pub use beneath::Dir;
pub(crate) use beneath::io_error;
pub(crate) use beneath::is_link;
#[cfg(windows)]
pub(crate) use beneath::is_reparse;
pub use mode::Modes;

/// Flags for every open of a loop's file.
#[cfg(unix)]
fn flags() -> i32 {
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits()
}

/// Flags for every open of a loop's file: a reparse point (a symbolic
/// link, a junction) is opened as itself, then refused as not a regular
/// file ([`check_regular`]).
#[cfg(windows)]
fn flags() -> u32 {
    windows_sys::Win32::Storage::FileSystem::FILE_FLAG_OPEN_REPARSE_POINT
}

/// The mode of a file an open creates (Unix; on Windows the file inherits
/// its private directory's ACL, and [`Modes::set_file`] then gives it its
/// own).
#[cfg(unix)]
pub(crate) fn create_mode(opts: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    opts.mode(mode)
}

#[cfg(windows)]
pub(crate) fn create_mode(opts: &mut OpenOptions, _mode: u32) -> &mut OpenOptions {
    opts
}

/// What kind of file this is, for a message: `a FIFO`, `a directory`, ...
pub(crate) fn describe_kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        describe_special(t)
    }
}

#[cfg(unix)]
fn describe_special(t: FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

#[cfg(windows)]
fn describe_special(_: FileType) -> &'static str {
    "not a regular file"
}

/// Maps an open's error: a symbolic link (`O_NOFOLLOW` answers `ELOOP`)
/// is refused by name; anything else is an I/O error of `action`.
fn open_error<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(io::Error) -> Error + 'a {
    move |e| {
        #[cfg(unix)]
        let link = e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32);
        #[cfg(windows)]
        let link = beneath::is_link(&e);
        if link {
            Error::NotRegular {
                path: path.to_owned(),
                kind: "a symbolic link",
            }
        } else {
            Error::io(action, path)(e)
        }
    }
}

/// Checks that an opened file is a regular one (on Windows, not a
/// reparse point either).
fn check_regular(file: &File, path: &Path) -> Result<u64> {
    let meta = file.metadata().map_err(Error::io("reading", path))?;
    #[cfg(windows)]
    if beneath::is_reparse(&meta) {
        return Err(Error::NotRegular {
            path: path.to_owned(),
            kind: "a symbolic link",
        });
    }
    if !meta.file_type().is_file() {
        return Err(Error::NotRegular {
            path: path.to_owned(),
            kind: describe_kind(meta.file_type()),
        });
    }
    Ok(meta.len())
}

/// Opens a loop's file for reading; `None` when it does not exist.
pub(crate) fn open_read(path: &Path) -> Result<Option<(File, u64)>> {
    let file = match OpenOptions::new().read(true).custom_flags(flags()).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(open_error(path, "opening")(e)),
    };
    let len = check_regular(&file, path)?;
    Ok(Some((file, len)))
}

/// Reads a whole regular file of at most `max` bytes; `None` when it does
/// not exist.
pub(crate) fn read_regular(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    let Some((file, len)) = open_read(path)? else {
        return Ok(None);
    };
    if len > max {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size: len,
            max,
        });
    }
    let bytes = read_to_end(&file, len, max).map_err(Error::io("reading", path))?;
    if bytes.len() as u64 > max {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(Some(bytes))
}

/// Reads `file` (`len` bytes long when opened) to its end, or to one byte
/// past `max` when it grew meanwhile. A read that comes back short once
/// the `len` bytes are in has met the end: no second read to hear so.
fn read_to_end(mut file: &File, len: u64, max: u64) -> io::Result<Vec<u8>> {
    let limit = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
    let mut bytes = vec![0; usize::try_from(len).map_or(limit, |l| l.saturating_add(1).min(limit))];
    let mut n = 0;
    loop {
        if n == bytes.len() {
            if n >= limit {
                break;
            }
            bytes.resize((n * 2).clamp(64, limit), 0);
        }
        let want = bytes.len() - n;
        match file.read(&mut bytes[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if k < want && n as u64 >= len {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(n);
    Ok(bytes)
}

/// The modes of what is made beside `path` (in its directory).
fn modes_beside(path: &Path) -> Modes {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => Modes::of_dir(dir),
        _ => Modes::of_dir(Path::new(".")),
    }
}

/// Gives a file just opened, and perhaps made, by [`open_append`] or
/// [`open_rw`] its mode. On Windows its owner-only ACL is set when it is
/// empty (just made), not again at every open of a file that has one.
fn set_made(modes: Modes, file: &File, len: u64, path: &Path) -> Result<()> {
    if cfg!(windows) && len > 0 {
        return Ok(());
    }
    modes
        .set_file(file)
        .map_err(Error::io("setting the mode of", path))
}

/// Opens a loop's file to append to, creating it (0600, or 0660 in a
/// group's root: [`mode`]).
pub(crate) fn open_append(path: &Path) -> Result<(File, u64)> {
    let modes = modes_beside(path);
    let file = create_mode(
        OpenOptions::new().append(true).read(true).create(true),
        modes.file(),
    )
    .custom_flags(flags())
    .open(path)
    .map_err(open_error(path, "opening"))?;
    let len = check_regular(&file, path)?;
    set_made(modes, &file, len, path)?;
    Ok((file, len))
}

/// Opens (creating it, 0600, or 0660 in a group's root) a file to read and
/// write in place, such as a lock file; with its length.
pub(crate) fn open_rw(path: &Path) -> Result<(File, u64)> {
    let modes = modes_beside(path);
    let file = create_mode(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        modes.file(),
    )
    .custom_flags(flags())
    .open(path)
    .map_err(open_error(path, "opening"))?;
    let len = check_regular(&file, path)?;
    set_made(modes, &file, len, path)?;
    Ok((file, len))
}

/// Opens a loop's existing file to change it in place (to cut a torn tail).
pub(crate) fn open_write(path: &Path) -> Result<Option<(File, u64)>> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(open_error(path, "opening")(e)),
    };
    let len = check_regular(&file, path)?;
    Ok(Some((file, len)))
}

/// Renames `from` to `to` only when nothing is at `to` (an
/// `AlreadyExists` error otherwise), in one step: `renameat2` with
/// `RENAME_NOREPLACE` on Linux, `renamex_np` with `RENAME_EXCL` on macOS.
/// Elsewhere the name is claimed with an empty directory that the rename
/// then replaces (POSIX replaces an empty directory in one step), so for a
/// moment the name shows an empty directory; `from` must be a directory.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).map_err(io::Error::from)
    }
    #[cfg(target_vendor = "apple")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let from = CString::new(from.as_os_str().as_bytes())?;
        let to = CString::new(to.as_os_str().as_bytes())?;
        // SAFETY: two NUL-terminated paths that outlive the call.
        match unsafe { nix::libc::renamex_np(from.as_ptr(), to.as_ptr(), nix::libc::RENAME_EXCL) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
    #[cfg(windows)]
    {
        crate::os::rename_noreplace(from, to)
    }
    #[cfg(all(
        unix,
        not(any(target_os = "linux", target_os = "android", target_vendor = "apple"))
    ))]
    {
        std::fs::create_dir(to)?;
        std::fs::rename(from, to).inspect_err(|_| {
            let _ = std::fs::remove_dir(to);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn fifos_symlinks_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        for (path, kind) in [
            (&fifo, "a FIFO"),
            (&link, "a symbolic link"),
            (&sub, "a directory"),
        ] {
            match read_regular(path, 1024) {
                Err(Error::NotRegular { kind: k, .. }) => assert_eq!(k, kind),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        assert!(matches!(open_append(&fifo), Err(Error::NotRegular { .. })));
        assert!(read_regular(&dir.path().join("none"), 1).unwrap().is_none());
    }

    #[test]
    fn a_file_past_its_bound_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2048]).unwrap();
        assert!(matches!(
            read_regular(&big, 1024),
            Err(Error::TooLarge {
                size: 2048,
                max: 1024,
                ..
            })
        ));
        assert_eq!(read_regular(&big, 4096).unwrap().unwrap().len(), 2048);
    }
}
