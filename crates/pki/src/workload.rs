//! Keys of workload certificates made on the node for its pods (the kubelet's podcertificate
//! manager, `generateKeyAndProof`, for `podCertificate` projected volumes): a private key of
//! the pod's `keyType` as PKCS#8 PEM, and a stub PKCS#10 request signed with it (empty
//! subject, no extensions), which the PodCertificateRequest carries as proof of possession.
//! The key never leaves the node.
//!
//! Key types: `ECDSAP256`, `ECDSAP384` and `ED25519`, the ones ring signs with. `RSA3072`,
//! `RSA4096` and `ECDSAP521`, which the kubelet also makes, are refused
//! ([`Error::UnsupportedKeyType`]): ring generates neither RSA nor P-521 keys.

use std::str::FromStr;

use rcgen::{CertificateParams, DistinguishedName, KeyPair};

use crate::error::{Error, Result};
use crate::secret::PrivateKeyPem;

/// A `keyType` of a `podCertificate` projection edged can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKeyType {
    /// `ECDSAP256`: ECDSA on P-256, signed with SHA-256.
    EcdsaP256,
    /// `ECDSAP384`: ECDSA on P-384, signed with SHA-384.
    EcdsaP384,
    /// `ED25519`.
    Ed25519,
}

impl FromStr for WorkloadKeyType {
    type Err = Error;

    /// Parses a projection's `keyType`.
    ///
    /// # Errors
    /// [`Error::UnsupportedKeyType`] for `RSA3072`, `RSA4096`, `ECDSAP521`;
    /// [`Error::UnknownKeyType`] for anything else.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ECDSAP256" => Ok(Self::EcdsaP256),
            "ECDSAP384" => Ok(Self::EcdsaP384),
            "ED25519" => Ok(Self::Ed25519),
            "RSA3072" | "RSA4096" | "ECDSAP521" => Err(Error::UnsupportedKeyType(s.to_owned())),
            other => Err(Error::UnknownKeyType(other.to_owned())),
        }
    }
}

/// A new workload key and its proof of possession.
#[derive(Debug)]
pub struct WorkloadKey {
    /// The private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, LF line endings).
    pub key: PrivateKeyPem,
    /// The stub PKCS#10 request (DER): empty subject, no attributes, signed with the key.
    pub stub_csr_der: Vec<u8>,
}

/// Generates a key of `key_type` and its stub request.
///
/// # Errors
/// [`Error::Rcgen`] if the system random source or signing fails.
pub fn generate(key_type: WorkloadKeyType) -> Result<WorkloadKey> {
    let algorithm = match key_type {
        WorkloadKeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        WorkloadKeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        WorkloadKeyType::Ed25519 => &rcgen::PKCS_ED25519,
    };
    let rcgen = |action| move |source| Error::Rcgen { action, source };
    let key = KeyPair::generate_for(algorithm).map_err(rcgen("generating a workload key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(rcgen("signing the stub certificate request"))?;
    Ok(WorkloadKey {
        key: PrivateKeyPem::new(key.serialize_pem()),
        stub_csr_der: csr.der().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use x509_parser::prelude::FromDer as _;

    use super::*;

    #[test]
    fn key_types_parse_like_the_api() {
        assert_eq!(
            "ECDSAP256".parse::<WorkloadKeyType>().ok(),
            Some(WorkloadKeyType::EcdsaP256)
        );
        assert_eq!(
            "ED25519".parse::<WorkloadKeyType>().ok(),
            Some(WorkloadKeyType::Ed25519)
        );
        assert!(matches!(
            "RSA4096".parse::<WorkloadKeyType>(),
            Err(Error::UnsupportedKeyType(_))
        ));
        assert!(matches!(
            "DSA".parse::<WorkloadKeyType>(),
            Err(Error::UnknownKeyType(_))
        ));
    }

    #[test]
    fn stub_requests_are_empty_and_signed_by_the_key() {
        for key_type in [
            WorkloadKeyType::EcdsaP256,
            WorkloadKeyType::EcdsaP384,
            WorkloadKeyType::Ed25519,
        ] {
            let made = generate(key_type).expect("generate");
            assert!(
                made.key
                    .expose()
                    .starts_with("-----BEGIN PRIVATE KEY-----\n")
            );
            let (rest, csr) =
                x509_parser::certification_request::X509CertificationRequest::from_der(
                    &made.stub_csr_der,
                )
                .expect("PKCS#10");
            assert!(rest.is_empty());
            csr.verify_signature().expect("signed by its key");
            let info = &csr.certification_request_info;
            assert_eq!(info.subject.iter().count(), 0, "{key_type:?}");
            let key = KeyPair::from_pem(made.key.expose()).expect("key");
            assert_eq!(
                info.subject_pki.raw,
                rcgen::PublicKeyData::subject_public_key_info(&key).as_slice()
            );
        }
    }
}
