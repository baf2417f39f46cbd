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
}
