//! `edgecore join`: a bootstrap token and a CSR for the node's first certificate
//! (kubeadm's token discovery and the kubelet's TLS bootstrap, in one exchange with cloudhub's
//! Join service).
//!
//! 1. The CA: with `--ca-cert-hash`, the join connection only accepts a server whose chain
//!    holds the CA with that hash. Without it, `GetCa` returns the CA certificate with an
//!    HMAC keyed by the token's secret; the CA is trusted only if the MAC checks out.
//! 2. A new private key is made on the node; only its CSR (`CN=system:node:<name>`,
//!    `O=system:nodes`) is sent, with the token, over TLS verified against that CA.
//! 3. cloudhub approves and signs a CertificateSigningRequest; the certificate, key and CA
//!    are stored (key 0600).

use std::time::{Duration, SystemTime};

use tracing::info;
use verge_pki::token::{BootstrapToken, verify_ca_mac};
use verge_pki::{CertInfo, NodeKey};
use verge_proto::hub::join_client::JoinClient;
use verge_proto::hub::{GetCaRequest, JoinRequest};

use super::{Credentials, Error, Result};
use crate::Config;

/// Bound on connecting to the Join service and on each call.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

/// Cloudhub's Join port when only the EdgeHub address is known.
pub const DEFAULT_JOIN_PORT: u16 = 10002;

/// What `edgecore join` needs.
#[derive(Clone)]
pub struct JoinParams {
    /// The Join service, e.g. `https://cloudhub.example:10002`.
    pub address: String,
    /// The bootstrap token, `<id>.<secret>`.
    pub token: String,
    /// kubeadm-style CA pin, `sha256:<hex>`; optional.
    pub ca_cert_hash: Option<String>,
    /// The node name to ask a certificate for.
    pub node_name: String,
    /// Server name to verify instead of the address's host.
    pub tls_server_name: Option<String>,
}

impl std::fmt::Debug for JoinParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinParams")
            .field("address", &self.address)
            .field("token", &"<redacted>")
            .field("ca_cert_hash", &self.ca_cert_hash)
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// A finished join.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The node name in the certificate.
    pub node: String,
    /// The CertificateSigningRequest (`kubectl get csr <name>`).
    pub csr_name: String,
    /// When the certificate expires.
    pub not_after: SystemTime,
}

/// The Join address of `config`: `edgeHub.joinServer`, else `edgeHub.server`'s host on port
/// 10002.
///
/// # Errors
/// [`Error::Address`] when `edgeHub.server` is not a URI.
pub fn join_address(config: &Config) -> Result<String> {
    if let Some(address) = &config.edge_hub.join_server {
        return Ok(address.clone());
    }
    let server = &config.edge_hub.server;
    let uri: http::Uri = server.parse().map_err(|_| Error::Address {
        address: server.clone(),
    })?;
    let host = uri.host().ok_or_else(|| Error::Address {
        address: server.clone(),
    })?;
    Ok(format!("https://{host}:{DEFAULT_JOIN_PORT}"))
}

/// Runs the join described by `params` and stores the credentials in `credentials`.
///
/// # Errors
/// [`Error::Token`] for a malformed token, [`Error::Connect`] when cloudhub cannot be reached
/// or its certificate is not from the pinned CA, [`Error::UnverifiedCa`] when the CA lacks the
/// token's proof, [`Error::Refused`] with cloudhub's reason (unknown or expired token, a name
/// owned by a non-edge Node), [`Error::Pki`].
pub async fn join(params: &JoinParams, credentials: &Credentials) -> Result<Joined> {
    let token = BootstrapToken::parse(&params.token)?;
    let endpoint = verge_proto::transport::endpoint(&params.address)
        .map_err(|_| Error::Address {
            address: params.address.clone(),
        })?
        .connect_timeout(JOIN_TIMEOUT)
        .timeout(JOIN_TIMEOUT);
    let connect = |config| {
        let endpoint = endpoint.clone();
        let name = params.tls_server_name.clone();
        async move {
            verge_proto::transport::connect_tls(endpoint, std::sync::Arc::new(config), name)
                .await
                .map(JoinClient::new)
                .map_err(|source| Error::Connect {
                    address: params.address.clone(),
                    source,
                })
        }
    };
    let mut client = match &params.ca_cert_hash {
        Some(hash) => connect(verge_pki::tls::join_client_config(hash)?).await?,
        None => {
            let mut discovery = connect(verge_pki::tls::discovery_client_config()?).await?;
            let answer = discovery
                .get_ca(GetCaRequest {
                    token_id: token.id().to_owned(),
                })
                .await
                .map_err(Error::Refused)?
                .into_inner();
            let der = verge_pki::pem_io::cert_from_pem(&answer.ca_certificate)?;
            if !verify_ca_mac(&token, &der, &answer.token_mac) {
                return Err(Error::UnverifiedCa);
            }
            connect(verge_pki::tls::client_config(&answer.ca_certificate, None)?).await?
        }
    };
    let key = NodeKey::generate()?;
    let csr = key.csr_pem(&params.node_name)?;
    let answer = client
        .join_node(JoinRequest {
            token: token.expose().to_string(),
            csr,
        })
        .await
        .map_err(Error::Refused)?
        .into_inner();
    if let Some(hash) = &params.ca_cert_hash {
        verge_pki::verify_ca_hash(&answer.ca_certificate, hash)?;
    }
    let info = CertInfo::parse(answer.certificate.as_bytes())?;
    credentials.store(&key.to_pem(), &answer.certificate, &answer.ca_certificate)?;
    info!(node = %params.node_name, csr = %answer.csr_name, "joined: node certificate stored");
    Ok(Joined {
        node: params.node_name.clone(),
        csr_name: answer.csr_name,
        not_after: info.not_after,
    })
}
