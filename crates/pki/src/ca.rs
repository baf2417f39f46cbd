//! [`Ca`]: the Verge certificate authority, and the certificates it issues.
//!
//! All keys Verge generates are ECDSA P-256. Issued certificates carry a random 127-bit serial,
//! an authority key identifier, and the validity window of [`crate::validity`] (backdated 5
//! minutes, capped at the CA's `notAfter`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::RngCore;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::sign::CertifiedKey;

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::cert_info::{CertInfo, x509_error};
use crate::csr::CsrRequest;
use crate::error::{Error, Result};
use crate::hash::ca_cert_hash_der;
use crate::node::node_subject;
use crate::pem_io::{cert_from_pem, cert_to_pem};
use crate::secret::PrivateKeyPem;
use crate::tls::certified_key;
use crate::validity;

/// The Verge CA: a self-signed CA certificate and its private key.
///
/// `Debug` shows the subject and validity, never the key.
pub struct Ca {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    key: KeyPair,
    info: CertInfo,
}

/// A certificate issued with a fresh key pair (serving and controller certificates).
#[derive(Debug, Clone)]
pub struct IssuedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PKCS#8 PEM.
    pub key_pem: PrivateKeyPem,
    /// The issuing CA's certificate, PEM.
    pub ca_pem: String,
}

impl IssuedCert {
    /// The certificate followed by the CA certificate, as a server presents it. The CA is
    /// included so that a joining node can find and pin it by hash (see
    /// [`join_client_config`](crate::join_client_config)).
    pub fn chain_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.ca_pem)
    }

    /// The chain and key as rustls serves them (e.g. for
    /// [`ReloadableServerCert`](crate::ReloadableServerCert)).
    ///
    /// # Errors
    /// As [`certified_key`].
    pub fn certified_key(&self) -> Result<Arc<CertifiedKey>> {
        certified_key(&self.chain_pem(), &self.key_pem)
    }
}

impl Ca {
    /// Generates a new CA: an ECDSA P-256 key and a self-signed certificate with subject
    /// `CN=<common_name>`, `basicConstraints CA:TRUE`, key usages keyCertSign, cRLSign and
    /// digitalSignature, valid `validity` from now (backdated 5 minutes).
    ///
    /// # Errors
    /// [`Error::InvalidValidity`], or [`Error::Rcgen`] if key generation or signing fails.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Self> {
        Self::generate_with(common_name, validity)
    }

    fn generate_with(common_name: &str, validity: Duration) -> Result<Self> {
        let key = KeyPair::generate().map_err(|source| Error::Rcgen {
            action: "generating the CA key",
            source,
        })?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(random_serial());
        validity::apply(&mut params, SystemTime::now(), validity, None)?;
        let cert = params.self_signed(&key).map_err(|source| Error::Rcgen {
            action: "self-signing the CA certificate",
            source,
        })?;
        Self::from_parts(cert.der().clone(), key)
    }

    /// Loads a CA from its certificate and private key PEM (e.g. `tls.crt`/`tls.key` of the CA
    /// Secret, or a CA the operator made with OpenSSL). An expired CA loads (check
    /// [`info`](Self::info)) but issues nothing: every issuing call returns [`Error::Expired`].
    ///
    /// # Errors
    /// PEM/X.509 errors, [`Error::Rcgen`] for an unreadable key, [`Error::NotACa`] for a
    /// certificate without CA:TRUE, [`Error::KeyMismatch`] when the key is not the
    /// certificate's.
    pub fn from_pem(cert_pem: &str, key_pem: &PrivateKeyPem) -> Result<Self> {
        let cert_der = cert_from_pem(cert_pem)?;
        let key = KeyPair::from_pem(key_pem.expose()).map_err(|source| Error::Rcgen {
            action: "reading the CA key",
            source,
        })?;
        Self::from_parts(cert_der, key)
    }

    fn from_parts(cert_der: CertificateDer<'static>, key: KeyPair) -> Result<Self> {
        let info = CertInfo::parse_der(&cert_der)?;
        if !info.is_ca {
            return Err(Error::NotACa);
        }
        let (_, parsed) = X509Certificate::from_der(&cert_der).map_err(x509_error)?;
        if parsed.public_key().raw != key.subject_public_key_info().as_slice() {
            return Err(Error::KeyMismatch);
        }
        Ok(Self {
            cert_pem: cert_to_pem(&cert_der),
            cert_der,
            key,
            info,
        })
    }

    /// The CA certificate, PEM (what nodes and controllers trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA private key, PKCS#8 PEM (to store in the CA Secret).
    pub fn key_pem(&self) -> PrivateKeyPem {
        PrivateKeyPem::new(self.key.serialize_pem())
    }

    /// Validity and subject of the CA certificate.
    pub fn info(&self) -> &CertInfo {
        &self.info
    }

    /// kubeadm's discovery hash of this CA, `sha256:<hex>` (see [`crate::hash`]).
    ///
    /// # Errors
    /// [`Error::Certificate`] (not expected: the certificate was parsed when loaded).
    pub fn cert_hash(&self) -> Result<String> {
        ca_cert_hash_der(&self.cert_der)
    }

    /// Issues a serving certificate with a new key: subject `CN=<common_name>`, the given DNS
    /// names and IP addresses (each entry that parses as an IP address is one) as subject
    /// alternative names, extended key usage serverAuth.
    ///
    /// # Errors
    /// [`Error::NoSubjectAltNames`], [`Error::InvalidSubjectAltName`], validity errors, or
    /// [`Error::Expired`] when the CA itself has expired.
    pub fn issue_serving(
        &self,
        common_name: &str,
        sans: &[String],
        validity: Duration,
    ) -> Result<IssuedCert> {
        if sans.is_empty() {
            return Err(Error::NoSubjectAltNames);
        }
        let mut params = leaf_params(common_name, ExtendedKeyUsagePurpose::ServerAuth);
        params.subject_alt_names = sans
            .iter()
            .map(|san| parse_san(san))
            .collect::<Result<_>>()?;
        self.issue_with_new_key(params, validity)
    }

    /// Issues a client certificate with a new key for a controller or service: subject
    /// `CN=<common_name>` and, when given, `O=<organization>` (Kubernetes reads O as a group;
    /// rcgen writes at most one), extended key usage clientAuth.
    ///
    /// # Errors
    /// Validity errors, or [`Error::Expired`] when the CA itself has expired.
    pub fn issue_client(
        &self,
        common_name: &str,
        organization: Option<&str>,
        validity: Duration,
    ) -> Result<IssuedCert> {
        let mut params = leaf_params(common_name, ExtendedKeyUsagePurpose::ClientAuth);
        if let Some(organization) = organization {
            params
                .distinguished_name
                .push(DnType::OrganizationName, organization);
        }
        self.issue_with_new_key(params, validity)
    }

    /// Signs a checked node CSR: the certificate has the CSR's public key, the subject
    /// `CN=system:node:<name>, O=system:nodes`, extended key usage clientAuth and nothing the
    /// CSR asked for beyond that. Returns the certificate PEM.
    ///
    /// # Errors
    /// Validity errors, or [`Error::Expired`] when the CA itself has expired.
    pub fn sign_client_csr(&self, csr: &CsrRequest, validity: Duration) -> Result<String> {
        let mut params = CertificateParams::default();
        params.distinguished_name = node_subject(csr.node_name());
        set_leaf_usages(&mut params, ExtendedKeyUsagePurpose::ClientAuth);
        self.sign(params, csr.public_key(), validity)
    }

    /// Signs a checked node CSR as [`Ca::sign_client_csr`] does, and binds the certificate to
    /// one Node object: `node_uid` (the Node's `metadata.uid`) is in a URI subject alternative
    /// name `urn:verge:node-uid:<uid>` ([`crate::NODE_UID_URI_PREFIX`], read back with
    /// [`crate::node_uid`]). A Node deleted and created again under the same name has another
    /// uid, so the certificates of the first stop matching: deleting the Node revokes them.
    ///
    /// # Errors
    /// [`Error::InvalidNodeUid`] unless `node_uid` is 1 to 64 ASCII letters, digits and `-`;
    /// otherwise as [`Ca::sign_client_csr`].
    pub fn sign_node_csr(
        &self,
        csr: &CsrRequest,
        node_uid: &str,
        validity: Duration,
    ) -> Result<String> {
        let valid = !node_uid.is_empty()
            && node_uid.len() <= 64
            && node_uid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid {
            return Err(Error::InvalidNodeUid(node_uid.to_owned()));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = node_subject(csr.node_name());
        set_leaf_usages(&mut params, ExtendedKeyUsagePurpose::ClientAuth);
        let uri = format!("{}{node_uid}", crate::NODE_UID_URI_PREFIX);
        params.subject_alt_names = vec![SanType::URI(
            uri.try_into()
                .map_err(|_| Error::InvalidNodeUid(node_uid.to_owned()))?,
        )];
        self.sign(params, csr.public_key(), validity)
    }

    fn issue_with_new_key(
        &self,
        params: CertificateParams,
        validity: Duration,
    ) -> Result<IssuedCert> {
        let key = KeyPair::generate().map_err(|source| Error::Rcgen {
            action: "generating the certificate key",
            source,
        })?;
        let cert_pem = self.sign(params, &key, validity)?;
        Ok(IssuedCert {
            cert_pem,
            key_pem: PrivateKeyPem::new(key.serialize_pem()),
            ca_pem: self.cert_pem.clone(),
        })
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        public_key: &impl PublicKeyData,
        validity: Duration,
    ) -> Result<String> {
        validity::apply(
            &mut params,
            SystemTime::now(),
            validity,
            Some(self.info.not_after),
        )?;
        params.serial_number = Some(random_serial());
        let issuer =
            Issuer::from_ca_cert_der(&self.cert_der, &self.key).map_err(|source| Error::Rcgen {
                action: "reading the CA certificate",
                source,
            })?;
        let cert = params
            .signed_by(public_key, &issuer)
            .map_err(|source| Error::Rcgen {
                action: "signing the certificate",
                source,
            })?;
        Ok(cert_to_pem(cert.der()))
    }
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("info", &self.info)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Parameters of a leaf certificate with subject `CN=<common_name>` and the given EKU.
fn leaf_params(common_name: &str, eku: ExtendedKeyUsagePurpose) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    set_leaf_usages(&mut params, eku);
    params
}

fn set_leaf_usages(params: &mut CertificateParams, eku: ExtendedKeyUsagePurpose) {
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![eku];
    params.use_authority_key_identifier_extension = true;
}

/// An IP address SAN when `san` parses as one, else a DNS name SAN.
fn parse_san(san: &str) -> Result<SanType> {
    if let Ok(ip) = san.parse::<std::net::IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    // rustls' DNS name rules: what a client will be able to match.
    rustls::pki_types::DnsName::try_from(san).map_err(|source| Error::InvalidSubjectAltName {
        san: san.to_owned(),
        source,
    })?;
    san.try_into()
        .map(SanType::DnsName)
        .map_err(|_| Error::InvalidSubjectAltName {
            san: san.to_owned(),
            source: rustls::pki_types::InvalidDnsNameError,
        })
}

/// A random positive 127-bit serial number (RFC 5280 allows up to 20 octets).
fn random_serial() -> SerialNumber {
    let mut bytes = [0_u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    // Positive, and no leading zero octet to strip.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}
