//! Reading certificates: validity, subject, renewal time, and the node identity of a peer.

use std::time::{Duration, SystemTime};

use rand::Rng;
use x509_parser::error::X509Error;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::error::{Error, Result};
use crate::node::{NODES_GROUP, SubjectError, node_name_from_common_name, single_common_name};
use crate::pem_io::cert_from_pem;
use crate::validity::from_unix;

/// Fraction of a certificate's lifetime after which it is renewed: 80 %, in the middle of the
/// 70–90 % window of the kubelet's certificate manager.
pub const RENEW_FRACTION: f64 = 0.8;
/// Earliest and latest fraction [`CertInfo::renew_at_jittered`] picks from (the kubelet's window).
pub const RENEW_JITTER_RANGE: (f64, f64) = (0.7, 0.9);

/// What Verge reads from an X.509 certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity (`notBefore`).
    pub not_before: SystemTime,
    /// End of validity (`notAfter`).
    pub not_after: SystemTime,
    /// Every subject common name (normally exactly one).
    pub common_names: Vec<String>,
    /// Every subject organization, in order (Kubernetes reads them as groups).
    pub organizations: Vec<String>,
    /// Whether `basicConstraints` says CA:TRUE.
    pub is_ca: bool,
    /// The IP addresses among its subject alternative names, in order.
    pub ip_addresses: Vec<std::net::IpAddr>,
    /// The DNS names among its subject alternative names, in order.
    pub dns_names: Vec<String>,
}

impl CertInfo {
    /// Parses the first certificate of PEM text, or DER bytes when the input is not PEM.
    ///
    /// # Errors
    /// [`Error::Pem`]/[`Error::NoPem`] for broken PEM, [`Error::Certificate`] for bad X.509.
    pub fn parse(pem_or_der: &[u8]) -> Result<Self> {
        let trimmed = pem_or_der.trim_ascii_start();
        if trimmed.starts_with(b"-----BEGIN") {
            let text = std::str::from_utf8(trimmed).map_err(|_| Error::NoPem {
                label: "CERTIFICATE",
            })?;
            Self::parse_der(&cert_from_pem(text)?)
        } else {
            Self::parse_der(pem_or_der)
        }
    }

    /// Parses a DER certificate.
    ///
    /// # Errors
    /// [`Error::Certificate`].
    pub fn parse_der(der: &[u8]) -> Result<Self> {
        let (_, cert) = X509Certificate::from_der(der).map_err(x509_error)?;
        let validity = cert.validity();
        let (common_names, organizations) = subject_names(cert.subject());
        let (ip_addresses, dns_names) = alt_names(&cert)?;
        Ok(Self {
            not_before: from_unix(validity.not_before.timestamp()),
            not_after: from_unix(validity.not_after.timestamp()),
            common_names,
            organizations,
            is_ca: cert.is_ca(),
            ip_addresses,
            dns_names,
        })
    }

    /// The single common name, if there is exactly one.
    pub fn common_name(&self) -> Option<&str> {
        single_common_name(&self.common_names).ok()
    }

    /// The certificate's lifetime (`notAfter - notBefore`), zero if inverted.
    pub fn lifetime(&self) -> Duration {
        self.not_after
            .duration_since(self.not_before)
            .unwrap_or_default()
    }

    /// The time at `fraction` (clamped to 0..=1) of the lifetime. Verge renews at
    /// `renew_at(RENEW_FRACTION)`, i.e. 80 %, without jitter: certificates issued at join time
    /// are already spread by the joins themselves.
    pub fn renew_at(&self, fraction: f64) -> SystemTime {
        let fraction = if fraction.is_nan() {
            1.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        self.not_before + self.lifetime().mul_f64(fraction)
    }

    /// The renewal time at a fraction drawn uniformly from [`RENEW_JITTER_RANGE`] (70–90 %, as
    /// the kubelet's certificate manager does), for fleets whose certificates were all issued at
    /// once and should not all renew at the same moment.
    pub fn renew_at_jittered(&self, rng: &mut impl Rng) -> SystemTime {
        let (low, high) = RENEW_JITTER_RANGE;
        self.renew_at(rng.random_range(low..=high))
    }

    /// Checks that `now` lies within `notBefore..=notAfter`.
    ///
    /// # Errors
    /// [`Error::Expired`] (carrying `not_after`) or [`Error::NotYetValid`].
    pub fn check_valid_at(&self, now: SystemTime) -> Result<()> {
        if now > self.not_after {
            Err(Error::Expired {
                not_after: self.not_after,
            })
        } else if now < self.not_before {
            Err(Error::NotYetValid {
                not_before: self.not_before,
            })
        } else {
            Ok(())
        }
    }
}

/// The node name of a peer's client certificate: its single common name is
/// `system:node:<name>` with a valid node name, and its organizations include `system:nodes`
/// (what the Kubernetes Node authorizer requires of a kubelet).
///
/// Call it only with a certificate the TLS layer has verified against the Verge CA (e.g. the
/// first of `ServerConnection::peer_certificates()`); this function checks the subject, not the
/// chain.
///
/// # Errors
/// [`Error::Certificate`] for bad X.509, [`Error::NotANode`] with the [`SubjectError`].
pub fn node_identity(peer_cert_der: &[u8]) -> Result<String> {
    let info = CertInfo::parse_der(peer_cert_der)?;
    let common_name = single_common_name(&info.common_names).map_err(Error::NotANode)?;
    let name = node_name_from_common_name(common_name).map_err(Error::NotANode)?;
    if !info.organizations.iter().any(|o| o == NODES_GROUP) {
        return Err(Error::NotANode(SubjectError::NotInNodesGroup {
            organizations: info.organizations,
        }));
    }
    Ok(name)
}

/// The prefix of the URI subject alternative name that binds a node certificate to its Node
/// object's uid ([`crate::Ca::sign_node_csr`]).
pub const NODE_UID_URI_PREFIX: &str = "urn:verge:node-uid:";

/// The IP addresses and the DNS names among `cert`'s subject alternative names, each in
/// order (none without the extension).
fn alt_names(cert: &X509Certificate<'_>) -> Result<(Vec<std::net::IpAddr>, Vec<String>)> {
    let Some(san) = cert
        .subject_alternative_name()
        .map_err(Error::Certificate)?
    else {
        return Ok((Vec::new(), Vec::new()));
    };
    let (mut ips, mut dns) = (Vec::new(), Vec::new());
    for name in &san.value.general_names {
        match name {
            x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).ok().map(std::net::IpAddr::from),
                    16 => <[u8; 16]>::try_from(*bytes)
                        .ok()
                        .map(std::net::IpAddr::from),
                    _ => None,
                };
                ips.extend(ip);
            }
            x509_parser::extensions::GeneralName::DNSName(name) => dns.push((*name).to_owned()),
            _ => {}
        }
    }
    Ok((ips, dns))
}

/// The Node uid a node certificate is bound to (its `urn:verge:node-uid:<uid>` subject
/// alternative name, see [`crate::Ca::sign_node_csr`]), or `None` for a certificate without
/// one (issued before certificates were bound, or for a test).
///
/// # Errors
/// [`Error::Certificate`] for bad X.509 (including a malformed SAN extension).
pub fn node_uid(peer_cert_der: &[u8]) -> Result<Option<String>> {
    let (_, cert) = X509Certificate::from_der(peer_cert_der).map_err(x509_error)?;
    let Some(san) = cert
        .subject_alternative_name()
        .map_err(Error::Certificate)?
    else {
        return Ok(None);
    };
    Ok(san.value.general_names.iter().find_map(|name| match name {
        x509_parser::extensions::GeneralName::URI(uri) => {
            uri.strip_prefix(NODE_UID_URI_PREFIX).map(str::to_owned)
        }
        _ => None,
    }))
}

/// Whether the certificate `leaf_der` was issued by one of the CA certificates `ca_ders`: its
/// issuer name is the CA's subject and its signature verifies with the CA's public key.
/// Validity periods are not checked here (the TLS layer and `check_peer_validity` do).
///
/// A TLS server that trusts several CAs (rustls accepts a chain to any of its roots) uses
/// this to tell which one vouched for a client, so that a name is accepted only from the CA
/// that is meant to issue it. Unparsable input is issued by nobody.
pub fn issued_by<'a>(leaf_der: &[u8], ca_ders: impl IntoIterator<Item = &'a [u8]>) -> bool {
    let Ok((_, leaf)) = X509Certificate::from_der(leaf_der) else {
        return false;
    };
    ca_ders.into_iter().any(|ca_der| {
        X509Certificate::from_der(ca_der).is_ok_and(|(_, ca)| {
            leaf.issuer() == ca.subject() && leaf.verify_signature(Some(ca.public_key())).is_ok()
        })
    })
}

/// Common names and organizations of a subject, in order. Values that are not strings are
/// kept as `"<non-string>"` so that they still count (and fail name checks).
pub(crate) fn subject_names(name: &X509Name<'_>) -> (Vec<String>, Vec<String>) {
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str()
            .map_or_else(|_| "<non-string>".to_owned(), str::to_owned)
    };
    (
        name.iter_common_name().map(text).collect(),
        name.iter_organization().map(text).collect(),
    )
}

/// Flattens x509-parser's nom error.
pub(crate) fn x509_error(e: x509_parser::nom::Err<X509Error>) -> Error {
    Error::Certificate(match e {
        x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e) => e,
        x509_parser::nom::Err::Incomplete(_) => X509Error::InvalidCertificate,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Ca;
    use crate::pem_io::cert_from_pem;

    #[test]
    fn issued_by_names_the_signing_ca_only() {
        let day = Duration::from_secs(86_400);
        let verge = Ca::generate("verge-ca", day).expect("ca");
        let other = Ca::generate("verge-ca", day).expect("same name, other key");
        let cert = verge.issue_client("peer", None, day).expect("issue");
        let leaf = cert_from_pem(&cert.cert_pem).expect("der");
        assert!(issued_by(&leaf, [verge.cert_der().as_ref()]));
        // Same subject name, another key: the signature decides.
        assert!(!issued_by(&leaf, [other.cert_der().as_ref()]));
        assert!(issued_by(
            &leaf,
            [other.cert_der().as_ref(), verge.cert_der().as_ref()]
        ));
        assert!(!issued_by(&leaf, []));
        assert!(!issued_by(
            b"not a certificate",
            [verge.cert_der().as_ref()]
        ));
    }
}
