//! Where a CONNECT goes ([`resolve`]): the rules of [`super::connect`]'s module docs.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::ResourceExt as _;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tracing::{debug, warn};
use verge_core::well_known::EDGE_NODE_LABEL;

use super::StreamsState;
use crate::Shared;

/// What a CONNECT's host names in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeKind {
    /// No Node of that name (or the host is no node name).
    Absent,
    /// A Verge edge node.
    Edge,
    /// A Node without the edge label.
    Foreign,
}

/// The outcome of resolving a CONNECT target.
pub(crate) enum Target {
    /// A node with a session on this replica (its name): open a tunnel.
    Local(String),
    /// Another replica accepted the CONNECT for its session: splice with it.
    Stream(Box<TlsStream<TcpStream>>),
    /// Dial this `host:port` directly.
    Dial(String),
    /// A known edge node that no replica holds a session for.
    Offline,
    /// A stream address of an edge node (its name when the edge-Node watch knows it) that no
    /// replica holds a session for.
    OfflineAddress(Option<String>),
    /// A forwarded CONNECT for a node without a session here.
    NotHere,
    /// Not allowed (passthrough off).
    Refused(String),
    /// The lookup itself failed (the API server).
    Failed(String),
}

/// Resolves `host:port` (see the module docs). `forwarded`: asked by a peer replica, so
/// only this replica's sessions count (the asking replica checked the Node). A host that is
/// a stream address (`verge_pki::stream_address`) is resolved by [`resolve_address`].
///
/// A host that names a Node without the edge label (a kubelet's) never reaches an edge
/// session, even when an edge with that name is connected: the edge joined before the
/// kubelet took the name, and the API server's exec, attach and port-forward streams for
/// the kubelet's node must not reach it (issue 31, weakness 1). This costs one Node GET per
/// CONNECT that names a node.
pub(crate) async fn resolve(
    shared: &Arc<Shared>,
    state: &Arc<StreamsState>,
    host: &str,
    port: u16,
    forwarded: bool,
) -> Target {
    if let Some(address) = verge_pki::parse_stream_address(host) {
        return resolve_address(shared, state, address, port, forwarded).await;
    }
    let local = shared.registry.tunnel_control(host).is_some();
    if forwarded {
        return if local {
            Target::Local(host.to_owned())
        } else {
            Target::NotHere
        };
    }
    let target = format!("{host}:{port}");
    let is_node_name = crate::validate_node_name(host).is_ok();
    let nodes: Api<Node> = Api::all(state.client.clone());
    let node = if is_node_name {
        match nodes.get_opt(host).await {
            Ok(node) => node,
            Err(error) => return Target::Failed(format!("cannot look up node {host}: {error}")),
        }
    } else {
        None
    };
    let owner = match &node {
        None => NodeKind::Absent,
        Some(n) if n.labels().contains_key(EDGE_NODE_LABEL) => NodeKind::Edge,
        Some(_) => NodeKind::Foreign,
    };
    if owner != NodeKind::Foreign {
        if local {
            return Target::Local(host.to_owned());
        }
        if is_node_name && let Some(stream) = state.peers.find(&target).await {
            return Target::Stream(Box::new(stream));
        }
        if owner == NodeKind::Edge {
            return Target::Offline;
        }
    } else if local {
        warn!(
            node = host,
            "CONNECT for a Node that is not a Verge edge node: its edge session is not used"
        );
    }
    if !state.config.passthrough {
        return Target::Refused(format!(
            "{target} is no edge node and streams.passthrough is off"
        ));
    }
    // A Node's `Hostname` rarely resolves from here; its `InternalIP` does.
    let address = node
        .and_then(|n| n.status?.addresses)
        .and_then(|addresses| {
            addresses
                .into_iter()
                .find(|a| a.type_ == "InternalIP")
                .map(|a| a.address)
        })
        .map_or(target, |ip| {
            if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            }
        });
    debug!(%host, %address, "CONNECT passed through");
    Target::Dial(address)
}

/// Resolves a stream address: the node of this replica's session at that address, else
/// (unless `forwarded`) the peer replica holding it, else [`Target::OfflineAddress`] with
/// the node's name if the edge-Node watch knows it. No Node is
/// looked up: only edge nodes advertise addresses of the prefix, and the address is bound to
/// the authenticated node name of the session that matches it, as a name is.
async fn resolve_address(
    shared: &Arc<Shared>,
    state: &Arc<StreamsState>,
    address: std::net::Ipv6Addr,
    port: u16,
    forwarded: bool,
) -> Target {
    if let Some(node) = shared.registry.node_at(&address) {
        return Target::Local(node);
    }
    if forwarded {
        return Target::NotHere;
    }
    match state.peers.find(&format!("[{address}]:{port}")).await {
        Some(stream) => Target::Stream(Box::new(stream)),
        None => Target::OfflineAddress(shared.trust.edge_node_at(&address)),
    }
}
