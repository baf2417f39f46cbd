//! The client side for nodes and controllers that already hold the Verge CA certificate.

use std::sync::Arc;

use rustls::client::ClientConfig;
use rustls::{RootCertStore, client::WebPkiServerVerifier};

use super::{ALPN_H2, PROTOCOL_VERSIONS, crypto_provider};
use crate::error::{Error, Result};
use crate::pem_io::{certs_from_pem, private_key_from_pem};
use crate::secret::PrivateKeyPem;

/// The certificate chain and key a client presents.
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    /// Leaf certificate first, PEM.
    pub cert_chain_pem: &'a str,
    /// The leaf's private key, PEM.
    pub key_pem: &'a PrivateKeyPem,
}

/// A client configuration (ring, TLS 1.2+1.3, ALPN `h2`) trusting only the CA certificates of
/// `ca_pem` and presenting `identity` when given. The server name the caller connects with must
/// be one of the serving certificate's subject alternative names.
///
/// # Errors
/// PEM errors, [`Error::Tls`] for an unusable CA or key, [`Error::KeyMismatch`].
pub fn client_config(ca_pem: &str, identity: Option<ClientIdentity<'_>>) -> Result<ClientConfig> {
    let provider = crypto_provider();
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(ca_pem)? {
        roots.add(cert).map_err(|source| Error::Tls {
            context: "adding the CA",
            source,
        })?;
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(Error::Verifier)?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(|source| Error::Tls {
            context: "selecting TLS versions",
            source,
        })?
        .with_webpki_verifier(verifier);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let chain = certs_from_pem(identity.cert_chain_pem)?;
            let key = private_key_from_pem(identity.key_pem)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|source| match source {
                    rustls::Error::InconsistentKeys(_) => Error::KeyMismatch,
                    source => Error::Tls {
                        context: "loading the client certificate",
                        source,
                    },
                })?
        }
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}
