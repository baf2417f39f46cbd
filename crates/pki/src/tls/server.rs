//! The server side: cloudhub's rustls configuration and its rotatable serving certificate.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use super::{ALPN_H2, PROTOCOL_VERSIONS, crypto_provider};
use crate::error::{Error, Result};

/// A server configuration (ring, TLS 1.2+1.3, ALPN `h2`) serving the certificate `resolver`
/// picks, and verifying client certificates with rustls' `WebPkiClientVerifier` against
/// `client_ca` (chain to one of them, clientAuth extended key usage, validity).
///
/// With `require_client_cert`, a client without a certificate fails the handshake; without
/// it, certificate-less clients are let through (certificates that are presented are still
/// verified), and an empty `client_ca` means no client authentication at all.
///
/// # Errors
/// [`Error::Tls`] for an unusable CA certificate, [`Error::Verifier`] when `client_ca` is
/// empty but client certificates are required.
pub fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
    client_ca: &[CertificateDer<'static>],
    require_client_cert: bool,
) -> Result<ServerConfig> {
    let provider = crypto_provider();
    let verifier = if client_ca.is_empty() && !require_client_cert {
        WebPkiClientVerifier::no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        for cert in client_ca {
            roots.add(cert.clone()).map_err(|source| Error::Tls {
                context: "adding the client CA",
                source,
            })?;
        }
        let builder =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let builder = if require_client_cert {
            builder
        } else {
            builder.allow_unauthenticated()
        };
        builder.build().map_err(Error::Verifier)?
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(|source| Error::Tls {
            context: "selecting TLS versions",
            source,
        })?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// A serving certificate that can be replaced while the server runs.
///
/// Each new handshake gets the certificate current at that moment; established connections
/// keep theirs, so cloudhub rotates its certificate before expiry without dropping sessions.
pub struct ReloadableServerCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadableServerCert {
    /// Starts with `key` (e.g. [`IssuedCert::certified_key`](crate::IssuedCert::certified_key)).
    pub fn new(key: Arc<CertifiedKey>) -> Self {
        Self {
            current: RwLock::new(key),
        }
    }

    /// Serves `key` to every handshake from now on.
    pub fn replace(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = key;
    }

    /// The certificate and key currently served.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ResolvesServerCert for ReloadableServerCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl fmt::Debug for ReloadableServerCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadableServerCert")
            .finish_non_exhaustive()
    }
}
