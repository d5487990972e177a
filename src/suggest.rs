//! "Did you mean": the one way a mistyped name is matched against the
//! names that exist. It is clap's own measure and threshold (strsim's
//! Jaro-Winkler, similarity above 0.7), so a loop name, a status, a stock
//! gate, a backend, a user, a key or value of a TOML file and a gate's
//! file are suggested as a mistyped flag is.

use std::path::Path;

/// The similarity above which a name is suggested (clap's).
const THRESHOLD: f64 = 0.7;

/// The candidate most like `typed`, when one is like it enough; ties go
/// to the first. `typed` itself is never suggested.
pub(crate) fn closest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        if c == typed {
            continue;
        }
        let score = strsim::jaro_winkler(typed, c);
        if score > THRESHOLD && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `; did you mean "agent"?`, or nothing: what an error about `typed`
/// ends with.
pub(crate) fn hint<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(typed, candidates)
        .map(|c| format!("; did you mean {c:?}?"))
        .unwrap_or_default()
}

/// `; did you mean `overlap`?`, or nothing: what serde's message of an
/// unknown field or variant (`unknown field `ovrlap`, expected one of
/// `step`, `overlap`, ...`, `unknown variant `skp`, expected `skip` or
/// `wait``) ends with. serde says the names in these words and no other
/// way, so its text is read, here alone.
pub(crate) fn serde_hint(message: &str) -> String {
    let Some(rest) = ["unknown field `", "unknown variant `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))
    else {
        return String::new();
    };
    let Some((typed, expected)) = rest.split_once("`, expected ") else {
        return String::new();
    };
    // The names are the quoted words: `a`, `b` or `c`.
    let names = expected.split('`').skip(1).step_by(2);
    closest(typed, names)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default()
}

/// `; did you mean "gates/office-hours.wasm"?`, or nothing: the file
/// beside the missing `path` whose name is most like its name, written as
/// `written` (the path as the user gave it) would write it.
pub(crate) fn file_hint(written: &str, path: &Path) -> String {
    near_file(path)
        .map(|near| file_named(written, &near))
        .unwrap_or_default()
}

/// The name of the file beside the missing `path` most like its name:
/// of the files with its extension, the one whose stem is most like its
/// stem (a shared `.wasm` would make any two names look alike).
pub(crate) fn near_file(path: &Path) -> Option<String> {
    let split = |name: &str| -> (String, String) {
        match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => (stem.to_owned(), ext.to_owned()),
            _ => (name.to_owned(), String::new()),
        }
    };
    let (stem, ext) = split(path.file_name()?.to_str()?);
    let files: Vec<(String, String)> = std::fs::read_dir(path.parent()?)
        .ok()?
        .filter_map(std::result::Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| split(name).1 == ext)
        .map(|name| (split(&name).0, name))
        .collect();
    let near = closest(&stem, files.iter().map(|(s, _)| s.as_str()))?;
    files
        .iter()
        .find(|(s, _)| s == near)
        .map(|(_, name)| name.clone())
}

/// `; did you mean "gates/office-hours.wasm"?`: the file `near` in the
/// directory of `written`, as `written` writes it.
pub(crate) fn file_named(written: &str, near: &str) -> String {
    // The directory as written, separators and all (a `/` stays a `/` on
    // Windows too).
    let dir = written.rfind(std::path::is_separator).map_or(0, |i| i + 1);
    let shown = format!("{}{near}", &written[..dir]);
    format!("; did you mean {shown:?}?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposition_is_suggested() {
        assert_eq!(closest("agnet", ["nightly", "agent", "age"]), Some("agent"));
        assert_eq!(closest("budgt", ["backoff", "budget"]), Some("budget"));
    }

    #[test]
    fn nothing_like_it_suggests_nothing() {
        assert_eq!(closest("zzz", ["agent", "nightly"]), None);
        assert_eq!(closest("agent", ["agent"]), None);
        assert_eq!(hint("zzz", ["agent"]), "");
        assert_eq!(hint("agnet", ["agent"]), "; did you mean \"agent\"?");
    }

    #[test]
    fn a_mistyped_toml_key_or_value_is_suggested_from_serdes_list() {
        assert_eq!(
            serde_hint("unknown field `ovrlap`, expected one of `step`, `timeout`, `overlap`"),
            "; did you mean `overlap`?"
        );
        assert_eq!(
            serde_hint("unknown variant `skp`, expected `skip` or `wait`"),
            "; did you mean `skip`?"
        );
        assert_eq!(
            serde_hint("unknown field `comand`, expected `command`"),
            "; did you mean `command`?"
        );
        assert_eq!(
            serde_hint("unknown field `zzzz`, expected `command` or `timeout`"),
            ""
        );
        assert_eq!(serde_hint("unknown field `x`, there are no fields"), "");
        assert_eq!(serde_hint("invalid type: string \"a\", expected a duration"), "");
    }

    #[test]
    fn a_missing_file_is_suggested_from_its_directory_as_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("gates")).unwrap();
        std::fs::write(dir.path().join("gates/office-hours.wasm"), "").unwrap();
        std::fs::create_dir(dir.path().join("gates/office-hour.d")).unwrap();
        std::fs::write(dir.path().join("gates/core.wasm"), "").unwrap();
        std::fs::write(dir.path().join("gates/office-hours.wat"), "").unwrap();
        let missing = dir.path().join("gates/ofice-hours.wasm");
        assert_eq!(
            file_hint("gates/ofice-hours.wasm", &missing),
            "; did you mean \"gates/office-hours.wasm\"?"
        );
        assert_eq!(file_hint("gates/zzz", &dir.path().join("gates/zzz")), "");
        // Another file of the kind, named nothing like it, is not meant.
        assert_eq!(
            file_hint("gates/nope.wasm", &dir.path().join("gates/nope.wasm")),
            ""
        );
        assert_eq!(
            file_hint("nowhere/x.wasm", &dir.path().join("nowhere/x.wasm")),
            ""
        );
    }
}
