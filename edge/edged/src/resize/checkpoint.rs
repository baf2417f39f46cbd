//! [`Checkpoint`]: the resources the node allocated to each container of a pod and those it
//! actuated (applied to the running container), kept in `<pod dir>/resources.json` (kubelet:
//! the `allocated_pods_state` and `actuated_pods_state` checkpoint files). The file goes with
//! the pod's directory when the pod is removed; an edgecore restart reads it back, so a
//! resize accepted or applied before the restart is not decided or applied again.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::resources::Resources;

/// The file in the pod's directory.
pub const FILE: &str = "resources.json";

/// See the module docs. Keyed by container name (init and app containers: every one of them
/// is resizable since Kubernetes 1.37; ephemeral containers are not).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The resources allocated to each container: the spec's at admission, the desired ones
    /// once a resize is accepted (kubelet: `status.containerStatuses[].allocatedResources`,
    /// and what new instances are created with).
    #[serde(default)]
    pub allocated: BTreeMap<String, ResourceRequirements>,
    /// The resources last applied to each container (at its start or by an in-place update).
    #[serde(default)]
    pub actuated: BTreeMap<String, Resources>,
}

/// The init and app containers of `pod`.
fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// Whether two quantities are the same amount (`1000m` and `1`), else the same text.
fn same_quantity(a: &Quantity, b: &Quantity) -> bool {
    match (
        crate::quantity::parse_scaled(&a.0, 3),
        crate::quantity::parse_scaled(&b.0, 3),
    ) {
        (Some(x), Some(y)) => x == y,
        _ => a.0 == b.0,
    }
}

/// Whether two resource lists hold the same amounts (absent and empty are the same).
fn same_list(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter()
            .all(|(k, q)| b.get(k).is_some_and(|r| same_quantity(q, r)))
}

/// Whether `a` and `b` are semantically equal (kubelet: `apiequality.Semantic.DeepEqual`).
pub fn same_requirements(
    a: Option<&ResourceRequirements>,
    b: Option<&ResourceRequirements>,
) -> bool {
    let none = ResourceRequirements::default();
    let (a, b) = (a.unwrap_or(&none), b.unwrap_or(&none));
    same_list(a.limits.as_ref(), b.limits.as_ref())
        && same_list(a.requests.as_ref(), b.requests.as_ref())
        && a.claims.as_deref().unwrap_or_default() == b.claims.as_deref().unwrap_or_default()
}

impl Checkpoint {
    /// The checkpoint of a pod just admitted: every container allocated and actuated as its
    /// spec says (kubelet: `SetAllocatedResources` at admission, `InitializeActuatedPod`).
    pub fn admitted(pod: &Pod) -> Self {
        let mut c = Self::default();
        c.allocate(pod);
        c.actuated = c
            .allocated
            .iter()
            .map(|(name, r)| (name.clone(), Resources::of(Some(r))))
            .collect();
        c
    }

    /// Allocates to every container of `pod` the resources of its spec.
    pub fn allocate(&mut self, pod: &Pod) {
        self.allocated = containers(pod)
            .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
            .collect();
    }

    /// Whether `pod`'s spec asks for other resources than those allocated (a resize).
    pub fn differs(&self, pod: &Pod) -> bool {
        containers(pod).any(|c| {
            self.allocated
                .get(&c.name)
                .is_some_and(|a| !same_requirements(c.resources.as_ref(), Some(a)))
        })
    }

    /// `pod` with the allocated resources in place of the spec's (kubelet:
    /// `UpdatePodFromAllocation`): what the worker runs while a resize is not accepted.
    pub fn allocated_pod(&self, pod: &Pod) -> Pod {
        let mut out = pod.clone();
        if let Some(spec) = out.spec.as_mut() {
            for c in spec
                .init_containers
                .iter_mut()
                .flatten()
                .chain(spec.containers.iter_mut())
            {
                if let Some(a) = self.allocated.get(&c.name) {
                    c.resources = Some(a.clone());
                }
            }
        }
        out
    }

    /// Reads the checkpoint of the pod whose directory is `pod_dir`; `None` if there is none.
    /// Blocking.
    ///
    /// # Errors
    /// The file cannot be read, or is not a checkpoint.
    pub fn load(pod_dir: &Path) -> std::io::Result<Option<Self>> {
        match std::fs::read(pod_dir.join(FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the checkpoints of every pod directory under `pods_dir`, by pod uid (the
    /// directory's name): at start-up, for the registry of admitted pods to count each pod
    /// at its allocation ([`crate::admission::Admitted::with_allocations`]). A checkpoint
    /// that cannot be read is left out (logged; its pod's worker then allocates the spec).
    /// Blocking.
    pub fn load_all(pods_dir: &Path) -> HashMap<String, Self> {
        let entries = match std::fs::read_dir(pods_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
            Err(e) => {
                warn!(error = %e, dir = %pods_dir.display(), "cannot list the pod directories");
                return HashMap::new();
            }
        };
        let mut all = HashMap::new();
        for entry in entries.flatten() {
            let Ok(uid) = entry.file_name().into_string() else {
                continue;
            };
            match Self::load(&entry.path()) {
                Ok(Some(c)) => {
                    all.insert(uid, c);
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, %uid, "resource checkpoint unreadable"),
            }
        }
        all
    }

    /// Writes the checkpoint into `pod_dir` (made private if missing), replacing the old one
    /// at once (a new file renamed over it, synced first). Blocking.
    ///
    /// # Errors
    /// The directory or the file cannot be written.
    pub fn save(&self, pod_dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        verge_edge_store::private_dir::write_file(&pod_dir.join(FILE), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(cpu: &str) -> Pod {
        serde_json::from_value(json!({"spec": {
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "10m"}}}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "dummy.com/x": "1"}}}],
        }}))
        .expect("pod")
    }

    #[test]
    fn a_resize_is_a_difference_with_the_allocation() {
        let c = Checkpoint::admitted(&pod("1"));
        assert!(
            !c.differs(&pod("1000m")),
            "the same amount written otherwise"
        );
        assert!(c.differs(&pod("2")));
        let allocated = c.allocated_pod(&pod("2"));
        assert!(!c.differs(&allocated));
        assert_eq!(c.actuated["c"].cpu_request, 1000);
        assert_eq!(c.actuated["init"].cpu_request, 10);
    }

    #[test]
    fn survives_a_restart_in_the_pod_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pod_dir = dir.path().join("u-1");
        assert_eq!(Checkpoint::load(&pod_dir).expect("load"), None);
        let mut c = Checkpoint::admitted(&pod("1"));
        c.allocate(&pod("2"));
        c.save(&pod_dir).expect("save");
        assert_eq!(Checkpoint::load(&pod_dir).expect("load"), Some(c));
        std::fs::write(pod_dir.join(FILE), b"{").expect("corrupt");
        assert!(Checkpoint::load(&pod_dir).is_err());
    }

    #[test]
    fn every_readable_checkpoint_is_loaded_by_pod_uid() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(Checkpoint::load_all(&dir.path().join("missing")).is_empty());
        let c = Checkpoint::admitted(&pod("2"));
        c.save(&dir.path().join("u-1")).expect("save");
        std::fs::create_dir(dir.path().join("u-2")).expect("no checkpoint");
        std::fs::create_dir(dir.path().join("u-3")).expect("dir");
        std::fs::write(dir.path().join("u-3").join(FILE), b"{").expect("corrupt");
        let all = Checkpoint::load_all(dir.path());
        assert_eq!(all, HashMap::from([("u-1".to_owned(), c)]));
    }
}
