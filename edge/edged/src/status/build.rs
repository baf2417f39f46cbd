//! Builds a pod's `v1.PodStatus` from what Docker holds and what its worker knows, following
//! the kubelet (`kubelet_pods.go`: `generateAPIPodStatus`, `getPhase`; `qos.GetPodQOS`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub use super::container::{ContainerFacts, container_status};

use crate::pod_worker::state::{PodState, RestartPolicy, WaitingReason, is_sidecar};

/// The pod-level facts.
#[derive(Debug, Clone)]
pub struct PodFacts<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its lifecycle state (the phase of a pod not running; the reason and message of one
    /// the node failed).
    pub state: &'a PodState,
    /// The node's IP.
    pub host_ip: Option<String>,
    /// The pod's IP (sandbox bridge IP, or the node IP for hostNetwork).
    pub pod_ip: Option<String>,
    /// When edged first handled the pod.
    pub start_time: Time,
}

/// The kubelet's `getPhase` over the app containers' statuses; `terminal` is its
/// `podIsTerminal`: the pod's containers were stopped for good (deleted), so none restarts
/// whatever the restart policy, and stopped containers make it `Succeeded` or `Failed`.
fn phase(pod: &Pod, statuses: &[ContainerStatus], terminal: bool) -> &'static str {
    let policy = RestartPolicy::of(pod);
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    let specs = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    for s in statuses {
        let st = s.state.as_ref();
        // A stopped container its own restart policy starts again (ContainerRestartRules)
        // counts as running: it is not done, whatever the pod's policy says.
        let last_exit = st
            .and_then(|s| s.terminated.as_ref())
            .or_else(|| s.last_state.as_ref().and_then(|l| l.terminated.as_ref()))
            .map(|t| t.exit_code);
        let restarted_by_itself = !terminal
            && last_exit.is_some_and(|code| {
                specs.iter().any(|c| {
                    c.name == s.name && c.restart_policy.is_some() && policy.restarts_app(c, code)
                })
            });
        if st.is_some_and(|s| s.running.is_some()) || restarted_by_itself {
            running += 1;
        } else if let Some(t) = st.and_then(|s| s.terminated.as_ref()) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s
            .last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_some())
        {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    match () {
        () if waiting > 0 => "Pending",
        () if running > 0 => "Running",
        () if stopped > 0 && terminal && stopped == succeeded => "Succeeded",
        () if stopped > 0 && terminal => "Failed",
        () if stopped > 0 && policy == RestartPolicy::Always => "Running",
        () if stopped > 0 && stopped == succeeded => "Succeeded",
        () if stopped > 0 && policy == RestartPolicy::Never => "Failed",
        () if stopped > 0 => "Running",
        () => "Pending",
    }
}

/// The pod's QoS class (`Guaranteed`, `Burstable`, `BestEffort`; `qos.GetPodQOS`).
pub fn qos_class(pod: &Pod) -> &'static str {
    let spec = pod.spec.as_ref();
    let all = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    let (mut any, mut guaranteed) = (false, true);
    for c in all {
        let res = c.resources.as_ref();
        let get = |m: Option<
            &std::collections::BTreeMap<
                String,
                k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            >,
        >,
                   k: &str| { m.and_then(|m| m.get(k)).map(|q| q.0.clone()) };
        for r in ["cpu", "memory"] {
            let limit = get(res.and_then(|r| r.limits.as_ref()), r);
            let request = get(res.and_then(|r| r.requests.as_ref()), r).or_else(|| limit.clone());
            any |= limit.is_some() || request.is_some();
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Condition `type_`: `True`, or `False` with `reason` and `message`. The transition time is
/// kept from `prev` while the status stays the same.
fn condition(
    type_: &str,
    ok: bool,
    (reason, message): (&str, Option<String>),
    prev: Option<&PodStatus>,
    now: &Time,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let kept = prev
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_ && c.status == status))
        .and_then(|c| c.last_transition_time.clone());
    PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: (!ok).then(|| reason.to_owned()),
        message: if ok { None } else { message },
        last_transition_time: Some(kept.unwrap_or_else(|| now.clone())),
        ..PodCondition::default()
    }
}

/// Why the pod's readiness gates (`spec.readinessGates`) hold it back, one message per unmet
/// gate, as the kubelet's `GeneratePodReadyCondition` words them: a gate is met when the
/// pod's status (as the API server has it, written by whoever owns the condition) carries a
/// condition of the gate's type with status `True`.
fn readiness_gates_unmet(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<String> {
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref());
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    gates
        .into_iter()
        .flatten()
        .filter_map(|gate| {
            let kind = &gate.condition_type;
            match conditions.and_then(|cs| cs.iter().find(|c| &c.type_ == kind)) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{kind}\" does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{kind}\" is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// The whole `v1.PodStatus`. `previous` keeps condition transition times stable.
pub fn pod_status(
    facts: &PodFacts<'_>,
    init: &[ContainerFacts<'_>],
    app: &[ContainerFacts<'_>],
    previous: Option<&PodStatus>,
    now: &Time,
) -> PodStatus {
    let init_statuses: Vec<ContainerStatus> = init
        .iter()
        .map(|f| container_status(f, WaitingReason::PodInitializing))
        .collect();
    // kubelet: `GeneratePodInitializedCondition`: a sidecar must have started, a regular init
    // container must have completed (ready); once an app container ran, the pod stays
    // initialized.
    let incomplete: Vec<&str> = init
        .iter()
        .zip(&init_statuses)
        .filter(|(f, s)| {
            if is_sidecar(f.spec) {
                s.started != Some(true)
            } else {
                !s.ready
            }
        })
        .map(|(f, _)| f.spec.name.as_str())
        .collect();
    let initialized = incomplete.is_empty() || app.iter().any(|f| f.latest.is_some());
    let app_wait = if initialized {
        WaitingReason::ContainerCreating
    } else {
        WaitingReason::PodInitializing
    };
    let statuses: Vec<ContainerStatus> =
        app.iter().map(|f| container_status(f, app_wait)).collect();
    let phase = match facts.state {
        PodState::Pending | PodState::Initializing => "Pending",
        PodState::Completed { succeeded: true } => "Succeeded",
        // kubelet: a pod the node failed stays Failed while it terminates (pods are not
        // allowed to transition out of terminal phases).
        PodState::Completed { succeeded: false }
        | PodState::Rejected(_)
        | PodState::Evicted(_)
        | PodState::Terminating {
            failure: Some(_), ..
        }
        | PodState::Stopped { failure: Some(_) } => "Failed",
        PodState::Running | PodState::Terminating { failure: None, .. } | PodState::Terminated => {
            phase(facts.pod, &statuses, false)
        }
        PodState::Stopped { failure: None } => phase(facts.pod, &statuses, true),
    };
    let terminal = matches!(phase, "Succeeded" | "Failed");
    // kubelet: `GenerateContainersReadyCondition`: sidecars and app containers.
    let unready: Vec<&str> = init
        .iter()
        .zip(&init_statuses)
        .filter(|(f, _)| is_sidecar(f.spec))
        .map(|(_, s)| s)
        .chain(&statuses)
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let ready = !terminal && !statuses.is_empty() && unready.is_empty();
    let not_ready = if terminal {
        ("PodCompleted", None)
    } else {
        (
            "ContainersNotReady",
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let gates_unmet = readiness_gates_unmet(facts.pod);
    let pod_ready = ready && gates_unmet.is_empty();
    let pod_not_ready = if ready {
        ("ReadinessGatesNotReady", Some(gates_unmet.join(", ")))
    } else {
        not_ready.clone()
    };
    let not_initialized = (
        "ContainersNotInitialized",
        Some(format!(
            "containers with incomplete status: [{}]",
            incomplete.join(" ")
        )),
    );
    let ips = |ip: &Option<String>| ip.clone();
    // kubelet (`PodObservedGenerationTracking`, on by default): the status and each
    // condition the kubelet writes carry the `metadata.generation` of the pod it synced.
    let generation = facts.pod.metadata.generation;
    let mut conditions = vec![
        condition("PodScheduled", true, ("", None), previous, now),
        condition("Initialized", initialized, not_initialized, previous, now),
        condition("ContainersReady", ready, not_ready, previous, now),
        condition("Ready", pod_ready, pod_not_ready, previous, now),
    ];
    for c in &mut conditions {
        c.observed_generation = generation;
    }
    PodStatus {
        phase: Some(phase.to_owned()),
        observed_generation: generation,
        conditions: Some(conditions),
        host_ip: ips(&facts.host_ip),
        host_ips: facts.host_ip.clone().map(|ip| vec![HostIP { ip }]),
        pod_ip: ips(&facts.pod_ip),
        pod_ips: facts.pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        qos_class: Some(qos_class(facts.pod).to_owned()),
        start_time: Some(facts.start_time.clone()),
        init_container_statuses: Some(init_statuses).filter(|s| !s.is_empty()),
        container_statuses: Some(statuses),
        // kubelet: a pod refused at admission or evicted keeps the reason and message.
        reason: facts.state.failure().map(|f| f.reason.to_owned()),
        message: facts.state.failure().map(|f| f.message.clone()),
        ..PodStatus::default()
    }
}

/// Image ids already resolved to the kubelet's `imageID` form, by local image id.
pub type ImageIds = HashMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated,
    };

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod")
    }

    #[test]
    fn status_and_conditions_carry_the_synced_generation() {
        let p = pod(serde_json::json!({
            "metadata": { "generation": 3 },
            "spec": { "containers": [] },
        }));
        let now = Time(verge_edge_store::clock::now());
        let facts = PodFacts {
            pod: &p,
            state: &PodState::Pending,
            host_ip: None,
            pod_ip: None,
            start_time: now.clone(),
        };
        let status = pod_status(&facts, &[], &[], None, &now);
        assert_eq!(status.observed_generation, Some(3));
        let conditions = status.conditions.unwrap_or_default();
        assert_eq!(conditions.len(), 4);
        assert!(conditions.iter().all(|c| c.observed_generation == Some(3)));
    }

    #[test]
    fn readiness_gates_need_true_conditions_of_their_types() {
        let gated = |conditions: serde_json::Value| {
            pod(serde_json::json!({
                "spec": {
                    "containers": [{ "name": "c" }],
                    "readinessGates": [
                        { "conditionType": "k8s.io/a" },
                        { "conditionType": "k8s.io/b" },
                    ],
                },
                "status": { "conditions": conditions },
            }))
        };
        assert_eq!(
            readiness_gates_unmet(&gated(serde_json::json!([
                { "type": "k8s.io/a", "status": "False" },
            ]))),
            [
                "the status of pod readiness gate \"k8s.io/a\" is not \"True\", but False",
                "corresponding condition of pod readiness gate \"k8s.io/b\" does not exist.",
            ]
        );
        assert!(
            readiness_gates_unmet(&gated(serde_json::json!([
                { "type": "k8s.io/a", "status": "True" },
                { "type": "k8s.io/b", "status": "True" },
            ])))
            .is_empty()
        );
        let ungated = pod(serde_json::json!({ "spec": { "containers": [{ "name": "c" }] } }));
        assert!(readiness_gates_unmet(&ungated).is_empty());
    }

    #[test]
    fn qos_classes() {
        let c = |res: serde_json::Value| {
            pod(serde_json::json!({"spec": {"containers": [{"name": "a", "resources": res}]}}))
        };
        assert_eq!(qos_class(&c(serde_json::json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&c(
                serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}})
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&c(serde_json::json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
    }

    #[test]
    fn phase_follows_getphase() {
        let p = pod(serde_json::json!({"spec": {"restartPolicy": "Never", "containers": []}}));
        let run = ContainerStatus {
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let done = |code| ContainerStatus {
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(phase(&p, &[run.clone(), done(0)], false), "Running");
        assert_eq!(phase(&p, &[done(0), done(0)], false), "Succeeded");
        assert_eq!(phase(&p, &[done(0), done(1)], false), "Failed");
        assert_eq!(phase(&p, &[ContainerStatus::default()], false), "Pending");
        // A deleted pod's stopped containers end it, whatever the restart policy.
        let always =
            pod(serde_json::json!({"spec": {"restartPolicy": "Always", "containers": []}}));
        assert_eq!(phase(&always, &[done(137)], false), "Running");
        assert_eq!(phase(&always, &[done(137)], true), "Failed");
        assert_eq!(phase(&always, &[done(0)], true), "Succeeded");
        assert_eq!(
            phase(&always, &[ContainerStatus::default()], true),
            "Pending"
        );
    }
}
