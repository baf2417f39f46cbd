//! What the kit's groups of detached processes (the control plane, the kubelet node) record in
//! their run directories so they can be stopped without a handle: `state.json` (each group's
//! own `State`, holding the started [`Component`]s) and `pids/<component>.pid`, written at
//! each start (it covers a start that failed before `state.json`).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::daemon;

/// One started process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Component {
    /// Binary name, e.g. `kube-apiserver` or `kubelet` (also the log and pid file name).
    pub(crate) name: String,
    pub(crate) pid: u32,
}

/// Reads `<dir>/state.json`; `None` when missing or unparsable.
pub(crate) fn load<T: DeserializeOwned>(dir: &Path) -> Option<T> {
    let bytes = std::fs::read(dir.join("state.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes `<dir>/state.json` (mode 0600 when `private`).
pub(crate) fn save<T: Serialize>(dir: &Path, state: &T, private: bool) -> anyhow::Result<()> {
    crate::control_plane::write_file(
        &dir.join("state.json"),
        &serde_json::to_string_pretty(state)?,
        private,
    )
}

/// `(component, pid)` of the live processes of `names` (start order) recorded in
/// `components` (from `state.json`) or `<dir>/pids/<name>.pid`, in reverse start order,
/// each pid once; a pid counts only while it runs the component's binary.
pub(crate) fn recorded_pids(
    dir: &Path,
    names: &[&str],
    components: Option<&[Component]>,
) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for name in names.iter().rev() {
        let from_state = components
            .and_then(|c| c.iter().find(|c| c.name == *name))
            .map(|c| c.pid);
        let from_file = std::fs::read_to_string(dir.join("pids").join(format!("{name}.pid")))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        for pid in [from_state, from_file].into_iter().flatten() {
            if !out.iter().any(|(_, p)| *p == pid) && daemon::is_alive(pid, Some(name)) {
                out.push(((*name).to_owned(), pid));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_dead_pids_are_not_recorded() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let components = vec![Component {
            name: "no-such-binary".to_owned(),
            pid: u32::MAX - 1,
        }];
        save(dir.path(), &components, true)?;
        let back: Vec<Component> = load(dir.path()).unwrap_or_default();
        assert_eq!(back.len(), 1);
        assert!(load::<Vec<Component>>(&dir.path().join("missing")).is_none());
        assert!(recorded_pids(dir.path(), &["no-such-binary"], Some(&back)).is_empty());
        Ok(())
    }
}
