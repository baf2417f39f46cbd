//! Pods without a sandbox. A sandbox (the kubelet's infra container) exists to hold the
//! network and IPC namespaces that a pod's containers share, and to keep the pod's IP while
//! they come and go. A pod of one container with no init containers shares them with no one,
//! so here that container holds them itself, and the pod costs Docker one container start
//! instead of two. Docker gives each new network namespace its own set-up (about as long as
//! the rest of a container's start, `cargo xtask bench pod-startup`), so this is most of the
//! difference between a pod start and a bare `docker run`.
//!
//! What the sandbox gave the pod, the container now has ([`spec::holding_network`]): the
//! pod's hostname, its sysctls, its `hostPort`s, and shareable IPC so that an ephemeral
//! container (`kubectl debug`) joins it. The pod's IP outlives the container: edged hands out
//! pod addresses itself ([`verge_edge_net::ipam`]) and every new instance of the container is
//! created with the same one, which its label ([`POD_IP`](verge_container_runtime::labels::POD_IP))
//! records across edgecore restarts.
//!
//! Which pods: [`eligible`] ones, on the node's pod network. A pod keeps the way it started
//! for its life: one with a sandbox in Docker goes on with it, one whose container holds its
//! own address goes on without. Pods with init containers or several containers, hostNetwork
//! pods and pods on Docker's default bridge (a node without `spec.podCIDR`, where Docker takes
//! no fixed address) have a sandbox, as before.

use k8s_openapi::api::core::v1::Pod;

use super::observe::{Instance, Observation};
use super::{Worker, spec_of};
use crate::network::{NetworkState, lock_ips};
use crate::spec;
use verge_container_runtime::{ContainerRuntime, RuntimeError};

/// Whether `pod` can run without a sandbox: exactly one container, no init containers, not
/// hostNetwork. Ephemeral containers do not count: added later, they join the container.
pub(crate) fn eligible(pod: &Pod) -> bool {
    let spec = spec_of(pod);
    spec.containers.len() == 1
        && spec.init_containers.as_ref().is_none_or(Vec::is_empty)
        && !spec::host_network(pod)
}

/// The network a pod without a sandbox has: the pod network's name and the pod's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnNetwork {
    /// The Docker network (`verge-pods-<node>`).
    pub network: String,
    /// The pod's IP, dotted quad.
    pub ip: String,
}

/// What the containers of one sync join.
#[derive(Debug, Clone)]
pub(super) enum Holder {
    /// The pod's running sandbox.
    Sandbox(Box<Instance>),
    /// Nothing: the container holds the pod's network itself; `None` while the pod network
    /// is not ready (a container cannot be created until it is).
    Own(Option<OwnNetwork>),
}

impl Holder {
    /// The sandbox, if the pod has one.
    pub(super) fn sandbox(&self) -> Option<&Instance> {
        match self {
            Self::Sandbox(s) => Some(s.as_ref()),
            Self::Own(_) => None,
        }
    }
}

impl Observation {
    /// The pod IP that the newest container holding its own network was created with.
    pub fn own_ip(&self) -> Option<&str> {
        self.containers
            .values()
            .flatten()
            .filter(|i| !i.labels.sandbox)
            .max_by_key(|i| i.labels.restart_count)
            .and_then(|i| i.labels.pod_ip.as_deref())
    }

    /// The running container of a pod without a sandbox (ephemeral containers join it).
    pub fn running_holder(&self) -> Option<&Instance> {
        self.containers.values().flatten().find(|i| {
            !i.labels.sandbox
                && i.labels.holds_network()
                && i.state == verge_container_runtime::RunState::Running
        })
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// Whether the pod runs without a sandbox (see the module docs): what Docker holds
    /// decides (a sandbox: no; a container with its own pod IP: yes); for a pod with nothing
    /// in Docker, [`eligible`] and the pod network being ready.
    pub(super) fn sandboxless(&self, obs: &Observation) -> bool {
        if !obs.sandboxes.is_empty() {
            return false;
        }
        if obs.own_ip().is_some() {
            return true;
        }
        eligible(&self.pod) && matches!(*self.ctx.network.borrow(), NetworkState::Ready(_))
    }

    /// The pod network and the pod's address on it (handed out once, then the pod's).
    ///
    /// # Errors
    /// Why not: the pod network is not ready, or has no free address.
    pub(super) fn own_network(&self) -> Result<OwnNetwork, String> {
        let state = self.ctx.network.borrow().clone();
        let NetworkState::Ready(net) = state else {
            return Err(state
                .sandbox_network()
                .err()
                .unwrap_or_else(|| "the pod network is not ready".to_owned()));
        };
        let ip = lock_ips(&self.ctx.pod_ips)
            .assign(&self.uid, net.cidr())
            .map_err(|e| e.to_string())?;
        Ok(OwnNetwork {
            network: net.name().to_owned(),
            ip: ip.to_string(),
        })
    }

    /// A container created at the pod's fixed address `ip` (if any) failed to start with
    /// `error`: when Docker refused the address as in use by a container that is not a pod's,
    /// the next start gets another ([`verge_edge_net::PodIps::refuse`]).
    pub(super) fn start_refused(&self, ip: Option<&str>, error: &RuntimeError) {
        if !error.is_address_in_use() {
            return;
        }
        if let Some(Ok(ip)) = ip.map(str::parse) {
            tracing::warn!(%ip, "the pod's address is held by a container that is not a pod's; taking another");
            lock_ips(&self.ctx.pod_ips).refuse(&self.uid, ip);
        }
    }

    /// Gives the pod's address back once its containers are removed.
    pub(super) fn release_ip(&self) {
        lock_ips(&self.ctx.pod_ips).release(&self.uid);
    }
}
