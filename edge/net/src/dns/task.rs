//! The cluster resolver task: keeps the zone ([`super::names`]) at what the store holds and
//! serves it ([`super::server`]) on the node's pod network gateway, port 53, the address
//! edged writes into pods' resolv.conf (`edged::resolv_conf`). Questions outside the zone go
//! to the first nameserver of the node's own resolv.conf ([`crate::resolv::node`]).
//!
//! The zone is built again at every snapshot of the Services and EndpointSlices
//! ([`crate::catalog`], which gathers a burst of changes into one); the sockets (UDP and TCP)
//! are bound once the Node's pod network is known (with `IP_FREEBIND`, before the bridge has
//! the address), and again when it changes. Built from redb, the zone answers offline and
//! right after a restart.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_core::{ResourceKey, ResourceType};

use crate::catalog::Snapshot;
use verge_edge_store::MetaStore;
use verge_metamanager::StoreEvent;

use super::names::ClusterNames;
use crate::stored;

/// How soon a failed bind is tried again.
pub const RETRY: Duration = Duration::from_secs(10);

/// The cluster resolver of one node; see the module docs.
#[derive(Debug)]
pub struct ClusterDns {
    store: MetaStore,
    node: String,
    zone: String,
    catalog: watch::Receiver<Arc<Snapshot>>,
    events: broadcast::Receiver<StoreEvent>,
}

impl ClusterDns {
    /// The resolver of node `node` for the cluster domain `zone`: its Services and
    /// EndpointSlices from `catalog` ([`crate::catalog::ServiceCatalog::subscribe`]), its own
    /// Node (the pod network's gateway) from `store`, following `events` (metamanager's).
    pub fn new(
        store: MetaStore,
        node: &str,
        zone: &str,
        catalog: watch::Receiver<Arc<Snapshot>>,
        events: broadcast::Receiver<StoreEvent>,
    ) -> Self {
        Self {
            store,
            node: node.to_owned(),
            zone: zone.to_owned(),
            catalog,
            events,
        }
    }

    /// The gateway of the node's pod network (the resolver's address), from its stored Node.
    fn gateway(&self) -> Option<Ipv4Addr> {
        stored::pod_network(&self.store, &self.node)
            .and_then(|net| net.spec().gateway.parse::<Ipv4Addr>().ok())
    }

    /// The zone of the catalog's latest snapshot (marked seen).
    fn names(&mut self) -> ClusterNames {
        let snapshot = Arc::clone(&self.catalog.borrow_and_update());
        ClusterNames::build(&self.zone, snapshot.services(), snapshot.slices())
    }

    /// Serves until `shutdown` (see the module docs).
    pub async fn run(mut self, shutdown: CancellationToken) {
        let own = ResourceKey::cluster(ResourceType::Node, &self.node);
        let (names_tx, names_rx) = watch::channel(Arc::new(self.names()));
        let upstream = node_upstream();
        let mut bound: Option<(Ipv4Addr, CancellationToken)> = None;
        loop {
            let gateway = self.gateway();
            if bound.as_ref().map(|(ip, _)| *ip) != gateway {
                if let Some((_, stop)) = bound.take() {
                    stop.cancel();
                }
                if let Some(ip) = gateway {
                    match bind(SocketAddrV4::new(ip, 53)) {
                        Ok((udp, tcp)) => {
                            info!(address = %ip, ?upstream, "cluster resolver serving (UDP and TCP)");
                            let stop = shutdown.child_token();
                            verge_runtime::tasks::spawn(
                                "cluster-dns",
                                super::server::serve_udp(
                                    udp,
                                    names_rx.clone(),
                                    upstream,
                                    stop.clone(),
                                ),
                            );
                            verge_runtime::tasks::spawn(
                                "cluster-dns-tcp",
                                super::server::serve_tcp(
                                    tcp,
                                    names_rx.clone(),
                                    upstream,
                                    stop.clone(),
                                ),
                            );
                            bound = Some((ip, stop));
                        }
                        Err(e) => warn!(address = %ip, error = %e, "cluster resolver not bound"),
                    }
                }
            }
            let retry = gateway.is_some() && bound.is_none();
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RETRY), if retry => break,
                    changed = self.catalog.changed() => match changed {
                        Ok(()) => {
                            names_tx.send_replace(Arc::new(self.names()));
                        }
                        Err(_) => return,
                    },
                    ev = self.events.recv() => match ev {
                        // Its own Node: the gateway may have changed; the zone has not.
                        Ok(ev) if ev.key == own => {
                            if self.gateway() != gateway {
                                break;
                            }
                        }
                        Ok(_) => {}
                        // Its own Node's change may be among those missed.
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
        }
    }
}

/// The resolver's UDP socket and TCP listener at `addr`, bound with `IP_FREEBIND` so that
/// they are up before Docker gives the pod network's bridge its gateway address.
fn bind(addr: SocketAddrV4) -> std::io::Result<(UdpSocket, tokio::net::TcpListener)> {
    use socket2::{Domain, Socket, Type};
    let udp = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    udp.set_freebind_v4(true)?;
    udp.set_nonblocking(true)?;
    udp.bind(&SocketAddr::V4(addr).into())?;
    let udp = UdpSocket::from_std(udp.into())?;
    let tcp = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    tcp.set_reuse_address(true)?;
    tcp.set_freebind_v4(true)?;
    tcp.set_nonblocking(true)?;
    tcp.bind(&SocketAddr::V4(addr).into())?;
    tcp.listen(128)?;
    Ok((udp, tokio::net::TcpListener::from_std(tcp.into())?))
}

/// The first nameserver of the node's resolv.conf ([`crate::resolv::node`]), port 53.
fn node_upstream() -> Option<SocketAddr> {
    crate::resolv::node()
        .nameservers
        .iter()
        .find_map(|ip| ip.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
}
