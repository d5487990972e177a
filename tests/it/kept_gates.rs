//! Gate components built against `automaton:gate@0.1.0` by the examples of
//! that time, kept byte for byte in tests/fixtures/gates/0.1.0/ (its
//! README says how each was built): they run unchanged, deciding what
//! their cases say they decided then.

use std::path::{Path, PathBuf};

use crate::common::Env;

/// The kept components and each one's sha256, as built.
const KEPT: [(&str, &str); 2] = [
    (
        "office-hours-c.wasm",
        "6be34e1dac88433dee16242cf50a205c540d3d1e85878d2939c725d8addeefe8",
    ),
    (
        "office-hours-rust.wasm",
        "2bcdc6b7282954f08d0035db08efca409872d2de4eecdc937d59dade673ef601",
    ),
];

fn kept_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gates/0.1.0")
}

#[test]
fn components_built_against_0_1_0_keep_deciding_as_they_did() {
    let env = Env::new();
    let cases = kept_dir().join("office-hours.cases.json");
    for (file, sha256) in KEPT {
        let wasm = kept_dir().join(file);
        let bytes = std::fs::read(&wasm).unwrap();
        assert!(bytes.len() < 4 << 20, "{file}: no kept file is over 4 MiB");
        assert_eq!(
            automaton::gate::sha256_hex(&bytes),
            sha256,
            "{file} is kept as built, never rebuilt"
        );
        let inspected = env.ok(&["gate", "inspect", wasm.to_str().unwrap()]);
        assert!(
            inspected.contains("automaton:gate/host@0.1.0"),
            "{file}: {inspected}"
        );
        let out = env.ok(&[
            "gate",
            "test",
            wasm.to_str().unwrap(),
            "--cases",
            cases.to_str().unwrap(),
        ]);
        assert!(out.contains("(office-hours 1.0.0)"), "{file}: {out}");
        assert!(out.ends_with("12 passed, 0 failed\n"), "{file}: {out}");
    }
}
