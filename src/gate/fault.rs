//! Reading what a gate's runtime printed when the gate trapped, so the error
//! an author reads says what happened in their code: the uncaught Python
//! exception (its last line and where it was raised) or the Rust panic's
//! message, without the interpreter runtime's own panic that follows it.
//! Anything else is left as it was printed, less the runtime's boilerplate.

/// What the gate's code did, read from its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// An uncaught Python exception: `ValueError: bad hour`, and where it
    /// was raised (`app.py, line 18, in evaluate`).
    Exception { exception: String, at: Option<String> },
    /// A Rust panic: its message, and where (`src/lib.rs:10:5`).
    Panic { message: String, at: Option<String> },
}

const TRACEBACK: &str = "Traceback (most recent call last):";

/// The fault the output reports, if it reports one in a shape we know.
pub(crate) fn read(output: &str) -> Option<Fault> {
    python_exception(output).or_else(|| rust_panic(output))
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
/// Rust runtime's note about `RUST_BACKTRACE`, which a gate cannot set.
pub(crate) fn without_boilerplate(output: &str) -> String {
    output
        .lines()
        .filter(|l| !is_backtrace_note(l))
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

    #[test]
    fn other_output_is_not_a_fault_and_loses_only_the_note() {
        for out in [
            "",
            "thread panicked at src/lib.rs: boom!!",
            "Traceback (most recent call last):\n",
        ] {
            assert_eq!(read(out), None, "{out:?}");
        }
        assert_eq!(
            without_boilerplate("abort\nnote: run with `RUST_BACKTRACE=1` environment variable\n"),
            "abort"
        );
    }
}
