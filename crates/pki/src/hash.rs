//! kubeadm's CA certificate hash (`--discovery-token-ca-cert-hash`): `sha256:` followed by the
//! lowercase hex SHA-256 of the CA certificate's DER-encoded SubjectPublicKeyInfo.
//!
//! Hashing the public key rather than the whole certificate means a CA certificate re-issued
//! for the same key keeps its hash, exactly as with kubeadm. Operators can compute it with
//! `openssl x509 -pubkey -noout -in ca.crt | openssl pkey -pubin -outform der | sha256sum`.

use ring::digest::{SHA256, digest};
use subtle::ConstantTimeEq;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::error::{Error, Result};
use crate::pem_io::cert_from_pem;

/// The prefix of a CA certificate hash.
pub const CA_HASH_PREFIX: &str = "sha256:";

/// The CA hash of the first certificate in `cert_pem`.
///
/// # Errors
/// [`Error::NoPem`]/[`Error::Pem`] for bad PEM, [`Error::Certificate`] for bad X.509.
pub fn ca_cert_hash(cert_pem: &str) -> Result<String> {
    ca_cert_hash_der(&cert_from_pem(cert_pem)?)
}

/// The CA hash of a DER certificate.
///
/// # Errors
/// [`Error::Certificate`].
pub fn ca_cert_hash_der(cert_der: &[u8]) -> Result<String> {
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(crate::cert_info::x509_error)?;
    Ok(spki_hash(cert.public_key().raw))
}

/// `sha256:<hex>` of DER SubjectPublicKeyInfo bytes.
pub(crate) fn spki_hash(spki_der: &[u8]) -> String {
    let sum = digest(&SHA256, spki_der);
    let mut out = String::with_capacity(CA_HASH_PREFIX.len() + 64);
    out.push_str(CA_HASH_PREFIX);
    for byte in sum.as_ref() {
        out.push(hex_digit(byte >> 4));
        out.push(hex_digit(byte & 0x0f));
    }
    out
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(nibble & 0x0f)])
}

/// Normalizes a pinned hash as an operator may type it (`sha256:` prefix, hex in either case).
///
/// # Errors
/// [`Error::MalformedCaHash`] unless it is `sha256:` and 64 hex digits.
pub fn parse_ca_hash(given: &str) -> Result<String> {
    let malformed = || Error::MalformedCaHash {
        given: given.to_owned(),
    };
    let hex = given.strip_prefix(CA_HASH_PREFIX).ok_or_else(malformed)?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(malformed());
    }
    Ok(format!("{CA_HASH_PREFIX}{}", hex.to_ascii_lowercase()))
}

/// Checks that the CA certificate in `cert_pem` has the pinned hash `expected`.
///
/// # Errors
/// [`Error::MalformedCaHash`] for a bad `expected`, [`Error::CaHashMismatch`] when the hashes
/// differ, or the errors of [`ca_cert_hash`].
pub fn verify_ca_hash(cert_pem: &str, expected: &str) -> Result<()> {
    verify_ca_hash_der(&cert_from_pem(cert_pem)?, expected)
}

/// [`verify_ca_hash`] for a DER certificate.
///
/// # Errors
/// As [`verify_ca_hash`].
pub fn verify_ca_hash_der(cert_der: &[u8], expected: &str) -> Result<()> {
    let expected = parse_ca_hash(expected)?;
    let actual = ca_cert_hash_der(cert_der)?;
    if bool::from(actual.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(Error::CaHashMismatch { expected, actual })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_format_is_checked() {
        let good = format!("sha256:{}", "AB".repeat(32));
        assert_eq!(
            parse_ca_hash(&good).ok(),
            Some(format!("sha256:{}", "ab".repeat(32)))
        );
        for bad in [
            "",
            "sha256:",
            "md5:00",
            &format!("sha256:{}", "g".repeat(64)),
            &"a".repeat(64),
        ] {
            assert!(
                matches!(parse_ca_hash(bad), Err(Error::MalformedCaHash { .. })),
                "{bad}"
            );
        }
    }
}
