//! wit-c: the component-model steps of building a C gate, so that clang,
//! lld and wasi-libc from the distribution are the only other tools.
//!
//! - `wit-c bindings WIT_DIR OUT_DIR`: the C bindings of the world `gate`
//!   (`gate.h`, `gate.c`, and `gate_component_type.o`, which carries the
//!   world's type into the linked module), as `wit-bindgen c` writes them.
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
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
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
