//! What differs between a component's exports and the `gate` world of the
//! version it was checked against, named by record and field: a gate built
//! against an edited copy of the WIT (a field added to `context`, a case
//! renamed in `decision`) is told which one, not only that `evaluate` has
//! the wrong type.
//!
//! The host's side is read from its own WIT files (the records, variants
//! and enums of `interface types`, and the world's exports); the gate's
//! from the component's types as wasmtime gives them. The two are walked
//! together from each export, so a record is found by where it is used
//! (the component's types carry no names), and the first difference is
//! said.

use std::collections::HashMap;

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::{ComponentItem, Type};

/// Every version's WIT the host links (a version's text names it in its
/// `package` line).
const WITS: &[&str] = &[
    include_str!("../../wit/0.1.0/gate.wit"),
    include_str!("../../wit/0.2.0/gate.wit"),
    include_str!("../../wit/gate.wit"),
];

/// The first difference between `component`'s exports and the `gate`
/// world of `automaton:gate@{version}`: `record `context` has a field
/// `extra` (string) after `totals`, which automaton:gate@0.1.0's has
/// not`. None when none is found (or the version is not one of the host's).
pub(crate) fn explain(engine: &Engine, component: &Component, version: &str) -> Option<String> {
    let wit = WITS
        .iter()
        .map(|text| Wit::parse(text))
        .find(|w| w.version == version)?;
    let ty = component.component_type();
    let ours = format!("automaton:gate@{version}'s");
    for (name, params, result) in &wit.exports {
        let Some(export) = ty.get_export(engine, name) else {
            return Some(format!("the component does not export `{name}`"));
        };
        let ComponentItem::ComponentFunc(func) = export.ty else {
            return Some(format!("its export `{name}` is not a function"));
        };
        let theirs: Vec<(String, Type)> = func.params().map(|(n, t)| (n.to_owned(), t)).collect();
        if theirs.len() != params.len() {
            return Some(format!(
                "its `{name}` takes {} parameters; {ours} takes {}",
                theirs.len(),
                params.len()
            ));
        }
        let walk = Walk {
            wit: &wit,
            ours: &ours,
        };
        for ((_, want), (pname, got)) in params.iter().zip(&theirs) {
            if let Some(d) = walk.diff(want, got, &format!("parameter `{pname}` of `{name}`")) {
                return Some(d);
            }
        }
        let results: Vec<Type> = func.results().collect();
        match (result, results.first()) {
            (Some(want), Some(got)) => {
                if let Some(d) = walk.diff(want, got, &format!("what `{name}` returns")) {
                    return Some(d);
                }
            }
            (None, None) => {}
            (Some(want), None) => {
                return Some(format!(
                    "its `{name}` returns nothing; {ours} returns {}",
                    want.show()
                ));
            }
            (None, Some(got)) => {
                return Some(format!(
                    "its `{name}` returns {}; {ours} returns nothing",
                    show(got)
                ));
            }
        }
    }
    None
}

/// A WIT type as written.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    /// A primitive (`u64`, `string`, `bool`...).
    Prim(String),
    /// A type named in `interface types`.
    Named(String),
    Option(Box<Ty>),
    List(Box<Ty>),
    Result(Option<Box<Ty>>, Option<Box<Ty>>),
    Tuple(Vec<Ty>),
}

impl Ty {
    fn show(&self) -> String {
        match self {
            Ty::Prim(p) | Ty::Named(p) => p.clone(),
            Ty::Option(t) => format!("option<{}>", t.show()),
            Ty::List(t) => format!("list<{}>", t.show()),
            Ty::Result(ok, err) => {
                let side = |t: &Option<Box<Ty>>| t.as_ref().map_or("_".to_owned(), |t| t.show());
                format!("result<{}, {}>", side(ok), side(err))
            }
            Ty::Tuple(ts) => format!(
                "tuple<{}>",
                ts.iter().map(Ty::show).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// The parts of a version's WIT this compares.
#[derive(Debug, Default)]
struct Wit {
    version: String,
    records: HashMap<String, Vec<(String, Ty)>>,
    variants: HashMap<String, Vec<(String, Option<Ty>)>>,
    enums: HashMap<String, Vec<String>>,
    exports: Vec<Export>,
}

/// One of the world's exported functions: name, parameters, result.
type Export = (String, Vec<(String, Ty)>, Option<Ty>);

impl Wit {
    /// Reads the host's own WIT (which its build checks: wasmtime's
    /// bindings are generated from the same files), so anything this does
    /// not know is skipped rather than refused.
    fn parse(text: &str) -> Wit {
        let mut p = Parser {
            tokens: tokens(text),
            at: 0,
        };
        let mut wit = Wit::default();
        while let Some(t) = p.next() {
            match t {
                "package" => {
                    // automaton : gate@0.1.0 ;
                    while let Some(t) = p.next().filter(|&t| t != ";") {
                        if let Some((_, v)) = t.split_once('@') {
                            v.clone_into(&mut wit.version);
                        }
                    }
                }
                "record" => {
                    let name = p.next().unwrap_or_default().to_owned();
                    let fields = p.list(|p| {
                        let field = p.next()?.to_owned();
                        p.expect(":")?;
                        Some((field, p.ty()?))
                    });
                    wit.records.insert(name, fields);
                }
                "variant" => {
                    let name = p.next().unwrap_or_default().to_owned();
                    let cases = p.list(|p| {
                        let case = p.next()?.to_owned();
                        let ty = if p.peek() == Some("(") {
                            p.next();
                            let ty = p.ty()?;
                            p.expect(")")?;
                            Some(ty)
                        } else {
                            None
                        };
                        Some((case, ty))
                    });
                    wit.variants.insert(name, cases);
                }
                "enum" => {
                    let name = p.next().unwrap_or_default().to_owned();
                    let cases = p.list(|p| p.next().map(str::to_owned));
                    wit.enums.insert(name, cases);
                }
                "export" if p.peek_at(1) == Some(":") => {
                    let name = p.next().unwrap_or_default().to_owned();
                    p.expect(":");
                    p.expect("func");
                    let mut params = Vec::new();
                    p.expect("(");
                    while p.peek().is_some_and(|t| t != ")") {
                        let Some(pname) = p.next().map(str::to_owned) else {
                            break;
                        };
                        p.expect(":");
                        let Some(ty) = p.ty() else { break };
                        params.push((pname, ty));
                        if p.peek() == Some(",") {
                            p.next();
                        }
                    }
                    p.expect(")");
                    let result = if p.peek() == Some("->") {
                        p.next();
                        p.ty()
                    } else {
                        None
                    };
                    wit.exports.push((name, params, result));
                }
                _ => {}
            }
        }
        wit
    }
}

/// The WIT's words and punctuation, without comments.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
            rest = &rest[start..];
            let len = if rest.starts_with("->") {
                2
            } else if rest.starts_with(|c: char| "{}()<>,:;=".contains(c)) {
                1
            } else {
                rest.find(|c: char| c.is_whitespace() || "{}()<>,:;=".contains(c))
                    .unwrap_or(rest.len())
            };
            out.push(&rest[..len]);
            rest = &rest[len..];
        }
    }
    out
}

struct Parser<'a> {
    tokens: Vec<&'a str>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let t = self.tokens.get(self.at).copied();
        self.at += 1;
        t
    }

    fn peek(&self) -> Option<&'a str> {
        self.peek_at(0)
    }

    fn peek_at(&self, n: usize) -> Option<&'a str> {
        self.tokens.get(self.at + n).copied()
    }

    fn expect(&mut self, token: &str) -> Option<()> {
        (self.next()? == token).then_some(())
    }

    fn skip_past(&mut self, token: &str) {
        while self.next().is_some_and(|t| t != token) {}
    }

    /// `{ item, item, }`, each read by `item`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Vec<T> {
        let mut items = Vec::new();
        if self.expect("{").is_none() {
            return items;
        }
        while self.peek().is_some_and(|t| t != "}") {
            match item(self) {
                Some(i) => items.push(i),
                None => break,
            }
            if self.peek() == Some(",") {
                self.next();
            }
        }
        self.skip_past("}");
        items
    }

    fn ty(&mut self) -> Option<Ty> {
        let name = self.next()?;
        let generic = self.peek() == Some("<");
        Some(match name {
            "option" | "list" if generic => {
                self.next();
                let inner = Box::new(self.ty()?);
                self.expect(">")?;
                if name == "option" {
                    Ty::Option(inner)
                } else {
                    Ty::List(inner)
                }
            }
            "result" if generic => {
                self.next();
                let ok = if self.peek() == Some("_") {
                    self.next();
                    None
                } else {
                    Some(Box::new(self.ty()?))
                };
                let err = if self.peek() == Some(",") {
                    self.next();
                    Some(Box::new(self.ty()?))
                } else {
                    None
                };
                self.expect(">")?;
                Ty::Result(ok, err)
            }
            "result" => Ty::Result(None, None),
            "tuple" if generic => {
                self.next();
                let mut ts = vec![self.ty()?];
                while self.peek() == Some(",") {
                    self.next();
                    ts.push(self.ty()?);
                }
                self.expect(">")?;
                Ty::Tuple(ts)
            }
            "bool" | "s8" | "u8" | "s16" | "u16" | "s32" | "u32" | "s64" | "u64" | "f32" | "f64" | "char"
            | "string" => Ty::Prim(name.to_owned()),
            _ => Ty::Named(name.to_owned()),
        })
    }
}

/// The gate's type as WIT writes it; a record, variant or enum by its
/// fields or cases (the component's types carry no names).
fn show(t: &Type) -> String {
    match t {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", show(&l.ty())),
        Type::Option(o) => format!("option<{}>", show(&o.ty())),
        Type::Result(r) => format!(
            "result<{}, {}>",
            r.ok().map_or("_".into(), |t| show(&t)),
            r.err().map_or("_".into(), |t| show(&t))
        ),
        Type::Record(r) => format!(
            "a record {{{}}}",
            r.fields().map(|f| f.name).collect::<Vec<_>>().join(", ")
        ),
        Type::Variant(v) => format!(
            "a variant {{{}}}",
            v.cases().map(|c| c.name).collect::<Vec<_>>().join(", ")
        ),
        Type::Enum(e) => format!("an enum {{{}}}", e.names().collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Walks the host's types and the gate's together.
struct Walk<'a> {
    wit: &'a Wit,
    /// `automaton:gate@0.1.0's`
    ours: &'a str,
}

impl Walk<'_> {
    /// The first difference between `want` (the host's) and `got` (the
    /// gate's) at `place` (`field `last-run` of record `context``).
    fn diff(&self, want: &Ty, got: &Type, place: &str) -> Option<String> {
        let ours = self.ours;
        let mismatch = || {
            Some(format!(
                "{place} is {} here; {ours} is {}",
                show(got),
                want.show()
            ))
        };
        match (want, got) {
            (Ty::Prim(p), _) => (show(got) != *p).then(|| mismatch().unwrap_or_default()),
            (Ty::Option(w), Type::Option(g)) => self.diff(w, &g.ty(), place),
            (Ty::List(w), Type::List(g)) => self.diff(w, &g.ty(), place),
            (Ty::Result(wo, we), Type::Result(g)) => self
                .side(wo.as_deref(), g.ok(), place, "ok")
                .or_else(|| self.side(we.as_deref(), g.err(), place, "error")),
            (Ty::Tuple(ws), Type::Tuple(g)) => {
                let gs: Vec<Type> = g.types().collect();
                if ws.len() != gs.len() {
                    return mismatch();
                }
                ws.iter().zip(&gs).find_map(|(w, g)| self.diff(w, g, place))
            }
            (Ty::Named(name), _) => self.named(name, got, place),
            _ => mismatch(),
        }
    }

    fn side(&self, want: Option<&Ty>, got: Option<Type>, place: &str, which: &str) -> Option<String> {
        match (want, got) {
            (None, None) => None,
            (Some(w), Some(g)) => self.diff(w, &g, place),
            (w, g) => Some(format!(
                "{place} has {} as its {which} type here; {} has {}",
                g.as_ref().map_or("none".into(), show),
                self.ours,
                w.map_or("none".into(), Ty::show)
            )),
        }
    }

    /// A record, variant or enum of the host's, against the gate's type.
    fn named(&self, name: &str, got: &Type, place: &str) -> Option<String> {
        let ours = self.ours;
        if let Some(fields) = self.wit.records.get(name) {
            let Type::Record(r) = got else {
                return Some(format!(
                    "{place} is {} here; {ours} is the record `{name}`",
                    show(got)
                ));
            };
            let theirs: Vec<(String, Type)> = r.fields().map(|f| (f.name.to_owned(), f.ty)).collect();
            return self.members(
                &format!("record `{name}`"),
                "field",
                &fields
                    .iter()
                    .map(|(f, t)| (f.as_str(), Some(t)))
                    .collect::<Vec<_>>(),
                &theirs
                    .iter()
                    .map(|(f, t)| (f.as_str(), Some(t)))
                    .collect::<Vec<_>>(),
            );
        }
        if let Some(cases) = self.wit.variants.get(name) {
            let Type::Variant(v) = got else {
                return Some(format!(
                    "{place} is {} here; {ours} is the variant `{name}`",
                    show(got)
                ));
            };
            let theirs: Vec<(String, Option<Type>)> = v.cases().map(|c| (c.name.to_owned(), c.ty)).collect();
            return self.members(
                &format!("variant `{name}`"),
                "case",
                &cases
                    .iter()
                    .map(|(c, t)| (c.as_str(), t.as_ref()))
                    .collect::<Vec<_>>(),
                &theirs
                    .iter()
                    .map(|(c, t)| (c.as_str(), t.as_ref()))
                    .collect::<Vec<_>>(),
            );
        }
        if let Some(names) = self.wit.enums.get(name) {
            let Type::Enum(e) = got else {
                return Some(format!(
                    "{place} is {} here; {ours} is the enum `{name}`",
                    show(got)
                ));
            };
            let theirs: Vec<&str> = e.names().collect();
            return self.members(
                &format!("enum `{name}`"),
                "case",
                &names.iter().map(|c| (c.as_str(), None)).collect::<Vec<_>>(),
                &theirs.iter().map(|c| (*c, None)).collect::<Vec<_>>(),
            );
        }
        None
    }

    /// The fields (or cases) of one record (or variant, or enum), in
    /// order: the first one added, missing, renamed or of another type.
    fn members(
        &self,
        what: &str,
        member: &str,
        want: &[(&str, Option<&Ty>)],
        got: &[(&str, Option<&Type>)],
    ) -> Option<String> {
        let ours = self.ours;
        let typed = |t: Option<&Type>| t.map(|t| format!(" ({})", show(t))).unwrap_or_default();
        let wtyped = |t: Option<&Ty>| t.map(|t| format!(" ({})", t.show())).unwrap_or_default();
        let after = |i: usize| {
            if i == 0 {
                "first".to_owned()
            } else {
                format!("after `{}`", got[i - 1].0)
            }
        };
        for i in 0..want.len().max(got.len()) {
            match (want.get(i), got.get(i)) {
                (Some((w, wt)), Some((g, gt))) if w == g => match (wt, gt) {
                    (Some(wt), Some(gt)) => {
                        if let Some(d) = self.diff(wt, gt, &format!("{member} `{g}` of {what}")) {
                            return Some(d);
                        }
                    }
                    (None, None) => {}
                    _ => {
                        let carries = |t: Option<String>| {
                            t.map_or("carries nothing".to_owned(), |t| format!("carries {t}"))
                        };
                        return Some(format!(
                            "{member} `{g}` of {what} {} here; {ours} {}",
                            carries(gt.map(show)),
                            carries(wt.map(Ty::show))
                        ));
                    }
                },
                (Some((w, wt)), Some((g, gt))) => {
                    return Some(if want.iter().any(|(n, _)| n == g) {
                        format!(
                            "{what} has {member} `{g}` where {ours} has `{w}` (they are in another order)"
                        )
                    } else {
                        format!(
                            "{what} has a {member} `{g}`{} {}, which {ours} has not (it has `{w}`{} there)",
                            typed(*gt),
                            after(i),
                            wtyped(*wt)
                        )
                    });
                }
                (None, Some((g, gt))) => {
                    return Some(format!(
                        "{what} has a {member} `{g}`{} {}, which {ours} has not",
                        typed(*gt),
                        after(i)
                    ));
                }
                (Some((w, wt)), None) => {
                    return Some(format!("{what} lacks {ours} {member} `{w}`{}", wtyped(*wt)));
                }
                (None, None) => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_wit_is_read() {
        let wit = Wit::parse(include_str!("../../wit/0.1.0/gate.wit"));
        assert_eq!(wit.version, "0.1.0");
        let context = &wit.records["context"];
        assert_eq!(context[0], ("loop-name".to_owned(), Ty::Prim("string".into())));
        assert_eq!(
            context.iter().find(|(f, _)| f == "last-run").unwrap().1,
            Ty::Option(Box::new(Ty::Named("run-result".into())))
        );
        assert_eq!(wit.variants["decision"].len(), 5);
        assert_eq!(wit.enums["level"].len(), 5);
        let names: Vec<&str> = wit.exports.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["describe", "check-params", "evaluate"]);
        let (_, params, result) = &wit.exports[2];
        assert_eq!(params[0].1, Ty::Named("context".into()));
        assert_eq!(result.as_ref().unwrap().show(), "result<decision, string>");
        for text in WITS {
            assert!(!Wit::parse(text).exports.is_empty());
        }
    }

    #[test]
    fn every_version_the_host_links_has_its_wit_here() {
        let here: Vec<String> = WITS.iter().map(|t| Wit::parse(t).version).collect();
        for version in super::super::world::VERSIONS {
            assert!(
                here.iter().any(|v| v == version),
                "automaton:gate@{version} is linked but not in world_diff::WITS"
            );
        }
    }
}
