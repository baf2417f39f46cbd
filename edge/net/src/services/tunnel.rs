//! The Service tunnel: how an edge pod reaches a Service endpoint its node does not reach
//! directly (a pod on a cloud node or at another site, the API server). The proxy's rules
//! DNAT a share of the Service port's new TCP connections to this listener on the pod
//! network's gateway ([`super::nft::Scope::tunnel`]); the listener reads each connection's
//! original destination (`SO_ORIGINAL_DST`: the cluster IP and port, or the node port), finds
//! the Service port in the proxy's current plan, picks one of its remote endpoints (round
//! robin; by client address with `sessionAffinity: ClientIP`) and carries the connection over
//! the node's cloudhub session (`EdgeHub.Dial`, on the session's own HTTP/2 connection: no
//! new port is opened towards the network and nothing is routed on cloud hosts). cloudhub
//! dials only ready endpoints of the Service named.
//!
//! The other way, [`serve_pod_tunnels`]: when the endpoint is a pod of another edge node,
//! cloudhub asks that node over its session to open a tunnel to its pod (only an address of
//! its own pod CIDR) and relays between the two nodes' streams.
//!
//! A connection the tunnel cannot carry (no session, no such Service port, cloudhub refused
//! or could not connect) is reset at once, as a refused connection would be. The listener is
//! bound with `IP_FREEBIND`, so it is up before Docker gives the bridge its gateway address.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_edgehub::SessionInfo;
use verge_proto::hub::{ServiceDial, TunnelFrame, tunnel_frame};

use super::model::{Backend, Protocol, ServicePort};

/// The tunnel's default port on the pod network's gateway (`network.serviceTunnelPort`).
pub const DEFAULT_PORT: u16 = 15001;

/// How long cloudhub may take to answer a dial (its own connect timeout is 5 s by default);
/// a session that died without edgehub noticing yet must not hold the pod's connection.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The proxy's current plan, shared with the tunnel.
pub type Plan = Arc<Vec<ServicePort>>;

/// Binds the tunnel's listener at `addr`, even before the address exists on the bridge
/// (`IP_FREEBIND`).
///
/// # Errors
/// The socket calls' errors (e.g. the port is taken).
pub fn bind(addr: SocketAddrV4) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_freebind_v4(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::V4(addr).into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// The Service port and remote endpoint for a connection to `dst` from `client`, from `plan`:
/// the TCP port whose cluster IP and port (or, at `node_ip`, node port) is `dst`. `turn`
/// spreads connections over the endpoints; with `sessionAffinity: ClientIP` the client's
/// address picks instead.
pub fn route(
    plan: &[ServicePort],
    dst: SocketAddrV4,
    client: Ipv4Addr,
    node_ip: Option<Ipv4Addr>,
    turn: usize,
) -> Option<(&ServicePort, Backend)> {
    let port = plan.iter().find(|p| {
        p.protocol == Protocol::Tcp
            && !p.remote.is_empty()
            && ((p.port == dst.port() && p.cluster_ips.contains(dst.ip()))
                || (node_ip == Some(*dst.ip()) && p.node_port == Some(dst.port())))
    })?;
    let pick = match port.affinity_seconds {
        Some(_) => u32::from(client) as usize,
        None => turn,
    };
    Some((port, port.remote[pick % port.remote.len()]))
}

/// Accepts connections on `listener` until `stop` and carries each over the current session
/// of `sessions` to the endpoint [`route`] picks from `plan` (see the module docs).
pub async fn serve(
    listener: TcpListener,
    plan: watch::Receiver<Plan>,
    sessions: watch::Receiver<Option<SessionInfo>>,
    node_ip: Option<Ipv4Addr>,
    stop: CancellationToken,
) {
    let turn = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (conn, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                warn!(%error, "service tunnel: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let session = sessions.borrow().clone();
        let plan = plan.borrow().clone();
        let turn = turn.fetch_add(1, Ordering::Relaxed);
        verge_runtime::tasks::spawn("service tunnel connection", async move {
            if let Err(reason) = carry(conn, peer, &plan, session, node_ip, turn).await {
                debug!(%peer, %reason, "service tunnel: connection reset");
            }
        });
    }
}

/// Carries one accepted connection; on an error it is reset and the reason returned.
async fn carry(
    conn: TcpStream,
    peer: SocketAddr,
    plan: &[ServicePort],
    session: Option<SessionInfo>,
    node_ip: Option<Ipv4Addr>,
    turn: usize,
) -> Result<(), String> {
    let reset = |conn: &TcpStream, reason: String| {
        let _ = SockRef::from(conn).set_linger(Some(Duration::ZERO));
        Err(reason)
    };
    let dst = match SockRef::from(&conn).original_dst_v4() {
        Ok(addr) => addr.as_socket_ipv4(),
        Err(error) => return reset(&conn, format!("no original destination: {error}")),
    };
    let (Some(dst), SocketAddr::V4(client)) = (dst, peer) else {
        return reset(&conn, "not an IPv4 connection".into());
    };
    let Some((port, endpoint)) = route(plan, dst, *client.ip(), node_ip, turn) else {
        return reset(
            &conn,
            format!("{dst} is no Service port with remote endpoints"),
        );
    };
    let Some(mut session) = session else {
        return reset(&conn, "no cloudhub session".into());
    };
    let (frames, outbound) = verge_proto::tunnel::outbound(TunnelFrame {
        frame: Some(tunnel_frame::Frame::Dial(ServiceDial {
            namespace: port.namespace.clone(),
            service: port.service.clone(),
            address: endpoint.ip.to_string(),
            port: u32::from(endpoint.port),
        })),
    });
    let dialled = tokio::time::timeout(DIAL_TIMEOUT, session.client.dial(outbound))
        .await
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(format!(
                "no answer within {DIAL_TIMEOUT:?}"
            )))
        });
    let inbound = match dialled {
        Ok(response) => response.into_inner(),
        Err(status) => {
            let reason = format!(
                "cloudhub did not dial {}:{} of {}/{}: {}",
                endpoint.ip,
                endpoint.port,
                port.namespace,
                port.service,
                status.message()
            );
            if status.code() == tonic::Code::PermissionDenied {
                info!("service tunnel: {reason}");
            }
            return reset(&conn, reason);
        }
    };
    let _ = conn.set_nodelay(true);
    match verge_proto::tunnel::splice(conn, inbound, frames).await {
        Ok(spliced) => debug!(%peer, %dst, ?spliced, "service tunnel: connection closed"),
        Err(error) => debug!(%peer, %dst, %error, "service tunnel: connection ended"),
    }
    Ok(())
}

/// How long connecting to a pod of this node for cloudhub may take.
pub const POD_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves cloudhub's requests to tunnel to this node's pods (`OpenTunnel.dial`: a pod of
/// another edge node reaching a Service endpoint here, relayed by cloudhub) until `stop`: each
/// address must be inside node `node`'s pod CIDR (from its stored Node; anything else is
/// refused), the node connects to it and carries the connection over an `EdgeHub.Tunnel`
/// call naming the request's id.
pub async fn serve_pod_tunnels(
    mut requests: mpsc::Receiver<verge_edgehub::TunnelRequest>,
    store: verge_edge_store::MetaStore,
    node: String,
    stop: CancellationToken,
) {
    loop {
        let request = tokio::select! {
            () = stop.cancelled() => return,
            request = requests.recv() => match request {
                Some(request) => request,
                None => return,
            },
        };
        let network = crate::stored::pod_network(&store, &node);
        verge_runtime::tasks::spawn("pod tunnel", async move {
            if let Err(reason) = pod_tunnel(request, network).await {
                info!(%reason, "pod tunnel refused");
            }
        });
    }
}

async fn pod_tunnel(
    mut request: verge_edgehub::TunnelRequest,
    network: Option<crate::PodNetwork>,
) -> Result<(), String> {
    let dial = request.dial.take().ok_or("not a pod tunnel")?;
    let ip: Ipv4Addr = dial
        .address
        .parse()
        .map_err(|_| format!("{:?} is not an IPv4 address", dial.address))?;
    let port = u16::try_from(dial.port).map_err(|_| format!("port {}", dial.port))?;
    if !network.as_ref().is_some_and(|n| n.contains(ip)) {
        return Err(format!("{ip} is not in this node's pod CIDR"));
    }
    let conn = tokio::time::timeout(POD_CONNECT_TIMEOUT, TcpStream::connect((ip, port)))
        .await
        .map_err(|_| format!("{ip}:{port}: no connection within {POD_CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("{ip}:{port}: {e}"))?;
    let _ = conn.set_nodelay(true);
    let (frames, outbound) = verge_proto::tunnel::outbound(TunnelFrame {
        frame: Some(tunnel_frame::Frame::Open(verge_proto::hub::TunnelOpen {
            tunnel_id: request.id.clone(),
        })),
    });
    let inbound = request
        .client
        .tunnel(outbound)
        .await
        .map_err(|s| format!("cloudhub refused the tunnel: {}", s.message()))?
        .into_inner();
    match verge_proto::tunnel::splice(conn, inbound, frames).await {
        Ok(spliced) => debug!(%ip, port, ?spliced, "pod tunnel closed"),
        Err(error) => debug!(%ip, port, %error, "pod tunnel ended"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(remote: &[u8], affinity: Option<u32>) -> ServicePort {
        ServicePort {
            name: "shop/web:http/tcp".into(),
            namespace: "shop".into(),
            service: "web".into(),
            protocol: Protocol::Tcp,
            cluster_ips: vec![Ipv4Addr::new(10, 96, 0, 20)],
            port: 80,
            node_port: Some(30080),
            backends: Vec::new(),
            remote: remote
                .iter()
                .map(|last| Backend {
                    ip: Ipv4Addr::new(10, 244, 9, *last),
                    port: 8080,
                })
                .collect(),
            affinity_seconds: affinity,
        }
    }

    #[test]
    fn a_connection_goes_to_a_remote_endpoint_of_its_service_port() {
        let plan = [port(&[1, 2], None)];
        let client = Ipv4Addr::new(10, 244, 1, 7);
        let node = Some(Ipv4Addr::new(192, 0, 2, 10));
        let to = |ip: [u8; 4], p| SocketAddrV4::new(ip.into(), p);
        let picked: Vec<u8> = (0..4)
            .map(|turn| {
                route(&plan, to([10, 96, 0, 20], 80), client, node, turn)
                    .expect("routed")
                    .1
                    .ip
                    .octets()[3]
            })
            .collect();
        assert_eq!(picked, [1, 2, 1, 2], "round robin");
        assert!(route(&plan, to([192, 0, 2, 10], 30080), client, node, 0).is_some());
        assert!(route(&plan, to([10, 96, 0, 20], 81), client, node, 0).is_none());
        assert!(route(&plan, to([10, 96, 0, 21], 80), client, node, 0).is_none());
        assert!(route(&[port(&[], None)], to([10, 96, 0, 20], 80), client, node, 0).is_none());
        let sticky = [port(&[1, 2, 3], Some(60))];
        let first = route(&sticky, to([10, 96, 0, 20], 80), client, node, 0).map(|r| r.1);
        for turn in 1..5 {
            assert_eq!(
                route(&sticky, to([10, 96, 0, 20], 80), client, node, turn).map(|r| r.1),
                first,
                "ClientIP affinity"
            );
        }
    }
}
