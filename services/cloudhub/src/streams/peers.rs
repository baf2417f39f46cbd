//! The other cloudhub replicas' CONNECT listeners, for CONNECTs that land on a replica
//! without the node's session (the API server dials one address, usually a Service in
//! front of every replica).
//!
//! Each replica publishes its listener in a `coordination.k8s.io` Lease of its own (as
//! kube-apiserver's identity Leases do): one object per replica, renewed every 10 s for
//! 30 s, deleted at shutdown, so nothing is written per node or per request. A replica
//! without the session asks every live peer at once with a forwarded CONNECT
//! ([`super::connect::FORWARDED`]); the one holding the session answers `200` and the
//! others `404`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::select_ok;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::connect::FORWARDED;

/// The label that marks replicas' peer Leases.
pub const PEER_LABEL: &str = "verge.io/cloudhub-streams";
/// The annotation holding a replica's CONNECT listener `host:port`.
pub const ADDRESS_ANNOTATION: &str = "verge.io/streams-address";
/// The subject common name of the client certificate a replica forwards with (issued from
/// the Verge CA at start-up).
pub const PEER_NAME: &str = "verge:cloudhub-peer";
const RENEW: Duration = Duration::from_secs(10);
const LEASE_SECONDS: i32 = 30;
const FIELD_MANAGER: &str = "cloudhub";

/// This replica's Lease and its view of the others.
pub(crate) struct Peers {
    client: kube::Client,
    /// `None`: every namespace (lookups); Leases are written to `home`.
    namespace: Option<String>,
    home: String,
    lease: String,
    replica: String,
    advertise: String,
    tls: Arc<ClientConfig>,
    timeout: Duration,
}

impl Peers {
    /// Peers looked up in `namespace` (`None`: all), this replica published in `home` as
    /// `replica` at `advertise`, forwarding over `tls` with at most `timeout` per lookup.
    pub(crate) fn new(
        client: kube::Client,
        namespace: Option<String>,
        home: String,
        replica: String,
        advertise: String,
        tls: Arc<ClientConfig>,
        timeout: Duration,
    ) -> Self {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        Self {
            client,
            namespace,
            home,
            lease: format!("cloudhub-streams-{}", &suffix[..10]),
            replica,
            advertise,
            tls,
            timeout,
        }
    }

    /// Keeps this replica's Lease renewed until `stop`, then deletes it.
    pub(crate) async fn publish(self: Arc<Self>, stop: CancellationToken) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.home);
        loop {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease.clone()),
                    labels: Some([(PEER_LABEL.to_owned(), "true".to_owned())].into()),
                    annotations: Some(
                        [(ADDRESS_ANNOTATION.to_owned(), self.advertise.clone())].into(),
                    ),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.replica.clone()),
                    lease_duration_seconds: Some(LEASE_SECONDS),
                    renew_time: Some(MicroTime(Timestamp::now())),
                    ..LeaseSpec::default()
                }),
            };
            let params = PatchParams::apply(FIELD_MANAGER).force();
            if let Err(error) = api.patch(&self.lease, &params, &Patch::Apply(&lease)).await {
                warn!(%error, lease = %self.lease, "cannot renew the streams peer Lease");
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(RENEW) => {}
            }
        }
        let _ = api.delete(&self.lease, &DeleteParams::default()).await;
    }

    /// The live peers' addresses (Leases renewed within their duration), not this one's.
    async fn addresses(&self) -> Vec<String> {
        let api: Api<Lease> = match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let leases = match api.list(&ListParams::default().labels(PEER_LABEL)).await {
            Ok(list) => list.items,
            Err(error) => {
                warn!(%error, "cannot list the streams peer Leases");
                return Vec::new();
            }
        };
        let now = Timestamp::now();
        leases
            .into_iter()
            .filter(|l| l.metadata.name.as_deref() != Some(self.lease.as_str()))
            .filter(|l| {
                l.spec.as_ref().is_some_and(|spec| {
                    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
                    spec.renew_time.as_ref().is_some_and(|MicroTime(renewed)| {
                        now.as_second() - renewed.as_second() <= seconds
                    })
                })
            })
            .filter_map(|l| l.metadata.annotations?.remove(ADDRESS_ANNOTATION))
            .collect()
    }

    /// A CONNECT to `target` accepted by the peer holding its session, or `None` when no
    /// live peer accepts within the timeout.
    pub(crate) async fn find(&self, target: &str) -> Option<TlsStream<TcpStream>> {
        let addresses = self.addresses().await;
        if addresses.is_empty() {
            return None;
        }
        let attempts = addresses.iter().map(|address| {
            Box::pin(async move {
                tokio::time::timeout(self.timeout, self.forward(address, target))
                    .await
                    .map_err(|_| format!("{address}: timed out"))?
            })
        });
        match select_ok(attempts).await {
            Ok((stream, _)) => Some(stream),
            Err(reason) => {
                debug!(%target, %reason, "no peer holds the session");
                None
            }
        }
    }

    /// Forwards a CONNECT for `target` to the peer at `address`; the stream once it
    /// answered `200`.
    async fn forward(&self, address: &str, target: &str) -> Result<TlsStream<TcpStream>, String> {
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| format!("{address}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        // The host the peer published: its serving certificate names it (`POD_IP` is among
        // a replica's names, as is 127.0.0.1).
        let host = address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
        let mut tls = TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("{address}: TLS: {e}"))?;
        let request =
            format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{FORWARDED}: 1\r\n\r\n");
        tls.write_all(request.as_bytes())
            .await
            .map_err(|e| format!("{address}: {e}"))?;
        // Read the response head byte by byte: nothing follows it until our side speaks.
        let mut head = Vec::with_capacity(128);
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() > 8192 {
                return Err(format!("{address}: response head too long"));
            }
            let byte = tls.read_u8().await.map_err(|e| format!("{address}: {e}"))?;
            head.push(byte);
        }
        let status_line = String::from_utf8_lossy(&head);
        let status_line = status_line.lines().next().unwrap_or_default();
        if status_line.split_whitespace().nth(1) == Some("200") {
            Ok(tls)
        } else {
            Err(format!("{address}: {status_line}"))
        }
    }
}
