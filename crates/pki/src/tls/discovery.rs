//! `edgecore join` without `--ca-cert-hash`: the CA certificate is fetched over a connection
//! whose server is not verified, and trusted only after the bootstrap token's MAC over it
//! checks out ([`crate::token::verify_ca_mac`]), as kubeadm trusts a `cluster-info` signed
//! with the token. Nothing secret is sent on such a connection: the request carries only
//! the token's public id.

use std::sync::Arc;

use rustls::client::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::{ALPN_H2, PROTOCOL_VERSIONS, crypto_provider};
use crate::error::{Error, Result};

/// A client configuration (ALPN `h2`) that accepts any server certificate (the handshake
/// signature is still checked), for fetching the MAC-authenticated CA certificate only.
///
/// # Errors
/// [`Error::Tls`] (not expected).
pub fn discovery_client_config() -> Result<ClientConfig> {
    let mut config = unverified_client_config()?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// A client configuration (no ALPN, no client certificate) that accepts any server
/// certificate for any name but still verifies the handshake signatures: the peer must hold
/// the key of the certificate it sends. For [`discovery_client_config`], and for HTTPS probes,
/// which the kubelet runs with `InsecureSkipVerify` (a probe asks "does the container answer",
/// not "is it who it claims to be").
///
/// # Errors
/// [`Error::Tls`] (not expected).
pub fn unverified_client_config() -> Result<ClientConfig> {
    let provider = crypto_provider();
    Ok(ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(|source| Error::Tls {
            context: "selecting TLS versions",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer { provider }))
        .with_no_client_auth())
}

/// Accepts every server certificate; checks handshake signatures.
#[derive(Debug)]
struct AnyServer {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
