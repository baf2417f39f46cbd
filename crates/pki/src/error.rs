//! The crate's [`Error`]: every failure except CSR refusals ([`CsrError`]) and bootstrap-token
//! refusals ([`TokenError`](crate::TokenError)), which have their own enums because callers
//! answer them differently (a refused join, not a broken installation).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::csr::CsrError;
use crate::node::SubjectError;
use crate::validity::rfc3339;

/// A `Result` whose error defaults to the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a PKI operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input held no PEM block of the expected label (`CERTIFICATE`, `PRIVATE KEY`, ...).
    #[error("no PEM {label} block found")]
    NoPem {
        /// The PEM label that was looked for.
        label: &'static str,
    },
    /// A PEM block could not be decoded.
    #[error("invalid PEM {label} block")]
    Pem {
        /// The PEM label that was being read.
        label: &'static str,
        /// The decoder's error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A DER certificate could not be parsed as X.509.
    #[error("invalid X.509 certificate")]
    Certificate(#[source] x509_parser::error::X509Error),
    /// Key generation, key parsing or certificate signing failed in rcgen.
    #[error("{action} failed")]
    Rcgen {
        /// What was being done, e.g. `"signing the certificate"`.
        action: &'static str,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// rustls refused a certificate, key or configuration.
    #[error("TLS: {context}")]
    Tls {
        /// What was being done, e.g. `"loading the private key"`.
        context: &'static str,
        /// rustls' error.
        #[source]
        source: rustls::Error,
    },
    /// rustls could not build the client-certificate verifier (e.g. no CA given).
    #[error("cannot build the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// A CA certificate hash is not of the form `sha256:<64 lowercase hex digits>`.
    #[error("malformed CA certificate hash {given:?}: expected sha256:<64 hex digits>")]
    MalformedCaHash {
        /// The hash as given.
        given: String,
    },
    /// The CA certificate's hash is not the pinned one: the peer is not the expected cluster.
    #[error("CA certificate hash mismatch: expected {expected}, the CA presented has {actual}")]
    CaHashMismatch {
        /// The pinned hash.
        expected: String,
        /// The hash of the CA certificate actually seen.
        actual: String,
    },
    /// The certificate given as CA has no `basicConstraints CA:TRUE`.
    #[error("the certificate is not a CA certificate (no basicConstraints CA:TRUE)")]
    NotACa,
    /// The private key does not belong to the certificate.
    #[error("the private key does not match the certificate's public key")]
    KeyMismatch,
    /// A certificate (or the CA that would sign one) is past its `notAfter`.
    #[error("certificate expired at {}", rfc3339(*not_after))]
    Expired {
        /// The certificate's `notAfter`.
        not_after: SystemTime,
    },
    /// A certificate's `notBefore` is still in the future.
    #[error("certificate not valid before {}", rfc3339(*not_before))]
    NotYetValid {
        /// The certificate's `notBefore`.
        not_before: SystemTime,
    },
    /// A requested validity is zero or too large to represent.
    #[error("invalid certificate validity {validity:?}")]
    InvalidValidity {
        /// The validity asked for.
        validity: Duration,
    },
    /// A serving certificate was requested without any DNS name or IP address.
    #[error("a serving certificate needs at least one subject alternative name")]
    NoSubjectAltNames,
    /// A subject alternative name is neither an IP address nor a valid DNS name.
    #[error("invalid subject alternative name {san:?}")]
    InvalidSubjectAltName {
        /// The name as given.
        san: String,
        /// Why the name is not a DNS name.
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// A Node uid to bind a certificate to is not a Kubernetes uid (1 to 64 ASCII letters,
    /// digits and `-`).
    #[error("invalid Node uid {0:?}")]
    InvalidNodeUid(String),
    /// A node name is not a DNS-1123 subdomain (checked before making a CSR).
    #[error("invalid node name")]
    NodeName(#[source] SubjectError),
    /// A peer certificate does not carry a node identity (`system:node:<name>` in `system:nodes`).
    #[error("the certificate is not a node certificate")]
    NotANode(#[source] SubjectError),
    /// A CSR was refused.
    #[error("certificate signing request refused")]
    Csr(#[from] CsrError),
    /// A `podCertificate` projection's `keyType` that the Kubernetes API accepts but ring
    /// cannot generate (`RSA3072`, `RSA4096`, `ECDSAP521`).
    #[error("key type {0:?} is not supported on this node (ECDSAP256, ECDSAP384 and ED25519 are)")]
    UnsupportedKeyType(String),
    /// A `podCertificate` projection's `keyType` that is none of the Kubernetes API's.
    #[error("unknown key type {0:?}")]
    UnknownKeyType(String),
    /// Reading or writing a PEM file failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// `"read"`, `"write"`, ...
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
