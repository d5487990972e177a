//! Reading what a gate's runtime printed when the gate trapped, so the error
//! an author reads says what happened in their code: the uncaught Python
//! exception (its last line and where it was raised), the value a
//! JavaScript gate threw, or the Rust panic's message, without the
//! interpreter runtime's own panic that follows it. Anything else is left
//! as it was printed, less the runtime's boilerplate.

/// What the gate's code did, read from its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// An uncaught Python exception: `ValueError: bad hour`, and where it
    /// was raised (`app.py, line 18, in evaluate`).
    Exception { exception: String, at: Option<String> },
    /// A Rust panic: its message, and where (`src/lib.rs:10:5`).
    Panic { message: String, at: Option<String> },
    /// A JavaScript gate threw something other than a string (a thrown
    /// string is a refusal): the value as the gate's `reportingThrows`
    /// printed it (`42`, `{"code":1}`, `TypeError: bad hour`), and where
    /// (`gate.js:27:25, in evaluate`); or, when the gate did not print it,
    /// only its type, as componentize-js reports it.
    Thrown { value: String, at: Option<String> },
}

const TRACEBACK: &str = "Traceback (most recent call last):";

/// What a JavaScript gate's `reportingThrows` prints before the value it
/// caught goes on to trap.
const UNCAUGHT: &str = "Uncaught ";

/// What componentize-js prints when the value a gate threw cannot be passed
/// back as the string a refusal is: `expected a string, received [number]`.
const NOT_A_STRING: &str = "expected a string, received [";

/// The fault the output reports, if it reports one in a shape we know.
pub(crate) fn read(output: &str) -> Option<Fault> {
    python_exception(output)
        .or_else(|| js_thrown(output))
        .or_else(|| rust_panic(output))
}

/// The exception of the last traceback: the unindented lines after its
/// `File ...` frames, up to a blank line or the runtime's panic.
fn python_exception(output: &str) -> Option<Fault> {
    let start = output.rfind(TRACEBACK)? + TRACEBACK.len();
    let mut at = None;
    let mut exception: Vec<&str> = Vec::new();
    for line in output[start..].lines().skip(1) {
        if exception.is_empty() {
            if let Some(frame) = line.strip_prefix("  File ") {
                at = frame_location(frame);
                continue;
            }
            if line.starts_with(' ') || line.starts_with('\t') {
                continue; // a frame's source line or its ^^^ marker
            }
        }
        if line.trim().is_empty() || is_panic_line(line) {
            break;
        }
        exception.push(line);
    }
    let exception = exception.join("\n").trim().to_owned();
    (!exception.is_empty()).then_some(Fault::Exception { exception, at })
}

/// `"/0/app.py", line 18, in evaluate` as `app.py, line 18, in evaluate`:
/// the file's name without the directory the build mounted it in.
fn frame_location(frame: &str) -> Option<String> {
    let rest = frame.strip_prefix('"')?;
    let (file, rest) = rest.split_once('"')?;
    let name = file.rsplit('/').next().unwrap_or(file);
    Some(format!("{name}{}", rest.trim_end()))
}

/// The last `Uncaught VALUE` a JavaScript gate printed (the value's lines up
/// to its `Stack:`, whose first frame says where), else the type of the
/// value componentize-js could not pass back.
fn js_thrown(output: &str) -> Option<Fault> {
    let lines: Vec<&str> = output.lines().collect();
    let Some(start) = lines.iter().rposition(|l| l.starts_with(UNCAUGHT)) else {
        let kind = lines.iter().rev().find_map(|l| {
            l.strip_prefix(NOT_A_STRING)
                .and_then(|rest| rest.strip_suffix(']'))
        })?;
        let value = format!(
            "{} {kind} (only a thrown string reaches the host, as a refusal; print the value before it traps to see it)",
            if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            },
        );
        return Some(Fault::Thrown { value, at: None });
    };
    let mut value = vec![&lines[start][UNCAUGHT.len()..]];
    let mut at = None;
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        if *line == "Stack:" {
            at = lines.get(i + 1).and_then(|f| js_frame(f));
            break;
        }
        if line.starts_with(NOT_A_STRING) || is_runtime_abort(line) {
            break;
        }
        value.push(line);
    }
    let value = value.join("\n").trim().to_owned();
    (!value.is_empty()).then_some(Fault::Thrown { value, at })
}

/// `evaluate<@/src/gate.js:27:25` as `gate.js:27:25, in evaluate`: the
/// file's name without its directory, and the function without
/// SpiderMonkey's `<` and `/<` marks for inner and arrow functions.
fn js_frame(frame: &str) -> Option<String> {
    let (function, place) = frame.trim().rsplit_once('@')?;
    let file = place.rsplit('/').next().unwrap_or(place);
    let function = function
        .split('/')
        .next()
        .unwrap_or(function)
        .trim_end_matches('<');
    if file.is_empty() {
        return None;
    }
    Some(match function {
        "" => file.to_owned(),
        f => format!("{file}, in {f}"),
    })
}

/// SpiderMonkey's line as the runtime aborts after an uncaught error.
fn is_runtime_abort(line: &str) -> bool {
    line.starts_with("Redirecting call to abort()")
}

/// `thread '<unnamed>' panicked at src/lib.rs:10:5:` then the message, up
/// to the `note: run with RUST_BACKTRACE` line or the end.
fn rust_panic(output: &str) -> Option<Fault> {
    let (head, rest) = output
        .lines()
        .enumerate()
        .filter(|(_, l)| is_panic_line(l))
        .last()
        .map(|(i, l)| (l, output.lines().skip(i + 1)))?;
    let at = head
        .split_once(" panicked at ")
        .map(|(_, at)| at.trim_end().trim_end_matches(':').to_owned())
        .filter(|at| !at.is_empty());
    let message: Vec<&str> = rest.take_while(|l| !is_backtrace_note(l)).collect();
    let message = message.join("\n").trim().to_owned();
    (!message.is_empty()).then_some(Fault::Panic { message, at })
}

fn is_panic_line(line: &str) -> bool {
    line.starts_with("thread '") && line.contains(" panicked at ")
}

fn is_backtrace_note(line: &str) -> bool {
    line.starts_with("note: run with `RUST_BACKTRACE=")
}

/// The output as shown after a trap nothing above explains: without the
/// Rust runtime's note about `RUST_BACKTRACE`, which a gate cannot set, and
/// SpiderMonkey's line about its abort.
pub(crate) fn without_boilerplate(output: &str) -> String {
    output
        .lines()
        .filter(|l| !is_backtrace_note(l) && !is_runtime_abort(l))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTHON: &str = "about to fail
Traceback (most recent call last):
  File \"/0/app.py\", line 18, in evaluate
ValueError: the office calendar is unreadable

thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:
Python function threw an unexpected exception
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";

    #[test]
    fn a_python_exception_is_its_last_line_and_where() {
        assert_eq!(
            read(PYTHON),
            Some(Fault::Exception {
                exception: "ValueError: the office calendar is unreadable".into(),
                at: Some("app.py, line 18, in evaluate".into()),
            })
        );
    }

    #[test]
    fn a_chained_python_exception_is_the_last_one_with_source_lines_skipped() {
        let out = "Traceback (most recent call last):
  File \"/0/app.py\", line 3, in hours
    return int(p)
           ^^^^^^
ValueError: invalid literal for int() with base 10: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File \"/0/app.py\", line 9, in evaluate
    start = hours(ctx.params)
  File \"/0/lib/office.py\", line 5, in hours
    raise KeyError('start_hour')
KeyError: 'start_hour'

thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:
Python function threw an unexpected exception
";
        assert_eq!(
            read(out),
            Some(Fault::Exception {
                exception: "KeyError: 'start_hour'".into(),
                at: Some("office.py, line 5, in hours".into()),
            })
        );
    }

    #[test]
    fn a_rust_panic_is_its_message_and_where() {
        let out = "thread '<unnamed>' panicked at src/lib.rs:41:9:
start_hour out of range: 25
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
";
        assert_eq!(
            read(out),
            Some(Fault::Panic {
                message: "start_hour out of range: 25".into(),
                at: Some("src/lib.rs:41:9".into()),
            })
        );
    }

    /// What a JavaScript gate built with componentize-js 0.23.0 printed
    /// when its `reportingThrows` caught `new TypeError('bad hour')`.
    const JS_ERROR: &str = "Uncaught TypeError: bad hour
Stack:
evaluate<@gate.js:27:25
reportingThrows/<@gate.js:11:14
export_evaluate@/tmp/c08433916acd/sources/initializer.js:314:29

expected a string, received [object]
Stack:
  _utf8AllocateAndEncode@/tmp/c08433916acd/sources/initializer.js:18:11
  export_evaluate@/tmp/c08433916acd/sources/initializer.js:406:45

Redirecting call to abort() to mozalloc_abort";

    #[test]
    fn a_thrown_javascript_error_is_its_name_message_and_where() {
        assert_eq!(
            read(JS_ERROR),
            Some(Fault::Thrown {
                value: "TypeError: bad hour".into(),
                at: Some("gate.js:27:25, in evaluate".into()),
            })
        );
    }

    #[test]
    fn a_thrown_javascript_value_is_shown_as_printed() {
        for (value, kind) in [
            ("42", "number"),
            ("{\"code\":1}", "object"),
            ("undefined", "undefined"),
        ] {
            let out = format!(
                "Uncaught {value}
expected a string, received [{kind}]
Stack:
  _utf8AllocateAndEncode@/tmp/c0/sources/initializer.js:18:11
  export_evaluate@/tmp/c0/sources/initializer.js:406:45

Redirecting call to abort() to mozalloc_abort"
            );
            assert_eq!(
                read(&out),
                Some(Fault::Thrown {
                    value: value.into(),
                    at: None
                }),
                "{out}"
            );
        }
    }

    #[test]
    fn a_javascript_value_nobody_printed_is_named_by_its_type() {
        let out = "expected a string, received [object]
Stack:
  _utf8AllocateAndEncode@/tmp/c0/sources/initializer.js:18:11

Redirecting call to abort() to mozalloc_abort";
        let Some(Fault::Thrown { value, at: None }) = read(out) else {
            panic!("{:?}", read(out));
        };
        assert!(value.starts_with("an object (only a thrown string"), "{value}");
    }

    #[test]
    fn other_output_is_not_a_fault_and_loses_only_the_note() {
        for out in [
            "",
            "thread panicked at src/lib.rs: boom!!",
            "Traceback (most recent call last):\n",
            "Uncaught \n",
        ] {
            assert_eq!(read(out), None, "{out:?}");
        }
        assert_eq!(
            without_boilerplate("abort\nnote: run with `RUST_BACKTRACE=1` environment variable\n"),
            "abort"
        );
        assert_eq!(
            without_boilerplate("oops\nRedirecting call to abort() to mozalloc_abort\n"),
            "oops"
        );
    }
}
