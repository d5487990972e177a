//! Test gates built from WAT: a well-behaved one and hostile ones (loops,
//! memory bombs, traps, spew, sandbox probes), encoded as components for
//! the `gate` world with the wat and wit-component crates. They are built
//! against the interface's first version (wit/0.1.0/gate.wit), as gates
//! built before later versions were; [`reads_commits_and_await`] is built
//! against wit/0.2.0/gate.wit and reads what that version added.

use std::path::Path;

/// The context record's field offsets (canonical ABI, passed by pointer).
pub(crate) const CTX_LOOP_NAME: u32 = 0;
pub(crate) const CTX_TICK: u32 = 16;

/// Where the return area lives in the test gates' memory.
const RET: u32 = 512;

/// A gate whose `evaluate` runs `body`, WAT instructions leaving the return
/// pointer on the stack. Functions available to `body`:
/// `(call $decide (i32 decision) (i32 ptr) (i32 len))`, `(call $refuse (ptr) (len))`,
/// and `$ctx` (the context pointer) as a local. Strings go in `data`
/// as `(offset, text)`; offsets 1024..4096 are free for them.
pub(crate) struct WatGate {
    pub body: String,
    pub data: Vec<(u32, String)>,
    /// Extra imports and functions (WAT module fields).
    pub extra: String,
    /// Whether the module imports WASI preview1 (wrapped with the adapter).
    pub wasi: bool,
    /// The `params-schema` `describe` gives (at offset 4096).
    pub schema: String,
}

impl WatGate {
    pub(crate) fn new(body: &str) -> WatGate {
        WatGate {
            body: body.to_owned(),
            data: Vec::new(),
            extra: String::new(),
            wasi: false,
            schema: r#"{"type":"object"}"#.to_owned(),
        }
    }

    pub(crate) fn data(mut self, offset: u32, text: &str) -> WatGate {
        self.data.push((offset, text.to_owned()));
        self
    }

    pub(crate) fn extra(mut self, wat: &str) -> WatGate {
        self.extra.push_str(wat);
        self
    }

    /// The params schema `describe` gives; `check-params` still takes any
    /// object.
    pub(crate) fn schema(mut self, schema: &str) -> WatGate {
        self.schema = schema.to_owned();
        self
    }

    pub(crate) fn wasi(mut self) -> WatGate {
        self.wasi = true;
        self
    }

    fn module(&self) -> String {
        let data: String = self
            .data
            .iter()
            .map(|(off, text)| format!("(data (i32.const {off}) \"{}\")\n", escape(text)))
            .collect();
        let wasi_imports = if self.wasi {
            r#"
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
"#
        } else {
            ""
        };
        format!(
            r#"(module
  (import "automaton:gate/host@0.1.0" "log" (func $log (param i32 i32 i32)))
  {wasi_imports}
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 8192))
  (data (i32.const 100) "test-gate")
  (data (i32.const 120) "0.1.0")
  (data (i32.const 130) "a gate for tests")
  (data (i32.const 4096) "{schema}")
  (data (i32.const 180) "params must be a JSON object")
  {data}
  (func $realloc (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $new_size i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and
      (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
      (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $new_size)))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))
        (br $grow)))
    (if (local.get $old_size)
      (then (memory.copy (local.get $p) (local.get $old) (local.get $old_size))))
    (local.get $p))
  (func (export "describe") (result i32)
    (i32.store (i32.const {RET}) (i32.const 100))
    (i32.store (i32.const {r4}) (i32.const 9))
    (i32.store (i32.const {r8}) (i32.const 120))
    (i32.store (i32.const {r12}) (i32.const 5))
    (i32.store (i32.const {r16}) (i32.const 130))
    (i32.store (i32.const {r20}) (i32.const 16))
    (i32.store (i32.const {r24}) (i32.const 4096))
    (i32.store (i32.const {r28}) (i32.const {schema_len}))
    (i32.const {RET}))
  (func (export "check-params") (param $p i32) (param $len i32) (result i32)
    (if (i32.and (i32.gt_u (local.get $len) (i32.const 0))
                 (i32.eq (i32.load8_u (local.get $p)) (i32.const 123)))
      (then (i32.store8 (i32.const {RET}) (i32.const 0)) (return (i32.const {RET}))))
    (i32.store8 (i32.const {RET}) (i32.const 1))
    (i32.store (i32.const {r4}) (i32.const 180))
    (i32.store (i32.const {r8}) (i32.const 28))
    (i32.const {RET}))
  (func $decide (param $d i32) (param $p i32) (param $len i32) (result i32)
    (i32.store8 (i32.const {RET}) (i32.const 0))
    (i32.store8 (i32.const {r4}) (local.get $d))
    (i32.store (i32.const {r8}) (local.get $p))
    (i32.store (i32.const {r12}) (local.get $len))
    (i32.const {RET}))
  (func $refuse (param $p i32) (param $len i32) (result i32)
    (i32.store8 (i32.const {RET}) (i32.const 1))
    (i32.store (i32.const {r4}) (local.get $p))
    (i32.store (i32.const {r8}) (local.get $len))
    (i32.const {RET}))
  {extra}
  (func (export "evaluate") (param $ctx i32) (result i32)
    {body})
)"#,
            r4 = RET + 4,
            r8 = RET + 8,
            r12 = RET + 12,
            r16 = RET + 16,
            r20 = RET + 20,
            r24 = RET + 24,
            r28 = RET + 28,
            schema = escape(&self.schema),
            schema_len = self.schema.len(),
            extra = self.extra,
            body = self.body,
        )
    }

    /// The component's bytes, built against wit/0.1.0/gate.wit.
    pub(crate) fn build(&self) -> Vec<u8> {
        let mut resolve = wit_parser::Resolve::default();
        let wit_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("wit/0.1.0");
        let (pkg, _) = resolve.push_dir(&wit_dir).expect("wit/0.1.0 parses");
        let world = resolve.select_world(&[pkg], Some("gate")).unwrap();
        encode(&self.module(), &resolve, world, self.wasi)
    }

    /// The component's bytes, built against wit/gate.wit (0.2.0).
    pub(crate) fn build_v0_2(&self) -> Vec<u8> {
        let (resolve, world) = wit_v0_2();
        let module = self
            .module()
            .replace("automaton:gate/host@0.1.0", "automaton:gate/host@0.2.0");
        encode(&module, &resolve, world, self.wasi)
    }
}

/// wit/0.2.0/gate.wit, parsed, and its world `gate`.
pub(crate) fn wit_v0_2() -> (wit_parser::Resolve, wit_parser::WorldId) {
    wit_at("wit/0.2.0")
}

/// wit/gate.wit (0.3.0), parsed, and its world `gate`.
pub(crate) fn wit_v0_3() -> (wit_parser::Resolve, wit_parser::WorldId) {
    wit_at("wit")
}

fn wit_at(dir: &str) -> (wit_parser::Resolve, wit_parser::WorldId) {
    let mut resolve = wit_parser::Resolve::default();
    let wit_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let (pkg, _) = resolve.push_dir(&wit_dir).expect("the wit parses");
    let world = resolve.select_world(&[pkg], Some("gate")).unwrap();
    (resolve, world)
}

impl WatGate {
    /// The component, built against `wit/0.1.0/gate.wit` with `edit`
    /// applied to its text (another version of the package, say) and the
    /// module's import renamed to match.
    pub(crate) fn build_against(&self, version: &str, edit: impl Fn(&str) -> String) -> Vec<u8> {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("wit/0.1.0/gate.wit"))
            .unwrap();
        let text = edit(&text.replace("automaton:gate@0.1.0", &format!("automaton:gate@{version}")));
        let mut resolve = wit_parser::Resolve::default();
        let pkg = resolve
            .push_str("gate.wit", &text)
            .expect("the edited wit parses");
        let world = resolve.select_world(&[pkg], Some("gate")).unwrap();
        let module = self.module().replace(
            "automaton:gate/host@0.1.0",
            &format!("automaton:gate/host@{version}"),
        );
        encode(&module, &resolve, world, self.wasi)
    }
}

fn encode(wat: &str, resolve: &wit_parser::Resolve, world: wit_parser::WorldId, wasi: bool) -> Vec<u8> {
    let mut module = wat::parse_str(wat).unwrap_or_else(|e| panic!("{e}\n{wat}"));
    wit_component::embed_component_metadata(&mut module, resolve, world, wit_component::StringEncoding::UTF8)
        .unwrap();
    let mut enc = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .unwrap();
    if wasi {
        enc = enc
            .adapter(
                "wasi_snapshot_preview1",
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
            .unwrap();
    }
    enc.encode().unwrap()
}

fn escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' => format!("\\{}", b as char),
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\{b:02x}"),
        })
        .collect()
}

/// A component for another world: `export run: func() -> u32`, optionally
/// importing an interface the host does not offer.
pub(crate) fn other_world(with_import: bool) -> Vec<u8> {
    let (wit, module_import) = if with_import {
        (
            "package test:other;\ninterface missing { poke: func(); }\nworld other { import missing; export run: func() -> u32; }",
            r#"(import "test:other/missing" "poke" (func))"#,
        )
    } else {
        (
            "package test:other;\nworld other { export run: func() -> u32; }",
            "",
        )
    };
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve.push_str("other.wit", wit).unwrap();
    let world = resolve.select_world(&[pkg], Some("other")).unwrap();
    let wat = format!(
        r#"(module {module_import} (memory (export "memory") 1) (func (export "run") (result i32) (i32.const 7)))"#
    );
    encode(&wat, &resolve, world, false)
}

// ---- the gates ----

/// Proceeds, or completes from tick 3 on; skips when the loop is named
/// "skip-me"; logs one line at info.
pub(crate) fn good() -> Vec<u8> {
    WatGate::new(&format!(
        r"(call $log (i32.const 2) (i32.const 1024) (i32.const 11))
    (if (i64.ge_u (i64.load (i32.add (local.get $ctx) (i32.const {CTX_TICK}))) (i64.const 3))
      (then (return (call $decide (i32.const 4) (i32.const 1040) (i32.const 9)))))
    (call $decide (i32.const 0) (i32.const 0) (i32.const 0))"
    ))
    .data(1024, "hello, host")
    .data(1040, "all done!")
    .build()
}

/// Skips with the loop's name as the reason: the context reached the gate.
pub(crate) fn echo_loop_name() -> Vec<u8> {
    WatGate::new(&format!(
        "(call $decide (i32.const 1)
       (i32.load (i32.add (local.get $ctx) (i32.const {CTX_LOOP_NAME})))
       (i32.load (i32.add (local.get $ctx) (i32.const {})))) ",
        CTX_LOOP_NAME + 4
    ))
    .build()
}

pub(crate) fn infinite_loop() -> Vec<u8> {
    WatGate::new("(loop $spin (br $spin)) (unreachable)").build()
}

pub(crate) fn memory_bomb() -> Vec<u8> {
    WatGate::new("(loop $eat (drop (memory.grow (i32.const 16))) (br $eat)) (unreachable)").build()
}

pub(crate) fn deep_recursion() -> Vec<u8> {
    WatGate::new("(call $down (i32.const 0))")
        .extra("(func $down (param i32) (result i32) (call $down (i32.add (local.get 0) (i32.const 1))))")
        .build()
}

/// Writes a panic message to stderr, then traps.
pub(crate) fn panics() -> Vec<u8> {
    WatGate::new(
        "(i32.store (i32.const 600) (i32.const 1024))
    (i32.store (i32.const 604) (i32.const 38))
    (drop (call $fd_write (i32.const 2) (i32.const 600) (i32.const 1) (i32.const 608)))
    (unreachable)",
    )
    .data(1024, "thread panicked at src/lib.rs: boom!!\n")
    .wasi()
    .build()
}

/// Writes `lines` lines of 64 bytes to stdout (`None`: forever), then
/// proceeds.
pub(crate) fn spew(lines: Option<u32>) -> Vec<u8> {
    let cond = match lines {
        Some(n) => format!("(br_if $more (i32.lt_u (local.get $i) (i32.const {n})))"),
        None => "(br $more)".to_owned(),
    };
    WatGate::new(&format!(
        "(local $i i32)
    (i32.store (i32.const 600) (i32.const 1024))
    (i32.store (i32.const 604) (i32.const 64))
    (loop $more
      (drop (call $fd_write (i32.const 1) (i32.const 600) (i32.const 1) (i32.const 608)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      {cond})
    (call $decide (i32.const 0) (i32.const 0) (i32.const 0))"
    ))
    .data(1024, &format!("{}\n", "y".repeat(63)))
    .wasi()
    .build()
}

/// Halts when it finds a preopened directory (it could read files), else
/// proceeds.
pub(crate) fn reads_files() -> Vec<u8> {
    WatGate::new(
        "(if (i32.eqz (call $fd_prestat_get (i32.const 3) (i32.const 640)))
      (then (return (call $decide (i32.const 3) (i32.const 1024) (i32.const 18)))))
    (call $decide (i32.const 0) (i32.const 0) (i32.const 0))",
    )
    .data(1024, "found a preopen!!!")
    .wasi()
    .build()
}

/// Halts when it sees any environment variable or argument, else proceeds.
pub(crate) fn reads_env() -> Vec<u8> {
    WatGate::new(
        "(drop (call $environ_sizes_get (i32.const 640) (i32.const 644)))
    (drop (call $args_sizes_get (i32.const 648) (i32.const 652)))
    (if (i32.or (i32.load (i32.const 640)) (i32.load (i32.const 648)))
      (then (return (call $decide (i32.const 3) (i32.const 1024) (i32.const 12)))))
    (call $decide (i32.const 0) (i32.const 0) (i32.const 0))",
    )
    .data(1024, "sees env/arg")
    .wasi()
    .build()
}

/// Proceeds when the WASI wall clock reads exactly the context's `now-ms`,
/// else halts.
pub(crate) fn reads_clock() -> Vec<u8> {
    WatGate::new(
        "(drop (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 656)))
    (if (i64.eq (i64.load (i32.const 656))
                (i64.mul (i64.load (i32.add (local.get $ctx) (i32.const 24))) (i64.const 1000000)))
      (then (return (call $decide (i32.const 0) (i32.const 0) (i32.const 0)))))
    (call $decide (i32.const 3) (i32.const 1024) (i32.const 13))",
    )
    .data(1024, "clock differs")
    .wasi()
    .build()
}

/// Returns an error instead of a decision.
pub(crate) fn refuses() -> Vec<u8> {
    WatGate::new("(call $refuse (i32.const 1024) (i32.const 21))")
        .data(1024, "cannot read the state")
        .build()
}

/// Where 0.2.0's context keeps what that version added (canonical ABI,
/// wasm32): the `option<commits>` and `option<pending-await>` fields, their
/// payloads, and the fields read inside them. `gate_versions` checks them
/// against the layout wit-parser computes from wit/gate.wit.
pub(crate) const CTX2_COMMITS: u32 = 128;
pub(crate) const CTX2_COMMITS_PAYLOAD: u32 = 132;
pub(crate) const COMMITS_HEAD_AFTER: u32 = 20;
pub(crate) const CTX2_AWAIT: u32 = 168;
pub(crate) const CTX2_AWAIT_PAYLOAD: u32 = 176;
pub(crate) const AWAIT_APPROVALS: u32 = 44;

/// Built against 0.2.0: with an await pending, `await-approval` with the
/// await's id as the reason (`complete` once an approval for it is in);
/// else, with commits, `skip` with the HEAD after the last step; else
/// `proceed`.
pub(crate) fn reads_commits_and_await() -> Vec<u8> {
    let id = CTX2_AWAIT_PAYLOAD;
    let approvals_len = CTX2_AWAIT_PAYLOAD + AWAIT_APPROVALS + 4;
    let head_after = CTX2_COMMITS_PAYLOAD + COMMITS_HEAD_AFTER;
    WatGate::new(&format!(
        "(if (i32.load8_u (i32.add (local.get $ctx) (i32.const {CTX2_AWAIT})))
      (then
        (if (i32.load (i32.add (local.get $ctx) (i32.const {approvals_len})))
          (then (return (call $decide (i32.const 4)
            (i32.load (i32.add (local.get $ctx) (i32.const {id})))
            (i32.load (i32.add (local.get $ctx) (i32.const {id_len})))))))
        (return (call $decide (i32.const 2)
          (i32.load (i32.add (local.get $ctx) (i32.const {id})))
          (i32.load (i32.add (local.get $ctx) (i32.const {id_len})))))))
    (if (i32.load8_u (i32.add (local.get $ctx) (i32.const {CTX2_COMMITS})))
      (then (if (i32.load8_u (i32.add (local.get $ctx) (i32.const {head_after})))
        (then (return (call $decide (i32.const 1)
          (i32.load (i32.add (local.get $ctx) (i32.const {head_ptr})))
          (i32.load (i32.add (local.get $ctx) (i32.const {head_len})))))))))
    (call $decide (i32.const 0) (i32.const 0) (i32.const 0))",
        id_len = id + 4,
        head_ptr = head_after + 4,
        head_len = head_after + 8,
    ))
    .build_v0_2()
}

/// Proceeds; its `describe` says it is `test-gate` at `version` (five
/// characters, as `0.2.0`): builds of one gate, for signatures and
/// rollbacks.
pub(crate) fn versioned(version: &str) -> Vec<u8> {
    assert_eq!(version.len(), 5, "the fixture's version is five characters");
    let gate = WatGate::new("(call $decide (i32.const 0) (i32.const 0) (i32.const 0))");
    let module = gate.module().replace(
        "(data (i32.const 120) \"0.1.0\")",
        &format!("(data (i32.const 120) \"{version}\")"),
    );
    let mut resolve = wit_parser::Resolve::default();
    let wit_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("wit/0.1.0");
    let (pkg, _) = resolve.push_dir(&wit_dir).expect("wit/0.1.0 parses");
    let world = resolve.select_world(&[pkg], Some("gate")).unwrap();
    encode(&module, &resolve, world, false)
}

/// The offset of `field` in record `record` of wit/gate.wit (0.3.0), in the
/// canonical ABI on wasm32.
pub(crate) fn offset_v0_3(record: &str, field: &str) -> u32 {
    let (resolve, _) = wit_v0_3();
    let mut sizes = wit_parser::SizeAlign::default();
    sizes.fill(&resolve);
    let (_, def) = resolve
        .types
        .iter()
        .find(|(_, t)| t.name.as_deref() == Some(record))
        .unwrap_or_else(|| panic!("no record {record}"));
    let wit_parser::TypeDefKind::Record(r) = &def.kind else {
        panic!("{record} is not a record")
    };
    let offsets = sizes.field_offsets(r.fields.iter().map(|f| &f.ty));
    let (_, (offset, _)) = r
        .fields
        .iter()
        .zip(offsets)
        .find(|(f, _)| f.name == field)
        .unwrap_or_else(|| panic!("no field {field} in {record}"));
    u32::try_from(offset.size_wasm32()).unwrap()
}

/// Built against 0.3.0: its `describe` asks for the last `runs` runs and
/// the sums over `windows_ms`; it skips with the first window's `sums`
/// (the JSON object) as the reason and logs how many runs and failures
/// that window had and how many last runs it was given; it proceeds when
/// it is given no window.
pub(crate) fn reads_history(runs: u32, windows_ms: &[u64]) -> Vec<u8> {
    let history = offset_v0_3("context", "history");
    let windows = history + offset_v0_3("history", "windows");
    let last_runs = history + offset_v0_3("history", "runs");
    let sums = offset_v0_3("window-sums", "sums");
    let w_runs = offset_v0_3("window-sums", "runs");
    let w_failures = offset_v0_3("window-sums", "failures");
    let info_history = offset_v0_3("gate-info", "history");
    let asked: String = windows_ms
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .map(|b| format!("\\{b:02x}"))
        .collect();
    let gate = WatGate::new(&format!(
        "(local $w i32)
    (if (i32.eqz (i32.load (i32.add (local.get $ctx) (i32.const {windows_len}))))
      (then (return (call $decide (i32.const 0) (i32.const 0) (i32.const 0)))))
    (local.set $w (i32.load (i32.add (local.get $ctx) (i32.const {windows}))))
    (call $say (i32.const 1200) (i32.load (i32.add (local.get $w) (i32.const {w_runs}))))
    (call $say (i32.const 1201) (i32.load (i32.add (local.get $w) (i32.const {w_failures}))))
    (call $say (i32.const 1202) (i32.load (i32.add (local.get $ctx) (i32.const {last_runs_len}))))
    (call $decide (i32.const 1)
      (i32.load (i32.add (local.get $w) (i32.const {sums})))
      (i32.load (i32.add (local.get $w) (i32.const {sums_len}))))",
        windows_len = windows + 4,
        last_runs_len = last_runs + 4,
        sums_len = sums + 4,
    ))
    .data(1200, "rfl")
    .extra(
        // Logs "<letter><digit>" for a number below 10, "<letter>+" above.
        r"(func $say (param $letter i32) (param $n i32)
    (i32.store8 (i32.const 1300) (i32.load8_u (local.get $letter)))
    (i32.store8 (i32.const 1301)
      (if (result i32) (i32.lt_u (local.get $n) (i32.const 10))
        (then (i32.add (i32.const 48) (local.get $n)))
        (else (i32.const 43))))
    (call $log (i32.const 2) (i32.const 1300) (i32.const 2)))",
    );
    let describe_end = format!(
        "(i32.store (i32.const {}) (i32.const {}))\n    (i32.const {RET}))\n  (func (export \"check-params\")",
        RET + 28,
        gate.schema.len()
    );
    let module = gate
        .module()
        .replace("automaton:gate/host@0.1.0", "automaton:gate/host@0.3.0")
        .replace(
            &describe_end,
            &format!(
                "(i32.store (i32.const {r28}) (i32.const {len}))
    (i32.store (i32.const {runs_at}) (i32.const {runs}))
    (i32.store (i32.const {ptr_at}) (i32.const 3072))
    (i32.store (i32.const {len_at}) (i32.const {n}))
    (i32.const {RET}))
  (func (export \"check-params\")",
                r28 = RET + 28,
                len = gate.schema.len(),
                runs_at = RET + info_history,
                ptr_at = RET + info_history + 4,
                len_at = RET + info_history + 8,
                n = windows_ms.len(),
            ),
        )
        .replace(
            "(memory (export \"memory\") 1)",
            &format!("(memory (export \"memory\") 1)\n  (data (i32.const 3072) \"{asked}\")"),
        );
    assert!(module.contains("(i32.const 3072))"), "describe was extended");
    let (resolve, world) = wit_v0_3();
    encode(&module, &resolve, world, false)
}
