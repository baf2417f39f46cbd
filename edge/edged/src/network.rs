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
//! - the Node has none (kube-controller-manager runs without `--allocate-node-cidrs`):
//!   Docker's default bridge, as before pod networks ([`NetworkState::DefaultBridge`]); pod IPs
//!   are then unique on the node only;
//! - the CIDR is unusable or the engine refuses the network: nowhere, with the reason
//!   ([`NetworkState::Failed`]), tried again every [`RETRY`].
//!
//! [`run`] re-reads the Node at every change of it in the store.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use tokio::sync::{broadcast, watch};
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

/// Where new pod sandboxes go; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkState {
    /// The Node object is not known yet.
    Unknown,
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

/// What the stored Node says: `None` when it is not stored, else its `spec.podCIDR`.
fn stored_pod_cidr(store: &MetaStore, key: &ResourceKey) -> Option<Option<String>> {
    let stored = match store.get(key) {
        Ok(stored) => stored?,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "reading the Node object failed");
            return None;
        }
    };
    match serde_json::from_slice::<Node>(&stored.content) {
        Ok(node) => Some(node.spec.and_then(|s| s.pod_cidr).filter(|c| !c.is_empty())),
        Err(e) => {
            warn!(error = %e, "stored Node object does not parse");
            None
        }
    }
}

/// The state for `pod_cidr` (see [`stored_pod_cidr`]), making the network in `runtime`.
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
/// at every store change of the Node (`events`), and every [`RETRY`] while it failed.
pub async fn run<R: ContainerRuntime>(
    runtime: R,
    store: MetaStore,
    node: String,
    mut events: broadcast::Receiver<StoreEvent>,
    tx: watch::Sender<NetworkState>,
    shutdown: CancellationToken,
) {
    let key = ResourceKey::cluster(ResourceType::Node, &node);
    let mut last_cidr = None;
    loop {
        let cidr = stored_pod_cidr(&store, &key);
        let failed = matches!(*tx.borrow(), NetworkState::Failed(_));
        if cidr != last_cidr || failed {
            let state = state_for(&runtime, &node, cidr.clone()).await;
            if let NetworkState::Failed(reason) = &state {
                warn!(%reason, "pod network not ready");
            }
            tx.send_if_modified(|s| {
                let changed = *s != state;
                *s = state;
                changed
            });
            last_cidr = cidr;
        }
        let retry = matches!(*tx.borrow(), NetworkState::Failed(_));
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RETRY), if retry => {}
            ev = events.recv() => match ev {
                Ok(ev) if ev.key != key => continue,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verge_container_runtime::fake::FakeRuntime;

    #[tokio::test]
    async fn the_state_follows_the_node_object() {
        let runtime = FakeRuntime::new("n");
        assert_eq!(state_for(&runtime, "n", None).await, NetworkState::Unknown);
        assert_eq!(
            state_for(&runtime, "n", Some(None)).await,
            NetworkState::DefaultBridge
        );
        let ready = state_for(&runtime, "n", Some(Some("10.244.7.0/24".into()))).await;
        let NetworkState::Ready(net) = &ready else {
            panic!("{ready:?}");
        };
        assert_eq!(runtime.networks()[net.name()].gateway, "10.244.7.1");
        assert!(ready.sandbox_network().is_ok());
        let failed = state_for(&runtime, "n", Some(Some("10.244.7.9/24".into()))).await;
        assert!(matches!(failed, NetworkState::Failed(ref r) if r.contains("host bits")));
        assert!(NetworkState::Unknown.sandbox_network().is_err());
    }

    #[tokio::test]
    async fn pod_ips_are_read_back_from_the_containers_labels_and_old_sandboxes() {
        use verge_container_runtime::labels::{ContainerLabels, PodRef};
        use verge_container_runtime::types::NetworkMode;
        use verge_container_runtime::{ContainerRuntime as _, ContainerSpec};
        let runtime = FakeRuntime::new("n");
        runtime.add_image("img");
        let net = verge_edge_net::PodNetwork::new("n", "10.244.7.0/24").expect("cidr");
        net.ensure(&runtime).await.expect("network");
        let container = |uid: &str, sandbox: bool, ip: Option<&str>| {
            let labels = ContainerLabels {
                pod: PodRef {
                    namespace: "ns".into(),
                    name: uid.into(),
                    uid: uid.into(),
                },
                container: if sandbox { "POD" } else { "app" }.into(),
                restart_count: 0,
                sandbox,
                pod_ip: ip.map(str::to_owned),
            };
            ContainerSpec {
                image: "img".into(),
                labels: labels.to_map(),
                network: NetworkMode::Network(net.name().to_owned()),
                ipv4_address: ip.map(str::to_owned),
                ..ContainerSpec::default()
            }
        };
        // A pod without a sandbox whose container is stopped (crash-loop back-off).
        let own = runtime
            .create("own", container("u-own", false, Some("10.244.7.9")))
            .await
            .expect("create");
        runtime.exit(&own, 1);
        // A sandbox an earlier edgecore made, at an address of the engine's.
        let old = runtime
            .create("old", container("u-old", true, None))
            .await
            .expect("create");
        runtime.start(&old).await.expect("start");
        let engine_given = runtime
            .inspect(&old)
            .await
            .expect("inspect")
            .and_then(|i| i.ip)
            .expect("an address");
        let ips = seed_pod_ips(&runtime).await;
        assert_eq!(
            ips.get("u-own").map(|ip| ip.to_string()),
            Some("10.244.7.9".into())
        );
        assert_eq!(
            ips.get("u-old").map(|ip| ip.to_string()),
            Some(engine_given)
        );
    }
}
