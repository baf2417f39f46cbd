//! The errors of the node's certificates: joining, loading and renewing.

use std::path::PathBuf;
use std::time::SystemTime;

/// What can go wrong with the node's credentials. Each variant keeps its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No node certificate yet and no bootstrap token to join with.
    #[error(
        "no node certificate in {dir}; join first: `edgecore join --cloudhub <host>:10002 --token <id.secret>` \
         (or set edgeHub.token to join on start)"
    )]
    NotJoined {
        /// The certificate directory.
        dir: PathBuf,
    },
    /// The node certificate expired (e.g. after a long offline period) and no token is set.
    #[error(
        "the node certificate expired at {}; re-join with a new bootstrap token: \
         `edgecore join --cloudhub <host>:10002 --token <id.secret>` (or set edgeHub.token)",
        rfc3339(.not_after)
    )]
    Expired {
        /// The certificate's `notAfter`.
        not_after: SystemTime,
    },
    /// The certificate names another node than the configured `nodeName`.
    #[error(
        "the node certificate is for node {certificate}, but nodeName is {configured}; re-join or fix nodeName"
    )]
    OtherNode {
        /// The node of the certificate.
        certificate: String,
        /// The configured node name.
        configured: String,
    },
    /// The join or renewal address is not a valid `https://host:port` URI.
    #[error("invalid cloudhub address {address:?}: expected https://<host>:<port>")]
    Address {
        /// The address.
        address: String,
    },
    /// The TLS connection to cloudhub failed (unreachable, or its certificate did not verify
    /// against the pinned or joined CA).
    #[error("cannot connect to cloudhub at {address}")]
    Connect {
        /// The address.
        address: String,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// cloudhub refused (e.g. UNAUTHENTICATED for an unknown or expired token,
    /// PERMISSION_DENIED for a name owned by a non-edge Node).
    #[error("cloudhub refused: {}", .0.message())]
    Refused(#[source] tonic::Status),
    /// A join without a CA pin, to a cloudhub that does not offer CA discovery by bootstrap
    /// token (`GetCa` answered FAILED_PRECONDITION; cloudhub's `trust.tokenCaDiscovery`).
    #[error(
        "cloudhub offers no CA discovery by bootstrap token: pin the Verge CA with \
         --ca-cert-hash sha256:<hex> or edgeHub.caCertHash (docs/install.md)"
    )]
    PinRequired(#[source] tonic::Status),
    /// The CA certificate cloudhub sent is not authenticated by the bootstrap token.
    #[error(
        "the CA certificate from cloudhub does not carry this bootstrap token's proof; wrong token or not a Verge cloudhub"
    )]
    UnverifiedCa,
    /// A certificate, key, CSR or hash problem.
    #[error(transparent)]
    Pki(#[from] verge_pki::Error),
    /// A malformed bootstrap token.
    #[error(transparent)]
    Token(#[from] verge_pki::TokenError),
}

/// `time` as RFC 3339 in UTC, seconds precision.
fn rfc3339(time: &SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(*time).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
