//! Link settings for the `automaton` binary.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Release binaries for Linux with glibc pack their relative relocations
    // (DT_RELR, glibc >= 2.36): a smaller table for the loader to apply at
    // every start of a position-independent binary. GNU ld before 2.38
    // ignores the option with a warning.
    let target = std::env::var("TARGET").unwrap_or_default();
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    if release && target.ends_with("-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
