//! Checks that a built gate is what the host will accept: a valid component
//! that exports the world `gate` of `wit/gate.wit` with the same types, and
//! imports nothing but the gate's `host` interface and WASI. The tests run
//! the check over every file in `gates/dist/`.

use std::collections::BTreeSet;
use wit_component::DecodedWasm;
use wit_parser::{CloneMaps, PackageId, Resolve, WorldItem, WorldKey};

/// The WIT package that defines the world, as text.
pub const GATE_WIT: &str = include_str!("../../../wit/gate.wit");

/// Checks `component` against the world `gate` in the WIT text `wit`.
pub fn check(wit: &str, component: &[u8]) -> Result<(), String> {
    if !wasmparser::Parser::is_component(component) {
        return Err(String::from("not a component (a core module, or not wasm)"));
    }
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(component)
        .map_err(|e| format!("invalid component: {e}"))?;

    let mut resolve = Resolve::default();
    let package: PackageId = resolve
        .push_str("gate.wit", wit)
        .map_err(|e| format!("bad WIT: {e:#}"))?;
    let gate = resolve
        .select_world(&[package], Some("gate"))
        .map_err(|e| format!("bad WIT: {e:#}"))?;

    let (decoded, world) = match wit_component::decode(component) {
        Ok(DecodedWasm::Component(decoded, world)) => (decoded, world),
        Ok(DecodedWasm::WitPackage(..)) => return Err(String::from("a WIT package, not a gate")),
        Err(e) => return Err(format!("cannot decode the component's world: {e:#}")),
    };

    // Exports: exactly the world's functions.
    let names = |items: &mut dyn Iterator<Item = &WorldKey>, r: &Resolve| -> BTreeSet<String> {
        items.map(|k| r.name_world_key(k)).collect()
    };
    let exported = names(&mut decoded.worlds[world].exports.keys(), &decoded);
    let expected = names(&mut resolve.worlds[gate].exports.keys(), &resolve);
    if exported != expected {
        return Err(format!(
            "exports {exported:?}, the world `gate` exports {expected:?}"
        ));
    }

    // Imports: the gate package's own interfaces, and WASI (what std uses).
    for (key, item) in &decoded.worlds[world].imports {
        let name = decoded.name_world_key(key);
        let allowed = match item {
            WorldItem::Interface { .. } => {
                name.starts_with("wasi:") || name.starts_with("automaton:gate/")
            }
            WorldItem::Type { .. } => true,
            WorldItem::Function(_) => false,
        };
        if !allowed {
            return Err(format!("imports `{name}`, which the host does not provide"));
        }
    }

    // Types: merge the component's world into `gate` (the shared package is
    // unified, so a type that differs is a conflict), then let wit-component
    // type-check the component against the result structurally.
    let remap = resolve
        .merge(decoded)
        .map_err(|e| format!("the component's types differ from the WIT: {e:#}"))?;
    let world = remap.worlds[world.index()].ok_or("the component's world was lost in merging")?;
    resolve
        .merge_worlds(world, gate, &mut CloneMaps::default())
        .map_err(|e| format!("the component does not match the world `gate`: {e:#}"))?;
    wit_component::targets(&resolve, gate, component, false)
        .map_err(|e| format!("the component does not target the world `gate`: {e:#}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const GATES: [&str; 8] = [
        "approve-every",
        "max-failures",
        "context-floor",
        "budget",
        "time-window",
        "max-ticks",
        "backoff",
        "no-progress",
    ];

    fn dist() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist")
    }

    fn built(gate: &str) -> Vec<u8> {
        let path = dist().join(format!("{gate}.wasm"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn every_stock_gate_is_a_component_of_the_world_gate() {
        for gate in GATES {
            check(GATE_WIT, &built(gate)).unwrap_or_else(|e| panic!("{gate}: {e}"));
        }
    }

    #[test]
    fn dist_holds_the_stock_gates_and_nothing_else() {
        let mut found: Vec<String> = std::fs::read_dir(dist())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        found.sort();
        let mut expected: Vec<String> = GATES.iter().map(|g| format!("{g}.wasm")).collect();
        expected.sort();
        assert_eq!(found, expected);
    }

    /// `GATE_WASM=path/to/gate.wasm cargo test -p gate-validate -- --ignored`
    /// checks any gate, e.g. one built from examples/gates/.
    #[test]
    #[ignore = "checks the file named by GATE_WASM"]
    fn the_gate_named_by_gate_wasm_is_a_component_of_the_world_gate() {
        let path = std::env::var("GATE_WASM").expect("set GATE_WASM to a .wasm file");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        check(GATE_WIT, &bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    }

    #[test]
    fn the_example_gate_carries_the_current_wit() {
        let copy = include_str!("../../../examples/gates/rust-minimal/wit/gate.wit");
        assert!(
            copy == GATE_WIT,
            "copy wit/gate.wit to examples/gates/rust-minimal/wit/"
        );
    }

    #[test]
    fn a_core_module_is_refused() {
        let core = b"\0asm\x01\0\0\0";
        assert!(
            check(GATE_WIT, core)
                .unwrap_err()
                .starts_with("not a component")
        );
    }

    #[test]
    fn a_gate_for_another_signature_is_refused() {
        let changed = GATE_WIT.replace(
            "export check-params: func(params: string) -> result<_, string>;",
            "export check-params: func(params: string) -> result<_, u32>;",
        );
        assert_ne!(changed, GATE_WIT);
        let err = check(&changed, &built("budget")).unwrap_err();
        assert!(err.contains("check-params"), "{err}");
    }

    #[test]
    fn a_gate_for_a_changed_record_is_refused() {
        let changed = GATE_WIT.replace(
            "        unchanged-ticks: u32,",
            "        unchanged-ticks: u64,",
        );
        assert_ne!(changed, GATE_WIT);
        assert!(check(&changed, &built("no-progress")).is_err());
    }

    #[test]
    fn a_gate_missing_an_export_is_refused() {
        let changed = GATE_WIT.replace(
            "    export describe: func() -> gate-info;",
            "    export describe: func() -> gate-info;\n    export reset: func();",
        );
        assert_ne!(changed, GATE_WIT);
        let err = check(&changed, &built("max-ticks")).unwrap_err();
        assert!(err.starts_with("exports"), "{err}");
    }
}
