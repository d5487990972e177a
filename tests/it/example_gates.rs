//! The example gates in examples/gates/, built with their own build scripts
//! and run as an author would: `gate test --cases` with their cases.json,
//! then a real tick. A missing toolchain skips a language (and says so),
//! unless AUTOMATON_REQUIRE_GATE_TOOLCHAINS=1, as CI sets, makes it fail.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use jiff::Timestamp;

use crate::common::{Env, link_cache};

fn example_dir(lang: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/gates")
        .join(lang)
}

fn has(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Builds the example with its build script into a temp dir, or says why
/// it cannot (and fails when toolchains are required).
fn build(lang: &str, toolchain: &str, present: bool, out: &Path) -> Option<PathBuf> {
    if !present {
        let required = std::env::var("AUTOMATON_REQUIRE_GATE_TOOLCHAINS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "the {lang} example gate needs {toolchain}, which is missing"
        );
        eprintln!(
            "skipped: the {lang} example gate needs {toolchain} (AUTOMATON_REQUIRE_GATE_TOOLCHAINS=1 makes this a failure)"
        );
        return None;
    }
    let built = built(&format!("office-hours-{lang}"), &example_dir(lang));
    let wasm = out.join(format!("office-hours-{lang}.wasm"));
    std::fs::copy(&built, &wasm).unwrap();
    Some(wasm)
}

/// The component `src`'s build script makes, built once per version of
/// its sources and kept in the target directory for the next run.
fn built(name: &str, src: &Path) -> PathBuf {
    let built = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("example-gates")
        .join(format!("{name}-{}.wasm", sources_hash(src)));
    if !built.is_file() {
        std::fs::create_dir_all(built.parent().unwrap()).unwrap();
        let partial = built.with_extension("partial");
        let status = build_script(&src.join("build.sh"))
            .arg(&partial)
            .status()
            .unwrap();
        assert!(status.success(), "building {name}: {status}");
        std::fs::rename(&partial, &built).unwrap();
    }
    built
}

/// The compiled-gate cache of the Python and JavaScript gates, kept in the
/// target directory from one run to the next. Compiling one of their
/// 12-18 MB components costs 15-20 s of CPU in a debug build, most of this
/// file's cost, and they change only when their sources do. An entry is
/// found by what the product keys it on (the component's sha256, the
/// wasmtime version, the engine's settings), so a new build of a gate or a
/// change to the engine compiles again, and every load still passes the
/// product's checks: the directory is private and this user's, and the
/// entry's seal binds it to that component. The first compile runs in
/// every run all the same: the stock gates and the Rust and C examples are
/// compiled into the run's own cache (`common::shared_cache`).
fn kept_cache() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("example-gate-cache");
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                panic!("{}: {e}", dir.display())
            }
            _ => dir,
        }
    })
}

/// A fresh root for a test of `lang`'s gate: the Python and JavaScript
/// ones compile into `kept_cache`, the others into the run's own cache.
fn env_for(lang: &str) -> Env {
    if !["python", "javascript"].contains(&lang) {
        return Env::new();
    }
    let env = Env::with_own_cache();
    link_cache(&env.root, kept_cache());
    env
}

/// A hash of an example's sources: every file but what its build makes or
/// fetches (`target/`, `node_modules/`, `.venv/`, `__pycache__/`, C
/// `bindings/`, wasm).
fn sources_hash(dir: &Path) -> String {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if ["target", "node_modules", ".venv", "__pycache__", "bindings"].contains(&name.as_ref())
                || name.ends_with(".wasm")
            {
                continue;
            }
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    let mut all = Vec::new();
    for f in files {
        all.extend(f.strip_prefix(dir).unwrap().to_string_lossy().as_bytes());
        all.push(0);
        all.extend(std::fs::read(&f).unwrap());
        all.push(0);
    }
    automaton::gate::sha256_hex(&all)[..16].to_owned()
}

/// A build script's command. The C gate's tool (tools/, the same crates
/// wherever the project is) builds once per test run into a shared target
/// directory instead of once per project.
fn build_script(script: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg(script);
    cmd.env(
        "CARGO_TARGET_DIR",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("gate-tools"),
    );
    cmd
}

/// Whether Debian's C toolchain for gates is here: clang and lld 19 with
/// wasi-libc and the wasm32 compiler runtime.
fn has_c_toolchain() -> bool {
    let probe = tempfile::tempdir().unwrap();
    let src = probe.path().join("probe.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint probe(void) { return puts(\"\"); }\n",
    )
    .unwrap();
    Command::new("clang-19")
        .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-o"])
        .arg(probe.path().join("probe.wasm"))
        .arg(&src)
        .output()
        .is_ok_and(|o| o.status.success())
        && has("cargo", "--version")
}

const C_TOOLCHAIN: &str =
    "clang-19, lld-19, wasi-libc and libclang-rt-19-dev-wasm32 (Debian packages) and cargo";

/// What office-hours decides at `now` with no failed run.
fn expected_at(now: Timestamp) -> (&'static str, &'static str) {
    const DAY: i64 = 86_400_000;
    let ms = now.as_millisecond();
    let weekday = (ms.div_euclid(DAY) + 3) % 7; // 1970-01-01 was a Thursday
    let hour = ms.rem_euclid(DAY) / 3_600_000;
    if weekday >= 5 {
        ("skip", "weekend")
    } else if !(9..17).contains(&hour) {
        ("skip", "outside office hours (09:00-17:00 UTC)")
    } else {
        ("proceed", "")
    }
}

fn run_example(lang: &str, toolchain: &str, present: bool) {
    let env = env_for(lang);
    let Some(wasm) = build(lang, toolchain, present, &env.root) else {
        return;
    };
    let cases = example_dir(lang).join("cases.json");
    let out = env.ok(&[
        "gate",
        "test",
        wasm.to_str().unwrap(),
        "--cases",
        cases.to_str().unwrap(),
    ]);
    assert!(out.starts_with("gate "), "{out}");
    assert!(out.contains("(office-hours 1.0.0)"), "{out}");
    assert!(out.ends_with("12 passed, 0 failed\n"), "{out}");

    env.new_loop(
        "office",
        "step = \"true\"\n[[gate]]\npath = \"gates/office-hours.wasm\"\nphase = [\"before-step\"]\n",
    );
    std::fs::create_dir_all(env.loop_dir("office").join("gates")).unwrap();
    std::fs::copy(&wasm, env.loop_dir("office").join("gates/office-hours.wasm")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "office", "--json"])).unwrap();
    let verdict = &v["decisions"][0];
    assert!(verdict.get("error").is_none(), "{v}");
    // The decision depends on the time the gate saw, which history keeps.
    let now = env
        .history("office")
        .into_iter()
        .find_map(|e| e["context"]["now"].as_str().map(str::to_owned))
        .expect("history records the gate's context");
    let (decision, reason) = expected_at(now.parse().unwrap());
    assert_eq!(verdict["decision"], decision, "{v}");
    if !reason.is_empty() {
        assert_eq!(verdict["reason"], reason, "{v}");
    }
}

#[test]
fn rust_example_gate() {
    let present = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2"));
    run_example(
        "rust",
        "the wasm32-wasip2 target (rustup target add wasm32-wasip2)",
        present,
    );
}

#[test]
fn python_example_gate() {
    run_example(
        "python",
        "componentize-py 0.25.1 (pip install componentize-py==0.25.1)",
        has("componentize-py", "--version"),
    );
}

#[test]
fn javascript_example_gate() {
    run_example(
        "javascript",
        "node and npm",
        has("node", "--version") && has("npm", "--version"),
    );
}

#[test]
fn c_example_gate() {
    run_example("c", C_TOOLCHAIN, has_c_toolchain());
}

/// `gate new` makes a project that builds and passes its own cases after
/// the first things an author does: bump its version, and add a
/// dependency the gate's code uses (a crate, a PyPI package, an npm
/// package, another C file). Each language's build script must notice
/// both (a stale lock file, requirements never installed, an import left
/// unbundled, a file left out all fail here).
#[test]
fn gate_new_rust_builds_after_a_version_bump_and_a_new_dependency() {
    let present = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2"));
    scaffold_and_build("rust", "the wasm32-wasip2 target", present, |dir| {
        edit(
            &dir.join("Cargo.toml"),
            "version = \"1.0.0\"",
            "version = \"1.1.0\"",
        );
        edit(
            &dir.join("Cargo.toml"),
            "[dependencies]\n",
            "[dependencies]\nitoa = \"1\"\n",
        );
        edit(
            &dir.join("src/lib.rs"),
            "const MS_PER_HOUR: u64 = 3_600_000;",
            "const MS_PER_HOUR: u64 = 3_600_000;\n\n\
             /// An hour as digits, by the new dependency.\n\
             pub fn hour_digits() -> String {\n    \
             itoa::Buffer::new().format(MS_PER_HOUR).to_owned()\n}",
        );
    });
}

#[test]
fn gate_new_python_builds_after_a_version_bump_and_a_new_dependency() {
    let present = has("componentize-py", "--version") || has("python3", "--version");
    scaffold_and_build("python", "componentize-py or python3", present, |dir| {
        edit(&dir.join("app.py"), "version=\"1.0.0\"", "version=\"1.1.0\"");
        edit(&dir.join("requirements.txt"), "\n", "\nsix==1.17.0\n");
        edit(
            &dir.join("app.py"),
            "import json\n",
            "import json\n\nimport six\n",
        );
        edit(
            &dir.join("app.py"),
            "MS_PER_HOUR = 3_600_000",
            "MS_PER_HOUR = 3_600_000 if six.PY3 else 0",
        );
    });
}

#[test]
fn gate_new_javascript_builds_after_a_version_bump_and_a_new_dependency() {
    let present = has("node", "--version") && has("npm", "--version");
    scaffold_and_build("javascript", "node and npm", present, |dir| {
        edit(&dir.join("gate.js"), "version: '1.0.0'", "version: '1.1.0'");
        edit(
            &dir.join("package.json"),
            "\"devDependencies\"",
            "\"dependencies\": {\n    \"ms\": \"2.1.3\"\n  },\n  \"devDependencies\"",
        );
        edit(
            &dir.join("gate.js"),
            "const MS_PER_HOUR = 3_600_000n;",
            "import ms from 'ms';\n\nconst MS_PER_HOUR = BigInt(ms('1h'));",
        );
    });
}

#[test]
fn gate_new_c_builds_after_a_version_bump_and_a_new_dependency() {
    scaffold_and_build("c", C_TOOLCHAIN, has_c_toolchain(), |dir| {
        edit(&dir.join("gate.c"), "\"1.0.0\"", "\"1.1.0\"");
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/hours.h"), "unsigned long long ms_per_hour(void);\n").unwrap();
        std::fs::write(
            dir.join("lib/hours.c"),
            "#include \"hours.h\"\nunsigned long long ms_per_hour(void) { return 3600000ull; }\n",
        )
        .unwrap();
        edit(
            &dir.join("gate.c"),
            "#define MS_PER_HOUR 3600000ull",
            "#include \"lib/hours.h\"\n#define MS_PER_HOUR (ms_per_hour())",
        );
    });
}

/// Replaces `from` (which must be there) with `to` in `path`.
fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// `gate new night-owl --lang LANG`, then `change` as an author would,
/// then the project's build script and `gate test --cases` with its
/// cases: all pass, from the bumped version 1.1.0, and its imports name
/// the newest version of the interface.
fn scaffold_and_build(lang: &str, toolchain: &str, present: bool, change: impl Fn(&Path)) {
    let env = env_for(lang);
    let dir = env.root.join("night-owl");
    let new = [
        "gate",
        "new",
        "night-owl",
        "--lang",
        lang,
        "--dir",
        dir.to_str().unwrap(),
    ];
    let out = env.ok(&new);
    assert!(out.starts_with("created gate project "), "{out}");
    env.fails(1, &new);
    env.fails(2, &["gate", "new", "Night", "--lang", lang]);
    if !present {
        let required = std::env::var("AUTOMATON_REQUIRE_GATE_TOOLCHAINS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "gate new --lang {lang} needs {toolchain}, which is missing"
        );
        eprintln!("skipped: building a scaffolded {lang} gate needs {toolchain}");
        return;
    }
    change(&dir);
    let wasm = env.root.join("night-owl.wasm");
    let status = build_script(&dir.join("build.sh")).arg(&wasm).status().unwrap();
    assert!(status.success(), "{status}");
    let cases = dir.join("cases.json");
    let out = env.ok(&[
        "gate",
        "test",
        wasm.to_str().unwrap(),
        "--cases",
        cases.to_str().unwrap(),
    ]);
    assert!(out.contains("(night-owl 1.1.0)"), "{out}");
    assert!(out.ends_with("12 passed, 0 failed\n"), "{out}");
    // Built against the newest interface, the one wit/gate.wit declares.
    let newest = include_str!("../../wit/gate.wit")
        .lines()
        .find_map(|l| l.strip_prefix("package automaton:gate@"))
        .and_then(|l| l.strip_suffix(';'))
        .unwrap();
    let inspect = env.ok(&["gate", "inspect", wasm.to_str().unwrap()]);
    let versions: Vec<&str> = inspect
        .lines()
        .filter_map(|l| l.trim().strip_prefix("automaton:gate/"))
        .collect();
    assert!(
        !versions.is_empty() && versions.iter().all(|v| v.ends_with(&format!("@{newest}"))),
        "{inspect}"
    );
    // A param of the wrong type: the gate's own words name it.
    let said = env.fails(
        1,
        &[
            "gate",
            "test",
            wasm.to_str().unwrap(),
            "--params",
            r#"{"end_hour": 17, "start_hour": "9"}"#,
        ],
    );
    assert!(said.contains("rejected its params: start_hour"), "{said}");
}

/// A C gate whose own code sets a decision tag the WIT does not have, with
/// the example's check of it taken out: the bindings trap (it never
/// reaches the host as `proceed`), saying which type and tag, and the
/// error names the function the trap was in. `abort()` and
/// `__builtin_trap()` in the gate's code are named by their function too.
#[test]
fn a_c_gates_unknown_tag_and_aborts_trap_in_a_named_function() {
    let env = env_for("c");
    let dir = env.root.join("tagged");
    env.ok(&[
        "gate",
        "new",
        "tagged",
        "--lang",
        "c",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    if !has_c_toolchain() {
        let _ = build("c", C_TOOLCHAIN, false, &env.root);
        return;
    }
    let gate = dir.join("gate.c");
    edit(
        &gate,
        "  if (ret->tag > AUTOMATON_GATE_TYPES_DECISION_COMPLETE) {",
        "  if (false) {",
    );
    edit(
        &gate,
        "// The decision: true with `*ret` set",
        "__attribute__((noinline)) void give_up(void) { abort(); }\n\
         __attribute__((noinline)) void stop_here(void) { __builtin_trap(); }\n\n\
         // The decision: true with `*ret` set",
    );
    edit(
        &gate,
        "  uint64_t weekday =",
        "  if (ctx->loop_name.len == 4 && memcmp(ctx->loop_name.ptr, \"nine\", 4) == 0) {\n    \
         ret->tag = 9;\n    gate_context_free(ctx);\n    return true;\n  }\n  \
         if (ctx->loop_name.len == 5 && memcmp(ctx->loop_name.ptr, \"abort\", 5) == 0)\n    \
         give_up();\n  \
         if (ctx->loop_name.len == 4 && memcmp(ctx->loop_name.ptr, \"trap\", 4) == 0)\n    \
         stop_here();\n  uint64_t weekday =",
    );
    let wasm = env.root.join("tagged.wasm");
    let status = build_script(&dir.join("build.sh")).arg(&wasm).status().unwrap();
    assert!(status.success(), "{status}");
    let unreachable = "trapped: wasm `unreachable` instruction executed";
    assert_eq!(
        error_of(&env, &wasm, "nine", "tagged 1.0.0"),
        format!(
            "{unreachable} (in gate_variant_tag_unknown); gate output: gate_decision_t has no tag 9: \
             the WIT's cases are numbered from 0 in the order written"
        )
    );
    assert_eq!(
        error_of(&env, &wasm, "abort", "tagged 1.0.0"),
        format!("{unreachable} (in give_up)")
    );
    assert_eq!(
        error_of(&env, &wasm, "trap", "tagged 1.0.0"),
        format!("{unreachable} (in stop_here)")
    );
}

/// A Rust gate's `std::process::abort()` (no panic message to read) is
/// named by the gate's function, demangled: the template keeps the
/// functions' names.
#[test]
fn a_rust_gates_abort_names_its_function() {
    let env = Env::new();
    let dir = env.root.join("aborting");
    env.ok(&[
        "gate",
        "new",
        "aborting",
        "--lang",
        "rust",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let present = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2"));
    if !present {
        let _ = build("rust", "the wasm32-wasip2 target", false, &env.root);
        return;
    }
    let lib = dir.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let at = text.find("fn evaluate(").expect("the template has evaluate");
    let body = at + text[at..].find('{').unwrap() + 1;
    std::fs::write(
        &lib,
        format!(
            "{}\n        if ctx.loop_name == \"abort\" {{\n            give_up();\n        }}{}\n\
             #[inline(never)]\nfn give_up() {{\n    std::process::abort();\n}}\n",
            &text[..body],
            &text[body..]
        ),
    )
    .unwrap();
    let wasm = env.root.join("aborting.wasm");
    let status = build_script(&dir.join("build.sh")).arg(&wasm).status().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(
        error_of(&env, &wasm, "abort", "aborting 1.0.0"),
        "trapped: wasm `unreachable` instruction executed (in aborting_gate::give_up)"
    );
}

/// A Python gate's uncaught exception, from the real interpreter runtime,
/// reads as the exception and where it was raised: not the runtime's own
/// panic, which `-vv` still shows.
#[test]
fn a_python_gates_exception_is_named_not_the_runtimes_panic() {
    let present = has("componentize-py", "--version");
    let env = env_for("python");
    // The office-hours example, failing for one loop name.
    let src = env.root.join("crashing-python");
    std::fs::create_dir_all(src.join("wit")).unwrap();
    let example = example_dir("python");
    for f in ["build.sh", "requirements.txt", "wit/gate.wit"] {
        std::fs::copy(example.join(f), src.join(f)).unwrap();
    }
    let app = std::fs::read_to_string(example.join("app.py")).unwrap();
    std::fs::write(
        src.join("app.py"),
        format!(
            "{app}\n\n_evaluate = WitWorld.evaluate\n\n\ndef _failing(self, ctx):\n    \
             if ctx.loop_name == \"crash\":\n        raise ValueError(\"the office calendar is unreadable\")\n    \
             return _evaluate(self, ctx)\n\n\nWitWorld.evaluate = _failing\n"
        ),
    )
    .unwrap();
    if !present {
        // Says it was skipped (or fails when toolchains are required).
        let _ = build("python", "componentize-py 0.25.1", false, &env.root);
        return;
    }
    let line = app.lines().count() + 8; // the `raise` above
    let wasm = env.root.join("crashing.wasm");
    std::fs::copy(built("crashing-python", &src), &wasm).unwrap();
    let ctx = env.root.join("crash.json");
    std::fs::write(&ctx, r#"{"loop_name": "crash", "now": "2026-11-30T10:00:00Z"}"#).unwrap();
    let args = [
        "gate",
        "test",
        wasm.to_str().unwrap(),
        "--context",
        ctx.to_str().unwrap(),
    ];
    let out = env.cmd().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = format!(
        "crashing.wasm (office-hours 1.0.0) raised ValueError: the office calendar is unreadable \
         (at app.py, line {line}, in _failing)"
    );
    assert!(stderr.trim_end().ends_with(&expected), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let out = env.cmd().arg("-vv").args(args).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("Python function threw an unexpected exception"),
        "{stderr}"
    );
}

/// A JavaScript gate that throws something other than a string (which
/// componentize-js cannot pass back, so the call traps) names the value it
/// threw and where, as the example's `reportingThrows` printed it.
#[test]
fn a_javascript_gates_thrown_value_is_named() {
    let present = has("node", "--version") && has("npm", "--version");
    let env = env_for("javascript");
    // The office-hours example, throwing for three loop names.
    let src = env.root.join("throwing-javascript");
    std::fs::create_dir_all(src.join("wit")).unwrap();
    let example = example_dir("javascript");
    for f in ["build.sh", "package.json", "package-lock.json", "wit/gate.wit"] {
        std::fs::copy(example.join(f), src.join(f)).unwrap();
    }
    let gate = std::fs::read_to_string(example.join("gate.js")).unwrap();
    assert!(
        gate.contains("export const evaluate = reportingThrows("),
        "the example wraps evaluate in reportingThrows"
    );
    let head = "function decide(ctx) {\n";
    let at = gate.find(head).expect("evaluate's logic is in decide") + head.len();
    let line = gate[..at].lines().count() + 3; // the `ctx.missing.field` below
    let throwing = format!(
        "{}  if (ctx.loopName === 'number') throw 42;\n  \
         if (ctx.loopName === 'object') throw {{ code: 1 }};\n  \
         if (ctx.loopName === 'error') ctx.missing.field;\n{}",
        &gate[..at],
        &gate[at..]
    );
    std::fs::write(src.join("gate.js"), throwing).unwrap();
    if !present {
        let _ = build("javascript", "node and npm", false, &env.root);
        return;
    }
    // The example's installed packages, when it has them.
    if example.join("node_modules/.package-lock.json").is_file() {
        std::os::unix::fs::symlink(example.join("node_modules"), src.join("node_modules")).unwrap();
    }
    let wasm = env.root.join("throwing.wasm");
    std::fs::copy(built("throwing-javascript", &src), &wasm).unwrap();
    for (loop_name, expected) in [
        ("number", "threw 42".to_owned()),
        ("object", r#"threw {"code":1}"#.to_owned()),
        (
            "error",
            format!(
                "threw TypeError: can't access property \"field\", ctx.missing is undefined \
                 (at gate.js:{line}:"
            ),
        ),
    ] {
        let said = evaluation_error(&env, &wasm, loop_name);
        assert!(said.starts_with(&expected), "{loop_name}: {said}");
        assert!(!said.contains("expected a string"), "{loop_name}: {said}");
    }
}

/// What `gate test WASM --context` says of loop `loop_name`'s evaluation:
/// it fails (exit 1), and this is its error after the gate's name.
fn evaluation_error(env: &Env, wasm: &Path, loop_name: &str) -> String {
    error_of(env, wasm, loop_name, "office-hours 1.0.0")
}

/// What `gate test WASM --context` says of loop `loop_name`'s evaluation
/// by the gate `gate` (its name and version): it fails (exit 1), and this
/// is its error after them.
fn error_of(env: &Env, wasm: &Path, loop_name: &str, gate: &str) -> String {
    let ctx = env.root.join(format!("{loop_name}.json"));
    std::fs::write(
        &ctx,
        format!(r#"{{"loop_name": "{loop_name}", "now": "2026-11-30T10:00:00Z"}}"#),
    )
    .unwrap();
    let out = env
        .cmd()
        .args([
            "gate",
            "test",
            wasm.to_str().unwrap(),
            "--context",
            ctx.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{loop_name}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    stderr
        .trim_end()
        .split_once(&format!(" ({gate}) "))
        .map_or_else(|| panic!("{loop_name}: {stderr}"), |(_, said)| said.to_owned())
}

/// A Python gate written without the example's `checked`, whose
/// `evaluate` returns what is not a decision: the error says what it
/// returned and what a decision is, not componentize-py's `KeyError`,
/// which `-v` still shows.
#[test]
fn a_python_gate_that_returns_no_decision_is_told_what_a_decision_is() {
    let present = has("componentize-py", "--version");
    let env = env_for("python");
    let src = env.root.join("unchecked-python");
    std::fs::create_dir_all(src.join("wit")).unwrap();
    let example = example_dir("python");
    for f in ["build.sh", "requirements.txt", "wit/gate.wit"] {
        std::fs::copy(example.join(f), src.join(f)).unwrap();
    }
    let app = std::fs::read_to_string(example.join("app.py")).unwrap();
    let wrapped = "        return checked(decide(ctx))\n";
    assert!(app.contains(wrapped), "the example wraps evaluate in checked");
    let unchecked = app.replace(
        wrapped,
        "        if ctx.loop_name == \"string\":\n            return \"skip\"\n        \
         if ctx.loop_name == \"number\":\n            return types.Decision_Skip(42)\n        \
         return decide(ctx)\n",
    );
    std::fs::write(src.join("app.py"), unchecked).unwrap();
    if !present {
        let _ = build("python", "componentize-py 0.25.1", false, &env.root);
        return;
    }
    let wasm = env.root.join("unchecked.wasm");
    std::fs::copy(built("unchecked-python", &src), &wasm).unwrap();
    let decision = "expected types.Decision_Proceed() | types.Decision_Skip(reason) | \
                    types.Decision_AwaitApproval(reason) | types.Decision_Halt(reason) | \
                    types.Decision_Complete(reason), the reason a str";
    assert_eq!(
        evaluation_error(&env, &wasm, "string"),
        format!("returned a value that is not a decision (a str); {decision}")
    );
    assert_eq!(
        evaluation_error(&env, &wasm, "number"),
        format!("returned a value that is not a decision (an int where a str is due); {decision}")
    );
    let ctx = env.root.join("string.json");
    let out = env
        .cmd()
        .args([
            "-v",
            "gate",
            "test",
            wasm.to_str().unwrap(),
            "--context",
            ctx.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("KeyError(<class 'str'>)"), "{stderr}");
}

/// A JavaScript gate written without the example's `checked` and
/// `reportingThrows`, whose `evaluate` returns a decision without its
/// reason or with a mistyped tag: the error says so, and what a decision
/// is, rather than "threw an undefined" or a path in the build's temporary
/// directory. A value it throws is still said to be thrown.
#[test]
fn a_javascript_gate_that_returns_no_decision_is_told_what_a_decision_is() {
    let present = has("node", "--version") && has("npm", "--version");
    let env = env_for("javascript");
    let src = env.root.join("unchecked-javascript");
    std::fs::create_dir_all(src.join("wit")).unwrap();
    let example = example_dir("javascript");
    for f in ["build.sh", "package.json", "package-lock.json", "wit/gate.wit"] {
        std::fs::copy(example.join(f), src.join(f)).unwrap();
    }
    let gate = std::fs::read_to_string(example.join("gate.js")).unwrap();
    let wrapped = "export const evaluate = reportingThrows((ctx) => checked(decide(ctx)));\n";
    assert!(gate.contains(wrapped), "the example wraps evaluate");
    let unchecked = gate.replace(
        wrapped,
        "export function evaluate(ctx) {\n  \
         if (ctx.loopName === 'no-reason') return { tag: 'skip' };\n  \
         if (ctx.loopName === 'mistyped') return { tag: 'skp', val: 'weekend' };\n  \
         if (ctx.loopName === 'nothing') return undefined;\n  \
         if (ctx.loopName === 'thrown') throw 42;\n  \
         return decide(ctx);\n}\n",
    );
    std::fs::write(src.join("gate.js"), unchecked).unwrap();
    if !present {
        let _ = build("javascript", "node and npm", false, &env.root);
        return;
    }
    if example.join("node_modules/.package-lock.json").is_file() {
        std::os::unix::fs::symlink(example.join("node_modules"), src.join("node_modules")).unwrap();
    }
    let wasm = env.root.join("unchecked.wasm");
    std::fs::copy(built("unchecked-javascript", &src), &wasm).unwrap();
    let decision = "expected {tag: 'proceed'} | {tag: 'skip' | 'await-approval' | 'halt' | \
                    'complete', val: reason}, the reason a string";
    for (loop_name, what) in [
        ("no-reason", "its reason is undefined, not a string"),
        ("mistyped", "the tag \"skp\""),
        ("nothing", "undefined"),
    ] {
        assert_eq!(
            evaluation_error(&env, &wasm, loop_name),
            format!("returned a value that is not a decision ({what}); {decision}"),
        );
    }
    let thrown = evaluation_error(&env, &wasm, "thrown");
    assert!(thrown.starts_with("threw a number "), "{thrown}");
}

/// The worked example of docs/writing-gates.md (WIT 0.3.0), in Rust,
/// Python, JavaScript and C: business hours in a zone from the host's
/// database, a cap on the cost summed by the host over the last 24 hours,
/// a halt after failures. Its cases pass, and in a real loop the third tick
/// awaits approval once two runs spent 6 of a cap of 5 (at a weekend in
/// Paris, every tick skips).
fn windowed_example(lang: &str, toolchain: &str, present: bool) {
    if !present {
        let required = std::env::var("AUTOMATON_REQUIRE_GATE_TOOLCHAINS").is_ok_and(|v| v == "1");
        assert!(!required, "the {lang} windowed example gate needs {toolchain}");
        eprintln!("skipped: the {lang} windowed example gate needs {toolchain}");
        return;
    }
    let dir = example_dir(&format!("windowed/{lang}"));
    let wasm = built(&format!("windowed-{lang}"), &dir);
    let env = env_for(lang);
    let cases = dir.join("cases.json");
    let out = env.ok(&[
        "gate",
        "test",
        wasm.to_str().unwrap(),
        "--cases",
        cases.to_str().unwrap(),
    ]);
    assert!(out.contains("(windowed 1.0.0)"), "{out}");
    assert!(out.ends_with("26 passed, 0 failed\n"), "{out}");

    let step = "step = \"echo '{\\\"cost_usd\\\": 3}' > \\\"$AUTOMATON_METRICS\\\"\"\n";
    env.new_loop(
        "spend",
        &format!(
            "{step}[[gate]]\npath = \"gates/windowed.wasm\"\n\
             params = {{ timezone = \"Europe/Paris\", cap = 5, start_hour = 0, end_hour = 24 }}\n"
        ),
    );
    std::fs::create_dir_all(env.loop_dir("spend").join("gates")).unwrap();
    std::fs::copy(&wasm, env.loop_dir("spend").join("gates/windowed.wasm")).unwrap();
    let tick =
        || -> serde_json::Value { serde_json::from_str(&env.ok(&["tick", "spend", "--json"])).unwrap() };
    let weekend = || {
        let paris = Timestamp::now().in_tz("Europe/Paris").unwrap();
        paris.weekday().to_monday_one_offset() > 5
    };
    let first = tick();
    if weekend() {
        assert_eq!(first["outcome"], "skipped", "{first}");
        return;
    }
    assert_eq!(first["outcome"], "ran", "{first}");
    assert_eq!(tick()["outcome"], "ran");
    let third = tick();
    if weekend() {
        return; // Paris's Friday ended between the ticks.
    }
    assert_eq!(third["outcome"], "awaiting-approval", "{third}");
    assert_eq!(
        third["decisions"][0]["reason"], "cost_usd over the last 24 h is 6, over the cap of 5",
        "{third}"
    );
}

#[test]
fn windowed_rust_example_gate() {
    let present = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2"));
    windowed_example("rust", "the wasm32-wasip2 target", present);
}

#[test]
fn windowed_c_example_gate() {
    windowed_example("c", C_TOOLCHAIN, has_c_toolchain());
}

#[test]
fn windowed_python_example_gate() {
    windowed_example(
        "python",
        "componentize-py 0.25.1 (pip install componentize-py==0.25.1)",
        has("componentize-py", "--version"),
    );
}

#[test]
fn windowed_javascript_example_gate() {
    windowed_example(
        "javascript",
        "node and npm",
        has("node", "--version") && has("npm", "--version"),
    );
}
