//! The compiled-gate cache: precompiled components under `<root>/cache/gates/`
//! (in a root shared by a group, each user's own `<root>/cache/gates/<uid>/`),
//! keyed by the component's sha256, the wasmtime version and a fingerprint of
//! the engine's settings. A `.cwasm` is native code, so an entry is used only
//! when its seal says this runner wrote exactly that file from exactly that
//! component, and only from a directory and files no other user can write
//! (a group's members neither: no process loads native code that another
//! uid could have written, root included); anything else is compiled again
//! (and replaced), and a cache others can write is not used at all. An
//! entry is checked and read through one open file, so what was checked is
//! what is loaded (mapped from that open file). The cache also remembers each component file's sha256
//! by its fingerprint, so a cached gate is loaded without reading or hashing
//! it, and, for signed gates, each signature it verified over a component
//! (`verified/`, see `host/verify.rs`). Entries are written atomically. Nothing here is ever fatal: without a
//! cache a gate is compiled in memory.

use std::hash::{Hash, Hasher};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::{GateError, GateErrorKind, human_bytes};
use super::seal::{Fingerprint, Key, Untrusted, Writers, check_private};
use crate::fsx::Modes;

/// The wasmtime release gates are compiled with; pinned in Cargo.toml.
pub(crate) const WASMTIME_VERSION: &str = "48.0.8";

/// How long a compile runs before a progress line is shown on a terminal.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Counts of what the cache did, for tests and `gate compile`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from a cached artefact.
    pub hits: u64,
    /// Components compiled (no usable cached artefact).
    pub compiled: u64,
    /// Cached artefacts that did not load, or whose seal did not match,
    /// and were replaced.
    pub rejected: u64,
}

pub(crate) struct Cache {
    /// This user's cache directory, and the one above it (the root's
    /// `cache/`), whose group's members may write the directories
    /// between them.
    dir: Option<PathBuf>,
    base: Option<PathBuf>,
    engine_key: String,
    /// The directory checked and the key loaded, on first use; `None` when
    /// the cache is refused or cannot be made.
    trusted: OnceLock<Option<Trusted>>,
    hits: AtomicU64,
    compiled: AtomicU64,
    rejected: AtomicU64,
}

/// A cache directory that passed its checks: this user's alone.
struct Trusted {
    key: Key,
}

/// Feeds `Hash` output into sha256, so the fingerprint is stable across
/// processes (std's `DefaultHasher` promises no such thing).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

/// The lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

impl Cache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Cache {
        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        let fingerprint = format!("{:x}", h.0.finalize());
        Cache {
            dir: dir.as_deref().map(own_dir),
            base: dir,
            engine_key: format!("wasmtime-{WASMTIME_VERSION}-{}", &fingerprint[..16]),
            trusted: OnceLock::new(),
            hits: AtomicU64::new(0),
            compiled: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            compiled: self.compiled.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// Where the artefact for a component with this sha256 lives.
    pub(crate) fn entry(&self, sha256: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(dir.join(format!("{sha256}.{}.cwasm", self.engine_key)))
    }

    /// The key, once the directory has passed its checks (made on first
    /// use, private). A refused cache is said once, with the reason.
    fn key(&self) -> Option<&Key> {
        self.trusted().map(|t| &t.key)
    }

    fn trusted(&self) -> Option<&Trusted> {
        let dir = self.dir.as_deref()?;
        let base = self.base.as_deref()?;
        self.trusted
            .get_or_init(|| match open_dir(base, dir) {
                Ok(trusted) => Some(trusted),
                Err(e) => {
                    tracing::warn!("not using the gate cache: {e}; gates are compiled in memory");
                    None
                }
            })
            .as_ref()
    }

    /// The sha256 of the component file with this fingerprint, when a
    /// sealed record says so: a cached gate then loads without reading or
    /// hashing its component.
    pub(crate) fn known_sha256(&self, path: &Path, file: &Fingerprint) -> Option<String> {
        let key = self.key()?;
        let text = std::fs::read_to_string(self.source_record(path)?).ok()?;
        let body = key.open(&text)?;
        let mut lines = body.lines();
        let want = source_lines(path, file, "");
        let mut wanted = want.lines();
        // Every line but the last (the sha256) must match.
        for _ in 0..3 {
            if lines.next()? != wanted.next()? {
                return None;
            }
        }
        let sha = lines.next()?.strip_prefix("sha256 ")?;
        (sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit())).then(|| sha.to_owned())
    }

    /// Records that the component file with this fingerprint has this
    /// sha256, when the file has settled (a file changed within the last
    /// moments could change again without moving its times).
    pub(crate) fn remember_sha256(&self, path: &Path, file: &Fingerprint, sha256: &str) {
        if !file.settled(SystemTime::now()) {
            return;
        }
        let (Some(trusted), Some(record)) = (self.trusted(), self.source_record(path)) else {
            return;
        };
        let sealed = trusted.key.seal(&source_lines(path, file, sha256));
        if let Err(e) = write_atomic(&record, sealed.as_bytes()) {
            tracing::debug!(path = %record.display(), error = %e, "could not record a gate's sha256");
        }
    }

    /// What a sealed record says a signature verified for: the signed
    /// component's name and version (its `describe`), when this runner
    /// verified exactly these signature bytes over exactly the component
    /// with this sha256 (`key`, see `trust::verified_key`).
    pub(crate) fn known_verified(&self, key: &str) -> Option<(String, String)> {
        let text = std::fs::read_to_string(self.verified_record(key)?).ok()?;
        let mut lines = self.trusted()?.key.open(&text)?.lines();
        (lines.next()? == "automaton gate signature 1").then_some(())?;
        (lines.next()?.strip_prefix("key ")? == key).then_some(())?;
        let name = lines.next()?.strip_prefix("name ")?.to_owned();
        let version = lines.next()?.strip_prefix("version ")?.to_owned();
        Some((name, version))
    }

    /// Records that the signature `key` names verified, over a component
    /// that describes itself as `name` `version`.
    pub(crate) fn remember_verified(&self, key: &str, name: &str, version: &str) {
        let (Some(trusted), Some(record)) = (self.trusted(), self.verified_record(key)) else {
            return;
        };
        let body = format!("automaton gate signature 1\nkey {key}\nname {name}\nversion {version}\n");
        if name.contains('\n') || version.contains('\n') {
            return;
        }
        if let Err(e) = write_atomic(&record, trusted.key.seal(&body).as_bytes()) {
            tracing::debug!(path = %record.display(), error = %e, "could not record a verified signature");
        }
    }

    fn verified_record(&self, key: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join("verified").join(key.get(..32)?))
    }

    fn source_record(&self, path: &Path) -> Option<PathBuf> {
        let abs = std::path::absolute(path).ok()?;
        let name = sha256_hex(abs.as_os_str().as_encoded_bytes());
        Some(self.dir.as_ref()?.join("sources").join(&name[..32]))
    }

    /// The cached artefact for this component, when its seal matches:
    /// the file is opened once (no link followed), checked through that
    /// open file and read from it, so no file swapped in after the check
    /// is loaded.
    pub(crate) fn load(&self, engine: &Engine, label: &str, sha256: &str) -> Option<Component> {
        let trusted = self.trusted()?;
        let path = self.entry(sha256)?;
        let file = open_entry(&path)?;
        if let Err(why) = self.check_open_entry(trusted, &path, &file, sha256) {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(gate = label, "cached gate not used ({why}); compiling it again");
            return None;
        }
        // SAFETY: what is loaded is the file whose seal was checked, through
        // the open file that was checked: this runner wrote this very file
        // (same inode, size and times) with `Component::serialize`, from
        // the component with this sha256, in a directory only this user (or
        // root) can write. wasmtime also checks the header, its version and
        // the engine settings.
        match unsafe { deserialize_open(engine, &file) } {
            Ok(component) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(gate = label, path = %path.display(), "gate cache hit");
                Some(component)
            }
            Err(e) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    gate = label,
                    path = %path.display(),
                    error = %super::host::error_text(&e),
                    "cached gate unusable; compiling it again"
                );
                None
            }
        }
    }

    /// Whether an open entry is this user's and its seal names it.
    fn check_open_entry(
        &self,
        trusted: &Trusted,
        path: &Path,
        file: &std::fs::File,
        sha256: &str,
    ) -> Result<(), String> {
        let meta = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        check_private(path, &meta, Writers::default()).map_err(|e| e.to_string())?;
        let seal_path = path.with_extension("seal");
        let text =
            std::fs::read_to_string(&seal_path).map_err(|e| format!("{}: {e}", seal_path.display()))?;
        let body = trusted
            .key
            .open(&text)
            .ok_or_else(|| format!("{} was not made by this runner", seal_path.display()))?;
        if body != self.artefact_lines(sha256, &Fingerprint::of(&meta)) {
            return Err(format!(
                "{} is not the file this runner compiled from this component",
                path.display()
            ));
        }
        Ok(())
    }

    fn artefact_lines(&self, sha256: &str, file: &Fingerprint) -> String {
        format!(
            "automaton gate artefact 1\ncomponent {sha256}\nengine {}\nfile {file}\n",
            self.engine_key
        )
    }

    /// Compiles a component and caches it (when there is a trusted cache).
    pub(crate) fn compile(
        &self,
        engine: &Engine,
        label: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<Component, GateError> {
        let entry = self.trusted().and_then(|t| Some((t, self.entry(sha256)?)));
        let component = compile(engine, label, bytes, entry.is_some())?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        if let Some((trusted, path)) = entry
            && let Err(e) = self.store(trusted, &component, sha256, &path)
        {
            tracing::warn!(gate = label, path = %path.display(), error = %e, "could not cache the compiled gate");
        }
        Ok(component)
    }

    /// Writes the artefact (a temp file, then a rename), then its seal.
    fn store(
        &self,
        trusted: &Trusted,
        component: &Component,
        sha256: &str,
        path: &Path,
    ) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(super::host::error_text(&e)))?;
        write_atomic(path, &bytes)?;
        let file = Fingerprint::of(&std::fs::symlink_metadata(path)?);
        let seal = trusted.key.seal(&self.artefact_lines(sha256, &file));
        write_atomic(&path.with_extension("seal"), seal.as_bytes())
    }
}

fn source_lines(path: &Path, file: &Fingerprint, sha256: &str) -> String {
    format!("automaton gate source 1\npath {path:?}\nfile {file}\nsha256 {sha256}\n")
}

/// This user's cache directory under `base` (a root's `cache/`): its
/// `gates/`, or in a root shared by a group (`base` set-group-ID), its
/// `gates/<uid>/`: the members share the root, never native code.
fn own_dir(base: &Path) -> PathBuf {
    let gates = base.join("gates");
    match Modes::of_dir(base).shared() {
        true => gates.join(own_uid().to_string()),
        false => gates,
    }
}

#[cfg(unix)]
fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[cfg(not(unix))]
fn own_uid() -> u32 {
    0
}

/// Loads the component in the open file `file`: on Linux mapped from the
/// file itself, named through `/proc/self/fd` (the very file checked,
/// whatever was renamed over its path since); elsewhere read from it.
///
/// # Safety
/// As [`Component::deserialize_file`]: the file must hold what
/// `Component::serialize` wrote.
#[cfg(target_os = "linux")]
unsafe fn deserialize_open(engine: &Engine, file: &std::fs::File) -> wasmtime::Result<Component> {
    use std::os::fd::AsRawFd;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    // SAFETY: the caller's.
    unsafe { Component::deserialize_file(engine, path) }
}

/// See the Linux version.
///
/// # Safety
/// As [`Component::deserialize`].
#[cfg(not(target_os = "linux"))]
unsafe fn deserialize_open(engine: &Engine, mut file: &std::fs::File) -> wasmtime::Result<Component> {
    use std::io::Read;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    // SAFETY: the caller's.
    unsafe { Component::deserialize(engine, &bytes) }
}

/// Opens an entry for reading without following a link; `None` when
/// there is none.
fn open_entry(path: &Path) -> Option<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK);
    }
    options.open(path).ok()
}

/// Makes this user's cache directory `dir` (private) if needed, refuses it
/// when another user could write it, or its parents up to `base` (which,
/// in a group's root, the group's members may write), and loads the key.
fn open_dir(base: &Path, dir: &Path) -> Result<Trusted, Untrusted> {
    let shared = Writers::of(base);
    if shared == Writers::default() {
        create_private_dir(&dir.join("sources")).map_err(Untrusted::io(dir))?;
        create_private_dir(&dir.join("verified")).map_err(Untrusted::io(dir))?;
    } else {
        let gates = dir.parent().unwrap_or(dir);
        crate::fsx::create_dirs(gates).map_err(|e| Untrusted::Io {
            path: gates.to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
        create_private_dir(&dir.join("sources")).map_err(Untrusted::io(dir))?;
        create_private_dir(&dir.join("verified")).map_err(Untrusted::io(dir))?;
    }
    let mut between: Vec<&Path> = dir
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(base))
        .collect();
    between.reverse();
    let own = [dir.to_owned(), dir.join("sources"), dir.join("verified")];
    let checked = between
        .into_iter()
        .map(|d| (d, shared))
        .chain(own.iter().map(|d| (d.as_path(), Writers::default())));
    for (d, writers) in checked {
        let meta = std::fs::metadata(d).map_err(Untrusted::io(d))?;
        if !meta.is_dir() {
            return Err(Untrusted::Kind {
                path: d.to_owned(),
                expected: "directory",
            });
        }
        check_private(d, &meta, writers)?;
    }
    Ok(Trusted {
        key: Key::load_or_create(&dir.join("key"))?,
    })
}

/// Compiles a component, showing a progress line on a terminal when it takes
/// long (a Python or JavaScript gate takes seconds).
fn compile(engine: &Engine, label: &str, bytes: &[u8], cached: bool) -> Result<Component, GateError> {
    let started = Instant::now();
    let size = human_bytes(bytes.len() as u64);
    let later = if cached {
        "it is cached for later runs"
    } else {
        "it is not cached, so every run compiles it again"
    };
    tracing::info!(gate = label, "compiling gate ({size}); {later}");
    let (done, wait) = mpsc::channel::<()>();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            if wait.recv_timeout(PROGRESS_AFTER) == Err(mpsc::RecvTimeoutError::Timeout)
                && std::io::stderr().is_terminal()
                && tracing::enabled!(tracing::Level::WARN)
            {
                progress(label, &size, later, started, &wait);
            }
        });
        let result = Component::new(engine, bytes);
        drop(done);
        result
    });
    let component = result.map_err(|e| {
        GateError::new(
            label,
            GateErrorKind::Compile {
                message: super::host::error_text(&e),
            },
        )
    })?;
    tracing::info!(gate = label, elapsed = ?started.elapsed(), "gate compiled");
    Ok(component)
}

/// A line on the terminal counting the seconds until the compile ends.
fn progress(label: &str, size: &str, later: &str, started: Instant, wait: &mpsc::Receiver<()>) {
    let mut err = std::io::stderr();
    loop {
        let _ = write!(
            err,
            "\rcompiling gate {label} ({size}): {}s; {later}",
            started.elapsed().as_secs()
        );
        let _ = err.flush();
        if wait.recv_timeout(Duration::from_secs(1)) != Err(mpsc::RecvTimeoutError::Timeout) {
            let _ = writeln!(err);
            return;
        }
    }
}

/// Writes a file, private: a temp file in the same directory, then a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache files live in a directory");
    // tempfile makes it 0600; on Windows it is given its ACL.
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    crate::fsx::Modes::PRIVATE.set_file(tmp.as_file())?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Makes `dir` and the directories missing above it, private (0700; on
/// Windows each given its owner-only ACL).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(windows)]
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    #[cfg(windows)]
    for made in missing.into_iter().rev() {
        crate::os::make_private(made)?;
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_lower_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn entry_key_carries_hash_version_and_engine() {
        let engine = Engine::default();
        let c = Cache::new(Some(PathBuf::from("root/cache")), &engine);
        let p = c.entry("abc").unwrap();
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(p.starts_with("root/cache/gates"));
        assert!(name.starts_with("abc.wasmtime-48.0.8-"), "{name}");
        assert!(name.ends_with(".cwasm"));
        let mut other = wasmtime::Config::new();
        other.epoch_interruption(true);
        let c2 = Cache::new(None, &Engine::new(&other).unwrap());
        assert_ne!(c.engine_key, c2.engine_key, "engine settings change the key");
        assert!(c2.entry("abc").is_none());
    }
}
