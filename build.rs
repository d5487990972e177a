//! Link settings for the `automaton` binary, and the stock gates' sha256s,
//! sizes and deflated copies.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Release binaries for Linux with glibc pack their relative relocations
    // (DT_RELR, glibc >= 2.36): a smaller table for the loader to apply at
    // every start of a position-independent binary. GNU ld before 2.38
    // ignores the option with a warning. The binary stays position-
    // independent: a fixed-address link (`-no-pie`) saves about 95 page
    // faults at start-up but gives up the randomisation of the binary's
    // own code in a process that runs untrusted WebAssembly
    // (docs/benchmarks.md weighs it).
    let target = std::env::var("TARGET").unwrap_or_default();
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    if release && target.ends_with("-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        // Identical functions folded into one: generic code instantiated
        // for types that compile to the same machine code (serde's and
        // clap's derives, wasmtime's host-call shims) is kept once. Only
        // code is folded, never data; rust-lld, this target's default
        // linker, does it (GNU ld has no such option).
        if target == "x86_64-unknown-linux-gnu" {
            println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
            hot_functions_first();
        }
        // The unwinder (backtraces; a panic aborts) linked in from GCC's
        // static libgcc_eh, ahead of the standard library's libgcc_s, which
        // the linker then drops as unneeded: one shared library fewer to
        // load and relocate at every start, and no run of libgcc_s's
        // constructor, whose CPU-model probe (`cpuid`) traps to the
        // hypervisor in a VM.
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
    stock_sha256s();
}

/// The functions a CLI tick, `--version` and `status` run, laid out
/// together at the start of the code in the order they first run
/// (`link/hot-functions.txt`, made by `link/hot-functions.sh`): a
/// process then faults in a few contiguous pages of code instead of
/// pages scattered over 13 MB. A name the build no longer has is skipped,
/// so a list gone stale costs page faults, never correctness. With
/// `AUTOMATON_LINK_MAP=<file>` the linker also writes its map there (how
/// the list is made: the map names the functions of a stripped binary).
fn hot_functions_first() {
    let list = Path::new("link/hot-functions.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=AUTOMATON_LINK_MAP");
    if let Ok(map) = std::env::var("AUTOMATON_LINK_MAP") {
        println!("cargo:rustc-link-arg-bins=-Wl,-Map={map}");
    }
    if list.exists() {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            Path::new(&dir).join(list).display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Writes, for each `gates/dist/<name>.wasm` the binary embeds,
/// `<OUT_DIR>/stock/<name>.sha256` (so a process names a stock gate's
/// content without hashing it), `<name>.size` (its length) and
/// `<name>.wasm.deflate` (the component as embedded: raw DEFLATE, inflated
/// only to compile it).
fn stock_sha256s() {
    let dist = Path::new("gates/dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("stock");
    std::fs::create_dir_all(&out).expect("OUT_DIR is writable");
    for entry in std::fs::read_dir(dist).expect("gates/dist/ holds the stock gates") {
        let path = entry.expect("gates/dist/ lists").path();
        if path.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let bytes = std::fs::read(&path).expect("a stock gate reads");
        let name = path.file_stem().expect("a file name");
        let sha256 = format!("{:x}", Sha256::digest(&bytes));
        std::fs::write(out.join(name).with_extension("sha256"), sha256).expect("OUT_DIR is writable");
        std::fs::write(out.join(name).with_extension("size"), bytes.len().to_string())
            .expect("OUT_DIR is writable");
        let deflated = miniz_oxide::deflate::compress_to_vec(&bytes, 10);
        std::fs::write(out.join(name).with_extension("wasm.deflate"), deflated).expect("OUT_DIR is writable");
    }
}
