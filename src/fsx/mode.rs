//! The modes a root's files and directories are made with, which follow
//! the directory they are made in. A directory with the set-group-ID bit
//! belongs to a root shared by a group (`init --group`): what is made in it
//! is its group's to read and write (files 0660, directories 02770, which
//! keep the group and the bit for what is made in them in turn). Anywhere
//! else, what is made is private (0600, 0700). The mode asked for at
//! creation passes through the process's umask, so in a shared directory
//! it is set again afterwards: a member's umask of 077 cannot leave a
//! file the next member could not use.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::sys::stat::{Mode, fchmod, fstat};

/// The set-group-ID bit.
const SETGID: u32 = 0o2000;

/// How what is made in one directory is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// The group a shared directory gives what is made in it; `None` for
    /// a private one.
    pub group: Option<u32>,
}

impl Modes {
    /// Private: files 0600, directories 0700.
    pub(crate) const PRIVATE: Modes = Modes { group: None };

    /// The modes of what is made in a directory whose metadata is `meta`.
    pub(crate) fn of_meta(meta: &Metadata) -> Modes {
        Modes {
            group: (meta.is_dir() && meta.mode() & SETGID != 0).then(|| meta.gid()),
        }
    }

    /// The modes of what is made in the directory at `dir` (private when
    /// it cannot be read).
    pub(crate) fn of_dir(dir: &Path) -> Modes {
        std::fs::metadata(dir).map_or(Modes::PRIVATE, |m| Modes::of_meta(&m))
    }

    /// The modes of what is made in the directory open as `fd`.
    pub(crate) fn of_fd(fd: impl AsFd) -> Modes {
        match fstat(fd.as_fd()) {
            #[allow(clippy::useless_conversion)] // a u16 on macOS
            Ok(st) if u32::from(st.st_mode) & SETGID != 0 => Modes {
                group: Some(st.st_gid),
            },
            _ => Modes::PRIVATE,
        }
    }

    /// Whether what is made here is a group's.
    pub fn shared(self) -> bool {
        self.group.is_some()
    }

    /// The mode of a file made here.
    pub fn file(self) -> u32 {
        if self.shared() { 0o660 } else { 0o600 }
    }

    /// The mode of a directory made here.
    pub fn dir(self) -> u32 {
        if self.shared() { 0o2770 } else { 0o700 }
    }

    /// Gives a file just made here its mode again, past the umask, when
    /// here is shared (a private mode only loses bits to a umask).
    pub(crate) fn set_file(self, file: &File) -> io::Result<()> {
        if self.shared() {
            set_if_mine(file, self.file())?;
        }
        Ok(())
    }

    /// As [`Modes::set_file`], for a directory just made here.
    pub(crate) fn set_dir(self, dir: impl AsFd) -> io::Result<()> {
        if self.shared() {
            set_if_mine(dir, self.dir())?;
        }
        Ok(())
    }
}

/// Sets `mode` on the open file `fd` when it is ours and has another one
/// (someone else's file keeps its mode: `doctor` names it).
fn set_if_mine(fd: impl AsFd, mode: u32) -> io::Result<()> {
    let st = fstat(fd.as_fd())?;
    #[allow(clippy::useless_conversion)] // a u16 on macOS
    let current = u32::from(st.st_mode) & 0o7777;
    if current == mode || st.st_uid != nix::unistd::geteuid().as_raw() {
        return Ok(());
    }
    fchmod(fd.as_fd(), Mode::from_bits_truncate(mode as nix::libc::mode_t))?;
    Ok(())
}

/// The permissions a file made here is created with (before the umask).
pub(crate) fn file_permissions(modes: Modes) -> std::fs::Permissions {
    std::fs::Permissions::from_mode(modes.file())
}

/// A temporary-file builder for what is made beside `modes`' files: made
/// with their mode.
pub(crate) fn builder<'a, 'b>(modes: Modes) -> tempfile::Builder<'a, 'b> {
    let mut builder = tempfile::Builder::new();
    builder.permissions(file_permissions(modes));
    builder
}

/// What is wrong with the mode of one path of a root shared by group
/// `group`, for `doctor`: `None` when its group's members can use it as
/// automaton does and nobody else can write it.
pub(crate) fn shared_fault(meta: &Metadata, group: u32) -> Option<Fault> {
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 && !meta.file_type().is_symlink() {
        return Some(Fault::OthersWrite);
    }
    if meta.gid() != group {
        return Some(Fault::Group);
    }
    let want = if meta.is_dir() { 0o2770 } else { 0o660 };
    let missing = want & !mode & 0o2770;
    (missing != 0).then_some(Fault::Missing(missing))
}

/// Why a path of a shared root is not as it should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Anyone may write it.
    OthersWrite,
    /// It belongs to another group.
    Group,
    /// The group lacks these bits (read, write, search, set-group-ID).
    Missing(u32),
}

/// The mode `meta`'s path should have in a shared root: the group's bits
/// added, others' taken away (they cannot pass the root's directory
/// anyway), the owner's kept (a script stays executable).
pub(crate) fn shared_mode(meta: &Metadata) -> u32 {
    let want = if meta.is_dir() { 0o2770 } else { 0o660 };
    (meta.mode() & 0o7777 | want) & !0o007
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::DirBuilderExt;

    #[test]
    fn a_setgid_directory_shares_what_is_made_in_it_past_the_umask() {
        let tmp = tempfile::tempdir().unwrap();
        let private = Modes::of_dir(tmp.path());
        assert_eq!((private.file(), private.dir()), (0o600, 0o700));
        let shared = tmp.path().join("shared");
        std::fs::DirBuilder::new().mode(0o770).create(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2770)).unwrap();
        let modes = Modes::of_dir(&shared);
        assert!(modes.shared());
        assert_eq!(modes, Modes::of_fd(File::open(&shared).unwrap()));
        // A file made through a umask that takes the group's bits.
        let path = shared.join("f");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        modes.set_file(&file).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o660);
        assert_eq!(shared_fault(&meta, modes.group.unwrap()), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(
            shared_fault(&meta, modes.group.unwrap()),
            Some(Fault::OthersWrite)
        );
        assert_eq!(shared_mode(&meta), 0o660);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(
            shared_fault(&meta, modes.group.unwrap()),
            Some(Fault::Missing(0o020))
        );
    }
}
