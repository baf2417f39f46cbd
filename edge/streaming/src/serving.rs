//! The node's kubelet serving certificate: `<dataDir>/pki/kubelet-serving.crt` and `.key`
//! (0600), for the DNS name `<node name>` and the node's stream address (its `Hostname`
//! address, `verge_pki::stream_address`), issued through
//! `EdgeHub.ServingCertificate` (signer `kubernetes.io/kubelet-serving`, as a kubelet with
//! `serverTLSBootstrap`) and renewed at 80 % of its lifetime.

use std::path::PathBuf;
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
    #[error("kubelet serving certificate: {0}")]
    Pki(#[from] verge_pki::Error),
    /// Cloudhub refused or failed.
    #[error("cloudhub refused the kubelet serving certificate: {}", .0.message())]
    Refused(#[from] tonic::Status),
}

/// The serving certificate files of one node.
#[derive(Debug, Clone)]
pub(crate) struct ServingCert {
    dir: PathBuf,
    node: String,
}

impl ServingCert {
    /// The files in `<data_dir>/pki` for `node`.
    pub(crate) fn new(data_dir: &std::path::Path, node: &str) -> Self {
        Self {
            dir: data_dir.join("pki"),
            node: node.to_owned(),
        }
    }

    /// The stored certificate and key when present and not due for renewal at `now`.
    fn stored(&self, now: SystemTime) -> Option<Arc<CertifiedKey>> {
        let chain = read_pem_file(&self.dir.join("kubelet-serving.crt")).ok()?;
        let key = read_private_key_file(&self.dir.join("kubelet-serving.key")).ok()?;
        let info = CertInfo::parse(chain.as_bytes()).ok()?;
        if now >= info.renew_at(RENEW_FRACTION) {
            return None;
        }
        // Issued before stream addresses (for the name alone): the API server now dials the
        // address, so a new certificate is asked for.
        let address = std::net::IpAddr::V6(verge_pki::stream_address(&self.node));
        if !info.ip_addresses.contains(&address) {
            return None;
        }
        verge_pki::certified_key(&chain, &key).ok()
    }

    /// The serving certificate: the stored one, else a new one from cloudhub through
    /// `client` (stored before it is returned).
    ///
    /// # Errors
    /// [`ServingError`] when none is stored and cloudhub does not issue one.
    pub(crate) async fn get(
        &self,
        client: &mut EdgeHubClient<Channel>,
    ) -> Result<Arc<CertifiedKey>, ServingError> {
        if let Some(key) = self.stored(SystemTime::now()) {
            return Ok(key);
        }
        let key = NodeKey::generate()?;
        let csr = key.serving_csr_pem(&self.node)?;
        let issued = client
            .serving_certificate(ServingCertificateRequest { csr })
            .await?
            .into_inner();
        verge_edgehub::certificates::ensure_private_dir(&self.dir)?;
        let pem = key.to_pem();
        write_private_key_file(&self.dir.join("kubelet-serving.key"), &pem)?;
        write_cert_file(&self.dir.join("kubelet-serving.crt"), &issued.certificate)?;
        info!(csr = %issued.csr_name, "kubelet serving certificate issued");
        Ok(verge_pki::certified_key(&issued.certificate, &pem)?)
    }
}
