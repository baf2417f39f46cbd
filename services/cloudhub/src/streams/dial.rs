//! Service connections across the link (`EdgeHub.Dial`, architecture.md §12): an edge pod's
//! TCP connection to a Service endpoint its node does not reach directly (a pod on a cloud
//! node, a pod at another site) arrives over the node's session and leaves from this
//! replica. cloudhub dials only an address and port that are a ready endpoint of the Service
//! the edge named, on that Service's EndpointSlices as this replica's watch sees them; any
//! other request is refused (`PERMISSION_DENIED`) and counted, so an edge pod cannot use
//! cloudhub to reach arbitrary cloud addresses.
//!
//! The EndpointSlices come from one reflector of all namespaces (`list`/`watch`
//! endpointslices, nothing else), started at the first dial, so a replica no edge dials
//! through holds none.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::net::TcpStream;
use tokio::sync::{OnceCell, mpsc};
use tonic::{Status, Streaming};
use tracing::{debug, info, warn};
use verge_proto::hub::{ServiceDial, TunnelFrame};

use crate::Shared;
use crate::metrics;
use crate::streams::StreamsState;
use crate::streams::tunnel::TunnelEnds;
use verge_proto::hub::{CloudFrame, OpenTunnel, cloud_frame};

/// The label tying an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// How long the first dial waits for the EndpointSlice watch's first list.
const CACHE_READY: Duration = Duration::from_secs(10);

/// The EndpointSlices of all namespaces, watched from the first dial on.
#[derive(Default)]
pub(crate) struct ServiceEndpoints {
    store: OnceCell<Store<EndpointSlice>>,
}

impl ServiceEndpoints {
    /// The cache, started (and its first list awaited) on first use.
    async fn store(&self, client: &kube::Client) -> Result<&Store<EndpointSlice>, Status> {
        let store = self
            .store
            .get_or_init(|| async {
                let (reader, writer) = reflector::store();
                let api = kube::Api::<EndpointSlice>::all(client.clone());
                let stream = reflector::reflector(
                    writer,
                    watcher::watcher(api, watcher::Config::default()).default_backoff(),
                );
                verge_runtime::tasks::spawn("endpointslice cache", async move {
                    stream
                        .for_each(|event| async move {
                            if let Err(error) = event {
                                debug!(%error, "endpointslice watch");
                            }
                        })
                        .await;
                });
                reader
            })
            .await;
        tokio::time::timeout(CACHE_READY, store.wait_until_ready())
            .await
            .map_err(|_| Status::unavailable("the EndpointSlice cache is not ready yet"))?
            .map_err(|_| Status::unavailable("the EndpointSlice cache stopped"))?;
        Ok(store)
    }

    /// Whether `dial` names a ready endpoint (address and TCP port) of its Service: `None`
    /// when not, else the endpoint's `nodeName` (`Some(None)` without one).
    async fn allows(
        &self,
        client: &kube::Client,
        dial: &ServiceDial,
    ) -> Result<Option<Option<String>>, Status> {
        let store = self.store(client).await?;
        Ok(store
            .state()
            .iter()
            .find_map(|slice| ready_endpoint(slice, dial)))
    }
}

/// When `slice` belongs to `dial`'s Service and has `dial`'s address as a ready endpoint
/// (`conditions.ready` true or unset) with `dial`'s port as a TCP port: that endpoint's
/// `nodeName`.
fn ready_endpoint(slice: &EndpointSlice, dial: &ServiceDial) -> Option<Option<String>> {
    let ours = slice.metadata.namespace.as_deref() == Some(dial.namespace.as_str())
        && slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .is_some_and(|s| *s == dial.service);
    let port = slice.ports.iter().flatten().any(|p| {
        p.port.and_then(|n| u32::try_from(n).ok()) == Some(dial.port)
            && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
    });
    let wanted = dial.address.parse::<IpAddr>().ok()?;
    if !ours || !port {
        return None;
    }
    slice
        .endpoints
        .iter()
        .flatten()
        .find(|e| {
            e.conditions.as_ref().and_then(|c| c.ready) != Some(false)
                && e.addresses
                    .iter()
                    .any(|a| a.parse::<IpAddr>().ok() == Some(wanted))
        })
        .map(|e| e.node_name.clone())
}

/// Checks the shape of `dial`: DNS-1123 labels, an IP literal, a port in 1..=65535.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the bad field.
pub(crate) fn validate(dial: &ServiceDial) -> Result<SocketAddr, Status> {
    for (field, value) in [("namespace", &dial.namespace), ("service", &dial.service)] {
        if !is_dns1123_label(value) {
            return Err(Status::invalid_argument(format!(
                "ServiceDial.{field} {value:?} is not a DNS-1123 label"
            )));
        }
    }
    let ip: IpAddr = dial.address.parse().map_err(|_| {
        Status::invalid_argument(format!(
            "ServiceDial.address {:?} is not an IP address",
            dial.address
        ))
    })?;
    let port = u16::try_from(dial.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| {
            Status::invalid_argument(format!("ServiceDial.port {} is out of range", dial.port))
        })?;
    Ok(SocketAddr::new(ip, port))
}

/// `IsDNS1123Label`: 1 to 63 lower-case alphanumerics or `-`, starting and ending with an
/// alphanumeric.
fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Serves one `EdgeHub.Dial` of `node` whose first frame was `dial`: checks it against the
/// Service's ready endpoints, connects within `timeout`, and splices `inbound` with the
/// connection; the returned receiver carries the frames back to the edge.
///
/// # Errors
/// `INVALID_ARGUMENT` (malformed), `PERMISSION_DENIED` (not a ready endpoint),
/// `UNAVAILABLE` (no connection in time, or the EndpointSlice cache not ready); each counted
/// in `verge_cloudhub_service_dials_total`.
pub(crate) async fn dial(
    shared: &Shared,
    state: &StreamsState,
    node: &str,
    dial: ServiceDial,
    inbound: Streaming<TunnelFrame>,
) -> Result<mpsc::Receiver<TunnelFrame>, Status> {
    let (endpoints, client) = (&state.endpoints, &state.client);
    let timeout = state.config.dial_timeout;
    let counted = |result: &'static str, status: Status| {
        metrics::global().service_dial(result);
        status
    };
    let target = validate(&dial).map_err(|s| counted("refused", s))?;
    let service = format!("{}/{}", dial.namespace, dial.service);
    let allowed = endpoints
        .allows(client, &dial)
        .await
        .map_err(|s| counted("failed", s))?;
    let Some(endpoint_node) = allowed else {
        warn!(%node, %service, %target, "service dial refused: not a ready endpoint of the Service");
        return Err(counted(
            "refused",
            Status::permission_denied(format!(
                "{target} is not a ready endpoint of Service {service}"
            )),
        ));
    };
    // A pod of another edge node whose session is here: through that node's session.
    if let Some(via) = endpoint_node.filter(|n| n != node)
        && let Some(control) = shared.registry.tunnel_control(&via)
    {
        return relay(state, control, node, &via, dial, inbound)
            .await
            .map_err(|s| counted("failed", s));
    }
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            return Err(counted(
                "failed",
                Status::unavailable(format!("{target} of Service {service}: {error}")),
            ));
        }
        Err(_) => {
            return Err(counted(
                "failed",
                Status::unavailable(format!(
                    "{target} of Service {service}: no connection within {timeout:?}"
                )),
            ));
        }
    };
    let _ = stream.set_nodelay(true);
    metrics::global().service_dial("connected");
    debug!(%node, %service, %target, "service dial connected");
    let (outbound, frames) = mpsc::channel(16);
    let node = node.to_owned();
    verge_runtime::tasks::spawn("service dial splice", async move {
        match verge_proto::tunnel::splice(stream, inbound, outbound).await {
            Ok(spliced) => debug!(%node, %service, %target, ?spliced, "service dial closed"),
            Err(error) => info!(%node, %service, %target, %error, "service dial ended"),
        }
    });
    Ok(frames)
}

/// Carries `inbound` (the dialling node's frames) to a tunnel that edge node `via` opens to
/// its own pod `dial.address:dial.port` (`CloudFrame.open_tunnel` with `dial`), and that
/// tunnel's frames back; the tunnel must arrive within `streams.tunnelTimeout`.
async fn relay(
    state: &StreamsState,
    control: mpsc::Sender<Box<CloudFrame>>,
    node: &str,
    via: &str,
    dial: ServiceDial,
    inbound: Streaming<TunnelFrame>,
) -> Result<mpsc::Receiver<TunnelFrame>, Status> {
    let mut expected = state.tunnels.expect(via);
    let port = dial.port;
    let open = CloudFrame {
        frame: Some(cloud_frame::Frame::OpenTunnel(OpenTunnel {
            tunnel_id: expected.id.clone(),
            port,
            dial: Some(dial),
        })),
    };
    if control.try_send(Box::new(open)).is_err() {
        return Err(Status::unavailable(format!(
            "edge node {via} is busy: too many tunnels are being opened"
        )));
    }
    let timeout = state.config.tunnel_timeout;
    let far: TunnelEnds = match tokio::time::timeout(timeout, &mut expected.arrived).await {
        Ok(Ok(ends)) => ends,
        _ => {
            return Err(Status::unavailable(format!(
                "edge node {via} did not open the tunnel to its pod within {timeout:?}"
            )));
        }
    };
    metrics::global().service_dial("connected");
    debug!(%node, %via, "service dial relayed to the endpoint's node");
    let (outbound, frames) = mpsc::channel(16);
    let (from, to) = (node.to_owned(), via.to_owned());
    verge_runtime::tasks::spawn("service dial relay", async move {
        let (up, down) = tokio::join!(
            forward(inbound, far.outbound),
            forward(far.inbound, outbound)
        );
        debug!(%from, %to, up, down, "service dial relay closed");
    });
    Ok(frames)
}

/// Forwards the `data` frames of `from` to `to` until either ends (dropping `to` ends that
/// direction); the bytes forwarded.
async fn forward(mut from: Streaming<TunnelFrame>, to: mpsc::Sender<TunnelFrame>) -> u64 {
    let mut bytes = 0u64;
    while let Ok(Some(frame)) = from.message().await {
        if let Some(verge_proto::hub::tunnel_frame::Frame::Data(data)) = &frame.frame {
            bytes += data.len() as u64;
            if to.send(frame).await.is_err() {
                break;
            }
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(ready: Option<bool>) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": { "name": "web-abc", "namespace": "shop",
                "labels": { "kubernetes.io/service-name": "web" } },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
            "endpoints": [{ "addresses": ["10.244.1.5"], "conditions": { "ready": ready } }]
        }))
        .expect("slice")
    }

    fn dial(ns: &str, service: &str, address: &str, port: u32) -> ServiceDial {
        ServiceDial {
            namespace: ns.into(),
            service: service.into(),
            address: address.into(),
            port,
        }
    }

    #[test]
    fn only_a_ready_endpoint_of_the_named_service_and_port_is_allowed() {
        let ok = dial("shop", "web", "10.244.1.5", 8080);
        assert!(ready_endpoint(&slice(Some(true)), &ok).is_some());
        assert!(
            ready_endpoint(&slice(None), &ok).is_some(),
            "unset ready is ready"
        );
        assert!(
            ready_endpoint(&slice(Some(false)), &ok).is_none(),
            "not ready"
        );
        for other in [
            dial("shop", "web", "10.244.1.6", 8080),
            dial("shop", "web", "10.244.1.5", 22),
            dial("shop", "db", "10.244.1.5", 8080),
            dial("kube-system", "web", "10.244.1.5", 8080),
            dial("shop", "web", "not-an-ip", 8080),
        ] {
            assert!(
                ready_endpoint(&slice(Some(true)), &other).is_none(),
                "{other:?}"
            );
        }
    }

    #[test]
    fn malformed_dials_are_invalid() {
        assert!(validate(&dial("shop", "web", "10.244.1.5", 8080)).is_ok());
        for bad in [
            dial("", "web", "10.244.1.5", 8080),
            dial("shop", "Web", "10.244.1.5", 8080),
            dial("shop", "web", "example.com", 8080),
            dial("shop", "web", "10.244.1.5", 0),
            dial("shop", "web", "10.244.1.5", 70_000),
        ] {
            let status = validate(&bad).expect_err("invalid");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}");
        }
    }
}
