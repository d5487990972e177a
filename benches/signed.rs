//! What checking a signed gate's signatures costs (docs/benchmarks.md,
//! "Verifying a signed gate"; target ≤ 1 ms once verified): in a host
//! that verified it already (a daemon's next tick), in a fresh host whose
//! cache holds the sealed record of the verification (a CLI tick), and,
//! for comparison, the first verification (the component read and hashed,
//! the signature checked, the gate asked what it is). The component is a
//! stock gate's, written to a file and signed with a key `ssh-keygen`
//! makes here. Run with `cargo bench --bench signed`.

use std::path::{Path, PathBuf};
use std::process::Command;

use automaton::domain::GateSource;
use automaton::gate::trust::Policy;
use automaton::gate::{GateHost, stock_gates};
use divan::Bencher;

fn main() {
    divan::main();
}

/// A signed component, its trust file and a cache dir, under `dir`.
struct Fixture {
    _dir: tempfile::TempDir,
    source: GateSource,
    policy: Policy,
    cache: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f"])
        .arg(&key));
    let gate = dir.path().join("budget.wasm");
    let stock = stock_gates().iter().find(|g| g.name == "budget").unwrap();
    std::fs::write(&gate, stock.component()).unwrap();
    run(Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "automaton-gate", "-f"])
        .arg(&key)
        .arg(&gate));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let trust = dir.path().join("allowed_signers");
    std::fs::write(
        &trust,
        format!("bench@example.com namespaces=\"automaton-gate\" {public}"),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    Fixture {
        source: GateSource::File {
            path: gate,
            sha256: None,
        },
        policy: Policy {
            required: true,
            signers: 1,
            allowed_signers: trust,
            revoked_keys: None,
        },
        cache,
        _dir: dir,
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("ssh-keygen (openssh-client) is installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn host(cache: &Path) -> GateHost {
    GateHost::new(Some(cache.to_owned())).unwrap()
}

/// The host verified this gate before: the trust file and the signature
/// read and judged, the cryptography remembered.
#[divan::bench]
fn verify_in_a_host_that_verified_it(bencher: Bencher) {
    let f = fixture();
    let host = host(&f.cache);
    let gate = host.load(&f.source).unwrap();
    host.verify(&gate, &f.source, &f.policy).unwrap().unwrap();
    bencher.bench_local(|| host.verify(&gate, &f.source, &f.policy).unwrap());
}

/// A fresh host (a CLI tick) with the gate loaded from the cache: the
/// verification's sealed record is read instead of the component.
#[divan::bench(sample_count = 50)]
fn verify_in_a_fresh_host_from_the_cache(bencher: Bencher) {
    let f = fixture();
    let first = host(&f.cache);
    let gate = first.load(&f.source).unwrap();
    first.verify(&gate, &f.source, &f.policy).unwrap().unwrap();
    bencher
        .with_inputs(|| {
            let h = host(&f.cache);
            let g = h.load(&f.source).unwrap();
            (h, g)
        })
        .bench_local_refs(|(h, g)| h.verify(g, &f.source, &f.policy).unwrap());
}

/// For comparison: the first verification, in a host with no cache.
#[divan::bench(sample_count = 20)]
fn first_verification(bencher: Bencher) {
    let f = fixture();
    bencher
        .with_inputs(|| {
            let h = GateHost::new(None).unwrap();
            let g = h.load(&f.source).unwrap();
            (h, g)
        })
        .bench_local_refs(|(h, g)| h.verify(g, &f.source, &f.policy).unwrap());
}
