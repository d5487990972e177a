//! `automaton gate test|inspect|compile|list`: the gate author's tools. Each
//! command takes typed arguments, returns a report, and has a render
//! function for people and `--json` for programs.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::cli::GateCommand;
use crate::domain::{Context, GateSource, Limits, Phase};
use crate::error::{Error, Exit, Result};
use crate::gate::{self, GateHost, GateInfo, GateLog, LogSource, stock_gates};
use crate::root::{Flags, Origin, Root};
use crate::term::safe;

mod cases;

/// Runs a `gate` subcommand. Compiled gates are cached in the root's
/// `cache/` when there is an initialised root, else in the user's own cache
/// (a gate's project folder is rarely inside a root).
pub(crate) fn run(cmd: GateCommand, root: Flags<'_>, out: &mut dyn Write) -> Result<Exit> {
    let cache = || gate_cache(root).ok().flatten();
    match cmd {
        GateCommand::Test {
            target,
            context,
            cases,
            bench,
            params,
            phase,
            timeout,
            memory,
            json,
        } => {
            let limits = Limits {
                timeout,
                memory: memory.map_or(Limits::DEFAULT_MEMORY, |m| m.as_u64()),
            };
            let target = parse_target(&target);
            if let Some(file) = cases {
                let table = cases::read(&file)?;
                let host = GateHost::new(cache())?;
                let defaults = cases::Defaults { params, phase, bench };
                let r = cases::run(&host, &target, table, &defaults, &limits)?;
                cases::render(&r, json.json, out).map_err(Error::Output)?;
                return Ok(if r.failed() == 0 { Exit::Ok } else { Exit::Wanting });
            }
            let ctx = context.map(|c| ContextInput::parse(&c).read()).transpose()?;
            let host = GateHost::new(cache())?;
            let r = test(&host, &target, ctx, params, phase, &limits)?;
            render_test(&r, json.json, out).map_err(Error::Output)?;
        }
        GateCommand::New { name, lang, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let files = gate::scaffold::scaffold(&name, lang, &dir)?;
            writeln!(
                out,
                "created gate project {} ({} files)",
                dir.display(),
                files.len()
            )
            .and_then(|()| {
                writeln!(out, "build:  {}/build.sh", dir.display())?;
                writeln!(
                    out,
                    "test:   automaton gate test {0}/gate.wasm --cases {0}/cases.json",
                    dir.display()
                )?;
                writeln!(
                    out,
                    "deploy: copy gate.wasm to <root>/loops/LOOP/gates/, then `automaton gate compile` it"
                )
            })
            .map_err(Error::Output)?;
        }
        GateCommand::Context => {
            write_json(&cases::example_context(), out).map_err(Error::Output)?;
        }
        GateCommand::Inspect { target, json } => {
            let host = GateHost::new(cache())?;
            let r = inspect(&host, &parse_target(&target))?;
            render_inspect(&r, json.json, out).map_err(Error::Output)?;
        }
        GateCommand::Compile { files, json } => {
            let host = GateHost::new(gate_cache(root)?)?;
            let r = compile(&host, &files)?;
            render_compile(&r, json.json, out).map_err(Error::Output)?;
        }
        GateCommand::List(json) => {
            let host = GateHost::new(cache())?;
            let r = list(&host)?;
            render_list(&r, json.json, out).map_err(Error::Output)?;
        }
        GateCommand::Replay(args) => return super::replay::run(&Root::open(root)?, &args, out),
        GateCommand::Promote(args) => return super::promote::run(&Root::open(root)?, &args, out),
        GateCommand::AllowRollback(args) => {
            let (root, stores) = super::opened(root)?;
            return super::ops::allow_rollback(&root, &stores, &args, out);
        }
    }
    Ok(Exit::Ok)
}

/// Where compiled gates are cached: the root's cache; the user's own when
/// no root was named and none is found; an error when the root named
/// (`--root`, `$AUTOMATON_ROOT`) is not initialised.
fn gate_cache(flags: Flags<'_>) -> Result<Option<PathBuf>> {
    let (root, origin) = Root::locate(flags)?;
    if root.loops_dir().is_dir() {
        return Ok(Some(root.cache_dir()));
    }
    match origin {
        Origin::Flag | Origin::Env => Err(Error::NoRoot {
            path: root.path().to_owned(),
        }),
        Origin::Discovered | Origin::Default => Ok(user_cache()),
    }
}

/// The user's own gate cache, made (private) on first use; `None`, and
/// gates compiled in memory, when there is no home to keep it in.
fn user_cache() -> Option<PathBuf> {
    let dir = crate::root::user_cache_dir()?;
    match crate::fsx::create_dirs(&dir) {
        Ok(()) => Some(dir),
        Err(e) => {
            tracing::warn!("not using a gate cache: {e}; gates are compiled in memory");
            None
        }
    }
}

/// `stock:NAME` names a stock gate; anything else is a component file.
pub(crate) fn parse_target(target: &str) -> GateSource {
    match target.strip_prefix("stock:") {
        Some(name) => GateSource::Stock(name.to_owned()),
        None => GateSource::File {
            path: PathBuf::from(target),
            sha256: None,
        },
    }
}

/// Where `gate test` reads its context from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ContextInput {
    File(PathBuf),
    Stdin,
}

impl ContextInput {
    pub(crate) fn parse(arg: &str) -> ContextInput {
        if arg == "-" {
            ContextInput::Stdin
        } else {
            ContextInput::File(PathBuf::from(arg))
        }
    }

    /// Reads the context; missing fields take their defaults.
    pub(crate) fn read(&self) -> Result<Context> {
        let (name, text) = match self {
            ContextInput::Stdin => {
                let mut s = String::new();
                io::Read::read_to_string(&mut io::stdin(), &mut s)
                    .map_err(Error::io("reading the context from", "-"))?;
                ("standard input".to_owned(), s)
            }
            ContextInput::File(p) => (
                p.display().to_string(),
                std::fs::read_to_string(p).map_err(Error::io("reading the context", p))?,
            ),
        };
        serde_json::from_str(&text).map_err(|source| Error::ContextJson { name, source })
    }
}

/// What `gate test` found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TestReport {
    pub gate: String,
    pub sha256: String,
    pub info: GateInfo,
    pub phase: Phase,
    pub decision: &'static str,
    pub reason: String,
    pub logs: Vec<GateLog>,
    #[serde(rename = "elapsed_us")]
    #[serde(serialize_with = "micros")]
    pub elapsed: Duration,
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}

/// Evaluates a gate alone: describes it, checks the params, evaluates the
/// context (with `params` and `phase` overriding the context's own).
pub(crate) fn test(
    host: &GateHost,
    target: &GateSource,
    context: Option<Context>,
    params: Option<serde_json::Value>,
    phase: Option<Phase>,
    limits: &Limits,
) -> Result<TestReport> {
    let gate = host.load(target)?;
    let info = host.describe(&gate)?;
    let mut ctx = context.unwrap_or_default();
    if let Some(p) = params {
        ctx.params = p;
    }
    if let Some(p) = phase {
        ctx.phase = p;
    }
    host.check_params(&gate, &ctx.params)?;
    let eval = host.evaluate(&gate, &ctx, limits)?;
    Ok(TestReport {
        gate: gate.label().to_owned(),
        sha256: gate.sha256().to_owned(),
        info,
        phase: ctx.phase,
        decision: eval.decision.name(),
        reason: eval.decision.reason().to_owned(),
        logs: eval.logs,
        elapsed: eval.elapsed,
    })
}

fn source_tag(s: LogSource) -> &'static str {
    match s {
        LogSource::Host => "log",
        LogSource::Stdout => "stdout",
        LogSource::Stderr => "stderr",
    }
}

pub(crate) fn render_test(r: &TestReport, json: bool, out: &mut dyn Write) -> io::Result<()> {
    if json {
        return write_json(r, out);
    }
    writeln!(
        out,
        "gate:     {} ({} {})",
        safe(&r.gate),
        safe(&r.info.name),
        safe(&r.info.version)
    )?;
    writeln!(out, "phase:    {}", r.phase)?;
    writeln!(out, "decision: {}", r.decision)?;
    if !r.reason.is_empty() {
        writeln!(out, "reason:   {}", safe(&r.reason))?;
    }
    writeln!(out, "time:     {:?}", r.elapsed)?;
    if !r.logs.is_empty() {
        writeln!(out, "logs:")?;
        for l in &r.logs {
            writeln!(
                out,
                "  {:<5} {:<6} {}",
                l.level.as_str(),
                source_tag(l.source),
                safe(&l.message)
            )?;
        }
    }
    Ok(())
}

/// What `gate inspect` found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InspectReport {
    pub gate: String,
    pub sha256: String,
    pub size: u64,
    pub info: GateInfo,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

pub(crate) fn inspect(host: &GateHost, target: &GateSource) -> Result<InspectReport> {
    let gate = host.load(target)?;
    let info = host.describe(&gate)?;
    let iface = host.interface(&gate);
    Ok(InspectReport {
        gate: gate.label().to_owned(),
        sha256: gate.sha256().to_owned(),
        size: gate.size(),
        info,
        imports: iface.imports,
        exports: iface.exports,
    })
}

pub(crate) fn render_inspect(r: &InspectReport, json: bool, out: &mut dyn Write) -> io::Result<()> {
    if json {
        return write_json(r, out);
    }
    writeln!(out, "gate:        {}", safe(&r.gate))?;
    writeln!(out, "name:        {}", safe(&r.info.name))?;
    writeln!(out, "version:     {}", safe(&r.info.version))?;
    writeln!(out, "description: {}", safe(&r.info.description))?;
    writeln!(out, "size:        {} bytes", r.size)?;
    writeln!(out, "sha256:      {}", r.sha256)?;
    writeln!(out, "imports:")?;
    for i in &r.imports {
        writeln!(out, "  {}", safe(i))?;
    }
    writeln!(out, "exports:")?;
    for e in &r.exports {
        writeln!(out, "  {}", safe(e))?;
    }
    writeln!(out, "params schema:")?;
    for line in r.info.params_schema.lines() {
        writeln!(out, "  {}", safe(line))?;
    }
    Ok(())
}

/// One file `gate compile` handled.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Compiled {
    pub gate: String,
    pub sha256: String,
    /// True when the cache already held it.
    pub cached: bool,
}

/// Compiles components into the cache, so the next tick loads them fast.
pub(crate) fn compile(host: &GateHost, files: &[PathBuf]) -> Result<Vec<Compiled>> {
    let mut done = Vec::new();
    for f in files {
        let before = host.cache_stats();
        let gate = host.load(&GateSource::File {
            path: f.clone(),
            sha256: None,
        })?;
        done.push(Compiled {
            gate: gate.label().to_owned(),
            sha256: gate.sha256().to_owned(),
            cached: host.cache_stats().hits > before.hits,
        });
    }
    Ok(done)
}

pub(crate) fn render_compile(r: &[Compiled], json: bool, out: &mut dyn Write) -> io::Result<()> {
    if json {
        return write_json(&r, out);
    }
    for c in r {
        let what = if c.cached { "already cached" } else { "compiled" };
        writeln!(out, "{what}: {} ({})", safe(&c.gate), &c.sha256[..12])?;
    }
    Ok(())
}

/// One row of `gate list`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StockRow {
    pub name: &'static str,
    pub version: String,
    pub description: String,
    pub size: u64,
    pub sha256: String,
}

/// The stock gates, described by themselves.
pub(crate) fn list(host: &GateHost) -> Result<Vec<StockRow>> {
    let mut rows = Vec::new();
    for s in stock_gates() {
        let gate = host.load(&GateSource::Stock(s.name.to_owned()))?;
        let info = host.describe(&gate)?;
        rows.push(StockRow {
            name: s.name,
            version: info.version,
            description: info.description,
            size: gate.size(),
            sha256: gate.sha256().to_owned(),
        });
    }
    Ok(rows)
}

pub(crate) fn render_list(rows: &[StockRow], json: bool, out: &mut dyn Write) -> io::Result<()> {
    if json {
        return write_json(&rows, out);
    }
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    writeln!(out, "{:<width$}  {:<8}  DESCRIPTION", "NAME", "VERSION")?;
    for r in rows {
        writeln!(
            out,
            "{:<width$}  {:<8}  {}",
            r.name,
            safe(&r.version),
            safe(&r.description)
        )?;
    }
    Ok(())
}

pub(super) fn write_json<T: Serialize + ?Sized>(value: &T, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(parse_target("stock:budget"), GateSource::Stock("budget".into()));
        assert_eq!(
            parse_target("gates/x.wasm"),
            GateSource::File {
                path: "gates/x.wasm".into(),
                sha256: None
            }
        );
        assert_eq!(ContextInput::parse("-"), ContextInput::Stdin);
    }

    #[test]
    fn context_missing_fields_default() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ctx.json");
        std::fs::write(&p, r#"{"tick": 7, "metrics": {"cost_usd": 1.5}}"#).unwrap();
        let ctx = ContextInput::File(p).read().unwrap();
        assert_eq!(ctx.tick, 7);
        assert_eq!(ctx.phase, Phase::BeforeStep);
        assert_eq!(ctx.metrics["cost_usd"], 1.5);
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{").unwrap();
        assert!(matches!(
            ContextInput::File(bad).read(),
            Err(Error::ContextJson { .. })
        ));
        let typo = dir.path().join("typo.json");
        std::fs::write(&typo, r#"{"tick": 7, "metrcs": {}}"#).unwrap();
        match ContextInput::File(typo).read() {
            Err(Error::ContextJson { source, .. }) => {
                assert!(source.to_string().contains("unknown field `metrcs`"), "{source}");
            }
            other => panic!("{other:?}"),
        }
    }
}
