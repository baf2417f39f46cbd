//! What taskmanager keeps on disk under `<dataDir>/tasks/` (JSON, written to a temporary file
//! and renamed, so a crash leaves the old or the new file whole):
//!
//! - `done.json`: the tasks that ran to their end, by name, with their uid and version: a
//!   task is not run again after edgecore restarts (until the cloud sends a new version or
//!   deletes it).
//! - `pending.json`: a change of what edgecore runs with (its configuration, its binary)
//!   waiting for edgecore to come back with it ([`Pending`]): how to undo it, the deadline,
//!   the steps so far.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use verge_core::task::ActionReport;

/// Where the change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// The new configuration is written; edgecore restarts with it and confirms once it is
    /// connected to cloudhub.
    Applied,
    /// edgecore did not come back in time: the backup is restored and edgecore restarts with
    /// it; the failure is reported then.
    RolledBack,
}

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "change",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Change {
    /// The configuration file (ConfigUpdateJob).
    Config {
        /// The configuration file.
        config: PathBuf,
        /// The previous configuration.
        backup: PathBuf,
    },
    /// edgecore's binary (NodeUpgradeJob; see [`crate::upgrade`]).
    Upgrade {
        /// The binary the node's supervisor starts (never touched before confirmation).
        installed: PathBuf,
        /// The new binary beside it, run on trial.
        staged: PathBuf,
        /// The version running before.
        from_version: String,
        /// The version the job asked for.
        to_version: String,
        /// When the restart into the new binary was asked for, in milliseconds since the Unix
        /// epoch (the session's downtime is measured from it).
        requested_at_ms: u64,
    },
}

/// A change of what edgecore runs with, across edgecore's restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// The task's name, `<kind>.<job>`.
    pub task: String,
    /// The job's uid.
    pub uid: String,
    /// The task's version.
    pub version: String,
    /// Where it stands.
    pub stage: Stage,
    /// What changed, and how to undo it.
    #[serde(flatten)]
    pub change: Change,
    /// How long edgecore has, from each start, to be connected again, in seconds.
    pub timeout_seconds: u64,
    /// How often edgecore started with the new configuration without confirming it; after
    /// [`MAX_BOOTS`] starts it is rolled back (a configuration that crashes edgecore).
    #[serde(default)]
    pub boots: u32,
    /// The steps so far.
    pub steps: Vec<ActionReport>,
    /// Why it was rolled back.
    #[serde(default)]
    pub reason: String,
}

/// The starts with a new configuration that may pass without its confirmation before it is
/// rolled back.
pub const MAX_BOOTS: u32 = 3;

/// The tasks that ran to their end: name → (uid, version).
pub type Done = BTreeMap<String, (String, String)>;

/// The files of `<dataDir>/tasks/`.
#[derive(Debug, Clone)]
pub struct TaskFiles {
    dir: PathBuf,
}

impl TaskFiles {
    /// The files under `<data_dir>/tasks/`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join("tasks"),
        }
    }

    /// The pending configuration change, if any (an unreadable file counts as none, and is
    /// logged by the caller through the error).
    ///
    /// # Errors
    /// The file exists but cannot be read or parsed.
    pub fn pending(&self) -> Result<Option<Pending>, String> {
        read(&self.dir.join("pending.json"))
    }

    /// Writes (or, with `None`, removes) the pending change.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn set_pending(&self, pending: Option<&Pending>) -> Result<(), String> {
        let path = self.dir.join("pending.json");
        match pending {
            Some(p) => write(&path, p),
            None => remove(&path),
        }
    }

    /// The tasks that ran to their end (none when the file is missing or unreadable).
    pub fn done(&self) -> Done {
        read(&self.dir.join("done.json"))
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Writes the tasks that ran to their end.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn set_done(&self, done: &Done) -> Result<(), String> {
        write(&self.dir.join("done.json"), done)
    }
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn remove(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Writes `value` as JSON to `path` through a temporary file, synced, then renamed.
fn write<T: Serialize>(path: &Path, value: &T) -> Result<(), String> {
    let what = |e: std::io::Error| format!("{}: {e}", path.display());
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(what)?;
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| e.to_string())?;
    write_atomically(path, &bytes, None).map_err(what)
}

/// Writes `bytes` to `path` through `<path>.tmp` (synced, with `mode` or 0600), renamed over
/// it: a reader sees the old content or the new, never a part.
///
/// # Errors
/// The write, sync or rename failed.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode.unwrap_or(0o600))
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_and_done_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = TaskFiles::new(dir.path());
        assert_eq!(files.pending(), Ok(None));
        assert!(files.done().is_empty());
        let pending = Pending {
            task: "configupdatejob.x".into(),
            uid: "u".into(),
            version: "1".into(),
            stage: Stage::Applied,
            change: Change::Config {
                config: dir.path().join("edgecore.yaml"),
                backup: dir.path().join("edgecore.yaml.backup"),
            },
            timeout_seconds: 1,
            boots: 0,
            steps: Vec::new(),
            reason: String::new(),
        };
        files.set_pending(Some(&pending)).expect("written");
        let done = Done::from([("a".to_owned(), ("u".to_owned(), "1".to_owned()))]);
        files.set_done(&done).expect("written");
        let again = TaskFiles::new(dir.path());
        assert_eq!(again.pending(), Ok(Some(pending)));
        assert_eq!(again.done(), done);
        again.set_pending(None).expect("removed");
        assert_eq!(again.pending(), Ok(None));
        again.set_pending(None).expect("removing twice is fine");
    }
}
