//! `edgecore join`'s client side: trust a server only if its chain contains the CA whose
//! kubeadm hash was given on the command line (`--ca-cert-hash sha256:…`).
//!
//! kubeadm pins the CA by reading it from an unauthenticated source and comparing hashes. Verge
//! pins it during the handshake instead: the serving chain includes the CA certificate
//! ([`IssuedCert::chain_pem`](crate::IssuedCert::chain_pem)); the verifier picks the chain
//! certificate with the pinned hash and verifies the server's certificate against it as the
//! only trust anchor (chain, validity, server name). So the bootstrap token is only ever sent
//! to a server holding a certificate from the pinned CA. After the handshake,
//! [`pinned_ca_pem`] takes the CA certificate out of the peer's chain for the node to keep.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};

use super::{ALPN_H2, PROTOCOL_VERSIONS, crypto_provider};
use crate::error::{Error, Result};
use crate::hash::{ca_cert_hash_der, parse_ca_hash};
use crate::pem_io::cert_to_pem;

/// A client configuration (no client certificate) that accepts a server only when its
/// presented chain contains a CA certificate with hash `ca_cert_hash` and the server's
/// certificate verifies against that CA for the name connected to.
///
/// # Errors
/// [`Error::MalformedCaHash`], or [`Error::Tls`] (not expected).
pub fn join_client_config(ca_cert_hash: &str) -> Result<ClientConfig> {
    let provider = crypto_provider();
    let verifier = PinnedCaVerifier {
        pin: parse_ca_hash(ca_cert_hash)?,
        provider: provider.clone(),
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(|source| Error::Tls {
            context: "selecting TLS versions",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The PEM of the certificate in a verified peer chain (e.g. `peer_certificates()` after a
/// handshake with [`join_client_config`]) whose hash is `ca_cert_hash`.
///
/// # Errors
/// [`Error::MalformedCaHash`], or [`Error::CaHashMismatch`] when no chain certificate matches.
pub fn pinned_ca_pem(peer_chain: &[CertificateDer<'_>], ca_cert_hash: &str) -> Result<String> {
    let pin = parse_ca_hash(ca_cert_hash)?;
    find_pinned(peer_chain, &pin).map(|cert| cert_to_pem(cert))
}

/// The first chain certificate (after the leaf) with hash `pin`.
fn find_pinned<'c, 'a>(
    chain: &'c [CertificateDer<'a>],
    pin: &str,
) -> Result<&'c CertificateDer<'a>> {
    let mut seen = Vec::new();
    for cert in chain.iter().skip(1) {
        match ca_cert_hash_der(cert) {
            Ok(hash) if hash == pin => return Ok(cert),
            Ok(hash) => seen.push(hash),
            Err(_) => seen.push("<unparsable certificate>".to_owned()),
        }
    }
    Err(Error::CaHashMismatch {
        expected: pin.to_owned(),
        actual: if seen.is_empty() {
            "no CA certificate in the chain".to_owned()
        } else {
            seen.join(", ")
        },
    })
}

/// Verifies a server against the chain certificate whose hash is pinned.
#[derive(Debug)]
struct PinnedCaVerifier {
    pin: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = Vec::with_capacity(intermediates.len() + 1);
        chain.push(end_entity.clone());
        chain.extend(intermediates.iter().cloned());
        let ca = find_pinned(&chain, &self.pin).map_err(|e| {
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
        })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
        webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
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
