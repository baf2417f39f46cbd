//! Verge's PKI: the Verge CA, the certificates it issues, node CSRs, Kubernetes bootstrap
//! tokens and the rustls configurations of Verge's gRPC links (architecture.md §7 intent:
//! identity is a certificate; private keys are made where they are used and never travel).
//!
//! A pure library: no Kubernetes client and no network I/O; file I/O only for PEM files.
//! Cryptography is rustls/ring throughout (never aws-lc-rs); certificates are made with rcgen
//! and read with x509-parser.
//!
//! # Layout
//! - [`address`]: a node's stream address ([`stream_address`]), the `Hostname` the API server
//!   dials for an edge node.
//! - [`ca`]: [`Ca`] — generate or load the CA, issue serving and controller certificates
//!   ([`IssuedCert`]), sign node CSRs.
//! - [`hash`]: kubeadm's CA hash `sha256:<hex of the SubjectPublicKeyInfo>` and its checks.
//! - [`node`]: the node subject (`CN=system:node:<name>`, `O=system:nodes`), node-name rules,
//!   and [`NodeKey`], the key a node makes for itself and its CSR.
//! - [`csr`]: [`CsrRequest`], a node CSR parsed and checked on the cloud side.
//! - [`cert_info`]: [`CertInfo`] (validity, subject, renewal time) and [`node_identity`] of a
//!   verified peer certificate.
//! - [`token`]: [`BootstrapToken`] and [`validate_token_secret`] for bootstrap-token Secrets.
//! - [`tls`]: rustls server and client configurations, the rotatable
//!   [`ReloadableServerCert`] and the CA-pinning [`join_client_config`].
//! - [`pem_io`]: PEM parsing and 0600 key files; [`secret`]: [`PrivateKeyPem`].
//! - [`validity`]: validity windows (5-minute backdate, capped at the CA's expiry).
//! - [`workload`]: keys and stub PKCS#10 requests of pods' `podCertificate` volumes.
//! - [`error`]: the crate's [`Error`].
//!
//! # Certificates Verge issues
//! | certificate | subject | extended key usage | key made by |
//! |---|---|---|---|
//! | CA | `CN=<name>`, CA:TRUE | — | [`Ca::generate`] |
//! | cloudhub serving | `CN=<name>`, DNS/IP SANs | serverAuth | [`Ca::issue_serving`] |
//! | node client | `CN=system:node:<node>`, `O=system:nodes` | clientAuth | the node ([`NodeKey`]) |
//! | controller client | `CN=<name>`, optional `O=<group>` | clientAuth | [`Ca::issue_client`] |

pub mod address;
pub mod ca;
pub mod cert_info;
pub mod csr;
pub mod error;
pub mod hash;
pub mod node;
pub mod pem_io;
pub mod secret;
pub mod tls;
pub mod token;
pub mod validity;
pub mod workload;

pub use address::{STREAM_PREFIX, is_stream_address, parse_stream_address, stream_address};
pub use ca::{Ca, IssuedCert};
pub use cert_info::{
    CertInfo, NODE_UID_URI_PREFIX, RENEW_FRACTION, issued_by, node_identity, node_uid,
};
pub use csr::{CsrError, CsrRequest, kubernetes_service_names};
pub use error::{Error, Result};
pub use hash::{ca_cert_hash, verify_ca_hash};
pub use node::{NODE_USER_PREFIX, NODES_GROUP, NodeKey, SubjectError, validate_node_name};
pub use secret::PrivateKeyPem;
pub use tls::{
    ALPN_H2, ClientIdentity, ReloadableServerCert, certified_key, client_config, crypto_provider,
    join_client_config, pinned_ca_pem, server_config,
};
pub use token::{BootstrapToken, TokenError, TokenGrant, Usage, validate_token_secret};
