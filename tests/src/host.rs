//! Looking at the host from a test: mount points, Docker bind sources, what another user
//! can read. Used by the volume-safety scenarios.

use std::path::{Path, PathBuf};
use std::process::Command;

use verge_testkit::docker::docker;

/// Lazily unmounts whatever is still mounted under a directory (a failed test's pins and
/// tmpfs), before the edge's tempdir is removed.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        for point in mounts_under(&self.0).into_iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(&point).output();
        }
    }
}

/// Mount points (with their file system types) at or under `dir`, from this process's
/// `/proc/self/mountinfo` (edgecore and dockerd share the mount namespace).
pub fn mounts_with_types(dir: &Path) -> Vec<(PathBuf, String)> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let point = PathBuf::from(pre.split(' ').nth(4)?);
            let fs_type = post.split(' ').next()?.to_owned();
            point.starts_with(&dir).then_some((point, fs_type))
        })
        .collect()
}

/// Mount points at or under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    mounts_with_types(dir).into_iter().map(|(p, _)| p).collect()
}

/// (container id, bind source) of every container Docker has (running or not).
///
/// # Errors
/// docker fails or prints JSON that does not parse.
pub fn all_bind_sources() -> anyhow::Result<Vec<(String, String)>> {
    let ids = docker(&["ps", "-aq"])?;
    let mut out = Vec::new();
    for id in ids.lines().filter(|l| !l.is_empty()) {
        let Ok(mounts) = docker(&["inspect", "-f", "{{json .Mounts}}", id]) else {
            continue; // removed meanwhile
        };
        let mounts: serde_json::Value = serde_json::from_str(&mounts)?;
        for m in mounts.as_array().into_iter().flatten() {
            let source = m["Source"].as_str().unwrap_or_default().to_owned();
            out.push((id.to_owned(), source));
        }
    }
    Ok(out)
}

/// Whether user `nobody` (65534, no groups) can read `file` (`setpriv ... cat`).
///
/// # Errors
/// `setpriv` cannot be run.
pub fn nobody_reads(file: &Path) -> anyhow::Result<bool> {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(file)
        .output()?;
    Ok(out.status.success())
}
