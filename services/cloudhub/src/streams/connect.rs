//! The HTTP CONNECT listener: what the API server's egress selector (`HTTPConnect` over
//! TLS) dials for every connection of its `cluster` egress, kubelet connections included.
//!
//! A CONNECT names the address the API server was about to dial, unresolved: for an edge
//! node `[<stream address>]:<port>` (its `Hostname` address, `verge_pki::stream_address`),
//! or `<node name>:<port>` from edgecore before stream addresses. It is
//! served, in order, by: a tunnel over the node's session on this replica; the replica that
//! holds the session ([`super::peers`]); for a known edge node without a session anywhere,
//! a `503` naming the node offline; otherwise, with `passthrough` on, a direct dial (a
//! Node's `Hostname` resolved to its `InternalIP`). Failures answer at once with a status
//! whose reason phrase says why: the API server shows only that line
//! (`proxy error from … code 503: 503 edge node edge-1 is offline …`).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::ext::ReasonPhrase;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tracing::{Instrument as _, debug, info, warn};
use verge_proto::hub::{CloudFrame, OpenTunnel, cloud_frame};

use super::StreamsState;
use super::route::{self, Target};
use crate::Shared;

/// The header a replica adds when it forwards a CONNECT to a peer: the peer answers from
/// its own sessions only (`404` without one) and never forwards again.
pub(crate) const FORWARDED: &str = "verge-forwarded";

/// The response to one CONNECT request.
pub(crate) async fn handle(
    mut request: Request<Incoming>,
    shared: Arc<Shared>,
    state: Arc<StreamsState>,
    peer_client: bool,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    if request.method() != Method::CONNECT {
        return Ok(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "this proxy only serves CONNECT",
        ));
    }
    let Some(authority) = request.uri().authority().cloned() else {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "CONNECT needs a host:port target",
        ));
    };
    let (host, port) = (
        authority.host().to_owned(),
        authority.port_u16().unwrap_or(443),
    );
    let forwarded = peer_client && request.headers().contains_key(FORWARDED);
    let span = verge_telemetry::span!("cloudhub.connect", net.peer.name = %host, net.peer.port = port, verge.forwarded = forwarded);
    let target = route::resolve(&shared, &state, &host, port, forwarded)
        .instrument(span.clone())
        .await;
    let on_upgrade = hyper::upgrade::on(&mut request);
    match target {
        Target::Local(node) => {
            let Some(control) = shared.registry.tunnel_control(&node) else {
                return Ok(offline(&node));
            };
            let mut expected = state.tunnels.expect(&node);
            let open = CloudFrame {
                frame: Some(cloud_frame::Frame::OpenTunnel(OpenTunnel {
                    tunnel_id: expected.id.clone(),
                    port: u32::from(port),
                    dial: None,
                })),
            };
            if control.try_send(Box::new(open)).is_err() {
                return Ok(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("edge node {host} is busy: too many tunnels are being opened"),
                ));
            }
            let timeout = state.config.tunnel_timeout;
            let ends = match tokio::time::timeout(timeout, &mut expected.arrived).await {
                Ok(Ok(ends)) => ends,
                _ => {
                    return Ok(refuse(
                        StatusCode::GATEWAY_TIMEOUT,
                        &format!("edge node {node} did not open the tunnel within {timeout:?}"),
                    ));
                }
            };
            verge_runtime::tasks::spawn(
                "CONNECT tunnel",
                async move {
                    let Ok(upgraded) = on_upgrade.await else {
                        return;
                    };
                    let result = verge_proto::tunnel::splice(
                        TokioIo::new(upgraded),
                        ends.inbound,
                        ends.outbound,
                    )
                    .await;
                    match result {
                        Ok(spliced) => debug!(?spliced, "tunnel closed"),
                        Err(error) => debug!(%error, "tunnel ended"),
                    }
                }
                .instrument(span),
            );
            Ok(established())
        }
        Target::Stream(stream) => {
            verge_runtime::tasks::spawn(
                "CONNECT via peer",
                async move {
                    if let Ok(upgraded) = on_upgrade.await {
                        let mut upgraded = TokioIo::new(upgraded);
                        let mut stream = stream;
                        let _ = tokio::io::copy_bidirectional(&mut upgraded, &mut stream).await;
                    }
                }
                .instrument(span),
            );
            Ok(established())
        }
        Target::Dial(address) => {
            let dialed = tokio::time::timeout(
                state.config.dial_timeout,
                TcpStream::connect(address.as_str()),
            )
            .await;
            let tcp = match dialed {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(error)) => {
                    return Ok(refuse(
                        StatusCode::BAD_GATEWAY,
                        &format!("cannot dial {address}: {error}"),
                    ));
                }
                Err(_elapsed) => {
                    return Ok(refuse(
                        StatusCode::GATEWAY_TIMEOUT,
                        &format!("dialling {address} timed out"),
                    ));
                }
            };
            verge_runtime::tasks::spawn(
                "CONNECT dial",
                async move {
                    if let Ok(upgraded) = on_upgrade.await {
                        let mut upgraded = TokioIo::new(upgraded);
                        let mut tcp = tcp;
                        let _ = tokio::io::copy_bidirectional(&mut upgraded, &mut tcp).await;
                    }
                }
                .instrument(span),
            );
            Ok(established())
        }
        Target::Offline => Ok(offline(&host)),
        Target::OfflineAddress(Some(node)) => Ok(offline(&node)),
        Target::OfflineAddress(None) => Ok(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "no cloudhub replica holds a session for stream address {host}, and no edge \
                 Node is known to have it"
            ),
        )),
        Target::NotHere => Ok(refuse(
            StatusCode::NOT_FOUND,
            &format!("node {host} has no session on this replica"),
        )),
        Target::Refused(reason) => {
            info!(%host, port, %reason, "CONNECT refused");
            Ok(refuse(StatusCode::FORBIDDEN, &reason))
        }
        Target::Failed(reason) => {
            warn!(%host, port, %reason, "CONNECT failed");
            Ok(refuse(StatusCode::BAD_GATEWAY, &reason))
        }
    }
}

/// `200` with no body: the tunnel is up (the API server fails a dial when anything follows
/// the response head before its TLS hello).
fn established() -> Response<Empty<Bytes>> {
    Response::new(Empty::new())
}

/// `503` for edge node `node`, which no replica holds a session for.
fn offline(node: &str) -> Response<Empty<Bytes>> {
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("edge node {node} is offline: no cloudhub replica holds its session"),
    )
}

/// A response with `status` and `reason` as its reason phrase (what the API server
/// reports), made printable.
pub(crate) fn refuse(status: StatusCode, reason: &str) -> Response<Empty<Bytes>> {
    let printable: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    if let Ok(phrase) = ReasonPhrase::try_from(printable.into_bytes()) {
        response.extensions_mut().insert(phrase);
    }
    response
}
