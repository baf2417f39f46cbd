//! Serving certificates the cluster signs for this node (`EdgeHub.ServingCertificate`:
//! cloudhub turns the CSR into a `certificates.k8s.io/v1` CSR with signer
//! `kubernetes.io/kubelet-serving`, approves it for what the node may serve, and
//! kube-controller-manager signs it with the cluster CA). Two kinds are asked for:
//!
//! - the kubelet's ([`ServingCert::kubelet`]): `<dataDir>/pki/kubelet-serving.{crt,key}`,
//!   for the DNS name `<node name>` and its stream address (its `Hostname` address,
//!   `verge_pki::stream_address`), as a kubelet with `serverTLSBootstrap`;
//! - a Service the node serves to its pods (the edge API at `kubernetes`), for the Service's
//!   DNS names and cluster IP, so a pod verifies it with the cluster CA in its `ca.crt` as
//!   it verifies the API server.
//!
//! Each is kept as two files (the key 0600, in a 0700 directory) and asked for again at 80 %
//! of its lifetime, or when the names it is for changed.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::sign::CertifiedKey;
use tonic::transport::Channel;
use tracing::info;
use verge_pki::pem_io::{
    read_pem_file, read_private_key_file, write_cert_file, write_private_key_file,
};
use verge_pki::{CertInfo, NodeKey, RENEW_FRACTION};
use verge_proto::hub::ServingCertificateRequest;
use verge_proto::hub::edge_hub_client::EdgeHubClient;

/// Why no serving certificate is available.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// Key generation, CSR or file I/O failed.
    #[error("serving certificate: {0}")]
    Pki(#[from] verge_pki::Error),
    /// Cloudhub refused or failed.
    #[error("cloudhub refused the serving certificate: {}", .0.message())]
    Refused(#[from] tonic::Status),
}

/// One serving certificate of this node: its files and the names it is for.
#[derive(Debug, Clone)]
pub struct ServingCert {
    dir: PathBuf,
    stem: String,
    node: String,
    dns_names: Vec<String>,
    ips: Vec<IpAddr>,
}

/// A stored serving certificate.
#[derive(Clone)]
pub struct Stored {
    /// The certificate chain and key, as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// When it is due to be asked for again (80 % of its lifetime).
    pub renew_at: SystemTime,
    /// When it expires (`notAfter`).
    pub not_after: SystemTime,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("renew_at", &self.renew_at)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl ServingCert {
    /// The kubelet serving certificate of `node`, kept in `<data_dir>/pki` (see the module
    /// docs).
    pub fn kubelet(data_dir: &Path, node: &str) -> Self {
        let address = IpAddr::V6(verge_pki::stream_address(node));
        Self::new(
            data_dir.join("pki"),
            "kubelet-serving",
            node,
            vec![node.to_owned()],
            vec![address],
        )
    }

    /// A serving certificate of `node` for `dns_names` and `ips`, kept in
    /// `<dir>/<stem>.crt` and `<dir>/<stem>.key`.
    pub fn new(
        dir: PathBuf,
        stem: &str,
        node: &str,
        dns_names: Vec<String>,
        ips: Vec<IpAddr>,
    ) -> Self {
        Self {
            dir,
            stem: stem.to_owned(),
            node: node.to_owned(),
            dns_names,
            ips,
        }
    }

    fn files(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{}.crt", self.stem)),
            self.dir.join(format!("{}.key", self.stem)),
        )
    }

    /// The stored certificate when it is for exactly these names and not expired at `now`
    /// (it may be due for renewal).
    pub fn stored(&self, now: SystemTime) -> Option<Stored> {
        let (cert, key) = self.files();
        let chain = read_pem_file(&cert).ok()?;
        let key = read_private_key_file(&key).ok()?;
        let info = CertInfo::parse(chain.as_bytes()).ok()?;
        if info.check_valid_at(now).is_err()
            || info.dns_names != self.dns_names
            || info.ip_addresses != self.ips
        {
            return None;
        }
        Some(Stored {
            key: verge_pki::certified_key(&chain, &key).ok()?,
            renew_at: info.renew_at(RENEW_FRACTION),
            not_after: info.not_after,
        })
    }

    /// The certificate: the stored one unless due for renewal at `now`, else a new one
    /// ([`Self::issue`]).
    ///
    /// # Errors
    /// As [`Self::issue`].
    pub async fn get(
        &self,
        client: &mut EdgeHubClient<Channel>,
    ) -> Result<Arc<CertifiedKey>, ServingError> {
        match self.stored(SystemTime::now()) {
            Some(stored) if SystemTime::now() < stored.renew_at => Ok(stored.key),
            _ => self.issue(client).await,
        }
    }

    /// A new certificate from cloudhub through `client`, with a new key; both are stored
    /// before it is returned.
    ///
    /// # Errors
    /// [`ServingError::Pki`] when making the key or CSR or writing the files fails,
    /// [`ServingError::Refused`] when cloudhub does not issue it.
    pub async fn issue(
        &self,
        client: &mut EdgeHubClient<Channel>,
    ) -> Result<Arc<CertifiedKey>, ServingError> {
        let key = NodeKey::generate()?;
        let csr = key.serving_csr_pem_for(&self.node, &self.dns_names, &self.ips)?;
        let issued = client
            .serving_certificate(ServingCertificateRequest { csr })
            .await?
            .into_inner();
        super::ensure_private_dir(&self.dir)?;
        let pem = key.to_pem();
        let (cert_file, key_file) = self.files();
        write_private_key_file(&key_file, &pem)?;
        write_cert_file(&cert_file, &issued.certificate)?;
        info!(csr = %issued.csr_name, stem = %self.stem, "serving certificate issued");
        Ok(verge_pki::certified_key(&issued.certificate, &pem)?)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use verge_pki::Ca;

    use super::*;

    /// A stored certificate is used only for exactly the names it was asked for and while it
    /// has not expired; its renewal time is 80 % of its lifetime.
    #[test]
    fn a_stored_certificate_serves_only_its_own_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::generate("cluster-ca", Duration::from_secs(3600)).expect("CA");
        let names = vec!["kubernetes".to_owned(), "kubernetes.default".to_owned()];
        let ip: IpAddr = "10.96.0.1".parse().expect("ip");
        let cert = ServingCert::new(
            dir.path().to_owned(),
            "serving",
            "edge-1",
            names.clone(),
            vec![ip],
        );
        assert!(
            cert.stored(SystemTime::now()).is_none(),
            "nothing stored yet"
        );
        let sans = [names.clone(), vec![ip.to_string()]].concat();
        let issued = ca
            .issue_serving("system:node:edge-1", &sans, Duration::from_secs(600))
            .expect("issued");
        write_private_key_file(&dir.path().join("serving.key"), &issued.key_pem).expect("key");
        write_cert_file(&dir.path().join("serving.crt"), &issued.cert_pem).expect("cert");
        let stored = cert.stored(SystemTime::now()).expect("stored");
        let lifetime = stored
            .not_after
            .duration_since(SystemTime::now())
            .expect("future");
        assert!(stored.renew_at < stored.not_after && lifetime <= Duration::from_secs(600));
        // Another cluster IP, fewer names, or past notAfter: not this certificate.
        let moved = ServingCert::new(
            dir.path().to_owned(),
            "serving",
            "edge-1",
            names.clone(),
            vec!["10.0.0.1".parse().expect("ip")],
        );
        assert!(moved.stored(SystemTime::now()).is_none());
        let fewer = ServingCert::new(
            dir.path().to_owned(),
            "serving",
            "edge-1",
            names[..1].to_vec(),
            vec![ip],
        );
        assert!(fewer.stored(SystemTime::now()).is_none());
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert!(cert.stored(later).is_none(), "expired");
    }
}
