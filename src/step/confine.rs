//! What a step (and its verifier) may touch, and, on Linux, the Landlock
//! ruleset that holds it to that.
//!
//! The policy is an allowlist built around what must stay out of reach:
//! - it may read everything but the root (its own loop's directory, run
//!   directory and worktree excepted), `~/.ssh` and `~/.gnupg`, unless
//!   `[step] readable` grants them, and never what grants power: the
//!   console's users (`users.json`), the root's `automaton.toml` (it may
//!   name the store with its password), the compiled-gate cache with its
//!   sealing key, and libpq's password, service and key files;
//! - it may write its run directory, its worktree and the repository's git
//!   directory, its workdir when that lies outside the root, the temporary
//!   directories, the harmless devices and `[step] writable`, never the
//!   root (a writable place that holds the root is granted entry by entry
//!   around it) nor the secrets above;
//! - where the kernel has Landlock's network rules (ABI 4), it may not
//!   connect over TCP to the ports a console serving the root listens on,
//!   unless `[step] connect` says otherwise;
//! - where it has scoping (ABI 6), it may not signal, nor reach an abstract
//!   Unix socket of, a process outside its own domain (the runner, the
//!   daemon).
//!
//! "Everything but X" is granted by walking from the top down the ancestors
//! of each X, granting each sibling entry whole. An entry made after the
//! ruleset is built next to such an ancestor is not granted. A place
//! granted twice (by the read walk and the write walk) has one rule with
//! both grants' rights, and each place is opened only while its rule is
//! added. A process keeps its walks while the directories they read keep
//! their modification times, and the ports' ruleset while the ports are
//! the same: a daemon builds them once.
//!
//! The ruleset is built in the runner (that restricts nothing); the step's
//! process applies it between fork and exec with two raw system calls
//! (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`), which neither
//! allocate nor lock.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What the tick asks of the step's confinement.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The root: never written; read only where `readable` re-grants it.
    pub root: PathBuf,
    /// Readable and writable whole, although inside the root: the run
    /// directory, the worktree.
    pub own: Vec<PathBuf>,
    /// Readable although inside the root or hidden: the loop's directory,
    /// `[step] readable`.
    pub readable: Vec<PathBuf>,
    /// Writable (and readable), granted around the root and the secrets.
    pub writable: Vec<PathBuf>,
    /// Not readable unless `readable` names them (`~/.ssh`, `~/.gnupg`).
    pub hidden: Vec<PathBuf>,
    /// Never readable nor writable, whatever else says.
    pub secrets: Vec<PathBuf>,
    /// TCP connections: `None` leaves them alone; `Some(Deny(ports))` all
    /// but those; `Some(Only(ports))` only those.
    pub connect: Option<Ports>,
}

/// Which TCP ports a step may connect to, when its ruleset handles TCP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    /// Any port but these.
    AllBut(Vec<u16>),
    /// These only.
    Only(Vec<u16>),
}

/// How a step ran, as its tick records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum Confinement {
    /// Held by a Landlock ruleset: the kernel's ABI level and what it
    /// enforced.
    Landlock { abi: u32, enforces: Vec<Enforced> },
    /// `[step] confine = "off"`: the runner's every right.
    Unconfined,
}

impl Confinement {
    /// In a few words, as `status` and `review` say it.
    pub fn describe(&self) -> String {
        match self {
            Confinement::Unconfined => "unconfined".to_owned(),
            Confinement::Landlock { abi, enforces } => {
                let what: Vec<&str> = enforces.iter().map(|e| e.as_str()).collect();
                format!("confined (Landlock ABI {abi}: {})", what.join(", "))
            }
        }
    }
}

/// One kind of restriction a ruleset enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforced {
    /// Reads and writes of files and directories.
    Filesystem,
    /// Truncation (ABI 3).
    Truncate,
    /// ioctl on devices (ABI 5).
    DeviceIoctl,
    /// TCP connections (ABI 4).
    TcpConnect,
    /// Signals to processes outside the step's domain (ABI 6).
    Signals,
    /// Abstract Unix sockets outside the step's domain (ABI 6).
    AbstractUnixSockets,
}

impl Enforced {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforced::Filesystem => "filesystem",
            Enforced::Truncate => "truncate",
            Enforced::DeviceIoctl => "device-ioctl",
            Enforced::TcpConnect => "tcp-connect",
            Enforced::Signals => "signals",
            Enforced::AbstractUnixSockets => "abstract-unix-sockets",
        }
    }
}

/// Why a step cannot be confined; the tick then refuses to run it.
#[derive(Debug, Error)]
pub enum ConfineError {
    #[error(
        "the kernel cannot confine the step ({why}); set `confine = \"off\"` in the loop's [step] table to run it unconfined"
    )]
    Unavailable { why: String },
    #[error("cannot build the step's Landlock ruleset")]
    Ruleset(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A ruleset ready to be applied in the step's process, and what the tick
/// records of it.
#[derive(Debug)]
pub struct Prepared {
    /// The files' ruleset, with the scopes.
    #[cfg(target_os = "linux")]
    pub(super) fd: std::os::fd::OwnedFd,
    /// The TCP ports' ruleset, a second layer: built once for a set of
    /// ports and kept (65,535 rules are worth keeping in a daemon).
    #[cfg(target_os = "linux")]
    pub(super) net: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    pub record: Confinement,
}

/// The kernel's Landlock ABI level: 0 where it has none.
/// `AUTOMATON_LANDLOCK_ABI` may lower it (never raise it): how the tests
/// see what an older kernel, or one without Landlock, does.
pub(crate) fn kernel_abi() -> u32 {
    let real = real_abi();
    match std::env::var("AUTOMATON_LANDLOCK_ABI")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        Some(asked) => asked.min(real),
        None => real,
    }
}

#[cfg(target_os = "linux")]
fn real_abi() -> u32 {
    use nix::libc;
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, a zero size and the VERSION flag the
    // call only returns the ABI level (or an error); it touches no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
}

#[cfg(not(target_os = "linux"))]
fn real_abi() -> u32 {
    0
}

/// Builds the ruleset for `policy`, or says why the kernel cannot confine.
pub fn prepare(policy: &Policy) -> Result<Prepared, ConfineError> {
    let abi = kernel_abi();
    if abi == 0 {
        return Err(ConfineError::Unavailable {
            why: unavailable_why().to_owned(),
        });
    }
    #[cfg(target_os = "linux")]
    {
        linux::build(policy, abi)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = policy;
        unreachable!("no Landlock outside Linux: the ABI is 0")
    }
}

fn unavailable_why() -> &'static str {
    if cfg!(target_os = "linux") {
        "Landlock is not enabled in this kernel"
    } else {
        "Landlock is Linux's; this system has no confinement automaton applies"
    }
}

/// The system calls that confine the calling thread, and so the step it
/// then starts: the files' ruleset, then the ports' one when there is one
/// (-1: none). Raw system calls, no allocation, no lock.
#[cfg(target_os = "linux")]
pub(super) fn restrict_self(fd: std::os::fd::RawFd, net: std::os::fd::RawFd) -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: raw system calls on plain integers; async-signal-safe.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for layer in [fd, net] {
            if layer >= 0 && libc::syscall(libc::SYS_landlock_restrict_self, layer, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Whether this process holds open the places its kept walks grant.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
static KEEP_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process hold open (`O_PATH`) the places its kept walks
/// grant, from the first ruleset that uses them: a process that confines
/// a step at every tick (the daemon) then adds their rules without
/// opening them again. A process that confines one step (a CLI tick)
/// holds none: each place is open only while its rule is added.
pub(crate) fn keep_places_open() {
    KEEP_OPEN.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `path` is `place` or lies under it.
#[cfg(target_os = "linux")]
fn within(path: &Path, place: &Path) -> bool {
    path.starts_with(place)
}

/// `path` with its links resolved when it exists (Landlock sees the
/// places themselves), else as given.
pub fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::{BTreeMap, HashMap};
    use std::ffi::OsString;
    use std::os::fd::{AsFd, OwnedFd};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, LazyLock, Mutex, OnceLock};
    use std::time::SystemTime;

    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
        Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
    };

    use super::{ConfineError, Confinement, Enforced, Policy, Ports, Prepared, within};

    fn ruleset_error(e: impl std::error::Error + Send + Sync + 'static) -> ConfineError {
        ConfineError::Ruleset(Box::new(e))
    }

    /// What each place is granted, one entry a place: a place granted by
    /// two grants (the temporary directory's entries by the read walk
    /// and by the write walk) is opened and ruled once, with both grants'
    /// rights (Landlock ORs the rules of one inode anyway).
    struct Grants {
        abi: ABI,
        /// By the path's bytes (compared as bytes, not component by
        /// component: a daemon builds this map at every tick).
        places: BTreeMap<OsString, Place>,
    }

    /// One place's rights, and where it is held open when a kept walk
    /// holds it.
    struct Place {
        access: BitFlags<AccessFs>,
        held: Option<(Arc<Walk>, usize)>,
    }

    impl Grants {
        /// Allows `access` on `path` and beneath it (only what applies to a
        /// file when it is one).
        fn grant(&mut self, path: &Path, is_dir: bool, access: BitFlags<AccessFs>) {
            self.grant_held(path, is_dir, access, None);
        }

        fn grant_held(
            &mut self,
            path: &Path,
            is_dir: bool,
            access: BitFlags<AccessFs>,
            held: Option<(Arc<Walk>, usize)>,
        ) {
            let access = if is_dir {
                access
            } else {
                access & AccessFs::from_file(self.abi)
            };
            let place = self.places.entry(path.as_os_str().to_owned()).or_insert(Place {
                access: BitFlags::EMPTY,
                held: None,
            });
            place.access |= access;
            if place.held.is_none() {
                place.held = held;
            }
        }

        /// Allows `access` on `path` whole when nothing of `around` lies
        /// in it; else on each of its entries but those in `around`,
        /// walking down towards them (a walk kept while the directories it
        /// read are unchanged). Nothing when `path` is in `around`.
        fn grant_around(
            &mut self,
            path: &Path,
            is_dir: bool,
            around: &[PathBuf],
            access: BitFlags<AccessFs>,
        ) {
            if around.iter().any(|a| within(path, a)) {
                return;
            }
            if !is_dir || !around.iter().any(|a| within(a, path)) {
                return self.grant(path, is_dir, access);
            }
            let walk = Walk::kept_or_made(path, around);
            let holds = super::KEEP_OPEN.load(Ordering::Relaxed);
            for (i, (entry, is_dir)) in walk.grants.iter().enumerate() {
                let held = holds.then(|| (Arc::clone(&walk), i));
                self.grant_held(entry, *is_dir, access, held);
            }
        }

        /// Adds a rule for each place to `rules`. A place is opened
        /// (`O_PATH`) only while its rule is added, so building a ruleset
        /// holds one descriptor at a time however many places it grants
        /// (a multi-threaded process whose table of descriptors grows
        /// waits for an RCU grace period at each doubling: milliseconds
        /// on a busy machine); in a process that keeps places open (a
        /// daemon), a kept walk's entries are opened once and held. A
        /// place that no longer exists is skipped.
        fn add_to(&self, rules: &mut RulesetCreated) -> Result<(), ConfineError> {
            for (path, place) in &self.places {
                let rule = match &place.held {
                    Some((walk, i)) => match &walk.held()[*i] {
                        Some(fd) => rules
                            .as_mut()
                            .add_rule(PathBeneath::new(fd.as_fd(), place.access)),
                        None => continue,
                    },
                    None => match PathFd::new(Path::new(path)) {
                        Ok(fd) => rules.as_mut().add_rule(PathBeneath::new(fd, place.access)),
                        Err(_) => continue,
                    },
                };
                rule.map_err(ruleset_error)?;
            }
            Ok(())
        }
    }

    /// A walk down from a place towards the places to leave out: the
    /// entries to grant (whether each is a directory) and the directories
    /// read with their modification times (which change when an entry is
    /// made, removed or renamed in them). A daemon keeps its walks: it
    /// does not read the same directories again at each tick, and holds
    /// the entries open.
    pub(super) struct Walk {
        dirs: Vec<(PathBuf, Option<SystemTime>)>,
        grants: Vec<(PathBuf, bool)>,
        /// The entries of `grants`, opened at the first ruleset that uses
        /// them in a process that keeps places open (None: gone).
        held: OnceLock<Vec<Option<PathFd>>>,
    }

    type Walks = HashMap<(PathBuf, Vec<PathBuf>), Arc<Walk>>;

    /// The walks kept; cleared when it holds this many.
    const WALKS_KEPT: usize = 64;

    impl Walk {
        pub(super) fn kept_or_made(path: &Path, around: &[PathBuf]) -> Arc<Walk> {
            static KEPT: LazyLock<Mutex<Walks>> = LazyLock::new(Mutex::default);
            let key = (path.to_owned(), around.to_vec());
            let mut kept = KEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(walk) = kept.get(&key)
                && walk.is_current()
            {
                return Arc::clone(walk);
            }
            let mut walk = Walk {
                dirs: Vec::new(),
                grants: Vec::new(),
                held: OnceLock::new(),
            };
            walk.read(path, around);
            let walk = Arc::new(walk);
            if kept.len() >= WALKS_KEPT {
                kept.clear();
            }
            kept.insert(key, Arc::clone(&walk));
            walk
        }

        /// Reads `dir`, keeping its entries to grant and walking on into
        /// those that lead to a place of `around`.
        fn read(&mut self, dir: &Path, around: &[PathBuf]) {
            // The time first: an entry made while the walk reads is seen
            // by the next check.
            self.dirs.push((dir.to_owned(), modified(dir)));
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if around.iter().any(|a| within(&path, a)) {
                    continue;
                }
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if is_dir && around.iter().any(|a| within(a, &path)) {
                    self.read(&path, around);
                } else {
                    self.grants.push((path, is_dir));
                }
            }
        }

        #[cfg(test)]
        pub(super) fn granted_paths(&self) -> impl Iterator<Item = &Path> {
            self.grants.iter().map(|(p, _)| p.as_path())
        }

        fn held(&self) -> &[Option<PathFd>] {
            self.held
                .get_or_init(|| self.grants.iter().map(|(p, _)| PathFd::new(p).ok()).collect())
        }

        fn is_current(&self) -> bool {
            self.dirs.iter().all(|(dir, at)| modified(dir) == *at)
        }
    }

    fn modified(dir: &Path) -> Option<SystemTime> {
        std::fs::symlink_metadata(dir).and_then(|m| m.modified()).ok()
    }

    fn is_dir(path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.is_dir())
    }

    /// The rulesets for `policy` on a kernel of Landlock ABI `level`: the
    /// files' (with the scopes) and, when TCP is handled, the ports'.
    pub(super) fn build(policy: &Policy, level: u32) -> Result<Prepared, ConfineError> {
        let abi = ABI::from(i32::try_from(level).unwrap_or(i32::MAX));
        let net = match &policy.connect {
            Some(ports) if abi >= ABI::V4 => Some(net_layer(ports)?),
            _ => None,
        };
        let scoped = abi >= ABI::V6;
        let fd = files_layer(policy, abi, scoped)?;

        let mut enforces = vec![Enforced::Filesystem];
        if abi >= ABI::V3 {
            enforces.push(Enforced::Truncate);
        }
        if abi >= ABI::V5 {
            enforces.push(Enforced::DeviceIoctl);
        }
        if net.is_some() {
            enforces.push(Enforced::TcpConnect);
        }
        if scoped {
            enforces.extend([Enforced::Signals, Enforced::AbstractUnixSockets]);
        }
        Ok(Prepared {
            fd,
            net,
            record: Confinement::Landlock { abi: level, enforces },
        })
    }

    /// The files' ruleset, with the scopes when `scoped`.
    fn files_layer(policy: &Policy, abi: ABI, scoped: bool) -> Result<OwnedFd, ConfineError> {
        let write = AccessFs::from_all(abi) & !AccessFs::Execute;
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(write)
            .map_err(ruleset_error)?;
        if scoped {
            ruleset = ruleset
                .scope(Scope::Signal | Scope::AbstractUnixSocket)
                .map_err(ruleset_error)?;
        }
        let mut g = Grants {
            abi,
            places: BTreeMap::new(),
        };
        // Directories may be listed everywhere: a name is not its content.
        g.grant(Path::new("/"), true, AccessFs::ReadDir.into());
        let mut unread = vec![policy.root.clone()];
        unread.extend(policy.hidden.iter().cloned());
        unread.extend(policy.secrets.iter().cloned());
        g.grant_around(Path::new("/"), true, &unread, read);
        for place in &policy.readable {
            g.grant_around(place, is_dir(place), &policy.secrets, read);
        }
        for place in &policy.own {
            // A worktree that holds the root is granted around it.
            let mut around = policy.secrets.clone();
            if !within(place, &policy.root) {
                around.push(policy.root.clone());
            }
            g.grant_around(place, is_dir(place), &around, write);
        }
        let mut unwritten = vec![policy.root.clone()];
        unwritten.extend(policy.secrets.iter().cloned());
        for place in &policy.writable {
            g.grant_around(place, is_dir(place), &unwritten, write);
        }
        let mut rules = ruleset.create().map_err(ruleset_error)?;
        g.add_to(&mut rules)?;
        owned(rules)
    }

    fn owned(rules: RulesetCreated) -> Result<OwnedFd, ConfineError> {
        let fd: Option<OwnedFd> = rules.into();
        fd.ok_or_else(|| ConfineError::Unavailable {
            why: "Landlock made no ruleset".to_owned(),
        })
    }

    /// The ruleset of the TCP ports the step may connect to, kept for the
    /// next step with the same ports (a daemon builds it once): Landlock's
    /// rules name ports one by one, so "all but these" is one rule for each
    /// other port.
    fn net_layer(ports: &Ports) -> Result<Arc<OwnedFd>, ConfineError> {
        static KEPT: Mutex<Option<(Ports, Arc<OwnedFd>)>> = Mutex::new(None);
        let mut kept = KEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((p, fd)) = kept.as_ref()
            && p == ports
        {
            return Ok(Arc::clone(fd));
        }
        let mut rules = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::ConnectTcp)
            .map_err(ruleset_error)?
            .create()
            .map_err(ruleset_error)?;
        grant_ports(&mut rules, ports)?;
        let fd = Arc::new(owned(rules)?);
        *kept = Some((ports.clone(), Arc::clone(&fd)));
        Ok(fd)
    }

    fn grant_ports(rules: &mut RulesetCreated, ports: &Ports) -> Result<(), ConfineError> {
        match ports {
            Ports::Only(allowed) => {
                for &port in allowed {
                    rules
                        .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                        .map_err(ruleset_error)?;
                }
            }
            Ports::AllBut(denied) => {
                for port in 0..=u16::MAX {
                    if !denied.contains(&port) {
                        rules
                            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                            .map_err(ruleset_error)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::linux::Walk;
    use super::{Policy, resolved};
    use std::path::PathBuf;

    /// The names a walk from `top` around `around` grants, relative to `top`.
    fn granted(top: &std::path::Path, around: &[PathBuf]) -> Vec<String> {
        let walk = Walk::kept_or_made(top, around);
        let mut names: Vec<String> = walk
            .granted_paths()
            .map(|p| p.strip_prefix(top).unwrap().display().to_string())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_walk_grants_every_entry_but_those_leading_to_the_places_left_out() {
        let d = tempfile::tempdir().unwrap();
        let top = super::resolved(d.path());
        for dir in ["a", "b/root/loops", "b/c", "e"] {
            std::fs::create_dir_all(top.join(dir)).unwrap();
        }
        std::fs::write(top.join("f"), "").unwrap();
        let around = [top.join("b/root")];
        assert_eq!(granted(&top, &around), ["a", "b/c", "e", "f"]);

        // A new entry beside the root is seen: the walk is read again.
        std::fs::create_dir(top.join("b/d")).unwrap();
        assert_eq!(granted(&top, &around), ["a", "b/c", "b/d", "e", "f"]);
    }

    fn open_descriptors() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn a_ruleset_granted_entry_by_entry_holds_no_descriptor_per_entry() {
        if super::kernel_abi() == 0 {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let top = resolved(d.path());
        for i in 0..300 {
            std::fs::write(top.join(format!("f{i}")), "").unwrap();
        }
        let root = top.join("root");
        std::fs::create_dir(&root).unwrap();
        let policy = Policy {
            root,
            writable: vec![top.clone()],
            ..Policy::default()
        };
        let before = open_descriptors();
        let prepared = super::prepare(&policy).unwrap();
        // The ruleset's own descriptor, and any a test beside this one
        // opened meanwhile; not one for each of the 300 entries granted.
        let held = open_descriptors().saturating_sub(before);
        drop(prepared);
        assert!(held < 100, "{held} descriptors held after building the ruleset");
    }
}
