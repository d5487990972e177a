//! wit-c: the component-model steps of building a C gate, so that clang,
//! lld and wasi-libc from the distribution are the only other tools.
//!
//! - `wit-c bindings WIT_DIR OUT_DIR`: the C bindings of the world `gate`
//!   (`gate.h`, `gate.c`, and `gate_component_type.o`, which carries the
//!   world's type into the linked module), as `wit-bindgen c` writes them,
//!   but for one thing: a variant whose tag the WIT does not have traps
//!   (see `trap_on_unknown_tags`).
//! - `wit-c component CORE.wasm OUT.wasm`: the component made of a core
//!   module linked against those bindings, with the WASI preview1 reactor
//!   adapter (the one for the host's wasmtime) turning wasi-libc's preview1
//!   imports into WASI preview2, as `wasm-tools component new` does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_bindgen_core::{Files, wit_parser::Resolve};
use wit_component::ComponentEncoder;

const USAGE: &str = "usage: wit-c bindings WIT_DIR OUT_DIR | wit-c component CORE.wasm OUT.wasm";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["bindings", wit, out] => bindings(Path::new(wit), Path::new(out)),
        ["component", core, out] => component(Path::new(core), Path::new(out)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wit-c: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the C bindings of the world `gate` in `wit` into `out`.
fn bindings(wit: &Path, out: &Path) -> Result<()> {
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve
        .push_path(wit)
        .with_context(|| format!("reading {}", wit.display()))?;
    let world = resolve.select_world(&[pkg], Some("gate"))?;
    let mut files = Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, contents) in files.iter() {
        let path: PathBuf = out.join(name);
        let fixed;
        let contents = if name.ends_with(".c") {
            fixed = trap_on_unknown_tags(&String::from_utf8_lossy(contents));
            fixed.as_bytes()
        } else {
            contents
        };
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The name of the function an unknown tag traps in: a trap's message
/// names it.
const UNKNOWN_TAG: &str = "gate_variant_tag_unknown";

/// wit-bindgen's C bindings hand a variant to the host (the decision
/// `evaluate` returns) by switching on the tag the gate's code set, with no
/// `default`: a tag the WIT does not have writes nothing, and the host reads
/// whatever the return area held (0, `proceed`, on a first call). Every
/// such switch (on `(*payload).tag`, the value being handed over; not the
/// `_free` functions' switches, which list only the cases that own memory)
/// gets a `default` that says which type and tag on stderr and traps, so an
/// unknown tag fails closed whatever the gate's own code checks.
fn trap_on_unknown_tags(c: &str) -> String {
    let mut out = String::with_capacity(c.len() + 1024);
    let mut helper = false;
    for line in c.split_inclusive('\n') {
        out.push_str(line);
        let code = line.trim();
        let Some(tag) = code
            .strip_prefix("switch (")
            .and_then(|s| s.strip_suffix(") {"))
            .filter(|e| e.ends_with(").tag"))
        else {
            continue;
        };
        let ty = type_before(&out[..out.len() - line.len()]).unwrap_or("a variant");
        let indent = &line[..line.len() - line.trim_start().len()];
        out.push_str(&format!(
            "{indent}  default: {UNKNOWN_TAG}(\"{ty}\", {tag});\n"
        ));
        helper = true;
    }
    if !helper {
        return out;
    }
    // Declared before the first function, defined at the end.
    let decl = format!(
        "#include <stdio.h>\n\n__attribute__((__noreturn__, __noinline__))\n\
         static void {UNKNOWN_TAG}(const char *type, int32_t tag);\n\n"
    );
    let at = out.find("\n__attribute__").map_or(0, |i| i + 1);
    out.insert_str(at, &decl);
    out.push_str(&format!(
        "\n// A tag the WIT does not have: never sent to the host as another case.\n\
         static void {UNKNOWN_TAG}(const char *type, int32_t tag) {{\n  \
         fprintf(stderr, \"%s has no tag %d: the WIT's cases are numbered from 0 in the order written\\n\", type, (int)tag);\n  \
         __builtin_trap();\n}}\n"
    ));
    out
}

/// The C type of the value a switch is about: the last `gate_..._t *`
/// declared before it (`const gate_decision_t *payload = ...`).
fn type_before(text: &str) -> Option<&str> {
    let end = text.rfind("_t *")? + 2;
    let start = text[..end]
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    Some(&text[start..end])
}

/// Turns the core module at `core` into a component at `out`.
fn component(core: &Path, out: &Path) -> Result<()> {
    let module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
    if module.get(..8) != Some(b"\0asm\x01\0\0\0") {
        bail!("{} is not a core WebAssembly module", core.display());
    }
    let bytes = ComponentEncoder::default()
        .module(&module)?
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .validate(true)
        .encode()
        .with_context(|| format!("making a component of {}", core.display()))?;
    std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
