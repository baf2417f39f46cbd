//! [`CsrRequest`]: a node's PKCS#10 certificate signing request, parsed and checked the way the
//! Kubernetes CSR approver checks a kubelet client CSR before Verge signs it.
//!
//! Accepted: a DER-encoded request with a valid self-signature; a subject of exactly `CN=system:node:<name>` (a DNS-1123
//! node name) and `O=system:nodes`, nothing else; no subject alternative names; no CA request;
//! an ECDSA P-256/P-384, Ed25519 or RSA (2048 bits or more) key. Every other requested
//! extension is ignored: the signer decides the certificate's extensions.

use rustls::pki_types::CertificateSigningRequestDer;
use rustls::pki_types::pem::PemObject;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::error::X509Error;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;

use crate::cert_info::subject_names;

mod envelope;
use crate::node::{NODES_GROUP, SubjectError, node_name_from_common_name, single_common_name};

/// Smallest RSA key accepted in a CSR, in bits.
pub const MIN_RSA_BITS: usize = 2048;

/// Why a CSR was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CsrError {
    /// The input is not a PEM `CERTIFICATE REQUEST`.
    #[error("not a PEM CERTIFICATE REQUEST")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// The DER is not a PKCS#10 request (or has trailing bytes).
    #[error("malformed PKCS#10 certificate request")]
    Malformed(#[source] X509Error),
    /// The unsigned outer encoding is not DER (see the `envelope` check).
    #[error("the CSR is not DER-encoded: {part}")]
    NotDer {
        /// The part that is wrong.
        part: &'static str,
    },
    /// The request's signature does not verify with its own public key (tampered or forged).
    #[error("the CSR signature does not verify")]
    Signature(#[source] X509Error),
    /// The subject is not a node identity.
    #[error("the CSR subject is not a node identity")]
    Subject(#[from] SubjectError),
    /// The organizations are not exactly `system:nodes`.
    #[error("the CSR organizations must be exactly [{NODES_GROUP}], got {organizations:?}")]
    Organizations {
        /// The organizations requested.
        organizations: Vec<String>,
    },
    /// The subject has an attribute other than CN and O.
    #[error("the CSR subject has an attribute other than CN and O (OID {oid})")]
    SubjectAttribute {
        /// The attribute's OID, dotted.
        oid: String,
    },
    /// The request asks for subject alternative names; a node client certificate has none.
    #[error("the CSR requests subject alternative names; node client certificates have none")]
    SubjectAltNames,
    /// A serving CSR whose subject alternative names are not exactly the node's name.
    #[error("a kubelet serving CSR must name exactly DNS:{node}, got {names:?}")]
    ServingNames {
        /// The node the subject names.
        node: String,
        /// The names requested.
        names: Vec<String>,
    },
    /// A serving CSR for a Service's names (the edge API's) naming something else.
    #[error("a Service serving CSR may name only {allowed:?}, got {names:?}")]
    ServiceNames {
        /// The names allowed.
        allowed: Vec<String>,
        /// The names requested.
        names: Vec<String>,
    },
    /// The request asks for a CA certificate.
    #[error("the CSR requests a CA certificate")]
    CaRequested,
    /// The public key type or size is not accepted.
    #[error("unsupported CSR public key: {reason}")]
    UnsupportedKey {
        /// What is wrong with it.
        reason: String,
    },
}

/// The DNS names in-cluster clients give the `kubernetes` Service in cluster domain
/// `domain`: `kubernetes`, `kubernetes.default`, `kubernetes.default.svc` and
/// `kubernetes.default.svc.<domain>` (the names the API server's own certificate carries):
/// what a node's serving certificate for the edge API names, and what cloudhub allows it.
pub fn kubernetes_service_names(domain: &str) -> Vec<String> {
    vec![
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        format!("kubernetes.default.svc.{domain}"),
    ]
}

/// What a CSR is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A node client certificate: no subject alternative names.
    Client,
    /// A serving certificate: subject alternative names allowed, checked by the caller.
    Serving,
}

/// A checked node CSR, ready for [`Ca::sign_client_csr`](crate::Ca::sign_client_csr).
#[derive(Debug, Clone)]
pub struct CsrRequest {
    der: Vec<u8>,
    common_name: String,
    organizations: Vec<String>,
    node_name: String,
    public_key: rcgen::SubjectPublicKeyInfo,
}

impl CsrRequest {
    /// Parses and checks a PEM CSR (see the module docs for the rules).
    ///
    /// # Errors
    /// A [`CsrError`] naming the first rule broken.
    pub fn parse(csr_pem: &str) -> Result<Self, CsrError> {
        let der = CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
            .map_err(CsrError::Pem)?;
        Self::parse_der(&der)
    }

    /// Parses and checks a DER CSR (e.g. `spec.request` of a Kubernetes CSR after PEM decoding).
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn parse_der(der: &[u8]) -> Result<Self, CsrError> {
        Self::parse_der_with(der, Purpose::Client).map(|(csr, _)| csr)
    }

    /// Parses and checks a PEM CSR for a node's kubelet serving certificate: the rules of
    /// [`parse`](Self::parse), except that the subject alternative names must be exactly
    /// the DNS name `<node name>` and the IP address of its stream address (the node's
    /// `Hostname`, [`crate::stream_address`]), in that order, or only the DNS name (edgecore
    /// before stream addresses, whose `Hostname` is its name).
    ///
    /// # Errors
    /// As [`parse`](Self::parse), and [`CsrError::ServingNames`] for other names.
    pub fn parse_serving(csr_pem: &str) -> Result<Self, CsrError> {
        let (csr, names) = Self::parse_serving_pem(csr_pem)?;
        let dns = format!("DNS:{}", csr.node_name);
        let ip = format!("IP:{}", crate::stream_address(&csr.node_name));
        if names != [dns.clone()] && names != [dns, ip] {
            return Err(CsrError::ServingNames {
                node: csr.node_name,
                names,
            });
        }
        Ok(csr)
    }

    /// Parses and checks a PEM CSR for a node's serving certificate of a Service it serves
    /// locally (the edge API at the `kubernetes` Service): the rules of [`parse`](Self::parse),
    /// except that it must ask for subject alternative names, each of them in `allowed`
    /// (`DNS:<name>` or `IP:<address>`, e.g. `IP:10.96.0.1`), in any order.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), and [`CsrError::ServiceNames`] for other names or none.
    pub fn parse_service_serving(csr_pem: &str, allowed: &[String]) -> Result<Self, CsrError> {
        let (csr, names) = Self::parse_serving_pem(csr_pem)?;
        if names.is_empty() || names.iter().any(|n| !allowed.contains(n)) {
            return Err(CsrError::ServiceNames {
                allowed: allowed.to_vec(),
                names,
            });
        }
        Ok(csr)
    }

    /// A serving CSR and its subject alternative names (`DNS:…`, `IP:…`, else as debugged).
    fn parse_serving_pem(csr_pem: &str) -> Result<(Self, Vec<String>), CsrError> {
        let der = CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
            .map_err(CsrError::Pem)?;
        Self::parse_der_with(&der, Purpose::Serving)
    }

    fn parse_der_with(der: &[u8], purpose: Purpose) -> Result<(Self, Vec<String>), CsrError> {
        let (rest, csr) = X509CertificationRequest::from_der(der).map_err(|e| {
            CsrError::Malformed(match e {
                x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e) => e,
                x509_parser::nom::Err::Incomplete(_) => X509Error::InvalidCertificate,
            })
        })?;
        if !rest.is_empty() {
            return Err(CsrError::NotDer {
                part: "bytes after the CertificationRequest",
            });
        }
        envelope::check(der)?;
        csr.verify_signature().map_err(CsrError::Signature)?;
        let info = &csr.certification_request_info;

        for attr in info.subject.iter_attributes() {
            let oid = attr.attr_type();
            if *oid != OID_X509_COMMON_NAME && *oid != OID_X509_ORGANIZATION_NAME {
                return Err(CsrError::SubjectAttribute {
                    oid: oid.to_id_string(),
                });
            }
        }
        let (common_names, organizations) = subject_names(&info.subject);
        let common_name = single_common_name(&common_names)?.to_owned();
        let node_name = node_name_from_common_name(&common_name)?;
        if organizations != [NODES_GROUP] {
            return Err(CsrError::Organizations { organizations });
        }

        let mut serving_names = Vec::new();
        if let Some(extensions) = csr.requested_extensions() {
            for extension in extensions {
                match extension {
                    ParsedExtension::SubjectAlternativeName(san) => {
                        if purpose == Purpose::Client {
                            return Err(CsrError::SubjectAltNames);
                        }
                        serving_names.extend(san.general_names.iter().map(|name| match name {
                            x509_parser::extensions::GeneralName::DNSName(dns) => {
                                format!("DNS:{dns}")
                            }
                            x509_parser::extensions::GeneralName::IPAddress(ip) => ip_name(ip),
                            other => format!("{other:?}"),
                        }));
                    }
                    ParsedExtension::BasicConstraints(bc) if bc.ca => {
                        return Err(CsrError::CaRequested);
                    }
                    _ => {}
                }
            }
        }

        check_key(&info.subject_pki)?;
        let public_key =
            rcgen::SubjectPublicKeyInfo::from_der(info.subject_pki.raw).map_err(|e| {
                CsrError::UnsupportedKey {
                    reason: e.to_string(),
                }
            })?;
        let csr = Self {
            der: der.to_vec(),
            common_name,
            organizations,
            node_name,
            public_key,
        };
        Ok((csr, serving_names))
    }

    /// The subject common name, `system:node:<name>`.
    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    /// The subject organizations: always `["system:nodes"]` once parsed.
    pub fn organizations(&self) -> &[String] {
        &self.organizations
    }

    /// The node name (the common name without `system:node:`), a valid DNS-1123 subdomain.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The request as DER, e.g. for `spec.request` of a `certificates.k8s.io/v1` CSR.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The requested public key, as rcgen signs it.
    pub(crate) fn public_key(&self) -> &rcgen::SubjectPublicKeyInfo {
        &self.public_key
    }
}

/// `IP:<address>` for a SAN's 4 or 16 address bytes, else `IP:<bytes>`.
fn ip_name(bytes: &[u8]) -> String {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .map(std::net::Ipv4Addr::from)
            .map_or_else(|_| String::new(), |a| format!("IP:{a}")),
        16 => <[u8; 16]>::try_from(bytes)
            .map(std::net::Ipv6Addr::from)
            .map_or_else(|_| String::new(), |a| format!("IP:{a}")),
        _ => format!("IP:{bytes:?}"),
    }
}

/// Refuses RSA keys below [`MIN_RSA_BITS`] and keys that are neither EC, Ed25519 nor RSA.
fn check_key(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Result<(), CsrError> {
    let parsed = spki.parsed().map_err(|e| CsrError::UnsupportedKey {
        reason: e.to_string(),
    })?;
    match parsed {
        PublicKey::RSA(rsa) if rsa.key_size() < MIN_RSA_BITS => Err(CsrError::UnsupportedKey {
            reason: format!(
                "RSA key of {} bits, at least {MIN_RSA_BITS} required",
                rsa.key_size()
            ),
        }),
        PublicKey::RSA(_) | PublicKey::EC(_) => Ok(()),
        // x509-parser does not decode Ed25519 keys; rcgen's algorithm match decides.
        PublicKey::Unknown(_) => Ok(()),
        _ => Err(CsrError::UnsupportedKey {
            reason: "only ECDSA, Ed25519 and RSA keys are accepted".to_owned(),
        }),
    }
}

#[cfg(test)]
mod serving_tests {
    use super::*;
    use crate::NodeKey;

    #[test]
    fn a_serving_csr_names_exactly_the_node() {
        let key = NodeKey::generate().expect("key");
        let pem = key.serving_csr_pem("edge-1").expect("csr");
        let csr = CsrRequest::parse_serving(&pem).expect("accepted");
        assert_eq!(csr.node_name(), "edge-1");
        // A client CSR has no names: refused as a serving CSR, and a serving CSR as a client one.
        let client = key.csr_pem("edge-1").expect("csr");
        assert!(matches!(
            CsrRequest::parse_serving(&client),
            Err(CsrError::ServingNames { .. })
        ));
        assert!(matches!(
            CsrRequest::parse(&pem),
            Err(CsrError::SubjectAltNames)
        ));
    }

    #[test]
    fn a_service_serving_csr_names_only_allowed_names() {
        let key = NodeKey::generate().expect("key");
        let allowed: Vec<String> = [
            "DNS:kubernetes",
            "DNS:kubernetes.default.svc",
            "IP:10.96.0.1",
        ]
        .map(str::to_owned)
        .to_vec();
        let ip = "10.96.0.1".parse().expect("ip");
        let names = ["kubernetes.default.svc".to_owned(), "kubernetes".to_owned()];
        let pem = key
            .serving_csr_pem_for("edge-1", &names, &[ip])
            .expect("csr");
        let csr = CsrRequest::parse_service_serving(&pem, &allowed).expect("accepted");
        assert_eq!(csr.node_name(), "edge-1");
        // Any name beyond them, or none at all, is refused.
        let other = ["kubernetes".to_owned(), "api.example.com".to_owned()];
        let pem = key.serving_csr_pem_for("edge-1", &other, &[]).expect("csr");
        let Err(CsrError::ServiceNames { names, .. }) =
            CsrRequest::parse_service_serving(&pem, &allowed)
        else {
            panic!("a name beyond the Service's must be refused");
        };
        assert_eq!(names, ["DNS:kubernetes", "DNS:api.example.com"]);
        let none = key.csr_pem("edge-1").expect("csr");
        assert!(CsrRequest::parse_service_serving(&none, &allowed).is_err());
        // The node's own serving CSR is not one for the Service.
        let own = key.serving_csr_pem("edge-1").expect("csr");
        assert!(CsrRequest::parse_service_serving(&own, &allowed).is_err());
    }

    #[test]
    fn a_serving_csr_may_carry_only_its_own_stream_address() {
        let key = NodeKey::generate().expect("key");
        let names = |sans: Vec<rcgen::SanType>| {
            let pem = key.node_csr("edge-1", sans).expect("csr");
            CsrRequest::parse_serving(&pem).map(|c| c.node_name().to_owned())
        };
        let dns = rcgen::SanType::DnsName("edge-1".try_into().expect("name"));
        let ip = |node: &str| {
            rcgen::SanType::IpAddress(std::net::IpAddr::V6(crate::stream_address(node)))
        };
        assert_eq!(names(vec![dns.clone()]).expect("old form"), "edge-1");
        assert_eq!(
            names(vec![dns.clone(), ip("edge-1")]).expect("new"),
            "edge-1"
        );
        let Err(CsrError::ServingNames { names: refused, .. }) =
            names(vec![dns.clone(), ip("edge-2")])
        else {
            panic!("another node's address must be refused");
        };
        assert_eq!(
            refused[1],
            format!("IP:{}", crate::stream_address("edge-2"))
        );
        assert!(names(vec![ip("edge-1")]).is_err());
        assert!(
            names(vec![
                dns,
                rcgen::SanType::IpAddress("10.0.0.1".parse().expect("ip"))
            ])
            .is_err()
        );
    }
}
