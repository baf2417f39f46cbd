//! The acceptance check of issue 9 (point 1): production code works on the typed
//! `verge_core::Envelope`; only the stream boundaries convert from and to the wire `Message`,
//! and nothing outside `verge-proto` uses the wire accessors (`MessageExt`) or builders.
//!
//! Scans the workspace's production sources (`src/` of every crate under `crates/`,
//! `services/` and `edge/`, without `tests.rs` and `*_tests.rs` files, `tests/` folders and inline
//! `#[cfg(test)]` modules).

use std::fs;
use std::path::{Path, PathBuf};

/// The files that read or write the wire `Message` (docs/architecture.md §2).
const BOUNDARIES: &[&str] = &[
    "services/cloudhub/src/edge.rs",
    "services/cloudhub/src/controller.rs",
    "crates/controller/src/hub.rs",
    "edge/edgehub/src/session.rs",
];

/// Crates that are test support, not production.
const NOT_PRODUCTION: &[&str] = &["crates/testkit"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "tests" && name != "target" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !name.to_string_lossy().ends_with("tests.rs")
        {
            out.push(path);
        }
    }
}

/// `(path relative to the root, text before any `#[cfg(test)]`)` of every production file.
fn production_sources() -> Vec<(String, String)> {
    let root = root();
    let mut crates = Vec::new();
    for group in ["crates", "services"] {
        for entry in fs::read_dir(root.join(group)).expect("readable").flatten() {
            crates.push(entry.path());
        }
    }
    // edgecore and the edge crates beside it (`edge/<crate>/src`).
    crates.push(root.join("edge"));
    for entry in fs::read_dir(root.join("edge")).expect("readable").flatten() {
        if entry.path().join("Cargo.toml").is_file() {
            crates.push(entry.path());
        }
    }
    let mut files = Vec::new();
    for dir in crates {
        let relative = dir
            .strip_prefix(&root)
            .expect("under root")
            .to_string_lossy()
            .into_owned();
        if !NOT_PRODUCTION.contains(&relative.as_str()) {
            rust_files(&dir.join("src"), &mut files);
        }
    }
    files
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path).expect("readable");
            let production = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .to_owned();
            let relative = path.strip_prefix(&root).expect("under root");
            (relative.to_string_lossy().replace('\\', "/"), production)
        })
        .collect()
}

/// Whether `text` names the wire `Message` type of `verge_proto`.
fn names_wire_message(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        let import = line.starts_with("use verge_proto::") || line.contains("verge_proto::Message");
        import
            && line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|token| token == "Message")
    })
}

#[test]
fn wire_accessors_and_builders_are_not_used_in_production() {
    let sources = production_sources();
    assert!(sources.len() > 50, "found {} files", sources.len());
    let offenders: Vec<&str> = sources
        .iter()
        .filter(|(_, text)| {
            [
                "MessageExt",
                "Message::build",
                "Message::reply",
                ".with_object(",
            ]
            .iter()
            .any(|needle| text.contains(needle))
        })
        .map(|(path, _)| path.as_str())
        .collect();
    assert!(offenders.is_empty(), "wire helpers used in {offenders:?}");
}

#[test]
fn only_stream_boundaries_touch_the_wire_message() {
    let mut touching: Vec<String> = production_sources()
        .into_iter()
        .filter(|(_, text)| names_wire_message(text))
        .map(|(path, _)| path)
        .collect();
    touching.sort();
    let mut expected: Vec<String> = BOUNDARIES.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(touching, expected);
}
