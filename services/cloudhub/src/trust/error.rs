//! [`TrustError`]: why a trust decision refused, and the gRPC status each maps to.

use tonic::Status;
use verge_pki::CsrError;
use verge_pki::token::TokenError;

/// A refused or failed trust decision.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The bootstrap token is malformed, unknown, expired, mismatched or lacks
    /// `usage-bootstrap-authentication`.
    #[error("bootstrap token refused: {0}")]
    Token(#[from] TokenError),
    /// A well-formed bootstrap token that the API server did not authenticate as a bootstrap
    /// token (a TokenReview, for a join): its Secret is missing or being deleted, the secret
    /// does not match, it expired, it lacks `usage-bootstrap-authentication`, its
    /// `auth-extra-groups` are invalid, or the API server runs without
    /// `--enable-bootstrap-token-auth`. A TokenReview does not say which.
    #[error(
        "bootstrap token {token_id:?} refused: the API server does not authenticate it (no such token, a wrong secret, expired, without usage-bootstrap-authentication, or an API server without --enable-bootstrap-token-auth); create a new one (e.g. kubeadm token create)"
    )]
    TokenNotAuthenticated {
        /// The token id.
        token_id: String,
    },
    /// `Join.GetCa` on a cloudhub without `trust.tokenCaDiscovery`: the edge must pin the CA
    /// (its hash) instead of discovering it with the bootstrap token.
    #[error(
        "CA discovery by bootstrap token is off on this cloudhub: set edgeHub.caCertHash to the Verge CA's pin (docs/install.md)"
    )]
    TokenCaDiscoveryOff,
    /// A taint the join asked its Node to be created with is not valid as Kubernetes
    /// validates a Node's `spec.taints`, or there are more than 32.
    #[error(
        "registerWithTaints refused: {reason}; fix edged.registerWithTaints in the edge's configuration"
    )]
    BadTaint {
        /// Which taint and what is wrong.
        reason: String,
    },
    /// The certificate signing request is malformed or asks for a subject other than
    /// `CN=system:node:<name>, O=system:nodes`.
    #[error("certificate signing request refused: {0}")]
    Csr(#[from] CsrError),
    /// A renewal asked for another node than the one authenticated.
    #[error("node {node} asked for a certificate for {asked}")]
    OtherSubject {
        /// The authenticated node.
        node: String,
        /// The node the CSR names.
        asked: String,
    },
    /// The name belongs to a Node that is not a Verge edge node.
    #[error(
        "node {node} exists and is not a Verge edge node (no node-role.kubernetes.io/edge label); refusing to take it over"
    )]
    ForeignNode {
        /// The node name.
        node: String,
    },
    /// A join under the name of a Node that already is a Verge edge node: only that node's own
    /// certificate (a renewal) or an operator deleting the Node lets the name be used again.
    #[error(
        "node {node} already joined as a Verge edge node; a join cannot take it over: the node renews with its own certificate, or an operator deletes the Node (kubectl delete node {node}) so it can join anew"
    )]
    NodeTaken {
        /// The node name.
        node: String,
    },
    /// The certificate is bound to a Node object (its uid) that no longer exists: the Node
    /// was deleted, perhaps created again since. Deleting the Node revoked the certificate.
    #[error(
        "the certificate of node {node} was issued for a Node that was deleted; it is revoked: join anew with a bootstrap token"
    )]
    NodeGone {
        /// The node name.
        node: String,
    },
    /// A hello names another node than the client certificate.
    #[error("the client certificate is for node {certificate}, the hello names {hello}")]
    IdentityMismatch {
        /// The node of the certificate.
        certificate: String,
        /// The node of the hello.
        hello: String,
    },
    /// No usable client certificate on the connection.
    #[error("no valid node client certificate: {0}")]
    NoClientCertificate(String),
    /// The connection's client certificate is outside its validity window now: the TLS
    /// session outlived it (a session resumed from a ticket keeps the certificate of the
    /// handshake that made the ticket; rustls verifies certificates in full handshakes only).
    #[error(
        "the client certificate of {who} is not valid now ({reason}); this TLS session outlived it: connect again with a current certificate"
    )]
    CertificateNotCurrent {
        /// The node (or client) named by the certificate.
        who: String,
        /// Expired at, or not valid before.
        reason: String,
    },
    /// A controller presented no token, or one that the TokenReview did not authenticate for
    /// the ControllerHub audience.
    #[error(
        "controller not authenticated: send `authorization: Bearer <service-account token>` with the ControllerHub audience"
    )]
    ControllerUnauthenticated,
    /// An authenticated controller named a group it may not serve: one of Verge's own
    /// groups while not in `trust.controllerUsers`, or a third-party group for which no RBAC
    /// rule grants it `attach` on `messagegroups.verge.io` (a SubjectAccessReview).
    #[error("{user} may not serve group {group:?}: {why}")]
    ControllerForbidden {
        /// The authenticated user.
        user: String,
        /// The group it named.
        group: String,
        /// Which rule refused it.
        why: &'static str,
    },
    /// A third-party group is served by another user's controller now (one user serves a
    /// group at a time; that user's replicas share it).
    #[error(
        "group {group:?} is served by {owner} (controller {controller}); a group has one owner"
    )]
    GroupTaken {
        /// The group.
        group: String,
        /// The user serving it.
        owner: String,
        /// The name of that user's controller.
        controller: String,
    },
    /// The API server could not be asked.
    #[error("Kubernetes API: {0}")]
    Cluster(#[from] kube::Error),
    /// The CA could not sign.
    #[error("signing failed: {0}")]
    Pki(#[from] verge_pki::Error),
    /// The CA Secret exists but holds no usable CA.
    #[error("CA Secret {secret} is unusable: {reason}")]
    BadCaSecret {
        /// `namespace/name`.
        secret: String,
        /// What is wrong.
        reason: String,
    },
}

impl From<TrustError> for Status {
    fn from(error: TrustError) -> Self {
        let message = error.to_string();
        match error {
            TrustError::Token(_)
            | TrustError::TokenNotAuthenticated { .. }
            | TrustError::ControllerUnauthenticated => Status::unauthenticated(message),
            TrustError::NoClientCertificate(_)
            | TrustError::CertificateNotCurrent { .. }
            | TrustError::NodeGone { .. } => Status::unauthenticated(message),
            TrustError::Csr(_) | TrustError::OtherSubject { .. } | TrustError::BadTaint { .. } => {
                Status::invalid_argument(message)
            }
            TrustError::ForeignNode { .. }
            | TrustError::NodeTaken { .. }
            | TrustError::IdentityMismatch { .. }
            | TrustError::ControllerForbidden { .. } => Status::permission_denied(message),
            TrustError::GroupTaken { .. } => Status::already_exists(message),
            TrustError::TokenCaDiscoveryOff => Status::failed_precondition(message),
            TrustError::Cluster(_) => Status::unavailable(message),
            TrustError::Pki(_) | TrustError::BadCaSecret { .. } => Status::internal(message),
        }
    }
}
