//! A value a gate's code returned that its language's bindings could not
//! hand to the host: a Python `evaluate` that returns `"skip"`, a
//! JavaScript one that returns `{tag: 'skip'}` without its reason. The
//! bindings then trap, and what they print names neither the gate's code
//! nor a decision (a `KeyError` inside componentize-py's runtime, an
//! "invalid variant tag" in a temporary build path of componentize-js).
//! This reads such a trap and says what the gate returned and what it
//! should return instead, in the gate's language.
//!
//! It goes by structure where the runtime gives one: componentize-py
//! lowers a returned value in its `wit_dylib_pop_*` functions, which the
//! wasm backtrace names. componentize-js names none of its functions, so
//! for JavaScript the error its generated bindings print is the only
//! witness: a stack entirely in their `initializer.js`, ending in the
//! export's `export_<name>`. The runtimes' texts this reads are here and
//! nowhere else, each with a unit test on what they printed
//! (componentize-py 0.25.1, componentize-js 0.23.0).

use super::fault::{self, Fault};

/// The language whose bindings refused the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Language {
    Python,
    JavaScript,
}

/// What a gate's code returned that is not of the export's type, as its
/// language names it: `a str`, `undefined`, `the tag "skp"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Returned {
    pub language: Language,
    pub what: String,
}

/// How a call trapped: whether on `unreachable`, and the names of the
/// functions of its wasm backtrace, innermost first.
pub(crate) struct Trapped {
    pub unreachable: bool,
    pub frames: Vec<String>,
}

/// The value the export `export` (`evaluate`, `describe`, `check-params`)
/// returned that its bindings could not lower, when the trap and the
/// gate's output show one.
pub(crate) fn read(trapped: &Trapped, export: &str, output: &str) -> Option<Returned> {
    if !trapped.unreachable {
        return None;
    }
    python(&trapped.frames, output).or_else(|| javascript(export, output))
}

/// componentize-py's lowering functions: a trap inside one of them is a
/// returned value it could not convert.
const PY_LOWERING: &str = "wit_dylib_pop_";

/// A Python value componentize-py could not lower: its runtime panics on
/// the `PyErr` of the conversion (`KeyError(<class 'str'>)`: the value's
/// type is none of the variant's cases; `TypeError("'int' object is not an
/// instance of 'str'")`: a field of the wrong type).
fn python(frames: &[String], output: &str) -> Option<Returned> {
    if !frames.iter().any(|f| f.starts_with(PY_LOWERING)) {
        return None;
    }
    let message = match fault::read(output) {
        Some(Fault::Panic { message, .. }) => message,
        _ => String::new(),
    };
    Some(Returned {
        language: Language::Python,
        what: py_error(&message).unwrap_or_else(|| "a value its bindings cannot convert".to_owned()),
    })
}

/// `a str` from `KeyError(<class 'str'>)`; `an int where a str is due` from
/// `TypeError("'int' object is not an instance of 'str'")`; another
/// error's own message.
fn py_error(panic: &str) -> Option<String> {
    let (_, err) = panic.split_once("PyErr {")?;
    let (_, value) = err.split_once(" value: ")?;
    if let Some(class) = value
        .strip_prefix("KeyError(<class '")
        .and_then(|rest| rest.split_once("'>)"))
        .map(|(class, _)| class)
    {
        return Some(py_type(class));
    }
    let (_, rest) = value.split_once("(\"")?;
    let (message, _) = rest.split_once("\")")?;
    let kinds = message
        .strip_prefix('\'')
        .and_then(|m| m.split_once("' object is not an instance of '"))
        .and_then(|(found, rest)| Some((found, rest.strip_suffix('\'')?)));
    Some(match kinds {
        Some((found, due)) => format!("{} where {} is due", article(found), article(due)),
        None => message.to_owned(),
    })
}

/// A value of Python type `class`, as its author would write of it.
fn py_type(class: &str) -> String {
    match class {
        "NoneType" => "None".to_owned(),
        "type" => "a class, not an instance of it".to_owned(),
        class => article(class),
    }
}

/// What componentize-js prints when a string it must lower is not one.
const NOT_A_STRING: &str = "expected a string, received [";

/// The file componentize-js generates the bindings in.
const BINDINGS: &str = "initializer.js";

/// The column of the bindings' call that lowers a string at the depth of a
/// result's `case 'err'` (componentize-js 0.23.0): there the string is the
/// value the gate threw, which `fault` names. A decision's reason is
/// lowered two blocks deeper (column 49); a record's field, in an export
/// without a result, is never a thrown value.
const JS_THROWN_COLUMN: u32 = 45;

/// An error the generated bindings raised in `export_<name>` while
/// lowering what the export returned.
fn javascript(export: &str, output: &str) -> Option<Returned> {
    let (message, frames) = js_error(output)?;
    let (function, column) = frames.last()?;
    if *function != format!("export_{}", camel(export)) {
        return None;
    }
    let what = if let Some(kind) = message
        .strip_prefix(NOT_A_STRING)
        .and_then(|k| k.strip_suffix(']'))
    {
        let has_error_case = export != "describe";
        if has_error_case && *column == JS_THROWN_COLUMN {
            return None;
        }
        let field = if export == "evaluate" {
            "its reason"
        } else {
            "a field"
        };
        format!("{field} is {}, not a string", js_kind(kind))
    } else if let Some(tag) = message.strip_prefix("invalid variant tag value `") {
        let (tag, rest) = tag.split_once("` (received `")?;
        let received = rest.split_once('`').map_or(rest, |(r, _)| r);
        match tag {
            "undefined" if received == "[object Object]" => "an object without a tag".to_owned(),
            "undefined" => format!("{received}, which has no tag"),
            tag => format!("the tag {tag}"),
        }
    } else if let Some(value) = ["undefined", "null"]
        .into_iter()
        .find(|v| message.ends_with(&format!(" is {v}")))
    {
        value.to_owned()
    } else {
        message.to_owned()
    };
    Some(Returned {
        language: JavaScript,
        what,
    })
}

use Language::JavaScript;

/// The last error in `output` whose stack lies in the bindings alone: its
/// message, and each frame's function and column, innermost first.
fn js_error(output: &str) -> Option<(&str, Vec<(&str, u32)>)> {
    let lines: Vec<&str> = output.lines().collect();
    let stack = lines.iter().rposition(|l| *l == "Stack:")?;
    let message = lines[..stack].last()?.trim();
    let mut frames = Vec::new();
    for line in lines[stack + 1..].iter().map(|l| l.trim()) {
        if line.is_empty() {
            break;
        }
        let (function, place) = line.rsplit_once('@')?;
        let mut parts = place.rsplitn(3, ':');
        let column = parts.next()?.parse().ok()?;
        let _line = parts.next()?;
        let file = parts.next()?;
        if file.rsplit('/').next() != Some(BINDINGS) {
            return None;
        }
        frames.push((function, column));
    }
    (!message.is_empty() && !frames.is_empty()).then_some((message, frames))
}

/// `check-params` as componentize-js names it: `checkParams`.
fn camel(export: &str) -> String {
    let mut parts = export.split('-');
    let mut out = parts.next().unwrap_or_default().to_owned();
    for p in parts {
        let mut chars = p.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// `undefined`, `null` as they are; `a number`, `an object`.
fn js_kind(kind: &str) -> String {
    match kind {
        "undefined" | "null" => kind.to_owned(),
        k => article(k),
    }
}

fn article(noun: &str) -> String {
    let a = if noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{a} {noun}")
}

/// What the export returns, in the gate's language, as its bindings take
/// it.
pub(crate) fn expected(language: Language, export: &str) -> &'static str {
    match (language, export) {
        (Language::Python, "evaluate") => {
            "types.Decision_Proceed() | types.Decision_Skip(reason) | types.Decision_AwaitApproval(reason) \
             | types.Decision_Halt(reason) | types.Decision_Complete(reason), the reason a str"
        }
        (Language::Python, "describe") => {
            "types.GateInfo(name=..., version=..., description=..., params_schema=...), each a str"
        }
        (Language::Python, _) => "None, or raise Err(message) with a str",
        (JavaScript, "evaluate") => {
            "{tag: 'proceed'} | {tag: 'skip' | 'await-approval' | 'halt' | 'complete', val: reason}, \
             the reason a string"
        }
        (JavaScript, "describe") => "{name, version, description, paramsSchema}, each a string",
        (JavaScript, _) => "undefined, or throw a string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|f| (*f).to_owned()).collect()
    }

    /// The innermost frames of a Python gate's trap, as wasmtime names
    /// them, up to the export.
    const PY_FRAMES: [&str; 4] = [
        "abort",
        "core::result::unwrap_failed",
        "wit_dylib_pop_variant",
        "evaluate",
    ];

    /// What componentize-py 0.25.1 printed when `evaluate` returned
    /// `"skip"`.
    const PY_STR: &str = "
thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1640:18:
called `Result::unwrap()` on an `Err` value: PyErr { type: <class 'KeyError'>, value: KeyError(<class 'str'>), traceback: None }
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";

    /// ... and when it returned `types.Decision_Skip(42)`.
    const PY_INT: &str = "
thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1494:89:
called `Result::unwrap()` on an `Err` value: PyErr { type: <class 'TypeError'>, value: TypeError(\"'int' object is not an instance of 'str'\"), traceback: None }
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";

    fn read_py(output: &str) -> Option<String> {
        let trapped = Trapped {
            unreachable: true,
            frames: frames(&PY_FRAMES),
        };
        read(&trapped, "evaluate", output).map(|r| {
            assert_eq!(r.language, Language::Python);
            r.what
        })
    }

    #[test]
    fn a_python_value_of_no_case_is_named_by_its_type() {
        assert_eq!(read_py(PY_STR).as_deref(), Some("a str"));
        let none = PY_STR.replace("<class 'str'>", "<class 'NoneType'>");
        assert_eq!(read_py(&none).as_deref(), Some("None"));
        let class = PY_STR.replace("<class 'str'>", "<class 'type'>");
        assert_eq!(read_py(&class).as_deref(), Some("a class, not an instance of it"));
        let dict = PY_STR.replace("<class 'str'>", "<class 'dict'>");
        assert_eq!(read_py(&dict).as_deref(), Some("a dict"));
    }

    #[test]
    fn a_python_field_of_the_wrong_type_says_what_was_due() {
        assert_eq!(read_py(PY_INT).as_deref(), Some("an int where a str is due"));
    }

    #[test]
    fn a_python_trap_outside_the_lowering_is_not_a_returned_value() {
        let trapped = Trapped {
            unreachable: true,
            frames: frames(&["abort", "std::process::abort", "evaluate"]),
        };
        assert_eq!(read(&trapped, "evaluate", PY_STR), None);
        let trapped = Trapped {
            unreachable: false,
            frames: frames(&PY_FRAMES),
        };
        assert_eq!(read(&trapped, "evaluate", PY_STR), None);
    }

    /// What componentize-js 0.23.0's bindings printed, the export's frame
    /// at `line:column`.
    fn js(message: &str, export: &str, at: &str) -> String {
        format!(
            "{message}
Stack:
  _utf8AllocateAndEncode@/tmp/8b9847e9f674/sources/initializer.js:18:11
  export_{export}@/tmp/8b9847e9f674/sources/initializer.js:{at}

Redirecting call to abort() to mozalloc_abort"
        )
    }

    fn read_js(export: &str, output: &str) -> Option<String> {
        let trapped = Trapped {
            unreachable: true,
            frames: Vec::new(),
        };
        read(&trapped, export, output).map(|r| {
            assert_eq!(r.language, Language::JavaScript);
            r.what
        })
    }

    #[test]
    fn a_javascript_decision_without_a_string_reason_is_named() {
        let no_reason = js("expected a string, received [undefined]", "evaluate", "351:49");
        assert_eq!(
            read_js("evaluate", &no_reason).as_deref(),
            Some("its reason is undefined, not a string")
        );
        let number = js("expected a string, received [number]", "evaluate", "375:49");
        assert_eq!(
            read_js("evaluate", &number).as_deref(),
            Some("its reason is a number, not a string")
        );
    }

    #[test]
    fn a_thrown_javascript_value_is_left_to_fault() {
        let thrown = js("expected a string, received [undefined]", "evaluate", "406:45");
        assert_eq!(read_js("evaluate", &thrown), None);
        let thrown = js("expected a string, received [object]", "checkParams", "120:45");
        assert_eq!(read_js("check-params", &thrown), None);
    }

    #[test]
    fn a_javascript_gate_info_field_that_is_not_a_string_is_named() {
        let describe = js("expected a string, received [number]", "describe", "143:41");
        assert_eq!(
            read_js("describe", &describe).as_deref(),
            Some("a field is a number, not a string")
        );
        // Another export's frame is not this call's.
        assert_eq!(read_js("evaluate", &describe), None);
    }

    #[test]
    fn a_javascript_value_with_an_unknown_tag_or_none_is_named() {
        let at = |message: &str| {
            format!("{message}\nStack:\n  export_evaluate@/tmp/596351bad7ac/sources/initializer.js:396:17\n")
        };
        let cases = [
            (
                "invalid variant tag value `\"skp\"` (received `[object Object]`) specified for `Decision`",
                "the tag \"skp\"",
            ),
            (
                "invalid variant tag value `undefined` (received `skip`) specified for `Decision`",
                "skip, which has no tag",
            ),
            (
                "invalid variant tag value `undefined` (received `[object Object]`) specified for `Decision`",
                "an object without a tag",
            ),
            (
                "can't access property \"tag\", variant23 is undefined",
                "undefined",
            ),
            ("can't access property \"tag\", variant23 is null", "null"),
        ];
        for (message, what) in cases {
            assert_eq!(
                read_js("evaluate", &at(message)).as_deref(),
                Some(what),
                "{message}"
            );
        }
    }

    #[test]
    fn an_error_in_the_gates_own_code_is_not_a_returned_value() {
        let own = "TypeError: bad hour\nStack:\n  evaluate@gate.js:27:25\n  export_evaluate@/tmp/c0/sources/initializer.js:314:29\n";
        assert_eq!(read_js("evaluate", own), None);
        assert_eq!(
            read_js("evaluate", "expected a string, received [number]\n"),
            None
        );
        assert_eq!(read_js("evaluate", ""), None);
    }

    #[test]
    fn export_names_are_camel_cased_as_componentize_js_does() {
        assert_eq!(camel("check-params"), "checkParams");
        assert_eq!(camel("evaluate"), "evaluate");
    }
}
