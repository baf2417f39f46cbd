//! ConfigUpdateJob on the node: named fields of edgecore's configuration file changed, the new
//! file checked by edgecore's own parser before anything changes, then applied by restarting
//! edgecore, and rolled back by itself when edgecore is not connected to cloudhub again within
//! the task's timeout.
//!
//! The steps (KubeEdge's actions): `Check` (the checks, and the new file parsed and validated:
//! a bad value is refused with edgecore's message, which names the field), `BackUp` (the
//! current file copied to `<config>.backup`), `Update` (the new file written, edgecore
//! restarted; confirmed once the restarted edgecore is connected), and `RollBack` (the backup
//! restored, edgecore restarted again) when it was not connected in time. The files are
//! written whole (temporary file, renamed). Field paths are the YAML keys of edgecore's
//! configuration (`edged.maxPods`); each value is read as YAML (`60`, `true`, `15s`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_norway::{Mapping, Value};

/// Fields a job may not change: what the node is and where its state lives.
pub const FIXED_FIELDS: [&str; 2] = ["nodeName", "dataDir"];

/// Checks a whole configuration text as edgecore would load it; the error names the field.
pub type Validator = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// edgecore's configuration file and how to check a new one.
#[derive(Clone)]
pub struct ConfigFile {
    /// The file edgecore was started with (`--config`).
    pub path: PathBuf,
    /// edgecore's parser and checks.
    pub validate: Validator,
}

impl std::fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ConfigFile {
    /// The backup of the file: `<path>.backup`.
    pub fn backup(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".backup");
        PathBuf::from(name)
    }
}

/// `text` (a YAML mapping, or empty) with each of `fields` set: a dotted path of keys (the
/// sections on the way are made when missing) to its value read as YAML.
///
/// # Errors
/// The reason, naming the field: a fixed field, a path through a value that is not a
/// section, a value that is not YAML, or a text that is not a mapping.
pub fn edit(text: &str, fields: &BTreeMap<String, String>) -> Result<String, String> {
    let mut root: Value = if text.trim().is_empty() {
        Value::Mapping(Mapping::new())
    } else {
        serde_norway::from_str(text).map_err(|e| format!("the configuration file: {e}"))?
    };
    if root.is_null() {
        root = Value::Mapping(Mapping::new());
    }
    for (path, raw) in fields {
        let segments: Vec<&str> = path.split('.').collect();
        if FIXED_FIELDS.contains(&segments[0]) {
            return Err(format!("{path}: cannot be changed by a job"));
        }
        let value: Value =
            serde_norway::from_str(raw).map_err(|e| format!("{path}: value is not YAML: {e}"))?;
        let mut section = &mut root;
        for (depth, segment) in segments.iter().enumerate() {
            let Value::Mapping(map) = section else {
                let at = segments[..depth].join(".");
                return Err(format!("{path}: {at} is not a section"));
            };
            let key = Value::String((*segment).to_owned());
            if depth + 1 == segments.len() {
                map.insert(key, value);
                break;
            }
            section = map
                .entry(key)
                .or_insert_with(|| Value::Mapping(Mapping::new()));
        }
    }
    serde_norway::to_string(&root).map_err(|e| format!("the new configuration: {e}"))
}

/// Reads the file, edits it and validates the result: the new text, or why it is refused
/// (nothing changed).
///
/// # Errors
/// The reason, naming the field where there is one.
pub fn prepare(file: &ConfigFile, fields: &BTreeMap<String, String>) -> Result<String, String> {
    let text = std::fs::read_to_string(&file.path)
        .map_err(|e| format!("reading {}: {e}", file.path.display()))?;
    let new = edit(&text, fields)?;
    (file.validate)(&new)?;
    Ok(new)
}

/// Copies the file to its backup (whole, keeping its mode).
///
/// # Errors
/// The copy failed.
pub fn back_up(file: &ConfigFile) -> Result<(), String> {
    let bytes = std::fs::read(&file.path).map_err(|e| e.to_string())?;
    crate::pending::write_atomically(&file.backup(), &bytes, Some(mode(&file.path)))
        .map_err(|e| format!("writing {}: {e}", file.backup().display()))
}

/// Writes `text` as the configuration (whole, keeping its mode).
///
/// # Errors
/// The write failed.
pub fn write(file: &ConfigFile, text: &str) -> Result<(), String> {
    crate::pending::write_atomically(&file.path, text.as_bytes(), Some(mode(&file.path)))
        .map_err(|e| format!("writing {}: {e}", file.path.display()))
}

/// Restores `backup` over `config`.
///
/// # Errors
/// The rename failed.
pub fn restore(config: &Path, backup: &Path) -> Result<(), String> {
    std::fs::rename(backup, config).map_err(|e| format!("restoring {}: {e}", config.display()))
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn fields_are_set_as_yaml_and_sections_made() {
        let text = "nodeName: edge-1\nedged:\n  maxPods: 110\n";
        let new = edit(
            text,
            &fields(&[
                ("edged.maxPods", "60"),
                ("edgeHub.heartbeat", "15s"),
                ("network.clusterDns", "true"),
            ]),
        )
        .expect("edited");
        let value: Value = serde_norway::from_str(&new).expect("yaml");
        assert_eq!(value["edged"]["maxPods"], Value::from(60));
        assert_eq!(value["edgeHub"]["heartbeat"], Value::from("15s"));
        assert_eq!(value["network"]["clusterDns"], Value::from(true));
        assert_eq!(value["nodeName"], Value::from("edge-1"));
    }

    #[test]
    fn fixed_fields_and_paths_through_values_are_refused() {
        let text = "nodeName: edge-1\nlogFormat: json\n";
        for (path, want) in [
            ("nodeName", "nodeName: cannot be changed by a job"),
            ("dataDir", "dataDir: cannot be changed by a job"),
            ("logFormat.x", "logFormat.x: logFormat is not a section"),
        ] {
            assert_eq!(edit(text, &fields(&[(path, "1")])), Err(want.to_owned()));
        }
        assert!(edit(text, &fields(&[("edged.maxPods", "[")])).is_err());
    }

    #[test]
    fn a_refused_value_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("edgecore.yaml");
        std::fs::write(&path, "edged:\n  maxPods: 110\n").expect("written");
        let file = ConfigFile {
            path: path.clone(),
            validate: Arc::new(|text: &str| {
                let v: Value = serde_norway::from_str(text).map_err(|e| e.to_string())?;
                match v["edged"]["maxPods"].as_u64() {
                    Some(_) => Ok(()),
                    None => Err("edged.maxPods: invalid type, expected u32".to_owned()),
                }
            }),
        };
        let err = prepare(&file, &fields(&[("edged.maxPods", "many")])).expect_err("refused");
        assert!(err.starts_with("edged.maxPods"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "edged:\n  maxPods: 110\n"
        );
        let new = prepare(&file, &fields(&[("edged.maxPods", "60")])).expect("valid");
        back_up(&file).expect("backed up");
        write(&file, &new).expect("written");
        assert!(
            std::fs::read_to_string(&path)
                .expect("read")
                .contains("maxPods: 60")
        );
        restore(&path, &file.backup()).expect("restored");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "edged:\n  maxPods: 110\n"
        );
    }
}
