//! The gate host, driven through the library and the real binary: good and
//! hostile gates give their decision or their typed error naming the gate,
//! the host keeps working after each failure, and the compiled-gate cache
//! is used and repaired.

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use automaton::domain::{Context, Decision, GateSource, Limits};
use automaton::gate::{GateErrorKind, GateHost, LogSource, OUTPUT_LIMIT};

use crate::gate_fixtures as fx;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
}

fn file(path: &Path) -> GateSource {
    GateSource::File {
        path: path.to_owned(),
        sha256: None,
    }
}

fn limits(timeout_ms: u64, memory: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        memory,
    }
}

/// After any failure, a good gate still evaluates in the same host.
fn assert_host_still_works(host: &GateHost, fx: &Fixture) {
    let good = host
        .load(&file(&fx.write("good-after.wasm", &fx::good())))
        .unwrap();
    let e = host
        .evaluate(&good, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(e.decision, Decision::Proceed);
}

#[test]
fn good_gate_describes_checks_and_decides() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host.load(&file(&fx.write("good.wasm", &fx::good()))).unwrap();
    assert_eq!(gate.size(), fx::good().len() as u64);
    assert_eq!(gate.sha256().len(), 64);
    let info = host.describe(&gate).unwrap();
    assert_eq!(
        (info.name.as_str(), info.version.as_str()),
        ("test-gate", "0.1.0")
    );
    assert_eq!(gate.version(), Some("0.1.0"));
    assert_eq!(info.params_schema, r#"{"type":"object"}"#);

    host.check_params(&gate, &serde_json::json!({"every": 2}))
        .unwrap();
    let err = host.check_params(&gate, &serde_json::json!([1])).unwrap_err();
    assert_eq!(
        err.kind(),
        &GateErrorKind::ParamsRejected {
            message: "params must be a JSON object".into(),
            line: None,
        }
    );
    assert!(err.to_string().contains("(test-gate 0.1.0)"), "{err}");

    let mut ctx = Context::default();
    let e = host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
    assert_eq!(e.decision, Decision::Proceed);
    assert_eq!(e.logs.len(), 1);
    assert_eq!(e.logs[0].message, "hello, host");
    assert_eq!(e.logs[0].source, LogSource::Host);
    ctx.tick = 3;
    let e = host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
    assert_eq!(e.decision, Decision::Complete("all done!".into()));
}

#[test]
fn context_reaches_the_gate() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&fx.write("echo.wasm", &fx::echo_loop_name())))
        .unwrap();
    let ctx = Context {
        loop_name: "nightly-fixes".into(),
        ..Context::default()
    };
    let e = host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
    assert_eq!(e.decision, Decision::Skip("nightly-fixes".into()));
}

#[test]
fn infinite_loop_times_out_naming_the_gate() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let path = fx.write("spin.wasm", &fx::infinite_loop());
    let gate = host.load(&file(&path)).unwrap();
    host.describe(&gate).unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &limits(50, 16 << 20))
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &GateErrorKind::Timeout {
            limit: Duration::from_millis(50)
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("spin.wasm") && msg.contains("test-gate 0.1.0"),
        "{msg}"
    );
    assert!(msg.contains("timed out after 50ms"), "{msg}");
    // The same gate again: a fresh instance, the same typed error.
    let again = host
        .evaluate(&gate, &Context::default(), &limits(20, 16 << 20))
        .unwrap_err();
    assert!(matches!(again.kind(), GateErrorKind::Timeout { .. }));
    assert_host_still_works(&host, &fx);
}

#[test]
fn memory_bomb_hits_the_cap() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&fx.write("bomb.wasm", &fx::memory_bomb())))
        .unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &limits(5_000, 8 << 20))
        .unwrap_err();
    assert_eq!(err.kind(), &GateErrorKind::MemoryCap { limit: 8 << 20 });
    assert!(err.to_string().contains("memory limit of 8 MiB"), "{err}");
    assert!(err.to_string().contains("bomb.wasm"), "{err}");
    assert_host_still_works(&host, &fx);
}

#[test]
fn deep_recursion_is_a_trap() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&fx.write("recurse.wasm", &fx::deep_recursion())))
        .unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &limits(5_000, 16 << 20))
        .unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::Trap { .. }), "{err:?}");
    assert!(err.to_string().contains("recurse.wasm"), "{err}");
    assert_host_still_works(&host, &fx);
}

#[test]
fn panic_text_from_stderr_travels_with_the_trap() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host.load(&file(&fx.write("panic.wasm", &fx::panics()))).unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap_err();
    match err.kind() {
        GateErrorKind::Trap { guest_output, .. } => {
            assert_eq!(guest_output, "thread panicked at src/lib.rs: boom!!");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    // Named with its version although nothing described it first, as in a
    // tick, so a tick and `gate test` name a gate the same way.
    let msg = err.to_string();
    assert!(
        msg.starts_with("gate ") && msg.contains("panic.wasm (test-gate 0.1.0) trapped: "),
        "{msg}"
    );
    assert!(
        msg.ends_with("; gate output: thread panicked at src/lib.rs: boom!!"),
        "{msg}"
    );
    assert_host_still_works(&host, &fx);
}

#[test]
fn endless_stdout_is_bounded() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    // 20,000 lines of 64 bytes: 1.25 MiB, twenty times the limit.
    let gate = host
        .load(&file(&fx.write("spew.wasm", &fx::spew(Some(20_000)))))
        .unwrap();
    let e = host
        .evaluate(&gate, &Context::default(), &limits(60_000, 16 << 20))
        .unwrap();
    assert_eq!(e.decision, Decision::Proceed);
    let total: usize = e.logs.iter().map(|l| l.message.len() + 1).sum();
    assert!(total <= OUTPUT_LIMIT + 200, "{total}");
    let last = e.logs.last().unwrap();
    assert_eq!(last.source, LogSource::Stdout);
    assert!(
        last.message
            .contains(&format!("{} more bytes", 20_000 * 64 - OUTPUT_LIMIT)),
        "{}",
        last.message
    );
    // Forever: the timeout ends it, and the host goes on.
    let forever = host
        .load(&file(&fx.write("spew-forever.wasm", &fx::spew(None))))
        .unwrap();
    let err = host
        .evaluate(&forever, &Context::default(), &limits(100, 16 << 20))
        .unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::Timeout { .. }), "{err:?}");
    assert_host_still_works(&host, &fx);
}

#[test]
fn sandbox_grants_no_files_env_or_args() {
    let fx = Fixture::new();
    // SAFETY-free way to make sure the host process has something to leak.
    assert!(std::env::vars().count() > 0);
    let host = GateHost::new(None).unwrap();
    for (name, bytes) in [("files.wasm", fx::reads_files()), ("env.wasm", fx::reads_env())] {
        let gate = host.load(&file(&fx.write(name, &bytes))).unwrap();
        let e = host
            .evaluate(&gate, &Context::default(), &Limits::default())
            .unwrap();
        assert_eq!(e.decision, Decision::Proceed, "{name}");
    }
}

#[test]
fn wall_clock_is_frozen_at_the_context_now() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&fx.write("clock.wasm", &fx::reads_clock())))
        .unwrap();
    let ctx = Context {
        now: "2020-02-29T12:34:56.789Z".parse().unwrap(),
        ..Context::default()
    };
    let e = host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
    assert_eq!(e.decision, Decision::Proceed);
}

#[test]
fn refusal_is_typed() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&fx.write("refuse.wasm", &fx::refuses())))
        .unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &GateErrorKind::Refused {
            message: "cannot read the state".into()
        }
    );
    assert!(err.logs().is_empty());
}

#[test]
fn bad_components_are_refused_at_load() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let good = fx::good();

    let text = fx.write("notes.wasm", b"this is not wasm");
    let err = host.load(&file(&text)).unwrap_err();
    assert!(
        matches!(err.kind(), GateErrorKind::NotAComponent { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("notes.wasm"), "{err}");

    let core = fx.write("core.wasm", &wat::parse_str("(module)").unwrap());
    let err = host.load(&file(&core)).unwrap_err();
    assert!(
        matches!(err.kind(), GateErrorKind::NotAComponent { .. }),
        "{err:?}"
    );

    let truncated = fx.write("truncated.wasm", &good[..good.len() / 2]);
    let err = host.load(&file(&truncated)).unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::Compile { .. }), "{err:?}");

    for (name, with_import) in [("other.wasm", false), ("other-import.wasm", true)] {
        let p = fx.write(name, &fx::other_world(with_import));
        let err = host.load(&file(&p)).unwrap_err();
        assert!(
            matches!(err.kind(), GateErrorKind::WrongWorld { .. }),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }

    let missing = fx.dir.path().join("nope.wasm");
    let err = host.load(&file(&missing)).unwrap_err();
    assert!(
        matches!(err.kind(), GateErrorKind::MissingFile { path, .. } if *path == missing),
        "{err:?}"
    );

    let err = host.load(&GateSource::Stock("no-such-gate".into())).unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::UnknownStock { .. }));
    assert_host_still_works(&host, &fx);
}

#[test]
fn sha256_pin_is_enforced() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let bytes = fx::good();
    let path = fx.write("pinned.wasm", &bytes);
    let actual = automaton::gate::sha256_hex(&bytes);
    let pinned = |pin: &str| GateSource::File {
        path: path.clone(),
        sha256: Some(pin.to_owned()),
    };
    host.load(&pinned(&actual.to_uppercase())).unwrap();
    let wrong = "0".repeat(64);
    let err = host.load(&pinned(&wrong)).unwrap_err();
    assert_eq!(
        err.kind(),
        &GateErrorKind::HashMismatch {
            expected: wrong,
            actual
        }
    );
}

#[test]
fn cache_hit_on_second_load_and_corrupt_entries_are_recompiled() {
    let fx = Fixture::new();
    let path = fx.write("cached.wasm", &fx::good());
    let first = GateHost::new(Some(fx.cache())).unwrap();
    first.load(&file(&path)).unwrap();
    assert_eq!(first.cache_stats().compiled, 1);
    // Memoised within a process: no second compile, no cache read.
    first.load(&file(&path)).unwrap();
    assert_eq!(first.cache_stats().compiled, 1);
    assert_eq!(first.cache_stats().hits, 0);

    let second = GateHost::new(Some(fx.cache())).unwrap();
    let gate = second.load(&file(&path)).unwrap();
    assert_eq!(second.cache_stats().hits, 1);
    assert_eq!(second.cache_stats().compiled, 0);
    second
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();

    let entries = cwasm_entries(&fx.cache());
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    let good_entry = std::fs::read(entry).unwrap();
    // Cached artefacts are mapped, not read: rewriting one in place under a
    // live host would pull pages from under it. The cache itself only ever
    // renames new files into place; here no host holds the entry.
    drop(gate);
    drop(second);

    for corrupt in [
        b"garbage".to_vec(),
        good_entry[..good_entry.len() / 2].to_vec(),
        Vec::new(),
    ] {
        std::fs::write(entry, &corrupt).unwrap();
        let host = GateHost::new(Some(fx.cache())).unwrap();
        let gate = host.load(&file(&path)).unwrap();
        let s = host.cache_stats();
        assert_eq!((s.rejected, s.compiled, s.hits), (1, 1, 0), "{s:?}");
        host.evaluate(&gate, &Context::default(), &Limits::default())
            .unwrap();
        // Repaired: the next process hits.
        let next = GateHost::new(Some(fx.cache())).unwrap();
        next.load(&file(&path)).unwrap();
        assert_eq!(next.cache_stats().hits, 1);
    }
}

fn cwasm_entries(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache.join("gates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

fn entry_of(cache: &Path, sha256: &str) -> PathBuf {
    let found: Vec<PathBuf> = cwasm_entries(cache)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(sha256))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// Regression: a `.cwasm` copied over the entry named after a pinned
/// component's sha256 ran the other gate, bypassing the pin.
#[test]
fn an_entry_swapped_for_another_gates_is_not_run() {
    let fx = Fixture::new();
    let good = fx.write("good.wasm", &fx::good());
    let other = fx.write("refuses.wasm", &fx::refuses());
    let host = GateHost::new(Some(fx.cache())).unwrap();
    let good_sha = host.load(&file(&good)).unwrap().sha256().to_owned();
    let other_sha = host.load(&file(&other)).unwrap().sha256().to_owned();
    drop(host);
    let good_entry = entry_of(&fx.cache(), &good_sha);
    let other_entry = entry_of(&fx.cache(), &other_sha);

    // The artefact alone, then the artefact with its seal.
    for with_seal in [false, true] {
        std::fs::copy(&other_entry, &good_entry).unwrap();
        if with_seal {
            std::fs::copy(
                other_entry.with_extension("seal"),
                good_entry.with_extension("seal"),
            )
            .unwrap();
        }
        let host = GateHost::new(Some(fx.cache())).unwrap();
        let pinned = GateSource::File {
            path: good.clone(),
            sha256: Some(good_sha.clone()),
        };
        let gate = host.load(&pinned).unwrap();
        let s = host.cache_stats();
        assert_eq!((s.rejected, s.compiled, s.hits), (1, 1, 0), "{s:?}");
        let e = host
            .evaluate(&gate, &Context::default(), &Limits::default())
            .expect("the pinned gate runs, not the swapped one");
        assert_eq!(e.decision, Decision::Proceed);
        // Repaired: the next process uses the rewritten entry.
        let next = GateHost::new(Some(fx.cache())).unwrap();
        next.load(&pinned).unwrap();
        assert_eq!(next.cache_stats().hits, 1);
    }
}

#[cfg(unix)]
#[test]
fn a_cache_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let path = fx.write("good.wasm", &fx::good());
    GateHost::new(Some(fx.cache()))
        .unwrap()
        .load(&file(&path))
        .unwrap();
    let gates = fx.cache().join("gates");
    for (dir, mode) in [(&gates, 0o777), (&gates, 0o720), (&fx.cache(), 0o757)] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let host = GateHost::new(Some(fx.cache())).unwrap();
        let gate = host.load(&file(&path)).unwrap();
        let s = host.cache_stats();
        assert_eq!((s.hits, s.compiled), (0, 1), "mode {mode:o} on {dir:?}: {s:?}");
        host.evaluate(&gate, &Context::default(), &Limits::default())
            .unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // A writable entry in a private directory is not used either.
    let entry = cwasm_entries(&fx.cache()).remove(0);
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    let host = GateHost::new(Some(fx.cache())).unwrap();
    host.load(&file(&path)).unwrap();
    let s = host.cache_stats();
    assert_eq!((s.hits, s.rejected, s.compiled), (0, 1, 1), "{s:?}");

    // The binary says which path and why, and still decides.
    std::fs::create_dir(fx.dir.path().join("loops")).unwrap();
    std::fs::set_permissions(&gates, std::fs::Permissions::from_mode(0o777)).unwrap();
    automaton()
        .args(["gate", "test"])
        .arg(&path)
        .env("AUTOMATON_ROOT", fx.dir.path())
        .assert()
        .success()
        .stdout(predicates::str::contains("proceed"))
        .stderr(predicates::str::contains(format!(
            "not using the gate cache: {} is writable by other users (mode 777)",
            gates.display()
        )));
    automaton()
        .args(["-q", "gate", "test"])
        .arg(&path)
        .env("AUTOMATON_ROOT", fx.dir.path())
        .assert()
        .success()
        .stderr("");
}

#[test]
fn unwritable_cache_is_not_fatal() {
    let fx = Fixture::new();
    let not_a_dir = fx.write("cache-is-a-file", b"");
    let host = GateHost::new(Some(not_a_dir)).unwrap();
    let gate = host.load(&file(&fx.write("good.wasm", &fx::good()))).unwrap();
    assert_eq!(host.cache_stats().compiled, 1);
    host.evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
}

// ---- the binary ----

fn automaton() -> Command {
    let mut c = std::process::Command::new(crate::common::BIN);
    crate::common::isolate(&mut c);
    Command::from_std(c)
}

#[test]
fn gate_test_prints_the_decision_and_logs() {
    let fx = Fixture::new();
    let path = fx.write("good.wasm", &fx::good());
    let ctx = fx.write("ctx.json", br#"{"tick": 5, "loop_name": "x"}"#);
    let out = automaton()
        .args(["gate", "test"])
        .arg(&path)
        .arg("--context")
        .arg(&ctx)
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["decision"], "complete");
    assert_eq!(v["reason"], "all done!");
    assert_eq!(v["info"]["name"], "test-gate");
    assert_eq!(v["logs"][0]["message"], "hello, host");
    assert!(v["elapsed_us"].is_u64());

    // Context from stdin, human output.
    automaton()
        .args(["gate", "test"])
        .arg(&path)
        .args(["--context", "-"])
        .write_stdin(r#"{"tick": 0}"#)
        .assert()
        .success()
        .stdout(predicates::str::contains("decision: proceed"))
        .stdout(predicates::str::contains("hello, host"));
}

#[test]
fn gate_test_human_output() {
    let fx = Fixture::new();
    fx.write("good.wasm", &fx::good());
    let out = automaton()
        .current_dir(fx.dir.path())
        .args(["gate", "test", "good.wasm", "--context", "-"])
        .write_stdin(r#"{"tick": 9, "loop_name": "nightly"}"#)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    insta::with_settings!({filters => vec![(r"(?m)^time: .*$", "time:     [elapsed]")]}, {
        insta::assert_snapshot!(String::from_utf8(out).unwrap());
    });
}

#[test]
fn gate_test_reports_a_gate_error_once_with_exit_1() {
    let fx = Fixture::new();
    let path = fx.write("spin.wasm", &fx::infinite_loop());
    let out = automaton()
        .args(["gate", "test"])
        .arg(&path)
        .args(["--timeout", "50ms"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("spin.wasm"), "{stderr}");
    assert!(stderr.contains("timed out after 50ms"), "{stderr}");
    assert_eq!(stderr.matches("timed out").count(), 1, "{stderr}");
    assert!(out.stdout.is_empty());

    automaton()
        .args(["gate", "test"])
        .arg(fx.write("text.wasm", b"hello"))
        .assert()
        .code(1)
        .stderr(predicates::str::contains("is not a WebAssembly component"));
    automaton()
        .args(["gate", "test"])
        .arg(&path)
        .args(["--params", "{not json"])
        .assert()
        .code(2);
}

#[test]
fn gate_inspect_shows_interface_and_hash() {
    let fx = Fixture::new();
    let bytes = fx::panics();
    let path = fx.write("panic.wasm", &bytes);
    let out = automaton()
        .args(["gate", "inspect", "--json"])
        .arg(&path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["sha256"], automaton::gate::sha256_hex(&bytes));
    assert_eq!(v["size"], bytes.len());
    let exports: Vec<&str> = v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(exports, ["describe", "check-params", "evaluate"]);
    let imports = v["imports"].to_string();
    assert!(imports.contains("automaton:gate/host@0.1.0"), "{imports}");
    assert!(imports.contains("wasi:cli/stderr"), "{imports}");
}

#[test]
fn gate_compile_warms_the_cache() {
    let fx = Fixture::new();
    let path = fx.write("warm.wasm", &fx::good());
    let root = fx.dir.path();
    // gate compile without an initialised root has nowhere to cache.
    automaton()
        .arg("--root")
        .arg(root)
        .args(["gate", "compile"])
        .arg(&path)
        .assert()
        .code(3);
    std::fs::create_dir(root.join("loops")).unwrap();
    automaton()
        .arg("--root")
        .arg(root)
        .args(["gate", "compile"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicates::str::starts_with("compiled: "));
    automaton()
        .arg("--root")
        .arg(root)
        .args(["gate", "compile"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicates::str::starts_with("already cached: "));
    automaton()
        .args(["-v", "-v", "gate", "test"])
        .arg(&path)
        .env("AUTOMATON_ROOT", root)
        .assert()
        .success()
        .stderr(predicates::str::contains("gate cache hit"));
}

/// A gate's error reads the same in `gate test` and in a tick: the path as
/// loop.toml (or the command line) writes it, the gate's name and version,
/// then what went wrong.
#[test]
fn a_gate_error_reads_the_same_in_gate_test_and_in_a_tick() {
    let env = crate::common::Env::new();
    env.new_loop(
        "panicky",
        "step = \"true\"\n[[gate]]\npath = \"gates/panic.wasm\"\non_error = \"skip\"\n",
    );
    let dir = env.loop_dir("panicky");
    std::fs::create_dir_all(dir.join("gates")).unwrap();
    std::fs::write(dir.join("gates/panic.wasm"), fx::panics()).unwrap();

    let out = env
        .cmd()
        .current_dir(&dir)
        .args(["gate", "test", "gates/panic.wasm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let from_test = stderr.trim_end().strip_prefix("error: ").expect(&stderr);

    let v: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "panicky", "--json"])).unwrap();
    let from_tick = v["decisions"][0]["error"]
        .as_str()
        .expect("the tick records the error");
    assert!(
        from_tick.starts_with("gate gates/panic.wasm (test-gate 0.1.0) trapped: "),
        "{from_tick}"
    );
    assert_eq!(from_test, from_tick);
}

/// Writes `text` to stderr, then traps: what a gate's runtime does when the
/// gate's code fails.
fn prints_then_traps(text: &str) -> Vec<u8> {
    fx::WatGate::new(&format!(
        "(i32.store (i32.const 600) (i32.const 1024))
    (i32.store (i32.const 604) (i32.const {}))
    (drop (call $fd_write (i32.const 2) (i32.const 600) (i32.const 1) (i32.const 608)))
    (unreachable)",
        text.len()
    ))
    .data(1024, text)
    .wasi()
    .build()
}

/// What componentize-py's runtime prints for an uncaught exception.
const PYTHON_EXCEPTION: &str = "Traceback (most recent call last):
  File \"/0/app.py\", line 18, in evaluate
ValueError: the office calendar is unreadable

thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:
Python function threw an unexpected exception
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
";

#[test]
fn an_uncaught_python_exception_reads_as_the_exception_not_the_runtime_panic() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let gate = host
        .load(&file(&fx.write("py.wasm", &prints_then_traps(PYTHON_EXCEPTION))))
        .unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("gate ")
            && msg.ends_with(
                "py.wasm (test-gate 0.1.0) raised ValueError: the office calendar is unreadable \
                 (at app.py, line 18, in evaluate)"
            ),
        "{msg}"
    );
    // The raw detail is kept on the error (and logged at debug level).
    match err.kind() {
        GateErrorKind::Exception {
            exception,
            trap,
            guest_output,
            ..
        } => {
            assert_eq!(exception, "ValueError: the office calendar is unreadable");
            assert!(trap.contains("unreachable"), "{trap}");
            assert!(guest_output.contains("Python function threw"), "{guest_output}");
        }
        other => panic!("expected an exception, got {other:?}"),
    }
    assert_host_still_works(&host, &fx);
}

#[test]
fn a_rust_panic_reads_as_its_message_and_a_bare_trap_as_its_reason() {
    let fx = Fixture::new();
    let host = GateHost::new(None).unwrap();
    let panics = prints_then_traps(
        "thread '<unnamed>' panicked at src/lib.rs:41:9:\nstart_hour out of range: 25\n\
         note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
    );
    let gate = host.load(&file(&fx.write("rs.wasm", &panics))).unwrap();
    let err = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::Panic { .. }), "{err:?}");
    assert!(
        err.to_string().ends_with(
            "rs.wasm (test-gate 0.1.0) panicked: start_hour out of range: 25 (at src/lib.rs:41:9)"
        ),
        "{err}"
    );

    let bare = host
        .load(&file(&fx.write("bare.wasm", &prints_then_traps(""))))
        .unwrap();
    let err = host
        .evaluate(&bare, &Context::default(), &Limits::default())
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("bare.wasm (test-gate 0.1.0) trapped: wasm `unreachable` instruction executed"),
        "{err}"
    );
}

/// A Python gate's exception reads the same in `gate test`, in a tick's
/// history and in `status`, and `gate test -vv` shows the raw detail.
#[test]
fn a_python_exception_reads_the_same_in_gate_test_a_tick_and_status() {
    let env = crate::common::Env::new();
    env.new_loop("office", "step = \"true\"\n[[gate]]\npath = \"gates/py.wasm\"\n");
    let dir = env.loop_dir("office");
    std::fs::create_dir_all(dir.join("gates")).unwrap();
    std::fs::write(dir.join("gates/py.wasm"), prints_then_traps(PYTHON_EXCEPTION)).unwrap();
    let expected = "gate gates/py.wasm (test-gate 0.1.0) raised ValueError: the office calendar \
                    is unreadable (at app.py, line 18, in evaluate)";

    let out = env
        .cmd()
        .current_dir(&dir)
        .args(["gate", "test", "gates/py.wasm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim_end(), format!("error: {expected}"));

    let out = env
        .cmd()
        .current_dir(&dir)
        .args(["-vv", "gate", "test", "gates/py.wasm"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("Python function threw an unexpected exception"),
        "{stderr}"
    );

    // The gate fails closed: the tick halts with the error as its reason.
    let out = env.cmd().args(["tick", "office", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(7), "a halted tick");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decisions"][0]["error"], expected, "{v}");
    let recorded = env
        .history("office")
        .into_iter()
        .find_map(|e| e["error"].as_str().map(str::to_owned))
        .expect("history records the gate's error");
    assert_eq!(recorded, expected);
    let status = env.ok(&["status", "office"]);
    assert!(status.contains(expected), "{status}");
}

/// Halts when it finds what an earlier call left behind (a changed data
/// byte, a flag, grown memory); otherwise leaves all three and proceeds.
fn remembers() -> Vec<u8> {
    fx::WatGate::new(
        "(if (i32.ne (i32.load8_u (i32.const 1100)) (i32.const 111))
      (then (return (call $decide (i32.const 3) (i32.const 1024) (i32.const 6)))))
    (if (i32.load (i32.const 4000))
      (then (return (call $decide (i32.const 3) (i32.const 1024) (i32.const 6)))))
    (if (i32.gt_u (memory.size) (i32.const 1))
      (then (return (call $decide (i32.const 3) (i32.const 1024) (i32.const 6)))))
    (i32.store8 (i32.const 1100) (i32.const 88))
    (i32.store (i32.const 4000) (i32.const 1))
    (drop (memory.grow (i32.const 1)))
    (i32.store (i32.const 70000) (i32.const 7))
    (call $decide (i32.const 0) (i32.const 0) (i32.const 0))",
    )
    .data(1024, "leaked")
    .data(1100, "original")
    .build()
}

/// A long-lived host reuses pooled instance slots: every call still starts
/// from the component's own memory image, under the same limits, and calls
/// past the pool's size wait for a slot rather than fail.
#[test]
fn a_resident_host_gives_every_call_a_fresh_instance_under_the_same_limits() {
    let fx = Fixture::new();
    let host = GateHost::resident(None, 2).unwrap();
    let gate = host
        .load(&file(&fx.write("remembers.wasm", &remembers())))
        .unwrap();
    for _ in 0..5 {
        let e = host
            .evaluate(&gate, &Context::default(), &Limits::default())
            .unwrap();
        assert_eq!(
            e.decision,
            Decision::Proceed,
            "an earlier call leaked into this one"
        );
    }
    std::thread::scope(|s| {
        for _ in 0..5 {
            s.spawn(|| {
                for _ in 0..4 {
                    let e = host
                        .evaluate(&gate, &Context::default(), &Limits::default())
                        .unwrap();
                    assert_eq!(e.decision, Decision::Proceed);
                }
            });
        }
    });

    let bomb = host
        .load(&file(&fx.write("bomb.wasm", &fx::memory_bomb())))
        .unwrap();
    let err = host
        .evaluate(&bomb, &Context::default(), &limits(5_000, 8 << 20))
        .unwrap_err();
    assert_eq!(err.kind(), &GateErrorKind::MemoryCap { limit: 8 << 20 });
    let spin = host
        .load(&file(&fx.write("spin.wasm", &fx::infinite_loop())))
        .unwrap();
    let err = host
        .evaluate(&spin, &Context::default(), &limits(50, 16 << 20))
        .unwrap_err();
    assert!(matches!(err.kind(), GateErrorKind::Timeout { .. }), "{err:?}");
    assert_host_still_works(&host, &fx);
    let e = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(e.decision, Decision::Proceed);
}

/// The daemon's pooled host and a one-shot process share compiled gates.
#[test]
fn a_resident_host_loads_what_a_one_shot_host_compiled() {
    let fx = Fixture::new();
    let path = fx.write("good.wasm", &fx::good());
    let once = GateHost::new(Some(fx.cache())).unwrap();
    once.load(&file(&path)).unwrap();
    assert_eq!(once.cache_stats().compiled, 1);
    let resident = GateHost::resident(Some(fx.cache()), 4).unwrap();
    let gate = resident.load(&file(&path)).unwrap();
    let stats = resident.cache_stats();
    assert_eq!((stats.hits, stats.compiled), (1, 0), "{stats:?}");
    let e = resident
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(e.decision, Decision::Proceed);
}

/// Counts its calls in a global and skips with the count as its reason
/// ("1" in a fresh instance).
fn counts_calls() -> Vec<u8> {
    fx::WatGate::new(
        "(global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (call $decide (i32.const 1) (i32.add (i32.const 1024) (global.get $calls)) (i32.const 1))",
    )
    .extra("(global $calls (mut i32) (i32.const 0))")
    .data(1024, "0123456789")
    .build()
}

/// Waits until the host has a spare instance ready for each of `n` gates
/// (its background thread made them).
fn until_spares_ready(host: &GateHost, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    while host.spare_stats().ready < n {
        assert!(std::time::Instant::now() < deadline, "no spare was made");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// An instance made ahead is fresh: a gate that counts its calls in a
/// global sees 1 every time, and its clock shows the context's `now`.
#[test]
fn an_instance_made_ahead_is_fresh_and_sees_the_calls_now() {
    let fx = Fixture::new();
    let host = GateHost::resident(None, 2).unwrap();
    host.set_ahead_from(Duration::ZERO);
    let gate = host
        .load(&file(&fx.write("counts.wasm", &counts_calls())))
        .unwrap();
    for _ in 0..4 {
        let e = host
            .evaluate(&gate, &Context::default(), &Limits::default())
            .unwrap();
        assert_eq!(e.decision, Decision::Skip("1".into()), "an instance was reused");
        until_spares_ready(&host, 1);
    }
    let stats = host.spare_stats();
    assert_eq!((stats.missed, stats.taken), (1, 3), "{stats:?}");

    let clock = host
        .load(&file(&fx.write("clock.wasm", &fx::reads_clock())))
        .unwrap();
    for now in ["2020-02-29T12:34:56.789Z", "2031-07-01T00:00:00.001Z"] {
        let ctx = Context {
            now: now.parse().unwrap(),
            ..Context::default()
        };
        let e = host.evaluate(&clock, &ctx, &Limits::default()).unwrap();
        assert_eq!(e.decision, Decision::Proceed, "{now}");
        until_spares_ready(&host, 2);
    }
    assert_eq!(host.spare_stats().taken, 4);
}

/// A gate whose instances are quicker to make than the threshold makes
/// its own in each call once one was timed, and asks for no spare; the
/// one spare asked for before it was timed is taken, not left holding a
/// pool slot. Every call still gets a fresh instance.
#[test]
fn a_gate_quick_to_instantiate_makes_its_instance_in_the_call() {
    let fx = Fixture::new();
    let host = GateHost::resident(None, 2).unwrap();
    host.set_ahead_from(Duration::from_hours(1));
    let gate = host
        .load(&file(&fx.write("counts.wasm", &counts_calls())))
        .unwrap();
    let fresh = |host: &GateHost| {
        let e = host
            .evaluate(&gate, &Context::default(), &Limits::default())
            .unwrap();
        assert_eq!(e.decision, Decision::Skip("1".into()), "an instance was reused");
    };
    // Not yet timed: it asks for a spare.
    fresh(&host);
    until_spares_ready(&host, 1);
    for _ in 0..4 {
        fresh(&host);
    }
    let stats = host.spare_stats();
    assert_eq!(
        (stats.missed, stats.taken, stats.in_call, stats.ready),
        (1, 1, 3, 0),
        "{stats:?}"
    );
}

/// A gate file replaced between calls is evaluated as its new content,
/// never in an instance made ahead from the old one, which is dropped.
#[test]
fn a_replaced_gate_file_is_never_evaluated_in_its_old_spare() {
    let fx = Fixture::new();
    let host = GateHost::resident(None, 2).unwrap();
    host.set_ahead_from(Duration::ZERO);
    let path = fx.write("gate.wasm", &counts_calls());
    let gate = host.load(&file(&path)).unwrap();
    let e = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(e.decision, Decision::Skip("1".into()));
    until_spares_ready(&host, 1);

    fx.write("gate.wasm", &fx::good());
    let gate = host.load(&file(&path)).unwrap();
    assert_eq!(host.spare_stats().dropped, 1, "the old content's spare is gone");
    let e = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(e.decision, Decision::Proceed);
    let stats = host.spare_stats();
    assert_eq!((stats.taken, stats.missed), (0, 2), "{stats:?}");
}

/// An instance that cannot be made (its memory alone is over the cap) fails
/// the next call with the error a call that made it itself gives, every
/// time, in a long-lived host as in a one-shot one.
#[test]
fn an_instance_that_cannot_be_made_ahead_fails_the_next_call_with_the_same_error() {
    let fx = Fixture::new();
    let path = fx.write("good.wasm", &fx::good());
    let tight = limits(5_000, 32 << 10);
    let once = GateHost::new(None).unwrap();
    let expected = once
        .evaluate(&once.load(&file(&path)).unwrap(), &Context::default(), &tight)
        .unwrap_err();
    assert_eq!(expected.kind(), &GateErrorKind::MemoryCap { limit: 32 << 10 });

    let host = GateHost::resident(None, 2).unwrap();
    host.set_ahead_from(Duration::ZERO);
    let gate = host.load(&file(&path)).unwrap();
    for _ in 0..3 {
        let err = host.evaluate(&gate, &Context::default(), &tight).unwrap_err();
        assert_eq!(err.kind(), expected.kind());
        assert_eq!(err.to_string(), expected.to_string());
        until_spares_ready(&host, 1);
    }
    assert_eq!(host.spare_stats().taken, 2);
    // The same gate under its usual limits is unaffected.
    let e = host
        .evaluate(&gate, &Context::default(), &Limits::default())
        .unwrap();
    assert_eq!(e.decision, Decision::Proceed);
}

/// The daemon, whose gate host keeps a spare instance, still ends on
/// SIGTERM with exit 0 once its ticks have.
#[test]
fn the_daemon_ends_on_sigterm_with_a_spare_instance_made() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let env = crate::common::Env::new();
    let gate = env.root.join("counts.wasm");
    std::fs::write(&gate, counts_calls()).unwrap();
    let toml = format!(
        "step = \"true\"\n[schedule]\nevery = \"100ms\"\n[[gate]]\npath = \"{}\"\n",
        gate.display()
    );
    let file = env.root.join("often.toml");
    std::fs::write(&file, toml).unwrap();
    env.cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .args(["new", "often", "--from"])
        .arg(&file)
        .status()
        .unwrap()
        .success()
        .then_some(())
        .expect("the loop is made");
    let mut daemon = env
        .cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .arg("daemon")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let gate_events = || {
        env.history("often")
            .into_iter()
            .filter(|e| e["kind"] == "gate")
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    while gate_events().len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the daemon never ticked");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    let status = loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = daemon.kill();
            panic!("the daemon did not end on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    // Every evaluation, whether its instance was made ahead or not, saw a
    // fresh one: the count is 1 each time.
    for e in gate_events() {
        assert_eq!(
            (&e["decision"], &e["reason"]),
            (&"skip".into(), &"1".into()),
            "{e}"
        );
    }
}

/// In a gate's project folder, outside any root, `gate compile` and `gate
/// test` cache compiled gates in the user's own cache, private to them.
#[test]
fn outside_a_root_gates_are_cached_for_the_user() {
    let fx = Fixture::new();
    let path = fx.write("project.wasm", &fx::good());
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = automaton();
        cmd.args(args)
            .arg(&path)
            .current_dir(fx.dir.path())
            .env("HOME", home.path())
            .env_remove("XDG_CACHE_HOME");
        cmd.assert().success()
    };
    run(&["gate", "compile"]).stdout(predicates::str::starts_with("compiled: "));
    run(&["gate", "compile"]).stdout(predicates::str::starts_with("already cached: "));
    run(&["-v", "-v", "gate", "test"]).stderr(predicates::str::contains("gate cache hit"));
    let cache = home.path().join(".cache/automaton");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&cache).unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "the cache is the user's alone: {mode:o}");
}
