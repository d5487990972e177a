//! Verifying a loaded gate's signatures against the trust file: each
//! signature judged (`trust`), then checked over the component's bytes
//! once per component and signature. A check that passed is remembered in
//! this process and, sealed, in the compiled-gate cache, with what the
//! gate said it is: a gate verified before is verified again without
//! reading or hashing its component, or asking its `describe`.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

use super::{Gate, GateHost};
use crate::domain::GateSource;
use crate::gate::cache::sha256_hex;
use crate::gate::error::{GateError, GateErrorKind};
use crate::gate::trust::{self, Policy, Refusal, Refused, Signed, Trust, Why};

impl GateHost {
    /// Whether `gate`, loaded from `source`, may run under `policy`: its
    /// signatures, `policy.signers` distinct trusted keys at least, each
    /// valid now and verified over the component. `None` for a stock gate
    /// (part of the binary, trusted as it is) and when no signature is
    /// required.
    pub fn verify(
        &self,
        gate: &Gate,
        source: &GateSource,
        policy: &Policy,
    ) -> Result<Option<Signed>, GateError> {
        let GateSource::File { path, .. } = source else {
            return Ok(None);
        };
        if !policy.required {
            return Ok(None);
        }
        let refuse = |refusal: Refusal| GateError::new(gate.label(), GateErrorKind::Untrusted { refusal });
        let trust = Trust::read(policy).map_err(refuse)?;
        let sig_path = trust::signature_path(path);
        let signatures = trust::read_signatures(&sig_path).map_err(refuse)?;
        let now = crate::clock::now();
        let (mut valid, mut refused, mut keys) = (Vec::new(), Vec::new(), HashSet::new());
        let mut said = None;
        let mut bytes = None;
        for s in &signatures {
            let signer = match trust.judge(&s.sig, now) {
                Ok(signer) => signer,
                Err(r) => {
                    refused.push(r);
                    continue;
                }
            };
            let key = verified_key(gate.sha256(), &s.pem);
            let known = self.known_verified(&key);
            let known = match known {
                Some(k) => Some(k),
                None => {
                    let component = match &bytes {
                        Some(b) => b,
                        None => bytes.insert(read_component(gate, path)?),
                    };
                    match trust::verifies(&s.sig, component) {
                        true => None,
                        false => {
                            refused.push(Refused {
                                signer: signer.principals,
                                why: Why::Tampered,
                            });
                            continue;
                        }
                    }
                }
            };
            if !keys.insert(s.sig.public_key().clone()) {
                refused.push(Refused {
                    signer: signer.principals,
                    why: Why::Again,
                });
                continue;
            }
            let (name, version) = match known {
                Some(k) => k,
                None => {
                    let info = self.describe(gate)?;
                    self.remember_verified(&key, &info.name, &info.version);
                    (info.name, info.version)
                }
            };
            said = Some((name, version));
            valid.push(signer.principals);
        }
        let needed = policy.signers.max(1);
        match said {
            Some((name, version)) if valid.len() >= needed as usize => Ok(Some(Signed {
                name,
                version,
                signers: valid,
            })),
            _ => Err(refuse(Refusal::Signers {
                needed,
                valid,
                refused,
            })),
        }
    }

    /// The name and version a verified signature's component said, when
    /// this process or the cache remembers verifying it.
    fn known_verified(&self, key: &str) -> Option<(String, String)> {
        if let Some(known) = self.lock_verified().get(key) {
            return Some(known.clone());
        }
        let known = self.cache.known_verified(key)?;
        self.lock_verified().insert(key.to_owned(), known.clone());
        Some(known)
    }

    fn remember_verified(&self, key: &str, name: &str, version: &str) {
        self.cache.remember_verified(key, name, version);
        self.lock_verified()
            .insert(key.to_owned(), (name.to_owned(), version.to_owned()));
    }

    fn lock_verified(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (String, String)>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What names one verification: the component's sha256 and the
/// signature's text.
fn verified_key(sha256: &str, pem: &str) -> String {
    let mut h = Sha256::new();
    h.update(sha256.as_bytes());
    h.update(b"\n");
    h.update(pem.as_bytes());
    format!("{:x}", h.finalize())
}

/// The component's bytes, checked to be the content that was loaded.
fn read_component(gate: &Gate, path: &std::path::Path) -> Result<Vec<u8>, GateError> {
    let changed = |message: String| {
        GateError::new(
            gate.label(),
            GateErrorKind::Io {
                path: path.to_owned(),
                message,
            },
        )
    };
    let bytes = std::fs::read(path).map_err(|e| changed(e.to_string()))?;
    if sha256_hex(&bytes) != gate.sha256() {
        return Err(changed(
            "it changed while it was being loaded; try again".to_owned(),
        ));
    }
    Ok(bytes)
}
