//! What shell completion offers beyond the command line's own words: the
//! loop names of the root being completed. The scripts `automaton
//! completions` prints call the binary with [`COMPLETE_VAR`] set, and
//! `main` answers from here before parsing anything.

use std::ffi::OsString;
use std::path::PathBuf;

use clap_complete::engine::CompletionCandidate;

use crate::root::Root;
use crate::store;

/// The variable that asks the binary for completions instead of running
/// a command (`main` answers it before parsing).
pub const COMPLETE_VAR: &str = "AUTOMATON_COMPLETE";

/// The loops of the root named on the line being completed (`--root DIR`),
/// else of the root found as every command finds it. Nothing when there is
/// no root: a completion never fails loudly.
pub(crate) fn loop_names() -> Vec<CompletionCandidate> {
    let flag = root_flag(std::env::args_os());
    let flags = crate::root::Flags {
        root: flag.as_deref(),
        store: None,
        server_bound: None,
    };
    let Ok(root) = Root::open(flags) else {
        return Vec::new();
    };
    // The root's store, so a root in PostgreSQL completes its loops too.
    store::Stores::open(&root)
        .and_then(|s| s.list())
        .unwrap_or_default()
        .into_iter()
        .map(|d| CompletionCandidate::new(d.name().as_str()))
        .collect()
}

/// The value of the last `--root DIR` or `--root=DIR` in `args`.
fn root_flag(args: impl IntoIterator<Item = OsString>) -> Option<PathBuf> {
    let mut found = None;
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let Some(s) = a.to_str() else { continue };
        if s == "--root" {
            found = args.next().map(PathBuf::from);
        } else if let Some(v) = s.strip_prefix("--root=") {
            found = Some(PathBuf::from(v));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_flag_is_read_from_the_line_being_completed() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(root_flag(args(&["automaton", "--", "automaton", "status"])), None);
        assert_eq!(
            root_flag(args(&["automaton", "--", "automaton", "--root", "/r", "status"])),
            Some(PathBuf::from("/r"))
        );
        assert_eq!(
            root_flag(args(&["automaton", "--", "automaton", "--root=/s", "status"])),
            Some(PathBuf::from("/s"))
        );
    }
}
