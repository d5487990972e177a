//! The modes a root's files and directories are made with, on Windows:
//! there are no modes and no set-group-ID directories, so everything is
//! made private, as on Unix outside a group's root; privacy is an ACL that
//! grants the owner alone ([`crate::os::make_private`] for a directory,
//! [`Modes::set_file`] for a file, which every file made private passes). A root shared by
//! a group (`init --group`) is a Unix arrangement.

use std::fs::File;
use std::io;
use std::path::Path;

/// How what is made in one directory is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// Always `None` on Windows: no directory is shared by a group.
    pub group: Option<u32>,
}

impl Modes {
    /// Private: the owner's alone.
    pub(crate) const PRIVATE: Modes = Modes { group: None };

    pub(crate) fn of_dir(_: &Path) -> Modes {
        Modes::PRIVATE
    }

    /// Whether this is a group's shared directory: never, on Windows.
    pub fn shared(self) -> bool {
        false
    }

    /// The Unix mode a file would have (for records and messages).
    pub fn file(self) -> u32 {
        0o600
    }

    /// The Unix mode a directory would have (for records and messages).
    pub fn dir(self) -> u32 {
        0o700
    }

    /// Gives a file just made here its owner-only ACL
    /// ([`crate::os::make_file_private`]), as Unix makes it 0600.
    #[allow(clippy::unused_self)] // the same calls as on Unix
    pub(crate) fn set_file(self, file: &File) -> io::Result<()> {
        crate::os::make_file_private(file)
    }

    #[allow(clippy::unused_self)]
    pub(crate) fn set_dir(self, _: &File) -> io::Result<()> {
        Ok(())
    }
}

/// A temporary-file builder for what is made beside `modes`' files.
pub(crate) fn builder<'a, 'b>(_: Modes) -> tempfile::Builder<'a, 'b> {
    tempfile::Builder::new()
}
