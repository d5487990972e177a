//! Loading a gate: reading and identifying its component (sha256,
//! remembered by file fingerprint), checking its pin, loading it from the
//! cache or compiling it, and pre-instantiating it against the `gate`
//! world. Loaded components are memoised by content.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use wasmtime::component::Component;

use super::{Compiled, GATE_WIT_VERSION, GATE_WIT_VERSIONS, Gate, GateHost, GateMeta, error_text};
use crate::domain::GateSource;
use crate::gate::cache::sha256_hex;
use crate::gate::error::{GateError, GateErrorKind};
use crate::gate::seal::Fingerprint;
use crate::gate::stock;
use crate::gate::world::Pre;
use crate::gate::world_diff;

/// A component file identified: its sha256, and its bytes when they were
/// read to get it.
struct Found {
    sha256: String,
    size: u64,
    bytes: Option<Arc<[u8]>>,
}

impl GateHost {
    /// Loads a gate: finds the component's sha256 (hashing the file only
    /// when its fingerprint is new), checks the sha256 pin, then loads it
    /// from the cache or compiles it, and checks it targets the `gate`
    /// world. Loaded components are memoised by content and files by
    /// fingerprint, so loading an unchanged gate again in a process costs a
    /// `stat`.
    pub fn load(&self, source: &GateSource) -> Result<Gate, GateError> {
        let label = source.to_string();
        let found = match source {
            GateSource::Stock(name) => match stock::find(name) {
                // Its bytes are inflated only if it is compiled.
                Some(g) => Found {
                    sha256: g.sha256(),
                    size: g.size(),
                    bytes: None,
                },
                None => {
                    return Err(GateError::new(
                        &label,
                        GateErrorKind::UnknownStock { name: name.clone() },
                    ));
                }
            },
            GateSource::File { path, .. } => self.identify(&label, path)?,
        };
        if let GateSource::File {
            sha256: Some(pin), ..
        } = source
            && !pin.trim().eq_ignore_ascii_case(&found.sha256)
        {
            return Err(GateError::new(
                &label,
                GateErrorKind::HashMismatch {
                    expected: pin.trim().to_ascii_lowercase(),
                    actual: found.sha256,
                },
            ));
        }
        let compiled = self.compiled(&label, source, &found)?;
        Ok(Gate {
            meta: Arc::new(GateMeta {
                label,
                sha256: found.sha256,
                size: found.size,
            }),
            compiled,
        })
    }

    /// The sha256 of a component file: remembered in this process or in
    /// the cache while the file's fingerprint is unchanged, else read and
    /// hashed (and the bytes kept for the compile that likely follows).
    fn identify(&self, label: &str, path: &Path) -> Result<Found, GateError> {
        let meta = std::fs::metadata(path).map_err(|e| io_error(label, path, e))?;
        if !meta.is_file() {
            return Err(io_error(label, path, std::io::Error::other("not a regular file")));
        }
        let file = Fingerprint::of(&meta);
        let seen = self
            .lock_seen()
            .get(path)
            .filter(|(f, _)| *f == file)
            .map(|(_, s)| s.clone());
        if let Some(sha256) = seen.or_else(|| self.cache.known_sha256(path, &file)) {
            self.replaced(path, &sha256);
            self.remember(path, file, &sha256);
            return Ok(Found {
                sha256,
                size: meta.len(),
                bytes: None,
            });
        }
        let bytes = std::fs::read(path).map_err(|e| io_error(label, path, e))?;
        let sha256 = sha256_hex(&bytes);
        self.replaced(path, &sha256);
        // Only a file that did not change while it was read is remembered.
        if std::fs::metadata(path).is_ok_and(|m| Fingerprint::of(&m) == file) {
            self.cache.remember_sha256(path, &file, &sha256);
            self.remember(path, file, &sha256);
        }
        Ok(Found {
            sha256,
            size: bytes.len() as u64,
            bytes: Some(bytes.into()),
        })
    }

    /// Notes what a gate file holds now; when it held other content
    /// before, that content's spare instances go (another path that still
    /// holds it makes its own again at its next call).
    fn replaced(&self, path: &Path, sha256: &str) {
        let Some(spares) = &self.spares else { return };
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.get_mut(path) {
            Some(old) if old == sha256 => {}
            Some(old) => spares.forget(&std::mem::replace(old, sha256.to_owned())),
            None => {
                held.insert(path.to_owned(), sha256.to_owned());
            }
        }
    }

    fn remember(&self, path: &Path, file: Fingerprint, sha256: &str) {
        if file.settled(std::time::SystemTime::now()) {
            self.lock_seen()
                .insert(path.to_owned(), (file, sha256.to_owned()));
        }
    }

    fn compiled(&self, label: &str, source: &GateSource, found: &Found) -> Result<Arc<Compiled>, GateError> {
        if let Some(c) = self.lock_loaded().get(&found.sha256) {
            return Ok(c.clone());
        }
        let component = if let Some(c) = self.cache.load(&self.engine, label, &found.sha256) {
            c
        } else {
            let bytes = match (&found.bytes, source) {
                (Some(b), _) => b.clone(),
                (None, GateSource::File { path, .. }) => reread(label, path, &found.sha256)?.into(),
                (None, GateSource::Stock(name)) => match stock::find(name) {
                    Some(g) => g.component().into(),
                    None => unreachable!("a stock gate found once is found again"),
                },
            };
            check_is_component(label, &bytes)?;
            self.cache.compile(&self.engine, label, &found.sha256, &bytes)?
        };
        let named = self.names_version(&component);
        let offered = named.as_deref().filter(|v| GATE_WIT_VERSIONS.contains(v));
        let wrong_world = |e: wasmtime::Error| {
            let world = offered.unwrap_or(GATE_WIT_VERSION);
            // Which record and field differ, when the gate names a version
            // this host offers (else it is another version altogether).
            let differs = named
                .as_deref()
                .filter(|_| offered.is_some())
                .and_then(|_| world_diff::explain(&self.engine, &component, world));
            GateError::new(
                label,
                GateErrorKind::WrongWorld {
                    detail: match differs {
                        Some(d) => format!("{d} ({})", error_text(&e)),
                        None => error_text(&e),
                    },
                    built_against: named.clone().filter(|_| offered.is_none()),
                    world: world.to_owned(),
                },
            )
        };
        let instance_pre = self.linker.instantiate_pre(&component).map_err(wrong_world)?;
        let pre = Pre::new(instance_pre, named.as_deref()).map_err(wrong_world)?;
        let compiled = Arc::new(Compiled {
            component,
            pre,
            info: OnceLock::new(),
        });
        self.lock_loaded().insert(found.sha256.clone(), compiled.clone());
        Ok(compiled)
    }

    fn lock_seen(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (Fingerprint, String)>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Compiled>>> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `automaton:gate` version a component's imports and exports name
    /// (`automaton:gate/types@0.1.0`), if any.
    fn names_version(&self, component: &Component) -> Option<String> {
        let ty = component.component_type();
        let names: Vec<String> = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .chain(ty.exports(&self.engine).map(|(n, _)| n.to_owned()))
            .collect();
        names.iter().find_map(|n| {
            let version = n.strip_prefix("automaton:gate/")?.split_once('@')?.1;
            Some(version.to_owned())
        })
    }
}

fn io_error(label: &str, path: &Path, e: std::io::Error) -> GateError {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => GateErrorKind::MissingFile {
            path: path.to_owned(),
            near: crate::suggest::near_file(path),
        },
        _ => GateErrorKind::Io {
            path: path.to_owned(),
            message: e.to_string(),
        },
    };
    GateError::new(label, kind)
}

/// Reads a component file again for a compile, and makes sure it is still
/// the content whose sha256 was checked.
fn reread(label: &str, path: &Path, sha256: &str) -> Result<Vec<u8>, GateError> {
    let bytes = std::fs::read(path).map_err(|e| io_error(label, path, e))?;
    let actual = sha256_hex(&bytes);
    if actual != sha256 {
        return Err(GateError::new(
            label,
            GateErrorKind::Io {
                path: path.to_owned(),
                message: "it changed while it was being loaded; try again".to_owned(),
            },
        ));
    }
    Ok(bytes)
}

/// Refuses what is not a component before handing it to the compiler, so
/// the error says what the file is.
fn check_is_component(label: &str, bytes: &[u8]) -> Result<(), GateError> {
    // The preamble: magic, then a u16 version and a u16 layer (0: a core
    // module, 1: a component).
    let detail = match bytes.get(..8) {
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => return Ok(()),
        Some([0, b'a', b's', b'm', _, _, 0, 0]) => {
            "it is a core WebAssembly module; build it as a component (wasm32-wasip2, or wrap it with `wasm-tools component new`)"
        }
        Some([0, b'a', b's', b'm', ..]) => "unknown WebAssembly layer",
        _ => "the file does not start with the WebAssembly magic number",
    };
    Err(GateError::new(
        label,
        GateErrorKind::NotAComponent {
            detail: detail.to_owned(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_components_are_named_for_what_they_are() {
        let core = b"\0asm\x01\0\0\0";
        for (bytes, is_err) in [
            (&b"hello"[..], true),
            (&core[..], true),
            (&b"\0asm\x0d\0\x01\0"[..], false),
        ] {
            let r = check_is_component("x", bytes);
            assert_eq!(r.is_err(), is_err, "{bytes:?}");
            if let Err(e) = r {
                assert!(matches!(e.kind(), GateErrorKind::NotAComponent { .. }));
            }
        }
    }
}
