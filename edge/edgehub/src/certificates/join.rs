//! `edgecore join`: a bootstrap token and a CSR for the node's first certificate
//! (kubeadm's token discovery and the kubelet's TLS bootstrap, in one exchange with cloudhub's
//! Join service).
//!
//! 1. The CA: with `--ca-cert-hash`, the join connection only accepts a server whose chain
//!    holds the CA with that hash. Without it, `GetCa` returns the CA certificate with an
//!    HMAC keyed by the token's secret; the CA is trusted only if the MAC checks out. A
//!    cloudhub answers `GetCa` only with `trust.tokenCaDiscovery` (off by default), else
//!    the join fails with [`Error::PinRequired`].
//! 2. A new private key is made on the node; only its CSR (`CN=system:node:<name>`,
//!    `O=system:nodes`) is sent, with the token and the taints the Node is to be created
//!    with (`edged.registerWithTaints`), over TLS verified against that CA.
//! 3. cloudhub approves and signs a CertificateSigningRequest and creates the Node with those
//!    taints; the certificate, key and CA are stored (key 0600).

use std::time::{Duration, SystemTime};

use tracing::info;
use verge_pki::token::{BootstrapToken, verify_ca_mac};
use verge_pki::{CertInfo, NodeKey};
use verge_proto::hub::join_client::JoinClient;
use verge_proto::hub::{GetCaRequest, JoinRequest, Taint};

use super::{Credentials, Error, Result};
use crate::HubSettings;

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
    /// The taints cloudhub creates the Node with (`edged.registerWithTaints`; the kubelet's
    /// `--register-with-taints`, which applies when the Node is created only). cloudhub
    /// checks them as the API server checks a Node's taints and refuses the join otherwise.
    pub register_with_taints: Vec<Taint>,
}

impl std::fmt::Debug for JoinParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinParams")
            .field("address", &self.address)
            .field("token", &"<redacted>")
            .field("ca_cert_hash", &self.ca_cert_hash)
            .field("node_name", &self.node_name)
            .field("register_with_taints", &self.register_with_taints)
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
pub fn join_address(config: &HubSettings) -> Result<String> {
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

/// How long the first connection to cloudhub is retried while nothing answers (a join run
/// right after cloudhub's Service appears, before its endpoints are programmed), as
/// `kubeadm join` retries discovery.
const CONNECT_RETRY_FOR: Duration = Duration::from_secs(60);

/// `connect()`, retried with backoff for [`CONNECT_RETRY_FOR`] while it fails because nothing
/// accepts the connection (refused, reset, timed out); other failures (a certificate that
/// does not verify) return at once.
async fn first_connect<T, F, Fut>(connect: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    use backon::{ExponentialBuilder, Retryable as _};
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(5))
        .with_total_delay(Some(CONNECT_RETRY_FOR))
        .without_max_times();
    connect
        .retry(backoff)
        .when(unreachable)
        .notify(|error, after| {
            tracing::warn!(%error, retry_in = ?after, "cloudhub not reachable yet; retrying");
        })
        .await
}

/// Whether `error` says nothing accepted the connection, or that what answered is not a
/// gRPC server (an HTTP status without `grpc-status`: with unverified discovery any server
/// completes the TLS handshake, e.g. whatever answers at a Service address whose endpoints
/// are not programmed yet).
fn unreachable(error: &Error) -> bool {
    use std::io::ErrorKind;
    if let Error::Refused(status) = error {
        return status.message().starts_with("grpc-status header missing");
    }
    let Error::Connect { source, .. } = error else {
        return false;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::TimedOut
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
            );
        }
        cause = current.source();
    }
    false
}

/// The error of a refused `GetCa`: FAILED_PRECONDITION is a cloudhub without token CA
/// discovery ([`Error::PinRequired`]), anything else a refusal.
fn get_ca_error(status: tonic::Status) -> Error {
    if status.code() == tonic::Code::FailedPrecondition {
        Error::PinRequired(status)
    } else {
        Error::Refused(status)
    }
}

/// Runs the join described by `params` and stores the credentials in `credentials`.
///
/// # Errors
/// [`Error::Token`] for a malformed token, [`Error::Connect`] when cloudhub cannot be reached
/// or its certificate is not from the pinned CA, [`Error::PinRequired`] without a pin when
/// cloudhub offers no token CA discovery, [`Error::UnverifiedCa`] when the CA lacks the
/// token's proof, [`Error::Refused`] with cloudhub's reason (unknown or expired token, a name
/// owned by a non-edge Node, an invalid taint), [`Error::Pki`].
pub async fn join(params: &JoinParams, credentials: &Credentials) -> Result<Joined> {
    let token = BootstrapToken::parse(&params.token)?;
    let endpoint = verge_proto::transport::endpoint(&params.address)
        .map_err(|_| Error::Address {
            address: params.address.clone(),
        })?
        .connect_timeout(JOIN_TIMEOUT)
        .timeout(JOIN_TIMEOUT);
    let connect = |config: rustls::ClientConfig| {
        let endpoint = endpoint.clone();
        let name = params.tls_server_name.clone();
        let config = std::sync::Arc::new(config);
        async move {
            verge_proto::transport::connect_tls(endpoint, config, name)
                .await
                .map(JoinClient::new)
                .map_err(|source| Error::Connect {
                    address: params.address.clone(),
                    source,
                })
        }
    };
    let mut client = match &params.ca_cert_hash {
        Some(hash) => {
            let config = verge_pki::tls::join_client_config(hash)?;
            first_connect(|| connect(config.clone())).await?
        }
        None => {
            let config = verge_pki::tls::discovery_client_config()?;
            // Discovery trusts any server until the CA checks out: asking for the CA is part
            // of reaching cloudhub, retried with the connection.
            let answer = first_connect(|| async {
                let mut discovery = connect(config.clone()).await?;
                let request = GetCaRequest {
                    token_id: token.id().to_owned(),
                };
                let answer = discovery.get_ca(request).await.map_err(get_ca_error)?;
                Ok(answer.into_inner())
            })
            .await?;
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
            register_with_taints: params.register_with_taints.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloudhub_without_token_ca_discovery_asks_for_a_pin() {
        let off = get_ca_error(tonic::Status::failed_precondition("discovery is off"));
        assert!(matches!(off, Error::PinRequired(_)), "{off:?}");
        assert!(off.to_string().contains("--ca-cert-hash"), "{off}");
        let refused = get_ca_error(tonic::Status::unauthenticated("unknown token"));
        assert!(matches!(refused, Error::Refused(_)), "{refused:?}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried_and_a_bad_address_is_not() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let address = format!("https://127.0.0.1:{port}");
        let endpoint = verge_proto::transport::endpoint(&address).expect("endpoint");
        let config = verge_pki::tls::discovery_client_config().expect("config");
        let source =
            verge_proto::transport::connect_tls(endpoint, std::sync::Arc::new(config), None)
                .await
                .expect_err("nothing listens");
        assert!(unreachable(&Error::Connect { address, source }));
        assert!(!unreachable(&Error::Address {
            address: "not a uri".into()
        }));
    }

    #[test]
    fn an_answer_that_is_not_grpc_is_retried_and_a_refusal_is_not() {
        let not_grpc = tonic::Status::unimplemented(
            "grpc-status header missing, mapped from HTTP status code 404",
        );
        assert!(unreachable(&Error::Refused(not_grpc)));
        let refused = tonic::Status::unauthenticated("unknown bootstrap token");
        assert!(!unreachable(&Error::Refused(refused)));
    }
}
