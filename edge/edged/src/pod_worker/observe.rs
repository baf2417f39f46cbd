//! What Docker holds for one pod: its sandboxes and every instance of every container,
//! read by label and inspected (the kubelet's `GetPodStatus`).

use std::collections::HashMap;

pub use verge_container_runtime::RunState;
use verge_container_runtime::labels::ContainerLabels;
use verge_container_runtime::{ContainerInfo, ContainerRuntime, ListFilter, RuntimeError};

/// One container of the pod as inspected, with edged's labels parsed.
pub type Instance = ContainerInfo<ContainerLabels>;

/// Everything Docker holds for one pod; instances sorted newest first (by restart count).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// Sandbox containers.
    pub sandboxes: Vec<Instance>,
    /// Instances per container name.
    pub containers: HashMap<String, Vec<Instance>>,
}

impl Observation {
    /// The running sandbox, if any.
    pub fn sandbox(&self) -> Option<&Instance> {
        self.sandboxes.iter().find(|s| s.state == RunState::Running)
    }

    /// The newest instance of container `name`.
    pub fn latest(&self, name: &str) -> Option<&Instance> {
        self.containers.get(name).and_then(|v| v.first())
    }

    /// The instance before the newest one (for `lastState`).
    pub fn previous(&self, name: &str) -> Option<&Instance> {
        self.containers.get(name).and_then(|v| v.get(1))
    }

    /// Every instance of every container and sandbox.
    pub fn all(&self) -> impl Iterator<Item = &Instance> {
        self.sandboxes
            .iter()
            .chain(self.containers.values().flatten())
    }
}

/// Turns an inspect into an [`Instance`]; `None` if it is not one of edged's containers.
fn instance(c: ContainerInfo) -> Option<Instance> {
    c.map_labels(ContainerLabels::parse)
}

/// Lists and inspects every container of pod `uid`.
///
/// # Errors
/// [`RuntimeError`] if the runtime cannot list or inspect.
pub async fn observe<R: ContainerRuntime>(
    runtime: &R,
    uid: &str,
) -> Result<Observation, RuntimeError> {
    let mut obs = Observation::default();
    for summary in runtime.list(&ListFilter::pod(uid)).await? {
        let Some(inst) = runtime.inspect(&summary.id).await?.and_then(instance) else {
            continue;
        };
        if inst.labels.sandbox {
            obs.sandboxes.push(inst);
        } else {
            obs.containers
                .entry(inst.labels.container.clone())
                .or_default()
                .push(inst);
        }
    }
    obs.sandboxes
        .sort_by_key(|s| std::cmp::Reverse(s.labels.restart_count));
    for v in obs.containers.values_mut() {
        v.sort_by_key(|i| std::cmp::Reverse(i.labels.restart_count));
    }
    Ok(obs)
}
