//! Who may sign a gate, and whether a gate's signatures say it may run:
//! the root's trust file in OpenSSH's `allowed_signers` format (principals,
//! `namespaces=`, `valid-after=`, `valid-before=`; ssh-keygen(1), "ALLOWED
//! SIGNERS"), the revoked keys beside it (one public key a line, as
//! `ssh-keygen -Y verify -r` reads them), and the detached SSHSIG
//! signatures `ssh-keygen -Y sign -n automaton-gate` writes beside a
//! component. This file reads them and judges each signature but the
//! cryptography, which the host checks once per component and signature
//! (`host/verify.rs`), and the rollback floor. Stock gates are part of the
//! binary and are never asked for a signature.

use std::fmt;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use ssh_key::public::KeyData;
use ssh_key::{HashAlg, PublicKey, SshSig};

/// The namespace a gate's signature must be made in (`-n`).
pub(crate) const NAMESPACE: &str = "automaton-gate";

/// The signatures file beside a component: `gate.wasm.sig`.
pub(crate) fn signature_path(component: &Path) -> PathBuf {
    let mut name = component.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// What the root's automaton.toml and the loop's loop.toml require of the
/// gates a loop loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Every component gate must carry enough valid signatures.
    pub required: bool,
    /// How many distinct trusted keys must have signed it (k of the n
    /// the trust file lists).
    pub signers: u32,
    /// The trust file, in the `allowed_signers` format.
    pub allowed_signers: PathBuf,
    /// Revoked public keys, one a line; none when unset.
    pub revoked_keys: Option<PathBuf>,
}

/// A gate whose signatures passed: what it says it is, and who signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The gate's name and version, as its `describe` says them.
    pub name: String,
    pub version: String,
    /// The principals of each valid signer.
    pub signers: Vec<String>,
}

/// Why a gate is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The trust file (or the revoked keys) cannot be read or has a bad
    /// line: no gate can be trusted until it is fixed.
    Trust { path: PathBuf, message: String },
    /// No signature beside the component.
    Unsigned { sig: PathBuf },
    /// The signatures file holds no signature that reads as one.
    Unreadable { sig: PathBuf, message: String },
    /// Fewer valid signers than required: who signed validly, and why each
    /// other signature does not count.
    Signers {
        needed: u32,
        valid: Vec<String>,
        refused: Vec<Refused>,
    },
    /// A validly signed build older than the highest this loop has run.
    RolledBack {
        name: String,
        version: String,
        highest: String,
    },
    /// A signed gate whose version cannot be ordered, so a rollback cannot
    /// be told from an upgrade.
    Unordered { name: String, version: String },
}

/// One signature that does not count, and its signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The principals of the trust file's line for the key, else the key's
    /// fingerprint.
    pub signer: String,
    pub why: Why,
}

/// Why a signature does not count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Made in another namespace than `automaton-gate`.
    Namespace(String),
    /// Its key is on no line of the trust file.
    Unknown,
    /// Its key's lines allow other namespaces only.
    NotAllowed(String),
    /// Its key's `valid-before` has passed.
    Expired(Timestamp),
    /// Its key's `valid-after` is still to come.
    NotYetValid(Timestamp),
    /// Its key is revoked.
    Revoked,
    /// Its key is of a type not verified here (only Ed25519 is).
    KeyType(String),
    /// It does not verify over this component: the component (or the
    /// signature) changed since it was signed.
    Tampered,
    /// A second signature by a key that already signed.
    Again,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Namespace(ns) => write!(
                f,
                "the signature is made for namespace {ns:?}, not {NAMESPACE:?} (sign with `-n {NAMESPACE}`)"
            ),
            Why::Unknown => write!(f, "the key is not in the trust file"),
            Why::NotAllowed(ns) => write!(
                f,
                "the trust file allows the key for namespaces={ns:?} only, not {NAMESPACE:?}"
            ),
            Why::Expired(at) => write!(f, "the key expired (valid-before {at})"),
            Why::NotYetValid(at) => write!(f, "the key is not valid yet (valid-after {at})"),
            Why::Revoked => write!(f, "the key is revoked"),
            Why::KeyType(t) => write!(f, "the key is {t}; only ssh-ed25519 keys sign gates"),
            Why::Tampered => write!(
                f,
                "the signature does not match the component: it changed since it was signed"
            ),
            Why::Again => write!(f, "the key signed more than once; it counts once"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Trust { path, message } => {
                write!(f, "the trust file {} cannot be used: {message}", path.display())
            }
            Refusal::Unsigned { sig } => write!(
                f,
                "it is not signed: no {} (sign it with `ssh-keygen -Y sign -n {NAMESPACE} -f KEY FILE`)",
                sig.display()
            ),
            Refusal::Unreadable { sig, message } => write!(f, "{}: {message}", sig.display()),
            Refusal::Signers {
                needed,
                valid,
                refused,
            } => {
                if *needed > 1 || !valid.is_empty() {
                    let by = match valid.is_empty() {
                        true => String::new(),
                        false => format!(" ({})", valid.join(", ")),
                    };
                    write!(f, "it needs {needed} signers and has {} valid{by}", valid.len())?;
                    if !refused.is_empty() {
                        f.write_str("; ")?;
                    }
                }
                let said: Vec<String> = refused
                    .iter()
                    .map(|r| format!("signed by {}: {}", r.signer, r.why))
                    .collect();
                f.write_str(&said.join("; "))
            }
            Refusal::RolledBack {
                name,
                version,
                highest,
            } => write!(
                f,
                "{name} {version} is older than {name} {highest}, which this loop ran before: a rollback is refused unless an operator allows it (`automaton gate allow-rollback LOOP {name} {version}`)"
            ),
            Refusal::Unordered { name, version } => write!(
                f,
                "{name}'s version {version:?} is not a semantic version (MAJOR.MINOR.PATCH), so a rollback cannot be told from an upgrade"
            ),
        }
    }
}

/// The trust file and the revoked keys, read.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    lines: Vec<Allowed>,
    revoked: Vec<KeyData>,
}

/// One line of the trust file.
#[derive(Debug)]
struct Allowed {
    principals: String,
    namespaces: Option<String>,
    valid_after: Option<Timestamp>,
    valid_before: Option<Timestamp>,
    key: KeyData,
}

/// One signature read from a `.sig` file: its text (what the host's record
/// of a verification names) and what it says.
pub(crate) struct Signature {
    pub(crate) pem: String,
    pub(crate) sig: SshSig,
}

/// A signature's signer, when it passed every check but the cryptography.
pub(crate) struct Signer {
    pub(crate) principals: String,
}

impl Trust {
    /// Reads the policy's trust file and revoked keys.
    pub(crate) fn read(policy: &Policy) -> Result<Trust, Refusal> {
        let text = read_text(&policy.allowed_signers)?;
        let lines = parse_allowed(&text).map_err(|message| Refusal::Trust {
            path: policy.allowed_signers.clone(),
            message,
        })?;
        let revoked = match &policy.revoked_keys {
            None => Vec::new(),
            Some(path) => parse_revoked(&read_text(path)?).map_err(|message| Refusal::Trust {
                path: path.clone(),
                message,
            })?,
        };
        Ok(Trust { lines, revoked })
    }

    /// Whether a signature counts, the cryptography aside: its namespace,
    /// its key in the trust file for this namespace, not revoked, valid
    /// `now`.
    pub(crate) fn judge(&self, sig: &SshSig, now: Timestamp) -> Result<Signer, Refused> {
        let key = sig.public_key();
        let mine: Vec<&Allowed> = self.lines.iter().filter(|l| &l.key == key).collect();
        let signer = match mine.first() {
            Some(line) => line.principals.clone(),
            None => fingerprint(key),
        };
        let refuse = |why| Refused {
            signer: signer.clone(),
            why,
        };
        if sig.namespace() != NAMESPACE {
            return Err(refuse(Why::Namespace(sig.namespace().to_owned())));
        }
        if mine.is_empty() {
            return Err(refuse(Why::Unknown));
        }
        if self.revoked.contains(key) {
            return Err(refuse(Why::Revoked));
        }
        if key.algorithm() != ssh_key::Algorithm::Ed25519 {
            return Err(refuse(Why::KeyType(key.algorithm().to_string())));
        }
        let allowed: Vec<&&Allowed> = mine
            .iter()
            .filter(|l| l.namespaces.as_deref().is_none_or(|n| matches_list(n, NAMESPACE)))
            .collect();
        if allowed.is_empty() {
            let ns = mine[0].namespaces.clone().unwrap_or_default();
            return Err(refuse(Why::NotAllowed(ns)));
        }
        // Any line of the key that is valid now makes it valid.
        let mut why = None;
        for line in &allowed {
            match (line.valid_after, line.valid_before) {
                (Some(after), _) if now < after => why = Some(Why::NotYetValid(after)),
                (_, Some(before)) if now > before => why = Some(Why::Expired(before)),
                _ => {
                    return Ok(Signer {
                        principals: line.principals.clone(),
                    });
                }
            }
        }
        Err(refuse(why.unwrap_or(Why::Unknown)))
    }
}

/// The key's SHA256 fingerprint, as `ssh-keygen -l` shows it.
pub(crate) fn fingerprint(key: &KeyData) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Whether a signature verifies over the component's bytes.
pub(crate) fn verifies(sig: &SshSig, bytes: &[u8]) -> bool {
    PublicKey::from(sig.public_key().clone())
        .verify(NAMESPACE, bytes, sig)
        .is_ok()
}

/// The signatures in a `.sig` file: one `-----BEGIN SSH SIGNATURE-----`
/// block each (several signers' files put one after the other).
pub(crate) fn read_signatures(sig_path: &Path) -> Result<Vec<Signature>, Refusal> {
    let text = match crate::fsx::read_regular(sig_path, MAX_FILE) {
        Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(None) => {
            return Err(Refusal::Unsigned {
                sig: sig_path.to_owned(),
            });
        }
        Err(e) => {
            return Err(Refusal::Unreadable {
                sig: sig_path.to_owned(),
                message: e.to_string(),
            });
        }
    };
    let unreadable = |message: String| Refusal::Unreadable {
        sig: sig_path.to_owned(),
        message,
    };
    let mut out = Vec::new();
    let end = "-----END SSH SIGNATURE-----";
    let mut rest = text.as_str();
    while let Some(start) = rest.find("-----BEGIN SSH SIGNATURE-----") {
        let block = &rest[start..];
        let len = block
            .find(end)
            .ok_or_else(|| unreadable("a signature block has no END line".to_owned()))?
            + end.len();
        let pem = format!("{}\n", &block[..len]);
        let sig = SshSig::from_pem(&pem).map_err(|e| {
            unreadable(format!(
                "signature {} is not an SSH signature ({e})",
                out.len() + 1
            ))
        })?;
        out.push(Signature { pem, sig });
        rest = &block[len..];
    }
    if out.is_empty() {
        return Err(unreadable(
            "it holds no `-----BEGIN SSH SIGNATURE-----` block".to_owned(),
        ));
    }
    Ok(out)
}

/// The rollback floor: a signed build may run when its version is at
/// least `highest`, the highest this loop ran (or an operator allowed).
pub(crate) fn check_floor(signed: &Signed, highest: Option<&str>) -> Result<(), Refusal> {
    let unordered = || Refusal::Unordered {
        name: signed.name.clone(),
        version: signed.version.clone(),
    };
    let version = semver::Version::parse(&signed.version).map_err(|_| unordered())?;
    let Some(highest) = highest else { return Ok(()) };
    match semver::Version::parse(highest) {
        Ok(h) if version < h => Err(Refusal::RolledBack {
            name: signed.name.clone(),
            version: signed.version.clone(),
            highest: highest.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Whether `version` is above `highest` (or there is none), so it becomes
/// the new floor.
pub(crate) fn raises(version: &str, highest: Option<&str>) -> bool {
    let Ok(v) = semver::Version::parse(version) else {
        return false;
    };
    highest.is_none_or(|h| semver::Version::parse(h).is_ok_and(|h| v > h))
}

/// The largest trust file or signatures file read.
const MAX_FILE: u64 = 1 << 20;

fn read_text(path: &Path) -> Result<String, Refusal> {
    let refuse = |message: String| Refusal::Trust {
        path: path.to_owned(),
        message,
    };
    match crate::fsx::read_regular(path, MAX_FILE) {
        Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| refuse("it is not UTF-8 text".to_owned())),
        Ok(None) => Err(refuse("it does not exist".to_owned())),
        Err(e) => Err(refuse(e.to_string())),
    }
}

/// The lines of an `allowed_signers` file.
fn parse_allowed(text: &str) -> Result<Vec<Allowed>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Allowed, String> {
    let (principals, rest) = field(line)?;
    let principals = principals.trim_matches('"').to_owned();
    let rest = rest.trim_start();
    let (options, key_text) = if is_key_type(rest) {
        ("", rest)
    } else {
        let (options, key) = field(rest)?;
        (options, key.trim_start())
    };
    let kind = key_text.split_whitespace().next().unwrap_or_default();
    if kind != "ssh-ed25519" {
        return Err(format!(
            "a {kind} key: only ssh-ed25519 keys sign gates (`ssh-keygen -t ed25519`)"
        ));
    }
    let key = PublicKey::from_openssh(key_text)
        .map_err(|e| format!("no public key that reads as one ({e})"))?
        .key_data()
        .clone();
    let mut allowed = Allowed {
        principals,
        namespaces: None,
        valid_after: None,
        valid_before: None,
        key,
    };
    for option in split_options(options) {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        let value = value.trim_matches('"');
        match name.to_ascii_lowercase().as_str() {
            "namespaces" => allowed.namespaces = Some(value.to_owned()),
            "valid-after" => allowed.valid_after = Some(timestamp(value)?),
            "valid-before" => allowed.valid_before = Some(timestamp(value)?),
            "cert-authority" => {
                return Err("cert-authority keys are not supported: list each signer's own key".to_owned());
            }
            _ => return Err(format!("unknown option {name:?}")),
        }
    }
    Ok(allowed)
}

/// The first space-separated field (quotes keep spaces) and the rest.
fn field(text: &str) -> Result<(&str, &str), String> {
    let mut quoted = false;
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return Ok((&text[..i], &text[i..])),
            _ => {}
        }
    }
    Err("a line needs principals, options if any, then a public key".to_owned())
}

/// Options separated by commas outside quotes.
fn split_options(options: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in options.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&options[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < options.len() {
        out.push(&options[start..]);
    }
    out
}

fn is_key_type(text: &str) -> bool {
    ["ssh-", "ecdsa-", "sk-"].iter().any(|p| text.starts_with(p))
}

/// `YYYYMMDD[Z]` or `YYYYMMDDHHMM[SS][Z]`: the system's time zone unless
/// it ends in `Z` (UTC), as ssh-keygen reads them.
fn timestamp(value: &str) -> Result<Timestamp, String> {
    let bad = || format!("{value:?} is not a time as YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z]");
    let (digits, utc) = match value.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (value, false),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| digits.get(r).and_then(|s| s.parse::<i8>().ok());
    let (hour, minute, second) = match digits.len() {
        8 => (0, 0, 0),
        12 => (num(8..10).ok_or_else(bad)?, num(10..12).ok_or_else(bad)?, 0),
        14 => (
            num(8..10).ok_or_else(bad)?,
            num(10..12).ok_or_else(bad)?,
            num(12..14).ok_or_else(bad)?,
        ),
        _ => return Err(bad()),
    };
    let year: i16 = digits[..4].parse().map_err(|_| bad())?;
    let date = jiff::civil::Date::new(year, num(4..6).ok_or_else(bad)?, num(6..8).ok_or_else(bad)?)
        .map_err(|_| bad())?;
    let time = jiff::civil::Time::new(hour, minute, second, 0).map_err(|_| bad())?;
    let zone = match utc {
        true => jiff::tz::TimeZone::UTC,
        false => jiff::tz::TimeZone::system(),
    };
    date.to_datetime(time)
        .to_zoned_datetime(zone)
        .map(|z| z.timestamp())
        .map_err(|_| bad())
}

/// Revoked keys: one public key a line (blank lines and `#` comments
/// skipped). A binary KRL is refused, saying so.
fn parse_revoked(text: &str) -> Result<Vec<KeyData>, String> {
    if text.starts_with("SSHKRL") {
        return Err("a KRL is not read here: list the revoked public keys, one a line".to_owned());
    }
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key =
            PublicKey::from_openssh(line).map_err(|e| format!("line {}: not a public key ({e})", i + 1))?;
        out.push(key.key_data().clone());
    }
    Ok(out)
}

/// An OpenSSH pattern-list (ssh_config(5), "PATTERNS"): `*` and `?`
/// wildcards, `!` negates; matches when some pattern does and no negated
/// one does.
fn matches_list(list: &str, name: &str) -> bool {
    let mut matched = false;
    for pattern in list.split(',').map(str::trim) {
        match pattern.strip_prefix('!') {
            Some(negated) if wildcard(negated.as_bytes(), name.as_bytes()) => return false,
            Some(_) => {}
            None => matched |= wildcard(pattern.as_bytes(), name.as_bytes()),
        }
    }
    matched
}

fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            wildcard(&pattern[1..], text) || (!text.is_empty() && wildcard(pattern, &text[1..]))
        }
        (Some(b'?'), Some(_)) => wildcard(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p == t => wildcard(&pattern[1..], &text[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMen5edu0+4equnNvW6G77XznKRnw68jWC/KiV2cXIUd";

    #[test]
    fn reads_the_lines_ssh_keygen_reads() {
        let text = format!(
            "# comment\n\nalice@example.com {KEY}\n\"bob@x,carol@x\" namespaces=\"automaton-gate,file\",valid-after=20260101,valid-before=\"20270101120000Z\" {KEY} bob\n"
        );
        let lines = parse_allowed(&text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].principals, "bob@x,carol@x");
        assert_eq!(lines[1].namespaces.as_deref(), Some("automaton-gate,file"));
        assert_eq!(
            lines[1].valid_before,
            Some("2027-01-01T12:00:00Z".parse().unwrap())
        );
        let err = parse_allowed("a@x\n").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
        let err = parse_allowed(&format!("a@x cert-authority {KEY}")).unwrap_err();
        assert!(err.contains("cert-authority"), "{err}");
        let err = parse_allowed(&format!("a@x valid-after=2026 {KEY}")).unwrap_err();
        assert!(err.contains("YYYYMMDD"), "{err}");
    }

    #[test]
    fn pattern_lists_match_as_ssh_does() {
        assert!(matches_list("automaton-gate", NAMESPACE));
        assert!(matches_list("file,automaton-*", NAMESPACE));
        assert!(!matches_list("file,git", NAMESPACE));
        assert!(!matches_list("*,!automaton-gate", NAMESPACE));
        assert!(matches_list("a?tomaton-gate", NAMESPACE));
    }

    #[test]
    fn the_floor_orders_semantic_versions() {
        let signed = |v: &str| Signed {
            name: "budget".into(),
            version: v.into(),
            signers: vec![],
        };
        assert!(check_floor(&signed("1.2.0"), Some("1.10.0")).is_err());
        assert!(check_floor(&signed("1.10.0"), Some("1.2.0")).is_ok());
        assert!(check_floor(&signed("1.2.0"), None).is_ok());
        assert!(matches!(
            check_floor(&signed("v1"), None),
            Err(Refusal::Unordered { .. })
        ));
        assert!(raises("1.10.0", Some("1.2.0")) && !raises("1.2.0", Some("1.2.0")) && raises("0.1.0", None));
        let revoked = parse_revoked("SSHKRL\0").unwrap_err();
        assert!(revoked.contains("KRL"));
    }
}
