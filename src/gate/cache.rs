//! The compiled-gate cache: precompiled components under `<root>/cache/gates/`,
//! keyed by the component's sha256, the wasmtime version and a fingerprint of
//! the engine's settings. Entries are written atomically; an entry that does
//! not load (corrupt, stale, from another engine) is compiled again and
//! replaced. Nothing here is ever fatal: without a cache a gate is compiled.

use std::hash::{Hash, Hasher};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::{GateError, GateErrorKind, human_bytes};

/// The wasmtime release gates are compiled with; pinned in Cargo.toml.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// How long a compile runs before a progress line is shown on a terminal.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Counts of what the cache did, for tests and `gate compile`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from a cached artefact.
    pub hits: u64,
    /// Components compiled (no usable cached artefact).
    pub compiled: u64,
    /// Cached artefacts that did not load and were replaced.
    pub rejected: u64,
}

pub(crate) struct Cache {
    dir: Option<PathBuf>,
    engine_key: String,
    hits: AtomicU64,
    compiled: AtomicU64,
    rejected: AtomicU64,
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
            dir: dir.map(|d| d.join("gates")),
            engine_key: format!("wasmtime-{WASMTIME_VERSION}-{}", &fingerprint[..16]),
            hits: AtomicU64::new(0),
            compiled: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// The directory entries are written to, if any.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
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

    /// The compiled component: from the cache when a usable entry exists,
    /// else compiled (and cached).
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        label: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<Component, GateError> {
        let entry = self.entry(sha256);
        if let Some(path) = entry.as_deref().filter(|p| p.is_file()) {
            // SAFETY: entries are written only by `store` below, from
            // `Component::serialize` of this engine configuration, atomically,
            // into the loop root's private cache directory. wasmtime checks
            // the header, its version and the engine settings on load; an
            // entry failing those checks is replaced.
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(component) => {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(gate = label, path = %path.display(), "gate cache hit");
                    return Ok(component);
                }
                Err(e) => {
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        gate = label,
                        path = %path.display(),
                        error = %super::host::error_text(&e),
                        "cached gate unusable; compiling it again"
                    );
                }
            }
        }
        let component = compile(engine, label, bytes)?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = entry
            && let Err(e) = store(&component, &path)
        {
            tracing::warn!(gate = label, path = %path.display(), error = %e, "could not cache the compiled gate");
        }
        Ok(component)
    }
}

/// Compiles a component, showing a progress line on a terminal when it takes
/// long (a Python or JavaScript gate takes seconds).
fn compile(engine: &Engine, label: &str, bytes: &[u8]) -> Result<Component, GateError> {
    let started = Instant::now();
    let (done, wait) = mpsc::channel::<()>();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            if wait.recv_timeout(PROGRESS_AFTER) == Err(mpsc::RecvTimeoutError::Timeout)
                && std::io::stderr().is_terminal()
            {
                eprintln!(
                    "compiling gate {label} ({}); it is cached for later runs",
                    human_bytes(bytes.len() as u64)
                );
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
    tracing::debug!(gate = label, elapsed = ?started.elapsed(), "gate compiled");
    Ok(component)
}

/// Writes the artefact: a temp file in the same directory, then a rename.
fn store(component: &Component, path: &Path) -> std::io::Result<()> {
    let dir = path.parent().expect("cache entries live in a directory");
    create_private_dir(dir)?;
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(super::host::error_text(&e)))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .suffix(".cwasm")
        .tempfile_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
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
