//! Checks that a built gate is what the host will accept: a valid component
//! that exports the world `gate` of the WIT version it was built against
//! (one of those the host links: `wit/0.1.0/gate.wit`, `wit/0.2.0/gate.wit`,
//! `wit/gate.wit`) with
//! the same types, and imports nothing but the gate's `host` interface and
//! WASI. The tests run the check over every file in `gates/dist/`.

use std::collections::BTreeSet;
use wit_component::DecodedWasm;
use wit_parser::{CloneMaps, PackageId, Resolve, WorldItem, WorldKey};

/// The WIT package of the interface's current version, as text.
pub const GATE_WIT: &str = include_str!("../../../wit/gate.wit");

/// Every version of the WIT package the host links, oldest first, with its
/// text: a gate built against any of them runs.
pub const GATE_WITS: [(&str, &str); 3] = [
    ("0.1.0", include_str!("../../../wit/0.1.0/gate.wit")),
    ("0.2.0", include_str!("../../../wit/0.2.0/gate.wit")),
    ("0.3.0", GATE_WIT),
];

/// The version of `automaton:gate` that `component` was built against, as
/// its imports and exports name it.
pub fn built_against(component: &[u8]) -> Result<String, String> {
    let (decoded, _) = decode(component)?;
    let versions: BTreeSet<String> = decoded
        .packages
        .iter()
        .filter(|(_, p)| p.name.namespace == "automaton" && p.name.name == "gate")
        .map(|(_, p)| {
            p.name
                .version
                .as_ref()
                .map_or_else(String::new, |v| v.to_string())
        })
        .collect();
    let mut versions = versions.into_iter();
    match (versions.next(), versions.next()) {
        (Some(v), None) if !v.is_empty() => Ok(v),
        (Some(v), None) => Err(format!("names `automaton:gate` without a version ({v:?})")),
        (None, _) => Err(String::from("names no `automaton:gate` package")),
        (Some(a), Some(b)) => Err(format!(
            "names two versions of `automaton:gate`: {a} and {b}"
        )),
    }
}

/// Checks `component` against the world `gate` of the WIT version it was
/// built against; a version the host does not link is refused.
pub fn check_built(component: &[u8]) -> Result<String, String> {
    if !wasmparser::Parser::is_component(component) {
        return Err(String::from("not a component (a core module, or not wasm)"));
    }
    let version = built_against(component)?;
    let Some((_, wit)) = GATE_WITS.iter().find(|(v, _)| *v == version) else {
        let known: Vec<&str> = GATE_WITS.iter().map(|(v, _)| *v).collect();
        return Err(format!(
            "built against automaton:gate@{version}, the host links {}",
            known.join(" and ")
        ));
    };
    check(wit, component)?;
    Ok(version)
}

fn decode(component: &[u8]) -> Result<(Resolve, wit_parser::WorldId), String> {
    match wit_component::decode(component) {
        Ok(DecodedWasm::Component(decoded, world)) => Ok((decoded, world)),
        Ok(DecodedWasm::WitPackage(..)) => Err(String::from("a WIT package, not a gate")),
        Err(e) => Err(format!("cannot decode the component's world: {e:#}")),
    }
}

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

    let (decoded, world) = decode(component)?;

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

    /// The version the stock gates are built against: the interface's
    /// first, so that they prove gates built against it keep running; but
    /// time-window, which reads the host's zones (`in-zone`, 0.3.0).
    fn stock_version(gate: &str) -> &'static str {
        if gate == "time-window" {
            "0.3.0"
        } else {
            "0.1.0"
        }
    }

    fn wit(version: &str) -> &'static str {
        GATE_WITS.iter().find(|(v, _)| *v == version).unwrap().1
    }

    #[test]
    fn every_stock_gate_is_a_component_of_the_world_gate() {
        for gate in GATES {
            let version = check_built(&built(gate)).unwrap_or_else(|e| panic!("{gate}: {e}"));
            assert_eq!(version, stock_version(gate), "{gate}");
        }
    }

    #[test]
    fn a_gate_checked_against_a_version_it_was_not_built_for_is_refused() {
        let err = check(GATE_WIT, &built("budget")).unwrap_err();
        assert!(err.contains("context"), "{err}");
    }

    #[test]
    fn the_versions_are_those_the_wit_files_declare() {
        for (version, text) in GATE_WITS {
            let line = format!("package automaton:gate@{version};");
            assert!(text.contains(&line), "{version}: no `{line}`");
        }
        assert_eq!(GATE_WITS.last().unwrap().1, GATE_WIT);
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
    /// checks any gate, e.g. one built from examples/gates/, against the
    /// version it was built for.
    #[test]
    #[ignore = "checks the file named by GATE_WASM"]
    fn the_gate_named_by_gate_wasm_is_a_component_of_the_world_gate() {
        let path = std::env::var("GATE_WASM").expect("set GATE_WASM to a .wasm file");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let version = check_built(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        println!("{path}: a gate of automaton:gate@{version}");
    }

    #[test]
    fn every_example_gate_carries_a_wit_the_host_links_unchanged() {
        let copies = [
            ("c", include_str!("../../../examples/gates/c/wit/gate.wit")),
            (
                "javascript",
                include_str!("../../../examples/gates/javascript/wit/gate.wit"),
            ),
            (
                "python",
                include_str!("../../../examples/gates/python/wit/gate.wit"),
            ),
            (
                "rust",
                include_str!("../../../examples/gates/rust/wit/gate.wit"),
            ),
            (
                "rust-minimal",
                include_str!("../../../examples/gates/rust-minimal/wit/gate.wit"),
            ),
        ];
        for (example, copy) in copies {
            assert!(
                GATE_WITS.iter().any(|(_, text)| *text == copy),
                "examples/gates/{example}/wit/gate.wit differs from every version in wit/: copy one of them"
            );
        }
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
        let changed = wit(stock_version("budget")).replace(
            "export check-params: func(params: string) -> result<_, string>;",
            "export check-params: func(params: string) -> result<_, u32>;",
        );
        assert_ne!(changed, wit(stock_version("budget")));
        let err = check(&changed, &built("budget")).unwrap_err();
        assert!(err.contains("check-params"), "{err}");
    }

    #[test]
    fn a_gate_for_a_changed_record_is_refused() {
        let changed = wit(stock_version("budget")).replace(
            "        unchanged-ticks: u32,",
            "        unchanged-ticks: u64,",
        );
        assert_ne!(changed, wit(stock_version("budget")));
        assert!(check(&changed, &built("no-progress")).is_err());
    }

    #[test]
    fn a_gate_missing_an_export_is_refused() {
        let changed = wit(stock_version("budget")).replace(
            "    export describe: func() -> gate-info;",
            "    export describe: func() -> gate-info;\n    export reset: func();",
        );
        assert_ne!(changed, wit(stock_version("budget")));
        let err = check(&changed, &built("max-ticks")).unwrap_err();
        assert!(err.starts_with("exports"), "{err}");
    }
}
