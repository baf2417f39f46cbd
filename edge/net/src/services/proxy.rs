//! The Service proxy task: keeps the node's nftables table ([`super::nft`]) at the plan
//! ([`super::model`]) of the Services and EndpointSlices in the store, which edgecontroller
//! sends with the same guarantees as pods and which stay in redb, so Services keep working
//! offline and are programmed again from redb after a restart.
//!
//! It plans again at start, at every store change of a Service, an EndpointSlice or the
//! node's own Node object (its pod CIDR and zone), gathering the changes of
//! [`DEBOUNCE`] into one apply, and every [`RETRY`] while an apply fails (e.g. `nft` is not
//! installed: pods still run, their Services do not work; logged). A plan that renders the
//! same script as the last one applied is not applied again. The rules stay when edgecore
//! stops, as kube-proxy's do: pods keep reaching their Services while it restarts.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;
use verge_metamanager::StoreEvent;

use super::model::{self, NodeContext};
use super::nft::{self, Scope};
use crate::podnet::{self, PodNetwork};
use crate::{Error, Result};

/// How long store changes are gathered before one apply.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// How soon a failed apply is tried again.
pub const RETRY: Duration = Duration::from_secs(10);

/// The zone label of Nodes (`PreferClose`).
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The Service proxy of one node; see the module docs.
#[derive(Debug)]
pub struct ServiceProxy {
    store: MetaStore,
    node: String,
    node_ip: Option<Ipv4Addr>,
    nft: PathBuf,
    events: broadcast::Receiver<StoreEvent>,
}

impl ServiceProxy {
    /// The proxy of node `node` (address `node_ip`) over `store`, following `events` (from
    /// metamanager), applying its rules with the `nft` binary at `nft`.
    pub fn new(
        store: MetaStore,
        node: &str,
        node_ip: Option<Ipv4Addr>,
        nft: PathBuf,
        events: broadcast::Receiver<StoreEvent>,
    ) -> Self {
        Self {
            store,
            node: node.to_owned(),
            node_ip,
            nft,
            events,
        }
    }

    /// The nftables table of this node: `verge-<bridge of its pod network>`.
    pub fn table(&self) -> String {
        format!("verge-{}", podnet::bridge_name(&self.node))
    }

    /// Programs the rules until `shutdown` (see the module docs).
    pub async fn run(mut self, shutdown: CancellationToken) {
        let own = ResourceKey::cluster(ResourceType::Node, &self.node);
        let mut last: Option<String> = None;
        loop {
            let script = self.script();
            let failed = if last.as_ref() == Some(&script) {
                false
            } else {
                let started = Instant::now();
                match apply(&self.nft, &script).await {
                    Ok(()) => {
                        debug!(elapsed = ?started.elapsed(), "service rules applied");
                        last = Some(script);
                        false
                    }
                    Err(e) => {
                        warn!(error = %verge_runtime::ErrorChain(&e), "service rules not applied");
                        true
                    }
                }
            };
            // Wait for a relevant change (then gather more for DEBOUNCE), a retry or the end.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RETRY), if failed => break,
                    ev = self.events.recv() => match ev {
                        Ok(ev) if !relevant(&ev.key, &own) => continue,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            tokio::time::sleep(DEBOUNCE).await;
                            break;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
        }
    }

    /// The script for what the store holds now.
    fn script(&self) -> String {
        let node: Option<Node> = crate::stored::node(&self.store, &self.node);
        let network = node
            .as_ref()
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.pod_cidr.as_deref())
            .and_then(|cidr| PodNetwork::new(&self.node, cidr).ok());
        let zone = node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(ZONE_LABEL).cloned());
        let ctx = NodeContext {
            node: self.node.clone(),
            node_ip: self.node_ip,
            zone,
            direct: network.iter().map(PodNetwork::cidr).collect(),
        };
        let services: Vec<Service> = crate::stored::list(&self.store, ResourceType::Service);
        let slices: Vec<EndpointSlice> =
            crate::stored::list(&self.store, ResourceType::EndpointSlice);
        let ports = model::plan(&services, &slices, &ctx);
        let scope = Scope {
            table: self.table(),
            bridge: network.map(|n| n.spec().bridge.clone()),
            node_ip: self.node_ip,
        };
        nft::render(&scope, &ports)
    }
}

/// Whether a change of `key` can change the rules.
fn relevant(key: &ResourceKey, own: &ResourceKey) -> bool {
    matches!(
        key.kind,
        ResourceType::Service | ResourceType::EndpointSlice
    ) || key == own
}

/// Runs `nft -f -` with `script` on its stdin.
///
/// # Errors
/// [`Error::Nft`] when `nft` cannot be run or refuses the script (its stderr).
pub async fn apply(nft: &std::path::Path, script: &str) -> Result<()> {
    let failed = |reason: String| Error::Nft { reason };
    let mut child = tokio::process::Command::new(nft)
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", nft.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| failed(format!("writing the script: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    info!(bytes = script.len(), "service rules applied");
    Ok(())
}
