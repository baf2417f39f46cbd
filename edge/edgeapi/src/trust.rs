//! Why a pod trusts the edge API: its serving certificate is signed by the cluster CA, for the
//! `kubernetes` Service's DNS names ([`verge_pki::kubernetes_service_names`]) and cluster IP, so an in-cluster
//! client verifies it with the `ca.crt` of its projected `kube-root-ca.crt` exactly as it
//! verifies the API server, and that `ca.crt` stays the cluster's (what Kubernetes
//! conformance checks).
//!
//! The certificate is asked for over the node's session (`EdgeHub.ServingCertificate`,
//! signer `kubernetes.io/kubelet-serving`, subject `system:node:<node>`): cloudhub approves it
//! only for those names and the Service's current cluster IPs, and kube-controller-manager
//! signs it. It is kept in the node's data directory (`edge-api/serving.{crt,key}`, the key
//! 0600), so the edge API serves across restarts while the link is down; it is asked for
//! again at 80 % of its lifetime once a session is up, and as soon as it no longer chains to
//! the cluster CA the node holds (a rotated CA, or a new cluster) (kube-controller-manager's
//! `--cluster-signing-duration`, a year by default, bounds how long a node that was cut off
//! keeps serving).
//!
//! What it costs: the certificate verifies for the `kubernetes` names with the cluster CA
//! anywhere, so a node whose key is stolen could pose as the API server to a client whose
//! traffic to the cluster IP it can intercept; the node already holds the tokens of its own
//! pods, and the key never leaves it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_edgehub::SessionInfo;
use verge_edgehub::certificates::serving::{ServingCert, Stored};
use verge_pki::ReloadableServerCert;

/// How long after a failed request (or while no session is up) the certificate is asked for
/// again.
pub const RETRY: Duration = Duration::from_secs(10);

/// How often a served certificate is checked for renewal (and against the cluster CA).
pub const RENEWAL_CHECK: Duration = Duration::from_secs(60);

/// The edge API's serving certificate of `node` for the `kubernetes` Service at
/// `cluster_ip` in cluster domain `domain`, kept in `dir` (see the module docs).
pub fn serving_cert(dir: PathBuf, node: &str, cluster_ip: Ipv4Addr, domain: &str) -> ServingCert {
    ServingCert::new(
        dir,
        "serving",
        node,
        verge_pki::kubernetes_service_names(domain),
        vec![IpAddr::V4(cluster_ip)],
    )
}

/// The stored certificate when it has not expired at `now` and, when the cluster CA is known
/// (`cluster_ca`, PEM), is signed by it.
fn usable(cert: &ServingCert, now: SystemTime, cluster_ca: Option<&str>) -> Option<Stored> {
    let stored = cert.stored(now)?;
    let Some(ca) = cluster_ca else {
        return Some(stored);
    };
    let cas = verge_pki::pem_io::certs_from_pem(ca).ok()?;
    let leaf = stored.key.cert.first()?;
    verge_pki::issued_by(leaf, cas.iter().map(AsRef::as_ref)).then_some(stored)
}

/// The first certificate to serve: the stored one while it has not expired and chains to the
/// cluster CA (`cluster_ca()`, when known; even if due for renewal: offline it is all there
/// is), else one asked for as soon as a session is up, tried again every [`RETRY`]. `None` at
/// `stop`.
pub async fn first(
    cert: &ServingCert,
    sessions: &mut watch::Receiver<Option<SessionInfo>>,
    stop: &CancellationToken,
    cluster_ca: impl Fn() -> Option<String>,
) -> Option<Arc<CertifiedKey>> {
    if let Some(stored) = usable(cert, SystemTime::now(), cluster_ca().as_deref()) {
        return Some(stored.key);
    }
    loop {
        let session = sessions.borrow_and_update().clone();
        if let Some(mut session) = session {
            match cert.issue(&mut session.client).await {
                Ok(key) => return Some(key),
                Err(e) => {
                    warn!(error = %verge_runtime::ErrorChain(&e), "edge API: no serving certificate yet");
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(RETRY) => {}
            _ = sessions.changed() => {}
        }
    }
}

/// Keeps `served` current: every [`RENEWAL_CHECK`], a certificate due for renewal, gone, or
/// no longer signed by the cluster CA (`cluster_ca()`) is asked for again while a session is
/// up (failures are logged and tried again after [`RETRY`]); never returns.
pub async fn renew(
    cert: ServingCert,
    sessions: watch::Receiver<Option<SessionInfo>>,
    served: Arc<ReloadableServerCert>,
    cluster_ca: impl Fn() -> Option<String>,
) {
    loop {
        let now = SystemTime::now();
        let due =
            usable(&cert, now, cluster_ca().as_deref()).is_none_or(|stored| now >= stored.renew_at);
        let session = sessions.borrow().clone();
        if due && let Some(mut session) = session {
            match cert.issue(&mut session.client).await {
                Ok(key) => {
                    served.replace(key);
                    info!("edge API: serving certificate renewed");
                }
                Err(e) => {
                    warn!(error = %verge_runtime::ErrorChain(&e), "edge API: serving certificate not renewed");
                }
            }
        }
        let wait = if due { RETRY } else { RENEWAL_CHECK };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use verge_pki::Ca;

    use super::*;

    /// A kept certificate is served only while it chains to the cluster CA the node holds:
    /// after a CA rotation (or on a new cluster) it is asked for again.
    #[test]
    fn a_kept_certificate_of_another_cluster_ca_is_not_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ip = Ipv4Addr::new(10, 96, 0, 1);
        let cert = serving_cert(dir.path().to_owned(), "edge-1", ip, "cluster.local");
        let cluster = Ca::generate("cluster-ca", Duration::from_secs(3600)).expect("CA");
        let other = Ca::generate("cluster-ca", Duration::from_secs(3600)).expect("CA");
        let mut sans = verge_pki::kubernetes_service_names("cluster.local");
        sans.push(ip.to_string());
        let issued = cluster
            .issue_serving("system:node:edge-1", &sans, Duration::from_secs(600))
            .expect("issued");
        verge_pki::pem_io::write_private_key_file(&dir.path().join("serving.key"), &issued.key_pem)
            .expect("key");
        verge_pki::pem_io::write_cert_file(&dir.path().join("serving.crt"), &issued.cert_pem)
            .expect("cert");
        let now = SystemTime::now();
        assert!(usable(&cert, now, Some(cluster.cert_pem())).is_some());
        assert!(usable(&cert, now, None).is_some(), "no CA known yet: kept");
        assert!(usable(&cert, now, Some(other.cert_pem())).is_none());
    }
}
