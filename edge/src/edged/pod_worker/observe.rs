//! What Docker holds for one pod: its sandboxes and every instance of every container,
//! read by label and inspected (the kubelet's `GetPodStatus`).

use std::collections::HashMap;

use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::Result;
use crate::edged::runtime::Runtime;
use crate::edged::runtime::labels::ContainerLabels;

/// The run state of one container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Created, never started (or being started).
    Created,
    /// Running (or paused/restarting).
    Running,
    /// Exited (or dead).
    Exited,
}

/// One Docker container of the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Docker id.
    pub id: String,
    /// Its labels.
    pub labels: ContainerLabels,
    /// Its state.
    pub state: RunState,
    /// Exit code (meaningful when exited).
    pub exit_code: i32,
    /// Whether the kernel OOM killer ended it.
    pub oom_killed: bool,
    /// Docker's error message (e.g. the executable was not found).
    pub error: Option<String>,
    /// When it (last) started.
    pub started_at: Option<Time>,
    /// When it exited.
    pub finished_at: Option<Time>,
    /// The image as given in the spec.
    pub image: String,
    /// The local image id (`sha256:...`).
    pub image_id: String,
    /// The bridge IP (sandbox only; empty for hostNetwork).
    pub ip: Option<String>,
}

impl Instance {
    /// How long it ran, if it started and exited.
    pub fn ran_for(&self) -> Option<std::time::Duration> {
        let (s, f) = (self.started_at.as_ref()?, self.finished_at.as_ref()?);
        let d = f.0.duration_since(s.0);
        std::time::Duration::try_from(d).ok()
    }
}

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

/// Docker's "zero time" (`0001-01-01T00:00:00Z`) and garbage are `None`.
fn parse_time(s: Option<&str>) -> Option<Time> {
    let t: Timestamp = s?.parse().ok()?;
    (t.as_second() > 0).then_some(Time(t))
}

/// Turns an inspect into an [`Instance`]; `None` if it is not one of edged's containers.
fn instance(c: ContainerInspectResponse) -> Option<Instance> {
    let config = c.config.as_ref()?;
    let labels = ContainerLabels::parse(config.labels.as_ref()?)?;
    let st = c.state.unwrap_or_default();
    let state = match st.status {
        Some(
            ContainerStateStatusEnum::RUNNING
            | ContainerStateStatusEnum::PAUSED
            | ContainerStateStatusEnum::RESTARTING,
        ) => RunState::Running,
        Some(ContainerStateStatusEnum::CREATED) => RunState::Created,
        _ if st.running == Some(true) => RunState::Running,
        _ => RunState::Exited,
    };
    let ip = c
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|n| n.get("bridge").and_then(|b| b.ip_address.clone()))
        .filter(|ip| !ip.is_empty());
    Some(Instance {
        id: c.id.unwrap_or_default(),
        image: config.image.clone().unwrap_or_default(),
        labels,
        state,
        exit_code: st
            .exit_code
            .and_then(|e| i32::try_from(e).ok())
            .unwrap_or(0),
        oom_killed: st.oom_killed.unwrap_or(false),
        error: st.error.filter(|e| !e.is_empty()),
        started_at: parse_time(st.started_at.as_deref()),
        finished_at: parse_time(st.finished_at.as_deref()),
        image_id: c.image.unwrap_or_default(),
        ip,
    })
}

/// Lists and inspects every container of pod `uid`.
///
/// # Errors
/// [`crate::Error::Docker`] if Docker cannot be listed or inspected.
pub async fn observe(runtime: &Runtime, uid: &str) -> Result<Observation> {
    let mut obs = Observation::default();
    for summary in runtime.list(Some(uid)).await? {
        let Some(id) = summary.id else { continue };
        let Some(inst) = runtime.inspect(&id).await?.and_then(instance) else {
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
