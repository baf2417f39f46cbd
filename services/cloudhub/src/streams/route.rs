//! Where a CONNECT goes ([`resolve`]): the rules of [`super::connect`]'s module docs.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::ResourceExt as _;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tracing::debug;
use verge_core::well_known::EDGE_NODE_LABEL;

use super::StreamsState;
use crate::Shared;

/// The outcome of resolving a CONNECT target.
pub(crate) enum Target {
    /// A node with a session on this replica: open a tunnel.
    Local,
    /// Another replica accepted the CONNECT for its session: splice with it.
    Stream(Box<TlsStream<TcpStream>>),
    /// Dial this `host:port` directly.
    Dial(String),
    /// A known edge node that no replica holds a session for.
    Offline,
    /// A forwarded CONNECT for a node without a session here.
    NotHere,
    /// Not allowed (passthrough off).
    Refused(String),
    /// The lookup itself failed (the API server).
    Failed(String),
}

/// Resolves `host:port` (see the module docs). `forwarded`: asked by a peer replica, so
/// only this replica's sessions count.
pub(crate) async fn resolve(
    shared: &Arc<Shared>,
    state: &Arc<StreamsState>,
    host: &str,
    port: u16,
    forwarded: bool,
) -> Target {
    if shared.registry.tunnel_control(host).is_some() {
        return Target::Local;
    }
    if forwarded {
        return Target::NotHere;
    }
    let target = format!("{host}:{port}");
    if crate::validate_node_name(host).is_ok()
        && let Some(stream) = state.peers.find(&target).await
    {
        return Target::Stream(Box::new(stream));
    }
    let nodes: Api<Node> = Api::all(state.client.clone());
    let node = if crate::validate_node_name(host).is_ok() {
        match nodes.get_opt(host).await {
            Ok(node) => node,
            Err(error) => return Target::Failed(format!("cannot look up node {host}: {error}")),
        }
    } else {
        None
    };
    if node
        .as_ref()
        .is_some_and(|n| n.labels().contains_key(EDGE_NODE_LABEL))
    {
        return Target::Offline;
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
