//! The last status of a pod torn down after its deletion (kubelet: the status manager's
//! `TerminatePod`, called by `SyncTerminatedPod`): whatever its containers did, the pod ends
//! in a terminal phase, so that whoever waits for one (a Job's
//! `batch.kubernetes.io/job-tracking` finalizer, the garbage collector of terminated pods)
//! is not left waiting for a pod that never ran.
//!
//! The phase itself comes first from the containers, as `getPhase` gives it for a terminal
//! pod ([`super::build::pod_status`] of a pod in `PodState::Stopped`):
//! `Succeeded` when every container stopped with exit code 0, `Failed` when one failed,
//! whatever the restart policy; [`terminate_pod`] then settles the containers that never
//! stopped and a phase still `Pending` or `Running`.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};

use crate::pod_worker::state::is_sidecar;

/// The reason of a container whose end is not known (kubelet:
/// `ContainerReasonStatusUnknown`).
pub const UNKNOWN_REASON: &str = "ContainerStatusUnknown";

/// The message of a container [`terminate_pod`] marks terminated.
pub const UNKNOWN_MESSAGE: &str = "The container could not be located when the pod was terminated";

/// The exit code of a container [`terminate_pod`] marks terminated (an error, as after a
/// SIGKILL).
pub const UNKNOWN_EXIT_CODE: i32 = 137;

/// Whether `status` has a terminal phase (`Succeeded` or `Failed`).
pub fn is_terminal(status: &PodStatus) -> bool {
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

/// `status` made the final status of `pod`, as the kubelet's `TerminatePod` does:
/// - once the pod has initialized (no init containers, an app container left waiting or
///   restarted, or the last init container completed or, a sidecar, started), every app
///   container not terminated is marked terminated with [`UNKNOWN_REASON`],
///   [`UNKNOWN_MESSAGE`] and exit code [`UNKNOWN_EXIT_CODE`] (its end is not known: a failure);
/// - so are the init containers up to the last one that tried to start (left waiting without
///   a previous termination ends the prefix), at least the first;
/// - a phase not yet terminal becomes `Failed`.
///
/// Whether the pod initialized is read from `status` itself (the kubelet reads the API
/// server's copy of the status it reported, which `status` is or follows).
pub fn terminate_pod(pod: &Pod, mut status: PodStatus) -> PodStatus {
    if has_initialized(pod, &status) {
        for s in status.container_statuses.iter_mut().flatten() {
            mark_unknown(s);
        }
    }
    let init = status
        .init_container_statuses
        .as_deref_mut()
        .unwrap_or_default();
    let tried = init
        .iter()
        .rposition(|s| !is_waiting(s) || last_terminated(s).is_some())
        .map_or(init.len().min(1), |last| last + 1);
    for s in &mut init[..tried] {
        mark_unknown(s);
    }
    if !is_terminal(&status) {
        status.phase = Some("Failed".to_owned());
    }
    status
}

fn is_waiting(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.waiting.is_some())
}

fn terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref())
}

fn last_terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|st| st.terminated.as_ref())
}

/// Marks `s` terminated, end unknown, unless it is.
fn mark_unknown(s: &mut ContainerStatus) {
    if terminated(s).is_some() {
        return;
    }
    s.state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(UNKNOWN_REASON.to_owned()),
            message: Some(UNKNOWN_MESSAGE.to_owned()),
            exit_code: UNKNOWN_EXIT_CODE,
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    });
}

/// Whether the pod of `status` got past its init containers (kubelet: `hasPodInitialized`).
fn has_initialized(pod: &Pod, status: &PodStatus) -> bool {
    let inits = pod.spec.as_ref().and_then(|s| s.init_containers.as_deref());
    if inits.is_none_or(<[_]>::is_empty) {
        return true;
    }
    let apps = status.container_statuses.iter().flatten();
    if apps
        .into_iter()
        .any(|s| last_terminated(s).is_some() || !is_waiting(s))
    {
        return true;
    }
    let Some(last) = status
        .init_container_statuses
        .as_ref()
        .and_then(|s| s.last())
    else {
        return false;
    };
    let Some(spec) = inits.into_iter().flatten().find(|c| c.name == last.name) else {
        return false;
    };
    if is_sidecar(spec) {
        let running = last.state.as_ref().is_some_and(|st| st.running.is_some());
        running && last.started == Some(true)
    } else {
        [last_terminated(last), terminated(last)]
            .into_iter()
            .flatten()
            .any(|t| t.exit_code == 0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({ "spec": spec })).expect("pod")
    }

    fn status(value: serde_json::Value) -> PodStatus {
        serde_json::from_value(value).expect("status")
    }

    fn waiting(name: &str) -> serde_json::Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}})
    }

    fn exited(name: &str, code: i32) -> serde_json::Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": "Error"}}})
    }

    fn unknown() -> Option<ContainerStateTerminated> {
        Some(ContainerStateTerminated {
            reason: Some(UNKNOWN_REASON.into()),
            message: Some(UNKNOWN_MESSAGE.into()),
            exit_code: 137,
            ..Default::default()
        })
    }

    fn state(s: &ContainerStatus) -> Option<ContainerStateTerminated> {
        terminated(s).cloned()
    }

    #[test]
    fn containers_that_never_ran_end_unknown_and_the_pod_failed() {
        let p = pod(json!({"containers": [{"name": "a"}, {"name": "b"}]}));
        let s = terminate_pod(
            &p,
            status(json!({"phase": "Pending",
                "containerStatuses": [waiting("a"), exited("b", 0)]})),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let statuses = s.container_statuses.unwrap_or_default();
        assert_eq!(state(&statuses[0]), unknown());
        assert_eq!(
            state(&statuses[1]).map(|t| t.exit_code),
            Some(0),
            "a terminated container stays as it ended"
        );
    }

    #[test]
    fn a_terminal_phase_stands() {
        let p = pod(json!({"containers": [{"name": "a"}]}));
        let done = status(json!({"phase": "Succeeded", "containerStatuses": [exited("a", 0)]}));
        assert_eq!(terminate_pod(&p, done.clone()), done);
    }

    #[test]
    fn before_initialization_only_the_init_containers_that_tried_end_unknown() {
        let p = pod(
            json!({"initContainers": [{"name": "i1"}, {"name": "i2"}, {"name": "i3"}],
            "containers": [{"name": "a"}]}),
        );
        let never = terminate_pod(
            &p,
            status(json!({"phase": "Pending",
                "initContainerStatuses": [waiting("i1"), waiting("i2"), waiting("i3")],
                "containerStatuses": [waiting("a")]})),
        );
        let init = never.init_container_statuses.unwrap_or_default();
        assert_eq!(state(&init[0]), unknown(), "at least the first");
        assert!(is_waiting(&init[1]) && is_waiting(&init[2]));
        let apps = never.container_statuses.unwrap_or_default();
        assert!(is_waiting(&apps[0]), "the pod never initialized");
        assert_eq!(never.phase.as_deref(), Some("Failed"));

        let mut second_running = waiting("i2");
        second_running["state"] = json!({"running": {}});
        let midway = terminate_pod(
            &p,
            status(json!({"phase": "Pending",
                "initContainerStatuses": [exited("i1", 0), second_running, waiting("i3")],
                "containerStatuses": [waiting("a")]})),
        );
        let init = midway.init_container_statuses.unwrap_or_default();
        assert_eq!(state(&init[0]).map(|t| t.exit_code), Some(0));
        assert_eq!(state(&init[1]), unknown());
        assert!(is_waiting(&init[2]));
    }

    #[test]
    fn a_pod_whose_last_init_container_completed_is_initialized() {
        let p = pod(json!({"initContainers": [{"name": "i1"}], "containers": [{"name": "a"}]}));
        let s = terminate_pod(
            &p,
            status(json!({"phase": "Pending",
                "initContainerStatuses": [exited("i1", 0)],
                "containerStatuses": [waiting("a")]})),
        );
        let apps = s.container_statuses.unwrap_or_default();
        assert_eq!(state(&apps[0]), unknown());
    }
}
