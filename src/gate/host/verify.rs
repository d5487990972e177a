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
use crate::gate::trust::{self, Policy, Refusal, Refused, Signature, Signed, Signer, Trust, Why};

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
        let (mut said, mut bytes) = (None, None);
        for s in &signatures {
            let checked = match trust.judge(&s.sig, now) {
                Ok(signer) => self.check_signature(gate, path, s, signer, &mut bytes)?,
                Err(r) => Err(r),
            };
            match checked {
                Err(r) => refused.push(r),
                Ok(signer) if !keys.insert(s.sig.public_key().clone()) => refused.push(Refused {
                    signer: signer.principals,
                    why: Why::Again,
                }),
                Ok(signer) => {
                    said = Some(self.what_it_is(gate, &verified_key(gate.sha256(), &s.pem))?);
                    valid.push(signer.principals);
                }
            }
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

    /// Whether one signature verifies over the component: remembered, or
    /// checked over its bytes (read once for all signatures, into `bytes`).
    /// The outer error is the component's, unreadable; the inner, the
    /// signature's.
    fn check_signature(
        &self,
        gate: &Gate,
        path: &std::path::Path,
        s: &Signature,
        signer: Signer,
        bytes: &mut Option<Vec<u8>>,
    ) -> Result<Result<Signer, Refused>, GateError> {
        if self
            .known_verified(&verified_key(gate.sha256(), &s.pem))
            .is_some()
        {
            return Ok(Ok(signer));
        }
        let component = match bytes {
            Some(b) => b,
            None => bytes.insert(read_component(gate, path)?),
        };
        if !trust::verifies(&s.sig, component) {
            return Ok(Err(Refused {
                signer: signer.principals,
                why: Why::Tampered,
            }));
        }
        let info = self.describe(gate)?;
        self.remember_verified(&verified_key(gate.sha256(), &s.pem), &info.name, &info.version);
        Ok(Ok(signer))
    }

    /// The name and version of a gate whose signature `key` verified.
    fn what_it_is(&self, gate: &Gate, key: &str) -> Result<(String, String), GateError> {
        match self.known_verified(key) {
            Some(known) => Ok(known),
            None => self.describe(gate).map(|i| (i.name, i.version)),
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
        self.verified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
