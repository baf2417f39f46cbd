//! The pod worker's events (kubelet reasons and messages; see [`crate::events`]).

use super::Worker;
use crate::events::{EventType, field_path};
use crate::probe::{ProbeKind, ProbeUpdate};
use verge_container_runtime::ContainerRuntime;

impl<R: ContainerRuntime> Worker<R> {
    /// Records an event about the pod itself.
    pub(super) fn pod_event(&self, type_: EventType, reason: &'static str, message: String) {
        self.ctx
            .events
            .record(&self.pod_ref(), None, type_, reason, message);
    }

    /// Records an event about container `name` (an init or app container of the spec).
    pub(super) fn container_event(
        &self,
        name: &str,
        type_: EventType,
        reason: &'static str,
        message: String,
    ) {
        let spec = self.pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|i| i.iter().any(|c| c.name == name));
        let path = Some(field_path(name, init));
        self.ctx
            .events
            .record(&self.pod_ref(), path, type_, reason, message);
    }

    /// `Unhealthy` for a failed probe attempt (kubelet: `<Kind> probe failed: <output>`),
    /// `ProbeWarning` for a successful one with a warning (kubelet: `<Kind> probe warning:
    /// <output>`, e.g. a redirect to another host).
    pub(super) fn probe_event(&self, u: &ProbeUpdate) {
        let (reason, verb) = match (u.success, u.message.is_empty()) {
            (false, _) => ("Unhealthy", "failed"),
            (true, false) => ("ProbeWarning", "warning"),
            (true, true) => return,
        };
        let message = format!("{} probe {verb}: {}", u.kind, u.message);
        self.container_event(&u.container, EventType::Warning, reason, message);
    }

    /// `Killing` before a container is stopped: for a failed liveness/startup probe, or for
    /// the pod's termination (`None`).
    pub(super) fn killing_event(&self, name: &str, probe: Option<ProbeKind>) {
        let message = match probe {
            Some(k) => format!(
                "Container {name} failed {} probe, will be restarted",
                k.as_str().to_lowercase()
            ),
            None => format!("Stopping container {name}"),
        };
        self.container_event(name, EventType::Normal, "Killing", message);
    }
}
