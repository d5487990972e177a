//! What differs between Unix and Windows below the rest of the program,
//! in one place: opening a file without following a link, renaming
//! without replacing, whether a process lives, who and where we are, and
//! making a path private to its owner.

use std::fs::File;
use std::io;
use std::path::Path;

/// Opens the file at `path` to read, following no link (a link is
/// refused) and, on Unix, never blocking on a FIFO.
#[cfg(unix)]
pub(crate) fn open_no_follow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
}

/// Opens the file at `path` to read, following no reparse point (a
/// symbolic link or a junction there is opened as itself and refused).
#[cfg(windows)]
pub(crate) fn open_no_follow(path: &Path) -> io::Result<File> {
    use std::os::windows::fs::OpenOptionsExt;
    use windows_sys::Win32::Storage::FileSystem::FILE_FLAG_OPEN_REPARSE_POINT;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)?;
    if crate::fsx::is_reparse(&file.metadata()?) {
        return Err(io::Error::from_raw_os_error(
            windows_sys::Win32::Foundation::ERROR_CANT_RESOLVE_FILENAME as i32,
        ));
    }
    Ok(file)
}

/// Renames `from` to `to` only when nothing is at `to` (an
/// `AlreadyExists` error otherwise), in one step: `MoveFileExW` without
/// `MOVEFILE_REPLACE_EXISTING`.
#[cfg(windows)]
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use windows_sys::Win32::Storage::FileSystem::MoveFileExW;
    let (from, to) = (wide(from), wide(to));
    // SAFETY: two NUL-terminated wide strings that outlive the call.
    match unsafe { MoveFileExW(from.as_ptr(), to.as_ptr(), 0) } {
        0 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// `path` as a NUL-terminated UTF-16 string, for the Win32 calls.
#[cfg(windows)]
pub(crate) fn wide(path: impl AsRef<std::ffi::OsStr>) -> Vec<u16> {
    use std::os::windows::ffi::OsStrExt;
    path.as_ref().encode_wide().chain([0]).collect()
}

/// Whether process `pid` runs on this machine. A process we may not look
/// at (on Unix, `EPERM`) runs.
pub(crate) fn process_alive(pid: u32) -> bool {
    // Pid 0 (or one past i32) names no process; on Unix kill(0, ...)
    // would ask about our own process group instead.
    let Ok(pid @ 1..) = i32::try_from(pid) else {
        return false;
    };
    #[cfg(unix)]
    {
        match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
            Ok(()) => true,
            Err(e) => e == nix::errno::Errno::EPERM,
        }
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::Foundation::{CloseHandle, ERROR_ACCESS_DENIED, GetLastError, STILL_ACTIVE};
        use windows_sys::Win32::System::Threading::{
            GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
        };
        // SAFETY: plain calls on a handle we own and close.
        unsafe {
            let handle = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid as u32);
            if handle.is_null() {
                return GetLastError() == ERROR_ACCESS_DENIED;
            }
            let mut code = 0u32;
            let ok = GetExitCodeProcess(handle, &raw mut code) != 0;
            CloseHandle(handle);
            !ok || code == STILL_ACTIVE as u32
        }
    }
}

/// The name of the OS user this process runs as; `None` when it has none.
#[cfg(unix)]
pub(crate) fn user_name() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => format!("uid{uid}"),
    }
}

/// The name of the OS user this process runs as (`%USERNAME%`, which
/// Windows sets for every logon).
#[cfg(windows)]
pub(crate) fn user_name() -> String {
    std::env::var("USERNAME")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "user".to_owned())
}

/// This machine's OS host name.
pub(crate) fn host_name() -> Option<String> {
    #[cfg(unix)]
    {
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok())
    }
    #[cfg(windows)]
    {
        std::env::var("COMPUTERNAME")
            .ok()
            .filter(|h| !h.trim().is_empty())
    }
}

/// Makes `path` (a file or directory automaton made) its owner's alone:
/// on Windows, a protected ACL granting the owner full control and nobody
/// else anything, where Unix makes it 0600 or 0700. A directory's entry is
/// inherited by what is made in it, so a file is private from the moment
/// it exists; [`make_file_private`] then gives the file its own.
#[cfg(windows)]
pub(crate) fn make_private(path: &Path) -> io::Result<()> {
    let inherit = std::fs::metadata(path)?.is_dir();
    let name = wide(path);
    acl::owner_only(inherit, |sd, info| {
        // SAFETY: a NUL-terminated wide string and a security descriptor
        // that outlive the call.
        unsafe { windows_sys::Win32::Security::SetFileSecurityW(name.as_ptr(), info, sd) }
    })
}

/// Makes the file open as `file` its owner's alone, as [`make_private`]
/// does by path: where Unix creates a private file 0600, Windows gives it
/// a protected ACL granting its owner alone. Every private file automaton
/// makes passes here, through [`crate::fsx::Modes::set_file`].
#[cfg(windows)]
pub(crate) fn make_file_private(file: &File) -> io::Result<()> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Foundation::{CloseHandle, INVALID_HANDLE_VALUE};
    use windows_sys::Win32::Storage::FileSystem::{
        FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, READ_CONTROL, ReOpenFile, WRITE_DAC,
    };
    // The file was opened to read or write it, not to change its ACL: a
    // second handle to the same file (never a path, which could name
    // another file by now) may.
    // SAFETY: a handle `file` owns, and the one ReOpenFile gives, closed.
    let handle = unsafe {
        ReOpenFile(
            file.as_raw_handle(),
            WRITE_DAC | READ_CONTROL,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            0,
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    let set = acl::owner_only(false, |sd, info| {
        // SAFETY: an open handle and a security descriptor that outlive
        // the call.
        unsafe { windows_sys::Win32::Security::SetKernelObjectSecurity(handle, info, sd) }
    });
    // SAFETY: the handle ReOpenFile gave, closed once.
    unsafe { CloseHandle(handle) };
    set
}

#[cfg(windows)]
mod acl {
    use std::io;

    use windows_sys::Win32::Foundation::{CloseHandle, ERROR_SUCCESS, HANDLE, LocalFree};
    use windows_sys::Win32::Security::Authorization::{
        EXPLICIT_ACCESS_W, GRANT_ACCESS, SetEntriesInAclW, TRUSTEE_IS_SID, TRUSTEE_IS_USER, TRUSTEE_W,
    };
    use windows_sys::Win32::Security::{
        ACL, DACL_SECURITY_INFORMATION, GetTokenInformation, InitializeSecurityDescriptor, NO_INHERITANCE,
        OBJECT_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR,
        SE_DACL_PROTECTED, SECURITY_DESCRIPTOR, SUB_CONTAINERS_AND_OBJECTS_INHERIT,
        SetSecurityDescriptorControl, SetSecurityDescriptorDacl, TOKEN_QUERY, TOKEN_USER, TokenUser,
    };
    use windows_sys::Win32::Storage::FileSystem::FILE_ALL_ACCESS;
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};
    use windows_sys::core::BOOL;

    /// `SECURITY_DESCRIPTOR_REVISION`.
    const REVISION: u32 = 1;

    /// Calls `set` with a security descriptor whose DACL grants this
    /// process's user full control and nobody else anything, protected
    /// from what the parent would have it inherit (inherited in turn when
    /// `inherit`, for a directory), and the information to set from it.
    ///
    /// The descriptor is set whole (`SetFileSecurityW`,
    /// `SetKernelObjectSecurity`): `SetNamedSecurityInfoW` and
    /// `SetSecurityInfo` do the same on Windows, but Wine drops their DACL
    /// and opens the file to everyone.
    pub(super) fn owner_only(
        inherit: bool,
        set: impl FnOnce(PSECURITY_DESCRIPTOR, OBJECT_SECURITY_INFORMATION) -> BOOL,
    ) -> io::Result<()> {
        let user = current_user()?;
        // SAFETY: the SID lives in `user`'s buffer for the whole call; the
        // ACL SetEntriesInAclW allocates outlives the descriptor that
        // points to it, and is freed below.
        unsafe {
            let sid = (*user.as_ptr().cast::<TOKEN_USER>()).User.Sid;
            let access = EXPLICIT_ACCESS_W {
                grfAccessPermissions: FILE_ALL_ACCESS,
                grfAccessMode: GRANT_ACCESS,
                grfInheritance: if inherit {
                    SUB_CONTAINERS_AND_OBJECTS_INHERIT
                } else {
                    NO_INHERITANCE
                },
                Trustee: TRUSTEE_W {
                    pMultipleTrustee: std::ptr::null_mut(),
                    MultipleTrusteeOperation: 0,
                    TrusteeForm: TRUSTEE_IS_SID,
                    TrusteeType: TRUSTEE_IS_USER,
                    ptstrName: sid.cast(),
                },
            };
            let mut acl: *mut ACL = std::ptr::null_mut();
            let rc = SetEntriesInAclW(1, &raw const access, std::ptr::null(), &raw mut acl);
            if rc != ERROR_SUCCESS {
                return Err(io::Error::from_raw_os_error(rc as i32));
            }
            let mut sd: SECURITY_DESCRIPTOR = std::mem::zeroed();
            let sdp: PSECURITY_DESCRIPTOR = (&raw mut sd).cast();
            let made = InitializeSecurityDescriptor(sdp, REVISION) != 0
                && SetSecurityDescriptorDacl(sdp, 1, acl, 0) != 0
                && SetSecurityDescriptorControl(sdp, SE_DACL_PROTECTED, SE_DACL_PROTECTED) != 0
                && set(
                    sdp,
                    DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
                ) != 0;
            let err = io::Error::last_os_error();
            LocalFree(acl.cast());
            if made { Ok(()) } else { Err(err) }
        }
    }

    /// This process's token's user, as `TOKEN_USER` in a buffer (u64s, so
    /// aligned for it).
    fn current_user() -> io::Result<Vec<u64>> {
        // SAFETY: a token handle we own and close; the buffer is as long
        // as the first call says.
        unsafe {
            let mut token: HANDLE = std::ptr::null_mut();
            if OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &raw mut token) == 0 {
                return Err(io::Error::last_os_error());
            }
            let mut len = 0u32;
            GetTokenInformation(token, TokenUser, std::ptr::null_mut(), 0, &raw mut len);
            let mut buf = vec![0u64; (len as usize).div_ceil(8).max(1)];
            let ok = GetTokenInformation(token, TokenUser, buf.as_mut_ptr().cast(), len, &raw mut len);
            let err = io::Error::last_os_error();
            CloseHandle(token);
            if ok == 0 {
                return Err(err);
            }
            Ok(buf)
        }
    }
}

/// Reads and writes at an offset without moving a shared cursor: std's
/// `FileExt` on Unix; on Windows, `seek_read`/`seek_write` (each call
/// positions the handle itself, so no two calls share a cursor).
#[cfg(unix)]
pub(crate) use std::os::unix::fs::FileExt;

#[cfg(windows)]
pub(crate) trait FileExt {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
}

#[cfg(windows)]
impl FileExt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::windows::fs::FileExt::seek_read(self, buf, offset)
    }

    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match std::os::windows::fs::FileExt::seek_write(self, buf, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What tells one file from another that replaced it under the same name:
/// its inode and device on Unix; on Windows (whose file index std does not
/// give yet) its creation time, which a file renamed over the name brings
/// with it.
pub(crate) fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.ino(), meta.dev())
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        (meta.creation_time(), 0)
    }
}

/// [`file_id`] of a directory entry (on Unix read from the listing, with
/// no `stat`).
pub(crate) fn entry_id(entry: &std::fs::DirEntry) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirEntryExt;
        entry.ino()
    }
    #[cfg(windows)]
    {
        entry.metadata().map_or(0, |m| file_id(&m).0)
    }
}

/// A file's modification time as seconds and nanoseconds since the Unix
/// epoch, to the file system's grain.
pub(crate) fn mtime(meta: &std::fs::Metadata) -> (i64, i64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.mtime(), meta.mtime_nsec())
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        // 100 ns intervals since 1601.
        let t = meta.last_write_time() as i64 - 116_444_736_000_000_000;
        (t.div_euclid(10_000_000), t.rem_euclid(10_000_000) * 100)
    }
}

/// Whether `name` is an OS user's name on this host. On Windows only the
/// user running this process is vouched for.
pub(crate) fn is_os_user(name: &str) -> bool {
    #[cfg(unix)]
    {
        matches!(nix::unistd::User::from_name(name), Ok(Some(_)))
    }
    #[cfg(windows)]
    {
        name.eq_ignore_ascii_case(&user_name())
    }
}

/// The name of the user who owns what `meta` describes (`uid<N>` for a
/// uid with no name). On Windows, the user running this process: a root
/// is its user's (its ACL grants nobody else).
pub(crate) fn owner_name(meta: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match nix::unistd::User::from_uid(meta.uid().into()) {
            Ok(Some(user)) => user.name,
            _ => format!("uid{}", meta.uid()),
        }
    }
    #[cfg(windows)]
    {
        let _ = meta;
        user_name()
    }
}
