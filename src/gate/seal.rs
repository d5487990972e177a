//! What makes the compiled-gate cache trustworthy: a check that only this
//! user (or root) can write a cache path, as ssh's StrictModes does (in a
//! root shared by a group, the directories above a user's own cache may
//! be its members' too, never the cache itself); a secret key kept 0600
//! in the user's cache; and seals, small text records
//! MACed with that key, binding a cache file to the component it came from
//! and to the exact file written (device, inode, size, mtime, ctime). A file
//! copied or renamed over an entry changes its ctime, so its seal no longer
//! matches and the entry is not used.

use std::fs::Metadata;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How old a file's mtime and ctime must be before its fingerprint is taken
/// as naming its content: file times tick in milliseconds, and a file
/// rewritten within one tick keeps its times.
const SETTLED_AFTER: Duration = Duration::from_secs(2);

/// Why a cache path is not trusted.
#[derive(Debug, thiserror::Error)]
#[cfg_attr(not(unix), allow(dead_code))] // Windows: the cache's ACL is the owner's alone
pub(crate) enum Untrusted {
    #[error(
        "{path} is owned by uid {owner}, not by this user (uid {me}), root or a member of the root's group"
    )]
    Owner { path: PathBuf, owner: u32, me: u32 },
    #[error("{path} is writable by other users (mode {mode:o}); `chmod go-w {path}` fixes it")]
    Writable { path: PathBuf, mode: u32 },
    #[error(
        "{path} is writable by others than its owner and the root's group (mode {mode:o}); `automaton doctor --fix` fixes it"
    )]
    GroupWritable { path: PathBuf, mode: u32 },
    #[error("{path} is readable by other users (mode {mode:o}); `chmod 600 {path}` fixes it")]
    Readable { path: PathBuf, mode: u32 },
    #[error("{path} is not a {expected}")]
    Kind { path: PathBuf, expected: &'static str },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl Untrusted {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Untrusted + '_ {
        move |source| Untrusted::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Who may write the cache besides this user and root: nobody, or, in a
/// root shared by a group (`init --group`), the members of that group, who
/// may already change every loop's step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Writers {
    group: Option<u32>,
}

impl Writers {
    /// The writers of a cache kept in `base` (a root's `cache/`): its
    /// group's members too when `base` is set-group-ID (a group's root)
    /// and this user is one of them.
    #[cfg(unix)]
    pub(crate) fn of(base: &Path) -> Writers {
        use std::os::unix::fs::MetadataExt;
        let group = std::fs::metadata(base)
            .ok()
            .filter(|m| m.is_dir() && m.mode() & 0o2000 != 0)
            .map(|m| m.gid())
            .filter(|&g| i_am_in(g));
        Writers { group }
    }

    #[cfg(not(unix))]
    pub(crate) fn of(_base: &Path) -> Writers {
        Writers::default()
    }

    /// Whether the group may write a path with this group id.
    #[cfg(unix)]
    fn group_may_write(self, gid: u32) -> bool {
        self.group == Some(gid)
    }
}

/// Whether this process is root or in group `gid`.
#[cfg(unix)]
fn i_am_in(gid: u32) -> bool {
    use nix::unistd::{getegid, geteuid};
    geteuid().is_root() || getegid().as_raw() == gid || in_supplementary(gid)
}

/// Whether `gid` is one of this process's supplementary groups.
#[cfg(all(unix, not(target_vendor = "apple")))]
fn in_supplementary(gid: u32) -> bool {
    nix::unistd::getgroups().is_ok_and(|g| g.contains(&nix::unistd::Gid::from_raw(gid)))
}

/// Whether this process's user is a member of `gid` (macOS has no
/// getgroups(2) in nix: membership is read from the group database).
#[cfg(target_vendor = "apple")]
fn in_supplementary(gid: u32) -> bool {
    is_member(nix::unistd::geteuid().as_raw(), gid)
}

/// Whether user `uid` is a member of group `gid` (their primary group, or
/// named in it).
#[cfg(unix)]
fn is_member(uid: u32, gid: u32) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return false;
    };
    user.gid.as_raw() == gid
        || Group::from_gid(Gid::from_raw(gid)).is_ok_and(|g| g.is_some_and(|g| g.mem.contains(&user.name)))
}

/// Refuses a path that another user could have written: owned by someone
/// other than this user, root or (in a group's root) a member of its
/// group, or writable by others, or by a group other than the root's.
#[cfg(unix)]
pub(crate) fn check_private(path: &Path, meta: &Metadata, writers: Writers) -> Result<(), Untrusted> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let owner = meta.uid();
    if owner != me && owner != 0 && !writers.group.is_some_and(|g| is_member(owner, g)) {
        return Err(Untrusted::Owner {
            path: path.to_owned(),
            owner,
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 || (mode & 0o020 != 0 && writers.group.is_none()) {
        return Err(Untrusted::Writable {
            path: path.to_owned(),
            mode,
        });
    }
    if mode & 0o020 != 0 && !writers.group_may_write(meta.gid()) {
        return Err(Untrusted::GroupWritable {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Elsewhere ownership is not checked; the seals still bind entries.
#[cfg(not(unix))]
pub(crate) fn check_private(_path: &Path, _meta: &Metadata, _writers: Writers) -> Result<(), Untrusted> {
    Ok(())
}

/// Identifies one version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Fingerprint {
    #[cfg(unix)]
    pub(crate) fn of(meta: &Metadata) -> Fingerprint {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Fingerprint {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    #[cfg(not(unix))]
    pub(crate) fn of(meta: &Metadata) -> Fingerprint {
        let ns = |t: std::io::Result<SystemTime>| {
            t.ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128)
        };
        Fingerprint {
            dev: 0,
            ino: 0,
            size: meta.len(),
            mtime_ns: ns(meta.modified()),
            ctime_ns: ns(meta.created()),
        }
    }

    /// True when the file has not changed for a while, so a later change
    /// is sure to move its times.
    pub(crate) fn settled(&self, now: SystemTime) -> bool {
        let now_ns = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let settled = SETTLED_AFTER.as_nanos() as i128;
        now_ns - self.mtime_ns.max(self.ctime_ns) >= settled
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Fingerprint {
            dev,
            ino,
            size,
            mtime_ns,
            ctime_ns,
        } = self;
        write!(f, "{dev} {ino} {size} {mtime_ns} {ctime_ns}")
    }
}

/// The per-user secret seals are made with.
pub(crate) struct Key([u8; 32]);

impl Key {
    /// Reads the key at `path`, creating it (0600, random) on first use. A
    /// key anyone but this user could read or write is refused.
    pub(crate) fn load_or_create(path: &Path) -> Result<Key, Untrusted> {
        match std::fs::File::open(path) {
            Ok(mut file) => {
                let meta = file.metadata().map_err(Untrusted::io(path))?;
                check_key_file(path, &meta)?;
                // The file checked is the file read: one open.
                let mut bytes = Vec::with_capacity(33);
                (&mut file)
                    .take(33)
                    .read_to_end(&mut bytes)
                    .map_err(Untrusted::io(path))?;
                let key: [u8; 32] = bytes.try_into().map_err(|_| Untrusted::Kind {
                    path: path.to_owned(),
                    expected: "32-byte key (delete it to make a new one)",
                })?;
                Ok(Key(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Key::create(path),
            Err(e) => Err(Untrusted::io(path)(e)),
        }
    }

    fn create(path: &Path) -> Result<Key, Untrusted> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| Untrusted::io(path)(std::io::Error::other(e.to_string())))?;
        let dir = path.parent().expect("the key lives in a directory");
        // tempfile makes it 0600; on Windows it is given its ACL.
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-key-")
            .tempfile_in(dir)
            .map_err(Untrusted::io(path))?;
        crate::fsx::Modes::PRIVATE
            .set_file(tmp.as_file())
            .map_err(Untrusted::io(path))?;
        tmp.write_all(&key).map_err(Untrusted::io(path))?;
        tmp.as_file().sync_all().map_err(Untrusted::io(path))?;
        // Two processes creating it at once: the first one's key stays.
        match tmp.persist_noclobber(path) {
            Ok(_) => Ok(Key(key)),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Key::load_or_create(path),
            Err(e) => Err(Untrusted::io(path)(e.error)),
        }
    }

    /// `text` followed by its MAC line.
    pub(crate) fn seal(&self, text: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("any key length works");
        mac.update(text.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{text}mac {tag:x}\n")
    }

    /// The text of a sealed record, if its MAC is this key's.
    pub(crate) fn open<'a>(&self, sealed: &'a str) -> Option<&'a str> {
        let body = sealed.strip_suffix('\n')?;
        let at = body.rfind('\n').map_or(0, |i| i + 1);
        let (text, mac_line) = sealed.split_at(at);
        let hex = mac_line.strip_prefix("mac ")?.trim_end();
        let tag = decode_hex(hex)?;
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("any key length works");
        mac.update(text.as_bytes());
        mac.verify_slice(&tag).ok()?;
        Some(text)
    }
}

#[cfg(unix)]
fn check_key_file(path: &Path, meta: &Metadata) -> Result<(), Untrusted> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err(Untrusted::Kind {
            path: path.to_owned(),
            expected: "regular file",
        });
    }
    check_private(path, meta, Writers::default())?;
    if meta.mode() & 0o077 != 0 {
        return Err(Untrusted::Readable {
            path: path.to_owned(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_key_file(path: &Path, meta: &Metadata) -> Result<(), Untrusted> {
    if !meta.is_file() {
        return Err(Untrusted::Kind {
            path: path.to_owned(),
            expected: "regular file",
        });
    }
    Ok(())
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_only_with_its_key_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let key = Key::load_or_create(&dir.path().join("key")).unwrap();
        let again = Key::load_or_create(&dir.path().join("key")).unwrap();
        let other = Key::load_or_create(&dir.path().join("other")).unwrap();
        let sealed = key.seal("component abc\n");
        assert_eq!(again.open(&sealed), Some("component abc\n"));
        assert_eq!(other.open(&sealed), None);
        assert_eq!(key.open(&sealed.replace("abc", "abd")), None);
        assert_eq!(key.open("component abc\n"), None);
        assert_eq!(key.open(""), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_key_is_private_and_a_shared_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        Key::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Key::load_or_create(&path).err().unwrap();
        assert!(matches!(err, Untrusted::Readable { .. }), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_key_its_group_can_read_or_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        Key::load_or_create(&path).unwrap();
        for (mode, writable) in [(0o640, false), (0o660, true)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = Key::load_or_create(&path).err().unwrap();
            match writable {
                true => assert!(matches!(err, Untrusted::Writable { .. }), "{err}"),
                false => assert!(matches!(err, Untrusted::Readable { .. }), "{err}"),
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_groups_members_may_write_the_directories_above_only() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
        let meta = std::fs::metadata(dir.path()).unwrap();
        let group = Writers {
            group: Some(meta.gid()),
        };
        assert!(check_private(dir.path(), &meta, group).is_ok());
        let err = check_private(dir.path(), &meta, Writers::default())
            .err()
            .unwrap();
        assert!(matches!(err, Untrusted::Writable { .. }), "{err}");
        let other = Writers {
            group: Some(meta.gid() + 1),
        };
        let err = check_private(dir.path(), &meta, other).err().unwrap();
        assert!(matches!(err, Untrusted::GroupWritable { .. }), "{err}");
    }

    #[test]
    fn fresh_files_are_not_settled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let fp = Fingerprint::of(&std::fs::metadata(&path).unwrap());
        assert!(!fp.settled(SystemTime::now()));
        assert!(fp.settled(SystemTime::now() + Duration::from_secs(3)));
    }
}
