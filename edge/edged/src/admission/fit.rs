//! Whether a pod fits on the node beside the pods already admitted there: the resource and
//! host-port part of the kubelet's predicate admit handler (`generalFilter`, which runs the
//! scheduler's `AdmissionCheck`: `noderesources.Fits`, then `nodeports.Fits`).
//!
//! What a pod takes ([`Usage`]) is its effective request ([`Requests::of_pod`], kubelet:
//! `resource.PodRequests`) and its host ports ([`HostPort::of_pod`], kubelet:
//! `GetHostPorts`); [`fit`] weighs it against the node's [`Allocatable`] and the other
//! admitted pods, and answers the kubelet's first failure reason and message; [`fit_resize`]
//! does the same for an admitted pod's in-place resize, and answers whether it waits
//! ([`Pending`]: `Infeasible` or `Deferred`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::pod_worker::state::is_sidecar;
use crate::quantity::parse_scaled;

/// The reason of a host-port conflict: the scheduler plugin's name, which the kubelet reports
/// as the reason of a failed predicate (`PredicateFailureError.PredicateName`).
pub const NODE_PORTS: &str = "NodePorts";

/// The message of a host-port conflict: the kubelet's `Predicate <name> failed: <desc>`
/// (`PredicateFailureError.Error`), `<desc>` being the `nodeports` plugin's `ErrReason`.
pub const NODE_PORTS_MESSAGE: &str =
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports";

/// What the node lets pods request in total: its `status.allocatable`, as edged reports it
/// ([`crate::node::status::allocatable`]). A resource the node does not report counts as 0
/// (the kubelet's `NodeInfo.Allocatable`), so a pod requesting it never fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocatable {
    /// `cpu`, millicores.
    pub cpu_millis: u64,
    /// `memory`, bytes.
    pub memory_bytes: u64,
    /// `ephemeral-storage`, bytes.
    pub ephemeral_storage_bytes: u64,
    /// `pods`: how many pods may be admitted at once.
    pub pods: u64,
}

impl Allocatable {
    /// The allocatable of a node status's `allocatable` map (quantities as
    /// [`crate::quantity::parse_scaled`] reads them; a missing or malformed one counts as 0).
    pub fn from_quantities(allocatable: &BTreeMap<String, Quantity>) -> Self {
        let get = |name: &str, scale: u32| {
            allocatable
                .get(name)
                .and_then(|q| parse_scaled(&q.0, scale))
                .unwrap_or(0)
        };
        Self {
            cpu_millis: get("cpu", 3),
            memory_bytes: get("memory", 0),
            ephemeral_storage_bytes: get("ephemeral-storage", 0),
            pods: get("pods", 0),
        }
    }
}

/// Requests of the resources admission weighs (kubelet: the scheduler framework's
/// `Resource`, for `cpu`, `memory` and `ephemeral-storage`; extended resources and hugepages
/// are not weighed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// `cpu`, millicores (rounded up, as `MilliValue`).
    pub cpu_millis: u64,
    /// `memory`, bytes (rounded up, as `Value`).
    pub memory_bytes: u64,
    /// `ephemeral-storage`, bytes (rounded up).
    pub ephemeral_storage_bytes: u64,
}

impl Requests {
    /// The requests of a `resources.requests`-like map; a malformed quantity counts as 0.
    fn of_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let get = |name: &str, scale: u32| {
            list.and_then(|l| l.get(name))
                .and_then(|q| parse_scaled(&q.0, scale))
                .unwrap_or(0)
        };
        Self {
            cpu_millis: get("cpu", 3),
            memory_bytes: get("memory", 0),
            ephemeral_storage_bytes: get("ephemeral-storage", 0),
        }
    }

    fn of_container(c: &Container) -> Self {
        Self::of_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
    }

    fn plus(self, other: Self) -> Self {
        Self {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            ephemeral_storage_bytes: self
                .ephemeral_storage_bytes
                .saturating_add(other.ephemeral_storage_bytes),
        }
    }

    fn max(self, other: Self) -> Self {
        Self {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            ephemeral_storage_bytes: self
                .ephemeral_storage_bytes
                .max(other.ephemeral_storage_bytes),
        }
    }

    /// The effective request of `pod` (kubelet: `resource.PodRequests`, from the spec):
    /// - the app containers' requests, plus every restartable init container's (sidecars run
    ///   beside them);
    /// - at least, per resource, what the init phase needs at its peak: each regular init
    ///   container's request plus the sidecars started before it, or the sidecars started so
    ///   far;
    /// - `spec.resources.requests` of `cpu` and `memory`, when set, replace the containers' sum
    ///   (pod-level resources, on by default since Kubernetes 1.34);
    /// - plus `spec.overhead` (RuntimeClass overhead).
    pub fn of_pod(pod: &Pod) -> Self {
        let Some(spec) = pod.spec.as_ref() else {
            return Self::default();
        };
        let mut total = spec
            .containers
            .iter()
            .map(Self::of_container)
            .fold(Self::default(), Self::plus);
        let (mut sidecars, mut init_peak) = (Self::default(), Self::default());
        for c in spec.init_containers.iter().flatten() {
            let own = Self::of_container(c);
            let during = if is_sidecar(c) {
                total = total.plus(own);
                sidecars = sidecars.plus(own);
                sidecars
            } else {
                own.plus(sidecars)
            };
            init_peak = init_peak.max(during);
        }
        total = total.max(init_peak);
        let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
        if let Some(level) = pod_level {
            let set = Self::of_list(Some(level));
            if level.contains_key("cpu") {
                total.cpu_millis = set.cpu_millis;
            }
            if level.contains_key("memory") {
                total.memory_bytes = set.memory_bytes;
            }
        }
        total.plus(Self::of_list(spec.overhead.as_ref()))
    }
}

/// One host port a pod binds (kubelet: a `ContainerPort` with `hostPort > 0`), with the
/// scheduler's defaults applied: an empty `hostIP` is `0.0.0.0`, an empty protocol `TCP`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// `hostIP`; `0.0.0.0` binds every address.
    pub ip: String,
    /// `protocol`: `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// `hostPort`.
    pub port: i32,
}

/// The host IP binding every address.
const ANY_IP: &str = "0.0.0.0";

impl HostPort {
    /// The host ports of `pod` (kubelet: `GetHostPorts`): those of its app containers and of
    /// its restartable init containers (they run for the pod's whole life); regular init
    /// containers' are not held.
    pub fn of_pod(pod: &Pod) -> Vec<Self> {
        let Some(spec) = pod.spec.as_ref() else {
            return Vec::new();
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c));
        sidecars
            .chain(&spec.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                let port = p.host_port.filter(|port| *port > 0)?;
                let non_empty = |s: &Option<String>, default: &str| {
                    s.as_deref()
                        .filter(|s| !s.is_empty())
                        .unwrap_or(default)
                        .to_owned()
                };
                Some(Self {
                    ip: non_empty(&p.host_ip, ANY_IP),
                    protocol: non_empty(&p.protocol, "TCP"),
                    port,
                })
            })
            .collect()
    }

    /// Whether `self` and `other` cannot both be bound (kubelet: `HostPortInfo.CheckConflict`):
    /// same port and protocol, on the same IP or with either on `0.0.0.0`.
    pub fn conflicts(&self, other: &Self) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == ANY_IP || other.ip == ANY_IP)
    }
}

/// What one admitted pod takes of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Its effective request.
    pub requests: Requests,
    /// Its host ports.
    pub host_ports: Vec<HostPort>,
}

impl Usage {
    /// What `pod` takes once admitted.
    pub fn of_pod(pod: &Pod) -> Self {
        Self {
            requests: Requests::of_pod(pod),
            host_ports: HostPort::of_pod(pod),
        }
    }
}

/// The kubelet's `InsufficientResourceError` message.
fn insufficient(resource: &str, requested: u64, used: u64, capacity: u64) -> String {
    format!(
        "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, \
         capacity: {capacity}"
    )
}

/// Why a pod taking `pod` does not fit beside the admitted pods `others` on a node of
/// `allocatable`: `(reason, message)` of the kubelet's first failed predicate, in its order
/// (`noderesources.Fits`, then `nodeports.Fits`), or `None` when it fits:
/// - `OutOfpods`: the pod count would pass `allocatable.pods`;
/// - `OutOfcpu`, `OutOfmemory`, `OutOfephemeral-storage`: the pod requests some of the
///   resource and more than the others leave of it; the message is the kubelet's
///   `Node didn't have enough resource: <name>, requested: <n>, used: <n>, capacity: <n>`
///   (millicores for `cpu`, bytes otherwise);
/// - [`NODE_PORTS`]: one of its host ports is held by another pod ([`NODE_PORTS_MESSAGE`]).
pub fn fit<'a>(
    pod: &Usage,
    others: impl IntoIterator<Item = &'a Usage> + Clone,
    allocatable: &Allocatable,
) -> Option<(&'static str, String)> {
    let count = others.clone().into_iter().count() as u64;
    if count + 1 > allocatable.pods {
        let message = insufficient("pods", 1, count, allocatable.pods);
        return Some(("OutOfpods", message));
    }
    let used = others
        .clone()
        .into_iter()
        .fold(Requests::default(), |sum, u| sum.plus(u.requests));
    let want = pod.requests;
    let checks = [
        (
            "OutOfcpu",
            "cpu",
            want.cpu_millis,
            used.cpu_millis,
            allocatable.cpu_millis,
        ),
        (
            "OutOfmemory",
            "memory",
            want.memory_bytes,
            used.memory_bytes,
            allocatable.memory_bytes,
        ),
        (
            "OutOfephemeral-storage",
            "ephemeral-storage",
            want.ephemeral_storage_bytes,
            used.ephemeral_storage_bytes,
            allocatable.ephemeral_storage_bytes,
        ),
    ];
    for (reason, name, requested, used, capacity) in checks {
        if requested > 0 && requested > capacity.saturating_sub(used) {
            return Some((reason, insufficient(name, requested, used, capacity)));
        }
    }
    let held = || others.clone().into_iter().flat_map(|u| &u.host_ports);
    if pod
        .host_ports
        .iter()
        .any(|want| held().any(|h| want.conflicts(h)))
    {
        return Some((NODE_PORTS, NODE_PORTS_MESSAGE.to_owned()));
    }
    None
}

/// Why a resize waits (`PodResizePending`'s reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// The pod alone asks for more than the node can allocate: it never fits.
    Infeasible,
    /// The other pods leave too little now: retried later.
    Deferred,
}

impl Pending {
    /// The condition reason (`Infeasible`, `Deferred`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Infeasible => "Infeasible",
            Self::Deferred => "Deferred",
        }
    }
}

/// A resize the node cannot allocate now ([`fit_resize`]): why, and the message of the
/// `PodResizePending` condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resize {}: {message}", .pending.as_str())]
pub struct Insufficient {
    /// `Infeasible` or `Deferred`.
    pub pending: Pending,
    /// The kubelet's message.
    pub message: String,
}

/// Whether an admitted pod, resized to take `pod`, still fits beside the admitted pods
/// `others` on a node of `allocatable` (kubelet: `canAdmitPod` with the resize operation, the
/// same checks as [`fit`]):
/// - [`Pending::Infeasible`] when the pod alone asks for more `cpu`, `memory` or
///   `ephemeral-storage` than the node can allocate (the scheduler's `Unresolvable`; the API
///   server refuses such a resize in Kubernetes 1.37, so it reaches the node only from an
///   older or foreign API server), with `Node didn't have enough capacity: <name>,
///   requested: <n>, capacity: <n>`;
/// - [`Pending::Deferred`] when it only does not fit beside the others, with the message of
///   [`fit`]'s failure (the kubelet's status manager makes every reason but `Infeasible`
///   `Deferred`), e.g. `Node didn't have enough resource: cpu, requested: R, used: U,
///   capacity: C`.
///
/// # Errors
/// The [`Insufficient`] above when it does not fit.
pub fn fit_resize<'a>(
    pod: &Usage,
    others: impl IntoIterator<Item = &'a Usage> + Clone,
    allocatable: &Allocatable,
) -> Result<(), Insufficient> {
    let want = pod.requests;
    let alone = [
        ("cpu", want.cpu_millis, allocatable.cpu_millis),
        ("memory", want.memory_bytes, allocatable.memory_bytes),
        (
            "ephemeral-storage",
            want.ephemeral_storage_bytes,
            allocatable.ephemeral_storage_bytes,
        ),
    ];
    for (name, requested, capacity) in alone {
        if requested > capacity {
            let message = format!(
                "Node didn't have enough capacity: {name}, requested: {requested}, capacity: \
                 {capacity}"
            );
            return Err(Insufficient {
                pending: Pending::Infeasible,
                message,
            });
        }
    }
    match fit(pod, others, allocatable) {
        None => Ok(()),
        Some((_, message)) => Err(Insufficient {
            pending: Pending::Deferred,
            message,
        }),
    }
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
