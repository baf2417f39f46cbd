//! The `v1.ContainerStatus` of one container (kubelet: `convertToAPIContainerStatuses`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus,
};

use crate::pod_worker::observe::{Instance, RunState};
use crate::pod_worker::state::{Waiting, WaitingReason};

/// What the status of one container is built from.
#[derive(Debug, Clone, Copy)]
pub struct ContainerFacts<'a> {
    /// The spec.
    pub spec: &'a Container,
    /// The newest instance, if any.
    pub latest: Option<&'a Instance>,
    /// The instance before it, if any.
    pub previous: Option<&'a Instance>,
    /// Why it is waiting, per its worker (back-off, image or config errors).
    pub waiting: Option<&'a Waiting>,
    /// Restart count when no instance exists.
    pub restarts: u32,
    /// Readiness (the probe manager's; counts while running).
    pub ready: bool,
    /// Started (the probe manager's startup result; counts while running).
    pub started: bool,
    /// A regular init container (run to completion, never probed; kubelet: `UpdatePodStatus`):
    /// started while running, ready once it exited 0; `ready` and `started` are not read.
    pub completes: bool,
    /// `imageID` of the newest instance.
    pub image_id: &'a str,
    /// Termination messages of exited instances, by container id
    /// ([`crate::termination_message`]).
    pub termination_messages: &'a HashMap<String, String>,
}

/// `Completed` for exit 0, `OOMKilled`, else `Error` (dockershim's reasons). The message is
/// the engine's error and the termination message `written`, joined by `": "` as the kubelet
/// joins them.
fn terminated(i: &Instance, written: Option<&String>) -> ContainerStateTerminated {
    let reason = if i.oom_killed {
        "OOMKilled"
    } else if i.exit_code == 0 {
        "Completed"
    } else {
        "Error"
    };
    ContainerStateTerminated {
        exit_code: i.exit_code,
        reason: Some(reason.to_owned()),
        message: join_message(i.error.as_deref(), written.map(String::as_str)),
        started_at: i.started_at.clone(),
        finished_at: i.finished_at.clone(),
        container_id: Some(format!("docker://{}", i.id)),
        ..ContainerStateTerminated::default()
    }
}

fn waiting(reason: WaitingReason, message: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.as_str().to_owned()),
            message: message.filter(|m| !m.is_empty()).map(str::to_owned),
        }),
        ..ContainerState::default()
    }
}

fn join_message(engine: Option<&str>, written: Option<&str>) -> Option<String> {
    let parts: Vec<&str> = [engine, written]
        .into_iter()
        .flatten()
        .filter(|m| !m.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(": "))
}

/// The `ContainerStatus` of one container; `default_wait` is the reason while nothing runs
/// (`ContainerCreating`, or `PodInitializing` for app containers during init).
pub fn container_status(f: &ContainerFacts<'_>, default_wait: WaitingReason) -> ContainerStatus {
    let term_state = |i: &Instance| ContainerState {
        terminated: Some(terminated(i, f.termination_messages.get(&i.id))),
        ..ContainerState::default()
    };
    let (state, last) = match f.latest {
        Some(i) if i.state == RunState::Running => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: i.started_at.clone(),
                }),
                ..ContainerState::default()
            },
            f.previous.map(term_state),
        ),
        Some(i) if i.state == RunState::Exited => match f.waiting {
            Some(w) => (waiting(w.reason, Some(&w.message)), Some(term_state(i))),
            None => (term_state(i), f.previous.map(term_state)),
        },
        Some(_) => (
            waiting(WaitingReason::ContainerCreating, None),
            f.previous.map(term_state),
        ),
        None => match f.waiting {
            Some(w) => (waiting(w.reason, Some(&w.message)), None),
            None => (waiting(default_wait, None), None),
        },
    };
    let running = state.running.is_some();
    ContainerStatus {
        name: f.spec.name.clone(),
        image: f.spec.image.clone().unwrap_or_default(),
        image_id: f.latest.map(|_| f.image_id.to_owned()).unwrap_or_default(),
        container_id: f.latest.map(|i| format!("docker://{}", i.id)),
        restart_count: f
            .latest
            .map_or(f.restarts, |i| i.labels.restart_count)
            .try_into()
            .unwrap_or(i32::MAX),
        ready: if f.completes {
            state.terminated.as_ref().is_some_and(|t| t.exit_code == 0)
        } else {
            running && f.ready
        },
        started: Some(running && (f.completes || f.started)),
        state: Some(state),
        last_state: last,
        ..ContainerStatus::default()
    }
}
