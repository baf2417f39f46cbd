//! The pod network this node's sandboxes join ([`verge_edge_net::podnet`]), kept up to date
//! from the Node object edgecontroller sends down (stored in redb by metamanager, so it is
//! known offline and after a restart).
//!
//! [`NetworkState`] says where a new sandbox goes:
//! - the Node object is not stored yet: nowhere ([`NetworkState::Unknown`]): pods that are not
//!   `hostNetwork` wait (event `NetworkNotReady`, as the kubelet's while its network plugin is
//!   not ready), so no pod starts on a network it would keep for its life by mistake;
//! - the Node has a `spec.podCIDR`: the pod network on it, once the engine made it
//!   ([`NetworkState::Ready`]);
//! - the Node has none and is younger than [`POD_CIDR_GRACE`]: nowhere yet
//!   ([`NetworkState::AwaitingPodCidr`]): kube-controller-manager's node-ipam controller gives
//!   a new Node its podCIDR moments after the Node is created, and a pod that arrives in
//!   between would otherwise keep Docker's default bridge for its life;
//! - the Node has none and is older (kube-controller-manager runs without
//!   `--allocate-node-cidrs`): Docker's default bridge, as before pod networks
//!   ([`NetworkState::DefaultBridge`]); pod IPs are then unique on the node only;
//! - the CIDR is unusable or the engine refuses the network: nowhere, with the reason
//!   ([`NetworkState::Failed`]), tried again every [`RETRY`].
//!
//! [`run`] re-reads the Node at every change of it in the store.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_container_runtime::{ContainerRuntime, NetworkEnsured};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_net::PodNetwork;
use verge_edge_store::MetaStore;
use verge_metamanager::StoreEvent;
use verge_runtime::ErrorChain;

/// How often a failed pod network is tried again.
pub const RETRY: Duration = Duration::from_secs(10);

/// How long a new Node without `spec.podCIDR` waits for node-ipam to give it one before its
/// pods go to Docker's default bridge, counted from the Node's `creationTimestamp` (at most
/// this long from when this edgecore first sees it, whatever the clocks say).
pub const POD_CIDR_GRACE: Duration = Duration::from_secs(30);

/// Where new pod sandboxes go; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkState {
    /// The Node object is not known yet.
    Unknown,
    /// The Node has no `spec.podCIDR` yet and is younger than [`POD_CIDR_GRACE`].
    AwaitingPodCidr,
    /// The Node has no `spec.podCIDR`: Docker's default bridge.
    DefaultBridge,
    /// The pod network on the Node's `spec.podCIDR`.
    Ready(PodNetwork),
    /// The pod network cannot be made; the reason.
    Failed(String),
}

impl NetworkState {
    /// The network a new sandbox joins, or why it cannot start yet.
    ///
    /// # Errors
    /// The reason, when the network is not ready (for the event `NetworkNotReady`).
    pub fn sandbox_network(&self) -> Result<verge_container_runtime::types::NetworkMode, String> {
        use verge_container_runtime::types::NetworkMode;
        match self {
            Self::Unknown => Err("the Node object has not arrived from the cloud yet".into()),
            Self::AwaitingPodCidr => Err(
                "the Node has no spec.podCIDR yet (kube-controller-manager's node-ipam controller \
                 gives a new Node one)"
                    .into(),
            ),
            Self::DefaultBridge => Ok(NetworkMode::Bridge),
            Self::Ready(net) => Ok(NetworkMode::Network(net.name().to_owned())),
            Self::Failed(reason) => Err(reason.clone()),
        }
    }
}

/// The pod IPs held by the node's containers ([`verge_edge_net::ipam`]): the label of every
/// container created with a fixed address, and the address of every running container
/// without the label (a sandbox an earlier edgecore made with an address of the engine's).
/// A container runtime that does not answer after a few tries gives an empty record, with
/// a warning.
pub(crate) async fn seed_pod_ips<R: ContainerRuntime>(runtime: &R) -> verge_edge_net::PodIps {
    use verge_container_runtime::ListFilter;
    use verge_container_runtime::labels::{self, ContainerLabels};
    let mut ips = verge_edge_net::PodIps::default();
    let mut listed = runtime.list(&ListFilter::node()).await;
    for _ in 0..SEED_TRIES {
        if listed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        listed = runtime.list(&ListFilter::node()).await;
    }
    let listed = match listed {
        Ok(listed) => listed,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "pod IPs not read from the containers; new pods may be refused an address in use");
            return ips;
        }
    };
    // Labelled addresses first: they are the pods' own.
    let labelled = listed.iter().filter_map(|c| {
        let l = ContainerLabels::parse(&c.labels)?;
        Some((l.pod.uid, c.labels.get(labels::POD_IP)?.parse().ok()?))
    });
    let engine_given = listed
        .iter()
        .filter(|c| !c.labels.contains_key(labels::POD_IP))
        .filter_map(|c| {
            let l = ContainerLabels::parse(&c.labels)?;
            Some((l.pod.uid, c.ip.as_deref()?.parse().ok()?))
        });
    for (uid, ip) in labelled.collect::<Vec<_>>().into_iter().chain(engine_given) {
        ips.adopt(&uid, ip);
    }
    ips
}

/// How many more times [`seed_pod_ips`] lists the containers before it gives up.
const SEED_TRIES: usize = 5;

/// Locks the pod IP record; a poisoned lock (a panic while it was held) is taken over, the
/// record being consistent after every call.
pub(crate) fn lock_ips(
    ips: &std::sync::Mutex<verge_edge_net::PodIps>,
) -> std::sync::MutexGuard<'_, verge_edge_net::PodIps> {
    ips.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the stored Node says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoredNode {
    /// Its `spec.podCIDR`, if set.
    pod_cidr: Option<String>,
    /// Its `metadata.creationTimestamp`.
    created: Option<Timestamp>,
}

/// The stored Node, or `None` when it is not stored (or unreadable: a warning).
fn stored_node(store: &MetaStore, key: &ResourceKey) -> Option<StoredNode> {
    let stored = match store.get(key) {
        Ok(stored) => stored?,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "reading the Node object failed");
            return None;
        }
    };
    match serde_json::from_slice::<Node>(&stored.content) {
        Ok(node) => Some(StoredNode {
            pod_cidr: node.spec.and_then(|s| s.pod_cidr).filter(|c| !c.is_empty()),
            created: node.metadata.creation_timestamp.map(|t| t.0),
        }),
        Err(e) => {
            warn!(error = %e, "stored Node object does not parse");
            None
        }
    }
}

/// How much of [`POD_CIDR_GRACE`] a Node created at `created` has left at `now`: all of it
/// when the Node looks created in the future (an edge clock behind the cloud's), none when
/// the Node has no creation time.
fn remaining_grace(created: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(created) = created else {
        return Duration::ZERO;
    };
    let age = Duration::try_from(now.duration_since(created)).unwrap_or(Duration::ZERO);
    POD_CIDR_GRACE.saturating_sub(age)
}

/// The state for `pod_cidr` (`None`: no Node stored; else its `spec.podCIDR`), making the
/// network in `runtime`.
async fn state_for<R: ContainerRuntime>(
    runtime: &R,
    node: &str,
    pod_cidr: Option<Option<String>>,
) -> NetworkState {
    let Some(pod_cidr) = pod_cidr else {
        return NetworkState::Unknown;
    };
    let Some(cidr) = pod_cidr else {
        return NetworkState::DefaultBridge;
    };
    let net = match PodNetwork::new(node, &cidr) {
        Ok(net) => net,
        Err(e) => return NetworkState::Failed(e.to_string()),
    };
    match net.ensure(runtime).await {
        Ok(ensured) => {
            if ensured != NetworkEnsured::Existing {
                info!(network = net.name(), cidr = %net.cidr(), ?ensured, "pod network made");
            }
            NetworkState::Ready(net)
        }
        Err(e) => NetworkState::Failed(ErrorChain(&e).to_string()),
    }
}

/// Keeps `tx` at the state of node `node`'s stored Node object until `shutdown`: at start,
/// at every store change of the Node (`events`), every [`RETRY`] while it failed, and when a
/// new Node's [`POD_CIDR_GRACE`] ends.
pub async fn run<R: ContainerRuntime>(
    runtime: R,
    store: MetaStore,
    node: String,
    mut events: broadcast::Receiver<StoreEvent>,
    tx: watch::Sender<NetworkState>,
    shutdown: CancellationToken,
) {
    let key = ResourceKey::cluster(ResourceType::Node, &node);
    let mut last = None;
    // When a Node without a podCIDR stops waiting for one (see `POD_CIDR_GRACE`).
    let mut grace_ends: Option<Instant> = None;
    loop {
        let stored = stored_node(&store, &key);
        let awaiting = match &stored {
            Some(n) if n.pod_cidr.is_none() => {
                let ends = *grace_ends.get_or_insert_with(|| {
                    Instant::now() + remaining_grace(n.created, verge_edge_store::clock::now())
                });
                Instant::now() < ends
            }
            _ => {
                grace_ends = None;
                false
            }
        };
        let cidr = stored.map(|n| n.pod_cidr);
        let failed = matches!(*tx.borrow(), NetworkState::Failed(_));
        let seen = Some((cidr.clone(), awaiting));
        if seen != last || failed {
            let state = if awaiting {
                NetworkState::AwaitingPodCidr
            } else {
                state_for(&runtime, &node, cidr).await
            };
            if let NetworkState::Failed(reason) = &state {
                warn!(%reason, "pod network not ready");
            }
            tx.send_if_modified(|s| {
                let changed = *s != state;
                *s = state;
                changed
            });
            last = seen;
        }
        let retry = matches!(*tx.borrow(), NetworkState::Failed(_));
        let grace_end = grace_ends.filter(|_| awaiting).unwrap_or_else(Instant::now);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RETRY), if retry => {}
            () = tokio::time::sleep_until(grace_end), if awaiting => {}
            ev = events.recv() => match ev {
                Ok(ev) if ev.key != key => continue,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

#[cfg(test)]
mod tests;
