//! Node identity: the kubelet's certificate subject (`CN=system:node:<name>`, `O=system:nodes`),
//! node-name rules, and [`NodeKey`], the private key a node makes for itself and never sends.

use std::fmt;

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

use crate::error::{Error, Result};
use crate::secret::PrivateKeyPem;

/// Prefix of a node's user name and certificate common name (`system:node:<name>`).
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group (certificate organization) every node belongs to.
pub const NODES_GROUP: &str = "system:nodes";
/// Longest node name: a DNS-1123 subdomain has at most 253 characters.
pub const MAX_NODE_NAME_LEN: usize = 253;

/// Why a certificate or CSR subject is not a node identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectError {
    /// The subject has no common name.
    #[error("the subject has no common name")]
    NoCommonName,
    /// The subject has more than one common name.
    #[error("the subject has {count} common names; exactly one is allowed")]
    SeveralCommonNames {
        /// How many there are.
        count: usize,
    },
    /// The common name does not start with `system:node:`.
    #[error("common name {common_name:?} is not of the form system:node:<node name>")]
    NotANodeUser {
        /// The common name found.
        common_name: String,
    },
    /// The node name is not a DNS-1123 subdomain, as Kubernetes requires of Node names.
    #[error("node name {name:?} is not a valid DNS-1123 subdomain: {reason}")]
    InvalidNodeName {
        /// The name found.
        name: String,
        /// What rule it breaks.
        reason: &'static str,
    },
    /// The organizations do not include `system:nodes`.
    #[error("organizations {organizations:?} do not include {NODES_GROUP}")]
    NotInNodesGroup {
        /// The organizations found.
        organizations: Vec<String>,
    },
}

/// Checks a Kubernetes node name: a DNS-1123 subdomain (lowercase letters, digits, `-` and
/// `.`; starting and ending with a letter or digit; each dot-separated part likewise; at most
/// 253 characters).
///
/// # Errors
/// [`SubjectError::InvalidNodeName`] naming the broken rule.
pub fn validate_node_name(name: &str) -> Result<(), SubjectError> {
    let invalid = |reason| {
        Err(SubjectError::InvalidNodeName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name.len() > MAX_NODE_NAME_LEN {
        return invalid("it is longer than 253 characters");
    }
    for label in name.split('.') {
        let bytes = label.as_bytes();
        if bytes.is_empty() {
            return invalid("it has an empty part between dots");
        }
        if !bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        {
            return invalid("only lowercase letters, digits, '-' and '.' are allowed");
        }
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if !bytes.first().is_some_and(alnum) || !bytes.last().is_some_and(alnum) {
            return invalid("each part must start and end with a letter or digit");
        }
    }
    Ok(())
}

/// The node name in a node common name `system:node:<name>`, checked.
///
/// # Errors
/// [`SubjectError::NotANodeUser`] or [`SubjectError::InvalidNodeName`].
pub fn node_name_from_common_name(common_name: &str) -> Result<String, SubjectError> {
    let name =
        common_name
            .strip_prefix(NODE_USER_PREFIX)
            .ok_or_else(|| SubjectError::NotANodeUser {
                common_name: common_name.to_owned(),
            })?;
    validate_node_name(name)?;
    Ok(name.to_owned())
}

/// The single common name among `common_names`.
pub(crate) fn single_common_name(common_names: &[String]) -> Result<&str, SubjectError> {
    match common_names {
        [] => Err(SubjectError::NoCommonName),
        [one] => Ok(one),
        many => Err(SubjectError::SeveralCommonNames { count: many.len() }),
    }
}

/// A node's private key (ECDSA P-256), made on the node; only its CSR leaves the node.
///
/// `Debug` does not print the key.
pub struct NodeKey {
    key: KeyPair,
}

impl NodeKey {
    /// Generates a new ECDSA P-256 key.
    ///
    /// # Errors
    /// [`Error::Rcgen`] if the system random source fails.
    pub fn generate() -> Result<Self> {
        let key = KeyPair::generate().map_err(|source| Error::Rcgen {
            action: "generating the node key",
            source,
        })?;
        Ok(Self { key })
    }

    /// Loads a key from PKCS#8 PEM (as written by [`to_pem`](Self::to_pem)).
    ///
    /// # Errors
    /// [`Error::Rcgen`] for an unreadable or unsupported key.
    pub fn from_pem(pem: &PrivateKeyPem) -> Result<Self> {
        let key = KeyPair::from_pem(pem.expose()).map_err(|source| Error::Rcgen {
            action: "reading the node key",
            source,
        })?;
        Ok(Self { key })
    }

    /// The key as PKCS#8 PEM, to store in a 0600 file.
    pub fn to_pem(&self) -> PrivateKeyPem {
        PrivateKeyPem::new(self.key.serialize_pem())
    }

    /// The DER SubjectPublicKeyInfo of the key.
    pub fn public_key_der(&self) -> Vec<u8> {
        rcgen::PublicKeyData::subject_public_key_info(&self.key)
    }

    /// A PEM PKCS#10 CSR for the kubelet client subject of `node_name`:
    /// `CN=system:node:<node_name>, O=system:nodes`, no extensions, signed by this key.
    ///
    /// # Errors
    /// [`Error::NodeName`] for a name that is not a DNS-1123 subdomain, [`Error::Rcgen`] if
    /// signing fails.
    pub fn csr_pem(&self, node_name: &str) -> Result<String> {
        self.node_csr(node_name, Vec::new())
    }
}

impl NodeKey {
    /// A PEM PKCS#10 CSR for the kubelet serving certificate of `node_name`, as a kubelet
    /// with `serverTLSBootstrap` asks signer `kubernetes.io/kubelet-serving`:
    /// `CN=system:node:<node_name>, O=system:nodes`, the DNS subject alternative name
    /// `<node_name>` and the IP address of its stream address ([`crate::stream_address`]:
    /// the node's `Hostname` address, which the API server and metrics-server dial).
    ///
    /// # Errors
    /// [`Error::NodeName`] for a name that is not a DNS-1123 subdomain, [`Error::Rcgen`] if
    /// signing fails.
    pub fn serving_csr_pem(&self, node_name: &str) -> Result<String> {
        let address = std::net::IpAddr::V6(crate::stream_address(node_name));
        self.serving_csr_pem_for(node_name, &[node_name.to_owned()], &[address])
    }

    /// A PEM PKCS#10 CSR for a serving certificate of node `node_name` (signer
    /// `kubernetes.io/kubelet-serving`, subject `CN=system:node:<node_name>, O=system:nodes`)
    /// for the DNS names `dns_names` then the IP addresses `ips`: the kubelet's own
    /// ([`Self::serving_csr_pem`]) or a Service the node serves locally (the edge API's
    /// `kubernetes`).
    ///
    /// # Errors
    /// [`Error::NodeName`] for a node name that is not a DNS-1123 subdomain, [`Error::Rcgen`]
    /// for a DNS name that is not IA5 text or if signing fails.
    pub fn serving_csr_pem_for(
        &self,
        node_name: &str,
        dns_names: &[String],
        ips: &[std::net::IpAddr],
    ) -> Result<String> {
        let mut sans = Vec::with_capacity(dns_names.len() + ips.len());
        for name in dns_names {
            let name = rcgen::string::Ia5String::try_from(name.as_str()).map_err(|source| {
                Error::Rcgen {
                    action: "encoding a DNS name",
                    source,
                }
            })?;
            sans.push(rcgen::SanType::DnsName(name));
        }
        sans.extend(ips.iter().copied().map(rcgen::SanType::IpAddress));
        self.node_csr(node_name, sans)
    }

    /// A PEM CSR for the node subject of `node_name` with subject alternative names `sans`.
    pub(crate) fn node_csr(&self, node_name: &str, sans: Vec<rcgen::SanType>) -> Result<String> {
        validate_node_name(node_name).map_err(Error::NodeName)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = node_subject(node_name);
        params.subject_alt_names = sans;
        let csr = params
            .serialize_request(&self.key)
            .map_err(|source| Error::Rcgen {
                action: "signing the CSR",
                source,
            })?;
        csr.pem().map_err(|source| Error::Rcgen {
            action: "encoding the CSR",
            source,
        })
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NodeKey(<redacted>)")
    }
}

/// `CN=system:node:<name>, O=system:nodes`.
pub(crate) fn node_subject(node_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, NODES_GROUP);
    dn.push(DnType::CommonName, format!("{NODE_USER_PREFIX}{node_name}"));
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_follow_dns_1123_subdomain_rules() {
        for good in [
            "edge-1",
            "a",
            "edge.site-3.example",
            "0abc",
            &"a".repeat(253),
        ] {
            assert_eq!(validate_node_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "Bad_Name",
            "UPPER",
            "-edge",
            "edge-",
            "edge..a",
            ".edge",
            "edge.",
            "é",
            &"a".repeat(254),
        ] {
            assert!(validate_node_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn node_common_names() {
        assert_eq!(
            node_name_from_common_name("system:node:edge-1").as_deref(),
            Ok("edge-1")
        );
        assert!(matches!(
            node_name_from_common_name("admin"),
            Err(SubjectError::NotANodeUser { .. })
        ));
        assert!(matches!(
            node_name_from_common_name("system:node:"),
            Err(SubjectError::InvalidNodeName { .. })
        ));
    }

    #[test]
    fn node_key_round_trips_and_hides_itself() -> Result<()> {
        let key = NodeKey::generate()?;
        let again = NodeKey::from_pem(&key.to_pem())?;
        assert_eq!(key.public_key_der(), again.public_key_der());
        assert_eq!(format!("{key:?}"), "NodeKey(<redacted>)");
        assert!(matches!(key.csr_pem("Bad_Name"), Err(Error::NodeName(_))));
        Ok(())
    }
}
