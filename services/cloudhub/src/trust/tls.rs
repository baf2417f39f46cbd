//! TLS on cloudhub's listeners (rustls through tokio-rustls, served by tonic with
//! `serve_with_incoming`, so peer certificates reach the services as `TlsConnectInfo`):
//!
//! - EdgeHub: mutual TLS; a client certificate issued by the Verge CA is required, so
//!   plaintext and certificate-less connections fail in the handshake.
//! - ControllerHub and Join: server authentication only (controllers authenticate with a
//!   service-account token, joining nodes with a bootstrap token).
//!
//! All share one serving certificate issued from the Verge CA for `trust.serverSans`,
//! reissued at 80 % of its lifetime ([`ServerTls::rotate`]): new handshakes get the new
//! certificate and established sessions are not dropped. At most `trust.maxHandshakes`
//! handshakes run at once per listener, each bounded by `trust.handshakeTimeout`.
//!
//! EdgeHub issues stateless TLS session tickets ([`SESSION_TICKET_LIFETIME`]), so a node
//! that reconnects resumes its session without a certificate signature and verification;
//! the keys are in this process's memory only. A resumed session carries the client
//! certificate of the handshake that made the ticket, which rustls does not verify again:
//! [`check_peer_validity`] checks it on every EdgeHub call.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::server::ProducesTickets;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_pki::{Ca, CertInfo, RENEW_FRACTION, ReloadableServerCert};

use super::{Trust, TrustConfig, TrustError};

/// The serving certificate and the two server configurations built on it.
#[derive(Debug, Clone)]
pub struct ServerTls {
    cert: Arc<ReloadableServerCert>,
    mutual: Arc<ServerConfig>,
    server_only: Arc<ServerConfig>,
}

impl ServerTls {
    /// Issues a serving certificate from `ca` for `config.server_sans` and builds the
    /// configurations.
    ///
    /// # Errors
    /// [`TrustError::Pki`] when issuing or building fails.
    pub fn new(ca: &Ca, config: &TrustConfig) -> Result<Self, TrustError> {
        let cert = Arc::new(ReloadableServerCert::new(serving_key(ca, config)?));
        let client_ca = [ca.cert_der().clone()];
        let mut mutual = verge_pki::tls::server_config(cert.clone(), &client_ca, true)?;
        mutual.ticketer = session_ticketer()?;
        let server_only = verge_pki::tls::server_config(cert.clone(), &[], false)?;
        Ok(Self {
            cert,
            mutual: Arc::new(mutual),
            server_only: Arc::new(server_only),
        })
    }

    /// The configuration requiring a client certificate from the Verge CA (EdgeHub), with
    /// session tickets ([`SESSION_TICKET_LIFETIME`]).
    pub fn mutual(&self) -> Arc<ServerConfig> {
        self.mutual.clone()
    }

    /// A configuration on the same (rotating) serving certificate that requires a client
    /// certificate issued by one of `client_cas` (the streams CONNECT listener).
    ///
    /// # Errors
    /// [`TrustError::Pki`] when a CA is unusable.
    pub fn with_client_cas(
        &self,
        client_cas: &[rustls::pki_types::CertificateDer<'static>],
    ) -> Result<Arc<ServerConfig>, TrustError> {
        Ok(Arc::new(verge_pki::tls::server_config(
            self.cert.clone(),
            client_cas,
            true,
        )?))
    }

    /// The configuration without client authentication (ControllerHub, Join).
    pub fn server_only(&self) -> Arc<ServerConfig> {
        self.server_only.clone()
    }

    /// Reissues the serving certificate at 80 % of its lifetime, for ever, until `shutdown`.
    /// A failed reissue is retried after a minute (the current certificate stays).
    pub async fn rotate(self, trust: Arc<Trust>, shutdown: CancellationToken) {
        let (ca, config) = (trust.ca(), trust.config());
        loop {
            let key = self.cert.current();
            let renew_at = key
                .end_entity_cert()
                .ok()
                .and_then(|der| CertInfo::parse_der(der).ok())
                .map_or_else(SystemTime::now, |info| info.renew_at(RENEW_FRACTION));
            let wait = renew_at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
                .max(Duration::from_secs(1));
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            match serving_key(ca, config) {
                Ok(key) => {
                    self.cert.replace(key);
                    info!("serving certificate reissued");
                }
                Err(error) => {
                    warn!(%error, "cannot reissue the serving certificate; retrying in 1m");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(60)) => {}
                    }
                }
            }
        }
    }
}

/// The lifetime of an EdgeHub TLS session ticket, as the edge is told in the ticket (a
/// rustls client offers no older one). It is that of rustls' `Ticketer` of the ring
/// provider: a new ChaCha20-Poly1305 key at the first handshake 6 hours after the last
/// change, the previous key still decrypts, so under steady traffic a ticket is accepted
/// for 6 to 12 hours after it was issued. Tickets are stateless: the server keeps no
/// per-node state, only the two keys, in memory (a restarted or another replica makes a
/// full handshake). Whatever a ticket's age, its certificate must still be valid
/// ([`check_peer_validity`]).
pub const SESSION_TICKET_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// The session ticket encrypter of EdgeHub (see [`SESSION_TICKET_LIFETIME`]).
fn session_ticketer() -> Result<Arc<dyn ProducesTickets>, TrustError> {
    rustls::crypto::ring::Ticketer::new().map_err(|source| {
        TrustError::Pki(verge_pki::Error::Tls {
            context: "making the session ticket keys",
            source,
        })
    })
}

/// Checks that the client certificate `leaf` (DER) of `who` is within its validity window
/// at `now`. rustls verifies the certificate in a full handshake only: a session resumed
/// from a ticket carries the certificate of the handshake that made the ticket, and an
/// established connection outlives the moment it was verified.
///
/// # Errors
/// [`TrustError::CertificateNotCurrent`] when it expired or is not yet valid,
/// [`TrustError::NoClientCertificate`] when it cannot be parsed.
pub fn check_peer_validity(leaf: &[u8], who: &str, now: SystemTime) -> Result<(), TrustError> {
    let info =
        CertInfo::parse_der(leaf).map_err(|e| TrustError::NoClientCertificate(e.to_string()))?;
    info.check_valid_at(now)
        .map_err(|e| TrustError::CertificateNotCurrent {
            who: who.to_owned(),
            reason: e.to_string(),
        })
}

/// A new serving certificate and key.
fn serving_key(
    ca: &Ca,
    config: &TrustConfig,
) -> Result<Arc<rustls::sign::CertifiedKey>, TrustError> {
    // The pod's own address too, which other replicas dial (streams peers).
    let mut sans = config.server_sans.clone();
    if let Ok(ip) = std::env::var("POD_IP")
        && !ip.is_empty()
        && !sans.contains(&ip)
    {
        sans.push(ip);
    }
    let issued = ca.issue_serving("cloudhub", &sans, config.server_cert_validity)?;
    Ok(issued.certified_key()?)
}

/// Accepted TLS connections of `listener` for tonic's `serve_with_incoming`: at most
/// `max_handshakes` handshakes at once, each bounded by `timeout`; failed handshakes
/// (plaintext, no or a foreign client certificate) are logged and dropped. Ends when
/// `shutdown` is cancelled or the consumer is gone.
///
/// The accept loop never waits for a handshake slot: a connection accepted while all slots
/// are taken waits for one (at most `timeout`) in its own task. Accepting only when a slot
/// is free would leave a storm of reconnecting edges in the kernel's accept queue, whose
/// overflow drops their SYNs, and each dropped SYN costs its edge a retransmission 1, 3, 7,
/// 15, 31 s later.
pub fn incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    trust: &TrustConfig,
    name: &'static str,
    shutdown: CancellationToken,
) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let (tx, rx) = mpsc::channel(16);
    let acceptor = TlsAcceptor::from(config);
    let permits = Arc::new(Semaphore::new(trust.max_handshakes));
    let timeout = trust.handshake_timeout;
    verge_runtime::tasks::spawn("tls accept", async move {
        loop {
            let (tcp, peer) = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        warn!(server = name, %error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, permits) = (acceptor.clone(), tx.clone(), permits.clone());
            verge_runtime::tasks::spawn("tls handshake", async move {
                let Ok(Ok(permit)) = tokio::time::timeout(timeout, permits.acquire_owned()).await
                else {
                    debug!(server = name, %peer, "no TLS handshake slot within the timeout");
                    return;
                };
                let handshake = tokio::time::timeout(timeout, acceptor.accept(tcp)).await;
                drop(permit);
                match handshake {
                    Ok(Ok(stream)) => {
                        let resumed = stream.get_ref().1.handshake_kind()
                            == Some(rustls::HandshakeKind::Resumed);
                        crate::metrics::global().handshake(name, resumed);
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(error)) => {
                        debug!(server = name, %peer, %error, "TLS handshake refused");
                    }
                    Err(_elapsed) => debug!(server = name, %peer, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_edgehub_issues_stateless_session_tickets() {
        let trust = Trust::for_tests();
        let tls = ServerTls::new(trust.ca(), trust.config()).expect("server TLS");
        let mutual = tls.mutual();
        assert!(mutual.ticketer.enabled());
        assert_eq!(
            u64::from(mutual.ticketer.lifetime()),
            SESSION_TICKET_LIFETIME.as_secs()
        );
        assert!(!tls.server_only().ticketer.enabled());
    }

    #[test]
    fn a_peer_certificate_must_be_valid_now() {
        let trust = Trust::for_tests();
        let issued = trust
            .ca()
            .issue_client(
                "system:node:edge-1",
                Some("system:nodes"),
                Duration::from_secs(60),
            )
            .expect("certificate");
        let der = verge_pki::pem_io::cert_from_pem(&issued.cert_pem).expect("DER");
        let info = CertInfo::parse_der(&der).expect("parses");
        check_peer_validity(&der, "node edge-1", SystemTime::now()).expect("valid now");
        let after = info.not_after + Duration::from_secs(1);
        let error = check_peer_validity(&der, "node edge-1", after).expect_err("expired");
        assert!(matches!(error, TrustError::CertificateNotCurrent { .. }));
        let message = error.to_string();
        assert!(
            message.contains("node edge-1") && message.contains("certificate expired at"),
            "{message}"
        );
        let before = info.not_before - Duration::from_secs(1);
        let error = check_peer_validity(&der, "node edge-1", before).expect_err("not yet valid");
        assert!(error.to_string().contains("not valid before"), "{error}");
        assert!(matches!(
            check_peer_validity(b"not DER", "x", SystemTime::now()),
            Err(TrustError::NoClientCertificate(_))
        ));
    }
}
