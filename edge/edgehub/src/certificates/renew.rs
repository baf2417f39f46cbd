//! Certificate rotation (the kubelet's client certificate rotation): at 80 % of the node
//! certificate's lifetime, a new key and a CSR for the same node go to cloudhub's
//! `EdgeHub.RenewCertificate` over a connection authenticated by the current certificate; the
//! new certificate and key replace the files and are used from the next connection on (the
//! running session is not dropped). A failed attempt is retried every minute.

use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use verge_pki::{CertInfo, NodeKey, RENEW_FRACTION};
use verge_proto::hub::RenewRequest;
use verge_proto::hub::edge_hub_client::EdgeHubClient;

use super::{Credentials, Error, Result};
use crate::HubSettings;

/// Delay after a failed renewal.
const RETRY: Duration = Duration::from_secs(60);

/// Renews the node certificate at 80 % of its lifetime, until `shutdown`.
pub async fn renew(config: HubSettings, shutdown: CancellationToken) {
    let credentials = Credentials::of(&config);
    loop {
        let wait = match credentials.load() {
            Ok(loaded) => loaded
                .info
                .renew_at(RENEW_FRACTION)
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO),
            Err(error) => {
                warn!(%error, "cannot read the node certificate");
                RETRY
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if let Err(error) = renew_once(&config, &credentials).await {
            warn!(%error, "certificate renewal failed; retrying in 1m");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}

/// One renewal against `edgeHub.server`.
///
/// # Errors
/// As [`Credentials::client_config`], [`Error::Connect`], [`Error::Refused`], [`Error::Pki`].
pub async fn renew_once(config: &HubSettings, credentials: &Credentials) -> Result<()> {
    let address = config.edge_hub.server.clone();
    let loaded = credentials.load()?;
    let tls = loaded.client_config(&config.node_name)?;
    let ca_pem = loaded.ca_pem;
    let endpoint = verge_proto::transport::endpoint(&address)
        .map_err(|_| Error::Address {
            address: address.clone(),
        })?
        .connect_timeout(config.edge_hub.connect_timeout)
        .timeout(config.edge_hub.connect_timeout);
    let channel =
        verge_proto::transport::connect_tls(endpoint, tls, config.edge_hub.tls_server_name.clone())
            .await
            .map_err(|source| Error::Connect { address, source })?;
    let key = NodeKey::generate()?;
    let csr = key.csr_pem(&config.node_name)?;
    let answer = EdgeHubClient::new(channel)
        .renew_certificate(RenewRequest { csr })
        .await
        .map_err(Error::Refused)?
        .into_inner();
    let info = CertInfo::parse(answer.certificate.as_bytes())?;
    credentials.store(&key.to_pem(), &answer.certificate, &ca_pem)?;
    info!(csr = %answer.csr_name, not_after = ?info.not_after, "node certificate renewed");
    Ok(())
}
