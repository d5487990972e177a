//! [`Dir`] on Windows: a directory known by its path, and what is beneath
//! it opened, made, unlinked, renamed and removed, following no reparse
//! point (a symbolic link, a junction, a mount point) anywhere on the way.
//!
//! Windows has no `openat`: each component of a path beneath the directory
//! is looked at without following it (`symlink_metadata`) and refused when
//! it is a reparse point, and the last one is opened with
//! `FILE_FLAG_OPEN_REPARSE_POINT` and checked again through its handle, so
//! a link made there meanwhile is opened as itself and refused, never
//! followed. A path that would climb out (`..`, an absolute path, a drive
//! or a UNC prefix) is refused as a link is.

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::windows::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use windows_sys::Win32::Foundation::ERROR_CANT_RESOLVE_FILENAME;
use windows_sys::Win32::Storage::FileSystem::{FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT};

use super::{Modes, check_regular, read_to_end};
use crate::error::{Error, Result};

/// A directory, and what is beneath it opened without following a reparse
/// point. A refusal is an I/O error that [`is_link`] recognises;
/// [`Dir::error`] turns any of them into the crate's error, naming the path.
#[derive(Debug)]
pub struct Dir {
    path: PathBuf,
}

/// How deep [`Dir::remove_tree`] goes before it gives up.
const TREE_DEPTH: usize = 256;

/// The error a refused link (or a path climbing out) is reported as.
fn refused() -> io::Error {
    io::Error::from_raw_os_error(ERROR_CANT_RESOLVE_FILENAME as i32)
}

/// Whether `e` is a refusal of a reparse point (or of a path climbing out
/// of its directory).
pub(crate) fn is_link(e: &io::Error) -> bool {
    e.raw_os_error() == Some(ERROR_CANT_RESOLVE_FILENAME as i32)
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

/// Whether what `meta` describes is a reparse point: a symbolic link, a
/// junction, a mount point.
pub(crate) fn is_reparse(meta: &Metadata) -> bool {
    meta.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 || meta.file_type().is_symlink()
}

/// The options every open beneath a directory takes: a reparse point is
/// opened as itself, never followed.
fn no_follow(opts: &mut OpenOptions) -> &mut OpenOptions {
    opts.custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
}

impl Dir {
    /// Opens the directory at `path`, refusing it when `path` itself is a
    /// reparse point (the directories above it are the caller's, and are
    /// followed as any path's are).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let meta = std::fs::symlink_metadata(path)?;
        if is_reparse(&meta) {
            return Err(refused());
        }
        if !meta.is_dir() {
            return Err(io::ErrorKind::NotADirectory.into());
        }
        Ok(Dir {
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

    /// The path of `rel` beneath this directory, every directory on the
    /// way checked not to be a reparse point; the last component is the
    /// caller's to check (it may not exist yet).
    fn beneath(&self, rel: &Path) -> io::Result<PathBuf> {
        let mut path = self.path.clone();
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n),
                Component::CurDir => {}
                _ => return Err(refused()),
            }
        }
        let last = names.pop();
        for name in names {
            path.push(name);
            let meta = std::fs::symlink_metadata(&path)?;
            if is_reparse(&meta) {
                return Err(refused());
            }
            if !meta.is_dir() {
                return Err(io::ErrorKind::NotADirectory.into());
            }
        }
        if let Some(last) = last {
            path.push(last);
        }
        Ok(path)
    }

    /// What is at `rel`, not followed; `None` when nothing is.
    fn look(&self, rel: &Path) -> io::Result<Option<Metadata>> {
        match std::fs::symlink_metadata(self.beneath(rel)?) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `name` in this directory is a regular file (a link to one
    /// is not).
    pub(crate) fn has_file(&self, name: impl AsRef<Path>) -> bool {
        self.look(name.as_ref())
            .is_ok_and(|m| m.is_some_and(|m| m.is_file() && !is_reparse(&m)))
    }

    /// Opens the file `rel` beneath this directory to read, following no
    /// link: a reparse point there is refused.
    pub(crate) fn open_file(&self, rel: &Path) -> io::Result<File> {
        let file = no_follow(OpenOptions::new().read(true)).open(self.beneath(rel)?)?;
        if is_reparse(&file.metadata()?) {
            return Err(refused());
        }
        Ok(file)
    }

    /// The directory `rel` beneath this one; `None` when it does not exist.
    pub(crate) fn open_dir(&self, rel: impl AsRef<Path>) -> io::Result<Option<Dir>> {
        let rel = rel.as_ref();
        match self.look(rel)? {
            None => Ok(None),
            Some(meta) if is_reparse(&meta) => Err(refused()),
            Some(meta) if !meta.is_dir() => Err(io::ErrorKind::NotADirectory.into()),
            Some(_) => Ok(Some(Dir { path: self.join(rel) })),
        }
    }

    /// The modes of what is made in this directory ([`Modes`]): private,
    /// the owner's alone.
    pub fn modes(&self) -> Modes {
        Modes::PRIVATE
    }

    /// The directory `name` in this one, made (the owner's alone) when
    /// missing. Something else there (a file, a link) is an error.
    pub(crate) fn make_dir(&self, name: &str) -> io::Result<Dir> {
        if let Some(dir) = self.open_dir(name)? {
            return Ok(dir);
        }
        match std::fs::create_dir(self.beneath(name.as_ref())?) {
            Ok(()) => {
                let dir = self
                    .open_dir(name)?
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
                crate::os::make_private(&dir.path)?;
                Ok(dir)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self
                .open_dir(name)?
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
            Err(e) => Err(e),
        }
    }

    /// Opens the regular file `rel` to read; `None` when it does not
    /// exist. With its length.
    pub(crate) fn open_read(&self, rel: impl AsRef<Path>) -> Result<Option<(File, u64)>> {
        let rel = rel.as_ref();
        let file = match self.open_file(rel) {
            Ok(f) => f,
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

    /// Makes `name` an empty regular file of ours (its owner's alone) and
    /// opens it to write.
    /// Whatever else is there under that name (a link planted there) is
    /// removed first and never written through; a directory there is an
    /// error.
    pub fn create(&self, name: &str) -> io::Result<File> {
        let path = self.beneath(name.as_ref())?;
        if let Some(meta) = self.look(name.as_ref())?
            && (is_reparse(&meta) || !meta.is_file())
        {
            self.unlink(name)?;
        }
        let file = no_follow(OpenOptions::new().write(true).create(true).truncate(true)).open(&path)?;
        if is_reparse(&file.metadata()?) {
            return Err(refused());
        }
        self.modes().set_file(&file)?;
        Ok(file)
    }

    /// Unlinks `name` (not a directory): a link itself, never what it
    /// points to. A name already gone is not an error.
    pub fn unlink(&self, name: impl AsRef<Path>) -> io::Result<()> {
        let path = self.beneath(name.as_ref())?;
        let removed = match std::fs::symlink_metadata(&path) {
            // A link to a directory (or a junction) is removed as a
            // directory, which removes the link alone.
            Ok(meta) if is_reparse(&meta) && meta.is_dir() => std::fs::remove_dir(&path),
            Ok(meta) if meta.is_dir() => return Err(io::ErrorKind::IsADirectory.into()),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
        match removed {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Removes `name` and, when it is a directory, everything in it: a
    /// link met anywhere is removed itself, never followed. A name
    /// already gone is not an error.
    pub(crate) fn remove_tree(&self, name: impl AsRef<Path>) -> io::Result<()> {
        self.remove_entry(name.as_ref(), 0)
    }

    fn remove_entry(&self, name: &Path, depth: usize) -> io::Result<()> {
        let sub = match self.open_dir(name) {
            Ok(Some(sub)) => sub,
            Ok(None) => return Ok(()),
            Err(e) if is_link(&e) || e.kind() == io::ErrorKind::NotADirectory => {
                return self.unlink(name);
            }
            Err(e) => return Err(e),
        };
        sub.remove_all_in(depth + 1)?;
        match std::fs::remove_dir(&sub.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
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

    /// The names in this directory, each with whether it is a directory
    /// (a link to one is not).
    pub fn entries(&self) -> io::Result<Vec<(OsString, bool)>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            let is_dir = match entry.metadata() {
                Ok(meta) => meta.is_dir() && !is_reparse(&meta),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            out.push((entry.file_name(), is_dir));
        }
        Ok(out)
    }

    /// Renames `from` to `to`, both in this directory, only when nothing
    /// is at `to` (an `AlreadyExists` error otherwise).
    pub(crate) fn rename_noreplace(&self, from: &str, to: &str) -> io::Result<()> {
        crate::os::rename_noreplace(&self.beneath(from.as_ref())?, &self.beneath(to.as_ref())?)
    }

    /// The same directory, known now by `path` (it was renamed).
    pub fn renamed(self, path: PathBuf) -> Dir {
        Dir { path }
    }

    /// Makes the directory private to its owner (Windows has no modes:
    /// its ACL, see [`crate::os::make_private`]).
    pub fn set_mode(&self, _mode: u32) -> io::Result<()> {
        crate::os::make_private(&self.path)
    }
}
