//! The Service proxy task: keeps the node's nftables table ([`super::nft`]) at the plan
//! ([`super::model`]) of the Services and EndpointSlices in the store, which edgecontroller
//! sends with the same guarantees as pods and which stay in redb, so Services keep working
//! offline and are programmed again from redb after a restart.
//!
//! It plans again at start, at every snapshot of the Services and EndpointSlices
//! ([`crate::catalog`], which gathers a burst of changes into one), at a store change of a
//! Node that alters what the rules use (its own: pod CIDR, zone and NodeGroup; its site peers':
//! their pod CIDRs are reached directly, through the routes [`crate::site`] keeps; its group
//! peers': their names keep `range-nodegroup` Services in the group; changes of
//! [`DEBOUNCE`] gathered), and every [`RETRY`] while an apply fails (e.g. `nft` is not
//! installed: pods still run, their Services do not work; logged). A plan that renders the
//! same rules as the last one applied (the same plan in the same scope) is neither rendered
//! nor applied again. The rules stay when edgecore
//! stops, as kube-proxy's do: pods keep reaching their Services while it restarts.
//!
//! With the Service tunnel ([`ServiceProxy::with_tunnel`]) it binds the tunnel's listener on
//! the pod network's gateway and plans again whenever the cloudhub session comes or goes:
//! remote endpoints are in the rules only while a session is up, so offline a Service with
//! endpoints on this node's site keeps only those, and one with none refuses at once.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_core::ResourceType;
use verge_core::well_known::NODE_GROUP_LABEL;
use verge_edge_store::MetaStore;
use verge_edgehub::SessionInfo;
use verge_metamanager::StoreEvent;

use super::model::{self, NodeContext};
use super::nft::{self, Scope};
use super::tunnel::{self, Plan};
use crate::catalog::Snapshot;
use crate::podnet::{self, PodNetwork};
use crate::{Error, Result};

/// How long store changes are gathered before one apply.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// How soon a failed apply is tried again.
pub const RETRY: Duration = Duration::from_secs(10);

/// The Service of the API server, whose HTTPS port the edge API serves
/// ([`ServiceProxy::with_edge_api`]).
const KUBERNETES: (&str, &str) = ("default", "kubernetes");

/// The zone label of Nodes (`PreferClose`).
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The Service proxy of one node; see the module docs.
#[derive(Debug)]
pub struct ServiceProxy {
    store: MetaStore,
    node: String,
    node_ip: Option<Ipv4Addr>,
    nft: PathBuf,
    catalog: watch::Receiver<Arc<Snapshot>>,
    events: broadcast::Receiver<StoreEvent>,
    tunnel: Option<TunnelSettings>,
    edge_api: Option<u16>,
}

/// The Service tunnel's settings: its port on the gateway and the cloudhub sessions.
#[derive(Debug)]
struct TunnelSettings {
    port: u16,
    sessions: watch::Receiver<Option<SessionInfo>>,
}

/// The tunnel's listener while bound: its address and the token that stops it.
type Bound = (SocketAddrV4, CancellationToken);

/// What the site routes were last applied for: this node's pod CIDR and its peers.
type SiteState = (Option<ipnet::Ipv4Net>, Vec<crate::site::Peer>);

/// What the rules take from the stored Nodes: this node's pod network and zone, and its
/// site peers. A Node change that leaves them as they were (a heartbeat) plans nothing.
#[derive(Debug, Clone, PartialEq)]
struct NodeInputs {
    network: Option<PodNetwork>,
    zone: Option<String>,
    peers: Vec<crate::site::Peer>,
    group: Option<BTreeSet<String>>,
}

impl ServiceProxy {
    /// The proxy of node `node` (address `node_ip`) over `store`: its Services and
    /// EndpointSlices from `catalog` ([`crate::catalog::ServiceCatalog::subscribe`]), its
    /// Nodes' changes from `events` (metamanager's); applies its rules with the `nft` binary
    /// at `nft`.
    pub fn new(
        store: MetaStore,
        node: &str,
        node_ip: Option<Ipv4Addr>,
        nft: PathBuf,
        catalog: watch::Receiver<Arc<Snapshot>>,
        events: broadcast::Receiver<StoreEvent>,
    ) -> Self {
        Self {
            store,
            node: node.to_owned(),
            node_ip,
            nft,
            catalog,
            events,
            tunnel: None,
            edge_api: None,
        }
    }

    /// Also reaches remote endpoints through the Service tunnel on the pod network's gateway,
    /// port `port`, over the sessions of `sessions` (edgehub's) (see the module docs).
    #[must_use]
    pub fn with_tunnel(
        mut self,
        port: u16,
        sessions: watch::Receiver<Option<SessionInfo>>,
    ) -> Self {
        self.tunnel = Some(TunnelSettings { port, sessions });
        self
    }

    /// Sends the `default/kubernetes` Service's HTTPS port to the edge API on the pod
    /// network's gateway, port `port`, online and offline, in place of its endpoints
    /// ([`model::serve_locally`]; the edge API itself reaches the API server).
    #[must_use]
    pub fn with_edge_api(mut self, port: u16) -> Self {
        self.edge_api = Some(port);
        self
    }

    /// The nftables table of this node: `verge-<bridge of its pod network>`.
    pub fn table(&self) -> String {
        format!("verge-{}", podnet::bridge_name(&self.node))
    }

    /// Programs the rules until `shutdown` (see the module docs).
    pub async fn run(mut self, shutdown: CancellationToken) {
        // The plan and scope last applied: compared instead of the rendered script, which
        // is not kept (hundreds of KiB with a thousand Services).
        let mut last: Option<(Scope, Plan)> = None;
        let (plan_tx, plan_rx) = watch::channel(Plan::default());
        let mut bound: Option<Bound> = None;
        let mut last_site: Option<SiteState> = None;
        loop {
            let inputs = self.node_inputs();
            let snapshot = Arc::clone(&self.catalog.borrow_and_update());
            let (mut ports, mut scope) = self.plan(&inputs, &snapshot);
            let gateway = inputs
                .network
                .as_ref()
                .and_then(|n| n.spec().gateway.parse::<Ipv4Addr>().ok());
            if let (Some(port), Some(gateway)) = (self.edge_api, gateway) {
                model::serve_locally(&mut ports, KUBERNETES, SocketAddrV4::new(gateway, port));
            }
            let site = (
                inputs.network.as_ref().map(PodNetwork::cidr),
                inputs.peers.clone(),
            );
            if last_site.as_ref() != Some(&site) {
                crate::site::apply(site.0, &site.1).await;
                last_site = Some(site);
            }
            if let Some(settings) = &self.tunnel {
                let want = gateway.map(|ip| SocketAddrV4::new(ip, settings.port));
                self.bind_tunnel(&mut bound, want, &plan_rx, &shutdown);
                let online = settings.sessions.borrow().is_some();
                scope.tunnel = bound.as_ref().map(|(addr, _)| *addr).filter(|_| online);
            }
            let ports: Plan = Arc::new(ports);
            plan_tx.send_replace(Arc::clone(&ports));
            let failed = if last
                .as_ref()
                .is_some_and(|(s, p)| *s == scope && **p == *ports)
            {
                false
            } else {
                let started = Instant::now();
                let script = nft::render(&scope, &ports);
                match apply(&self.nft, &script).await {
                    Ok(()) => {
                        debug!(elapsed = ?started.elapsed(), "service rules applied");
                        last = Some((scope, ports));
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
                let session_change = async {
                    match self.tunnel.as_mut() {
                        Some(t) => {
                            if t.sessions.changed().await.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RETRY), if failed => break,
                    () = session_change => break,
                    changed = self.catalog.changed() => match changed {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                    ev = self.events.recv() => match ev {
                        Ok(ev) if ev.key.kind != ResourceType::Node => continue,
                        Ok(_) if self.node_inputs() == inputs => continue,
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

    /// (Re)binds the tunnel's listener at `want` (none: stops it) and serves it with `plan`.
    fn bind_tunnel(
        &self,
        bound: &mut Option<Bound>,
        want: Option<SocketAddrV4>,
        plan: &watch::Receiver<Plan>,
        shutdown: &CancellationToken,
    ) {
        let Some(settings) = &self.tunnel else { return };
        if bound.as_ref().map(|(addr, _)| *addr) == want {
            return;
        }
        if let Some((_, stop)) = bound.take() {
            stop.cancel();
        }
        let Some(addr) = want else { return };
        match tunnel::bind(addr) {
            Ok(listener) => {
                info!(%addr, "service tunnel listening");
                let stop = shutdown.child_token();
                verge_runtime::tasks::spawn(
                    "service-tunnel",
                    tunnel::serve(
                        listener,
                        plan.clone(),
                        settings.sessions.clone(),
                        self.node_ip,
                        stop.clone(),
                    ),
                );
                *bound = Some((addr, stop));
            }
            Err(error) => {
                warn!(%addr, %error, "service tunnel not bound: remote endpoints are left out")
            }
        }
    }

    /// What the rules take from the stored Nodes now (see [`NodeInputs`]).
    fn node_inputs(&self) -> NodeInputs {
        let nodes: Vec<Node> = crate::stored::list(&self.store, ResourceType::Node);
        let own = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(self.node.as_str()));
        NodeInputs {
            network: own
                .and_then(|n| n.spec.as_ref())
                .and_then(|s| s.pod_cidr.as_deref())
                .and_then(|cidr| PodNetwork::new(&self.node, cidr).ok()),
            zone: own
                .and_then(|n| n.metadata.labels.as_ref())
                .and_then(|l| l.get(ZONE_LABEL).cloned()),
            peers: crate::site::peers(&nodes, &self.node),
            group: group_of(own, &nodes),
        }
    }

    /// The plan for what the store holds now and the scope of its rules (without the tunnel).
    fn plan(&self, inputs: &NodeInputs, snapshot: &Snapshot) -> (Vec<model::ServicePort>, Scope) {
        let ctx = NodeContext {
            node: self.node.clone(),
            node_ip: self.node_ip,
            zone: inputs.zone.clone(),
            group: inputs.group.clone(),
            direct: inputs
                .network
                .iter()
                .map(PodNetwork::cidr)
                .chain(inputs.peers.iter().map(|p| p.pod_cidr))
                .collect(),
        };
        let ports = model::plan(snapshot.services(), snapshot.slices(), &ctx);
        let scope = Scope {
            table: self.table(),
            bridge: inputs.network.as_ref().map(|n| n.spec().bridge.clone()),
            node_ip: self.node_ip,
            tunnel: None,
        };
        (ports, scope)
    }
}

/// The names of the stored Nodes of this node's NodeGroup, itself included (edgecontroller
/// sends every edge node its group's peers), when `own` carries `NODE_GROUP_LABEL`.
fn group_of(own: Option<&Node>, nodes: &[Node]) -> Option<BTreeSet<String>> {
    let group = |n: &Node| crate::site::label(n, NODE_GROUP_LABEL);
    let name = own.and_then(group)?;
    let members = nodes
        .iter()
        .filter(|n| group(n).as_deref() == Some(name.as_str()))
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    Some(members)
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
