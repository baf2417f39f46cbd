//! rustls configurations for Verge's gRPC links: ring provider only, TLS 1.2 and 1.3, ALPN `h2`.
//!
//! - [`server`]: cloudhub's [`server_config`] verifying client certificates against the Verge
//!   CA, and [`ReloadableServerCert`] to rotate the serving certificate at runtime.
//! - [`client`]: [`client_config`] for nodes and controllers that hold the CA certificate.
//! - [`pinned`]: [`join_client_config`] for `edgecore join`, which knows only the CA's hash.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;

use crate::error::{Error, Result};
use crate::pem_io::{certs_from_pem, private_key_from_pem};
use crate::secret::PrivateKeyPem;

pub mod client;
mod discovery;
pub mod pinned;
pub mod server;

pub use client::{ClientIdentity, client_config};
pub use discovery::{discovery_client_config, unverified_client_config};
pub use pinned::{join_client_config, pinned_ca_pem};
pub use server::{ReloadableServerCert, server_config};

/// The ALPN protocol gRPC speaks (HTTP/2).
pub const ALPN_H2: &[u8] = b"h2";

/// The TLS versions Verge accepts.
pub(crate) static PROTOCOL_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// rustls' ring crypto provider (Verge never uses aws-lc-rs).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls certificate chain and key from PEM: the chain leaf first, the key PKCS#8, SEC1 or
/// PKCS#1.
///
/// # Errors
/// PEM errors, [`Error::Tls`] for a key ring cannot use, [`Error::KeyMismatch`] when the key
/// is not the leaf's.
pub fn certified_key(chain_pem: &str, key_pem: &PrivateKeyPem) -> Result<Arc<CertifiedKey>> {
    let chain = certs_from_pem(chain_pem)?;
    let key = private_key_from_pem(key_pem)?;
    match CertifiedKey::from_der(chain, key, &crypto_provider()) {
        Ok(certified) => Ok(Arc::new(certified)),
        Err(rustls::Error::InconsistentKeys(_)) => Err(Error::KeyMismatch),
        Err(source) => Err(Error::Tls {
            context: "loading the certificate and key",
            source,
        }),
    }
}
