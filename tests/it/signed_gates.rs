//! Signed gates: a root or a loop that requires signatures runs a gate
//! only when enough keys of the root's `allowed_signers` file signed it
//! (`ssh-keygen -Y sign -n automaton-gate`), each valid now and not
//! revoked, and never an older signed build than the loop ran unless an
//! operator allowed it. Keys and signatures are made here with the real
//! `ssh-keygen`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::Env;
use crate::gate_fixtures::versioned;

const GATE_LOOP: &str = "step = \"true\"\n[[gate]]\npath = \"gates/gate.wasm\"\n";

/// A fresh ed25519 key pair, `dir/NAME` and `dir/NAME.pub`.
fn keygen(dir: &Path, name: &str) -> PathBuf {
    keygen_typed(dir, name, "ed25519")
}

fn keygen_typed(dir: &Path, name: &str, kind: &str) -> PathBuf {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", kind, "-N", "", "-C", name, "-f"])
        .arg(&key)
        .output()
        .expect("ssh-keygen (openssh-client) is installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    key
}

/// The public key's `TYPE BASE64` line.
fn public(key: &Path) -> String {
    let text = fs::read_to_string(key.with_extension("pub")).unwrap();
    let mut parts = text.split_whitespace();
    format!("{} {}", parts.next().unwrap(), parts.next().unwrap())
}

/// Signs `file` with `key` in `namespace`: `file.sig`, as ssh-keygen
/// writes it (replacing one there).
fn sign(key: &Path, file: &Path, namespace: &str) -> String {
    let sig = PathBuf::from(format!("{}.sig", file.display()));
    let _ = fs::remove_file(&sig);
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    fs::read_to_string(sig).unwrap()
}

/// A root whose gates must be signed (with the `[gates]` lines given),
/// and the key `alice@example.com` signs with.
struct Signed {
    env: Env,
    keys: PathBuf,
    alice: PathBuf,
}

impl Signed {
    fn new(gates: &str) -> Signed {
        Signed::in_root(Env::new(), gates)
    }

    fn in_root(env: Env, gates: &str) -> Signed {
        let keys = env.root.parent().unwrap().join("keys");
        fs::create_dir_all(&keys).unwrap();
        let alice = keygen(&keys, "alice");
        let file = env.root.join("automaton.toml");
        let mut text = fs::read_to_string(&file).unwrap();
        text += &format!("[gates]\n{gates}\n");
        fs::write(&file, text).unwrap();
        Signed { env, keys, alice }
    }

    fn trust(&self, lines: &str) {
        fs::write(self.env.root.join("allowed_signers"), lines).unwrap();
    }

    /// Loop `name` whose gate is `bytes`, put in place after `new`.
    fn with_gate(&self, name: &str, toml: &str, bytes: &[u8]) -> PathBuf {
        self.env.new_loop(name, toml);
        let gates = self.env.loop_dir(name).join("gates");
        fs::create_dir_all(&gates).unwrap();
        let gate = gates.join("gate.wasm");
        fs::write(&gate, bytes).unwrap();
        gate
    }

    /// One tick: its outcome and reason.
    fn tick(&self, name: &str) -> (String, String) {
        let out = self.env.run(&["tick", name, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let reason = v["reason"].as_str().unwrap_or_default().to_owned();
        (v["outcome"].as_str().unwrap().to_owned(), reason)
    }

    /// The tick halts the loop, for `reason`, which names the gate.
    fn refused(&self, name: &str) -> String {
        let (outcome, reason) = self.tick(name);
        assert_eq!(outcome, "halted", "{reason}");
        assert!(
            reason.contains("gate gates/gate.wasm") && reason.contains("is not trusted"),
            "{reason}"
        );
        assert_eq!(self.env.state(name)["status"], "halted");
        reason
    }
}

#[test]
fn a_gate_signed_by_a_trusted_key_runs_and_one_without_its_signature_halts() {
    let s = Signed::new("require_signed = true");
    s.trust(&format!(
        "alice@example.com namespaces=\"automaton-gate\" {}\n",
        public(&s.alice)
    ));
    let gate = s.with_gate("good", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    assert_eq!(s.tick("good").0, "ran");
    assert_eq!(s.env.state("good")["signed_versions"]["test-gate"], "0.1.0");
    s.env.ok(&["validate", "good"]);

    let stripped = s.with_gate("stripped", GATE_LOOP, &versioned("0.1.0"));
    let reason = s.refused("stripped");
    assert!(
        reason.contains("is not signed: no ") && reason.contains("gate.wasm.sig"),
        "{reason}"
    );
    // The gate event records the refusal; `validate` says it too.
    let gate_event = s
        .env
        .history("stripped")
        .into_iter()
        .find(|e| e["kind"] == "gate")
        .unwrap();
    assert!(gate_event["error"].as_str().unwrap().contains("is not signed"));
    let err = s.env.fails(5, &["validate", "stripped"]);
    assert!(err.contains("is not signed"), "{err}");
    // `on_error = "proceed"` does not make a signature optional.
    s.with_gate(
        "lax",
        &format!("{GATE_LOOP}on_error = \"proceed\"\n"),
        &versioned("0.1.0"),
    );
    s.refused("lax");
    assert!(!stripped.with_extension("wasm.sig").exists());
}

#[test]
fn a_gate_changed_after_it_was_signed_is_refused_naming_its_signer() {
    let s = Signed::new("require_signed = true");
    s.trust(&format!("alice@example.com {}\n", public(&s.alice)));
    let gate = s.with_gate("tampered", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    assert_eq!(s.tick("tampered").0, "ran");
    // Another build put in its place, the signature left as it was.
    fs::write(&gate, versioned("0.1.1")).unwrap();
    let reason = s.refused("tampered");
    assert!(
        reason.contains("signed by alice@example.com: the signature does not match the component"),
        "{reason}"
    );
}

#[test]
fn a_signature_made_for_another_namespace_is_refused() {
    let s = Signed::new("require_signed = true");
    s.trust(&format!("alice@example.com {}\n", public(&s.alice)));
    let gate = s.with_gate("other-ns", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "file");
    let reason = s.refused("other-ns");
    assert!(
        reason.contains("signed by alice@example.com: the signature is made for namespace \"file\""),
        "{reason}"
    );
    // A key the trust file allows for other namespaces only.
    s.trust(&format!(
        "alice@example.com namespaces=\"git,file\" {}\n",
        public(&s.alice)
    ));
    let gate = s.with_gate("key-ns", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    let reason = s.refused("key-ns");
    assert!(
        reason.contains("allows the key for namespaces=\"git,file\" only"),
        "{reason}"
    );
}

#[test]
fn a_key_past_its_valid_before_or_before_its_valid_after_is_refused() {
    let s = Signed::new("require_signed = true");
    let key = public(&s.alice);
    s.trust(&format!("alice@example.com valid-before=20200101Z {key}\n"));
    let gate = s.with_gate("expired", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    let reason = s.refused("expired");
    assert!(
        reason.contains("signed by alice@example.com: the key expired (valid-before 2020-01-01T00:00:00Z)"),
        "{reason}"
    );
    s.trust(&format!("alice@example.com valid-after=20990101Z {key}\n"));
    let gate = s.with_gate("early", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    let reason = s.refused("early");
    assert!(
        reason.contains("the key is not valid yet (valid-after 2099-01-01"),
        "{reason}"
    );
    // Inside its window, the same key signs.
    s.trust(&format!(
        "alice@example.com valid-after=20200101Z,valid-before=20990101Z {key}\n"
    ));
    let gate = s.with_gate("window", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    assert_eq!(s.tick("window").0, "ran");
}

#[test]
fn a_revoked_key_and_an_unknown_key_are_refused() {
    let s = Signed::new("require_signed = true\nrevoked_keys = \"revoked_keys\"");
    let key = public(&s.alice);
    s.trust(&format!("alice@example.com {key}\n"));
    fs::write(s.env.root.join("revoked_keys"), "# none yet\n").unwrap();
    let gate = s.with_gate("revoked", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    assert_eq!(s.tick("revoked").0, "ran");
    fs::write(s.env.root.join("revoked_keys"), format!("{key} alice\n")).unwrap();
    s.env.ok(&["resume", "revoked"]);
    let reason = s.refused("revoked");
    assert!(
        reason.contains("signed by alice@example.com: the key is revoked"),
        "{reason}"
    );

    let mallory = keygen(&s.keys, "mallory");
    let gate = s.with_gate("unknown", GATE_LOOP, &versioned("0.1.0"));
    sign(&mallory, &gate, "automaton-gate");
    let reason = s.refused("unknown");
    assert!(
        reason.contains("signed by SHA256:") && reason.contains("the key is not in the trust file"),
        "{reason}"
    );
    // A trust file listing a key of a type not verified here is refused
    // whole, naming its line, rather than read in part.
    let carol = keygen_typed(&s.keys, "carol", "ecdsa");
    s.trust(&format!(
        "alice@example.com {key}\ncarol@example.com {}\n",
        public(&carol)
    ));
    let gate = s.with_gate("ecdsa", GATE_LOOP, &versioned("0.1.0"));
    sign(&s.alice, &gate, "automaton-gate");
    let reason = s.refused("ecdsa");
    assert!(
        reason.contains("allowed_signers cannot be used: line 2: a ecdsa-sha2-nistp256 key: only ssh-ed25519 keys sign gates"),
        "{reason}"
    );
}

#[test]
fn a_loop_that_needs_two_signers_refuses_one_and_runs_with_two() {
    // The root requires nothing: the loop's own `[gates]` does.
    let s = Signed::new("");
    let bob = keygen(&s.keys, "bob");
    s.trust(&format!(
        "alice@example.com {}\nbob@example.com {}\n",
        public(&s.alice),
        public(&bob)
    ));
    let toml = format!("{GATE_LOOP}[gates]\nrequire_signed = true\nsigners = 2\n");
    let gate = s.with_gate("two", &toml, &versioned("0.1.0"));
    let alice_sig = sign(&s.alice, &gate, "automaton-gate");
    let reason = s.refused("two");
    assert!(
        reason.contains("it needs 2 signers and has 1 valid (alice@example.com)"),
        "{reason}"
    );
    // The same key twice counts once.
    let sig = PathBuf::from(format!("{}.sig", gate.display()));
    fs::write(&sig, format!("{alice_sig}{alice_sig}")).unwrap();
    s.env.ok(&["resume", "two"]);
    let reason = s.refused("two");
    assert!(reason.contains("the key signed more than once"), "{reason}");
    // Two signers' files, one after the other.
    let bob_sig = sign(&bob, &gate, "automaton-gate");
    fs::write(&sig, format!("{alice_sig}{bob_sig}")).unwrap();
    s.env.ok(&["resume", "two"]);
    assert_eq!(s.tick("two").0, "ran");
}

#[test]
fn an_older_signed_build_is_refused_until_an_operator_allows_the_rollback() {
    let s = Signed::new("require_signed = true");
    s.trust(&format!("alice@example.com {}\n", public(&s.alice)));
    let gate = s.with_gate("roll", GATE_LOOP, &versioned("0.2.0"));
    sign(&s.alice, &gate, "automaton-gate");
    assert_eq!(s.tick("roll").0, "ran");
    assert_eq!(s.env.state("roll")["signed_versions"]["test-gate"], "0.2.0");
    // The older build, validly signed.
    fs::write(&gate, versioned("0.1.0")).unwrap();
    sign(&s.alice, &gate, "automaton-gate");
    let reason = s.refused("roll");
    assert!(
        reason.contains("test-gate 0.1.0 is older than test-gate 0.2.0"),
        "{reason}"
    );
    s.env
        .fails(2, &["gate", "allow-rollback", "roll", "test-gate", "old"]);
    let said = s
        .env
        .ok(&["gate", "allow-rollback", "roll", "test-gate", "0.1.0"]);
    assert!(said.contains("may run test-gate 0.1.0"), "{said}");
    let allowed = s
        .env
        .history("roll")
        .into_iter()
        .find(|e| e["kind"] == "rollback-allowed")
        .unwrap();
    assert_eq!(
        (&allowed["by"], &allowed["gate"], &allowed["from"], &allowed["to"]),
        (
            &serde_json::json!("operator"),
            &serde_json::json!("test-gate"),
            &serde_json::json!("0.2.0"),
            &serde_json::json!("0.1.0")
        )
    );
    s.env.ok(&["resume", "roll"]);
    assert_eq!(s.tick("roll").0, "ran");
    assert_eq!(s.env.state("roll")["signed_versions"]["test-gate"], "0.1.0");
}

#[test]
fn a_verified_signature_is_remembered_sealed_and_a_forged_record_is_not_believed() {
    let s = Signed::in_root(Env::with_own_cache(), "require_signed = true");
    s.trust(&format!("alice@example.com {}\n", public(&s.alice)));
    let gate = s.with_gate("cached", GATE_LOOP, &versioned("0.2.0"));
    sign(&s.alice, &gate, "automaton-gate");
    assert_eq!(s.tick("cached").0, "ran");
    let verified = s.env.root.join("cache/gates/verified");
    let records: Vec<PathBuf> = fs::read_dir(&verified)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(records.len(), 1, "one record of the one verification");
    let record = fs::read_to_string(&records[0]).unwrap();
    assert!(
        record.contains("name test-gate\nversion 0.2.0\n") && record.contains("\nmac "),
        "{record}"
    );
    // A record rewritten to claim another version, its MAC left as it was,
    // is not believed: the signature is checked again and the gate's own
    // version counts.
    fs::write(&records[0], record.replace("version 0.2.0", "version 9.9.9")).unwrap();
    assert_eq!(s.tick("cached").0, "ran");
    assert_eq!(s.env.state("cached")["signed_versions"]["test-gate"], "0.2.0");
}
