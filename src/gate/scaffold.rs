//! `gate new NAME --lang L`: a gate project to start from, made of the
//! office-hours example for that language (examples/gates/L/, embedded in
//! the binary) with the gate renamed. It builds as generated, with the
//! same pinned build script and cases.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

use crate::error::{Error, Result};

/// The languages `gate new` scaffolds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Javascript,
    C,
}

macro_rules! files {
    ($lang:literal: $($file:literal),* $(,)?) => {
        &[$(($file, include_str!(concat!("../../examples/gates/", $lang, "/", $file)))),*]
    };
}

/// The newest interface, which the examples are written against (their
/// `wit/gate.wit` copies it; a test holds them to it).
const WIT: &str = include_str!("../../wit/gate.wit");

fn files(lang: Lang) -> &'static [(&'static str, &'static str)] {
    match lang {
        Lang::Rust => {
            files!("rust": "Cargo.toml", "Cargo.lock", "src/lib.rs", "build.sh", "cases.json", "README.md", ".gitignore")
        }
        Lang::Python => {
            files!("python": "app.py", "requirements.txt", "build.sh", "cases.json", "README.md", ".gitignore")
        }
        Lang::Javascript => {
            files!("javascript": "gate.js", "package.json", "package-lock.json", "build.sh", "cases.json", "README.md", ".gitignore")
        }
        Lang::C => {
            files!("c": "gate.c", "build.sh", "cases.json", "README.md", ".gitignore", "tools/Cargo.toml", "tools/Cargo.lock", "tools/src/main.rs")
        }
    }
}

/// Checks a gate name: lower-case letters, digits and dashes, starting
/// with a letter (it becomes a package name in every language).
pub(crate) fn parse_name(s: &str) -> std::result::Result<String, String> {
    let ok = s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err("use lower-case letters, digits and dashes, starting with a letter".to_owned())
    }
}

/// Writes the project into `dir` (which must not exist yet); returns the
/// files written.
pub(crate) fn scaffold(name: &str, lang: Lang, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir(dir).map_err(Error::io("creating the gate project", dir))?;
    let snake = name.replace('-', "_");
    let mut written = Vec::new();
    for (file, text) in files(lang).iter().copied().chain([("wit/gate.wit", WIT)]) {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(Error::io("creating", parent))?;
        }
        let text = text.replace("office-hours", name).replace("office_hours", &snake);
        std::fs::write(&path, text).map_err(Error::io("writing", &path))?;
        #[cfg(unix)]
        if file.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(Error::io("making executable", &path))?;
        }
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_package_names() {
        assert!(parse_name("office-hours").is_ok());
        assert!(parse_name("g2").is_ok());
        for bad in ["", "Office", "2fa", "a_b", "a-", "a b"] {
            assert!(parse_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_examples_are_on_the_newest_interface() {
        let examples = [
            ("rust", include_str!("../../examples/gates/rust/wit/gate.wit")),
            ("python", include_str!("../../examples/gates/python/wit/gate.wit")),
            (
                "javascript",
                include_str!("../../examples/gates/javascript/wit/gate.wit"),
            ),
            ("c", include_str!("../../examples/gates/c/wit/gate.wit")),
        ];
        for (lang, copy) in examples {
            assert!(
                copy == WIT,
                "examples/gates/{lang}/wit/gate.wit is not wit/gate.wit: copy it, and move the example to it"
            );
        }
    }

    #[test]
    fn a_project_is_renamed_and_refuses_to_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let files = scaffold("night-owl", Lang::Rust, &dir).unwrap();
        assert!(files.iter().any(|f| f.ends_with("wit/gate.wit")));
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"night-owl-gate\""), "{cargo}");
        let build = std::fs::read_to_string(dir.join("build.sh")).unwrap();
        assert!(build.contains("night_owl_gate.wasm"), "{build}");
        assert!(scaffold("night-owl", Lang::Rust, &dir).is_err());
    }
}
