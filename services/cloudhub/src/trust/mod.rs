//! Trust: who may be a node and who may be a controller (issue "Trust", architecture.md §7).
//!
//! - [`Trust::join`]: a bootstrap token (a standard `bootstrap.kubernetes.io/token` Secret,
//!   authenticated by the API server through a TokenReview) and a node's CSR become a signed
//!   client certificate through a `certificates.k8s.io/v1` CertificateSigningRequest with
//!   signer `verge.io/edge-node`, so `kubectl get csr` shows every join. A join creates the
//!   edge's Node, with the taints it registers with, and binds the certificate to its uid; a
//!   name that any Node already has is refused.
//! - [`Trust::ca_for_token`]: the CA with the token's proof over it (`Join.GetCa`), only with
//!   `trust.tokenCaDiscovery` (off by default: edges pin the CA), the one decision that
//!   reads a bootstrap-token Secret: the proof is keyed with the token's secret.
//! - [`Trust::check_edge_node`]: each use of a node certificate checks that its Node still
//!   exists as a Verge edge node with the uid the certificate is bound to (deleting the Node
//!   revokes its certificates).
//! - [`Trust::renew`]: a node authenticated by its certificate gets a new one for its own
//!   name only, bound to the same Node.
//! - [`Trust::review_controller`]: a controller's service-account token, checked with a
//!   TokenReview for the ControllerHub audience against the allowed users.
//!
//! Every refusal is logged with the node (or controller) and the reason, and counted
//! ([`Trust::refusals`]). The decisions are here; the API calls behind them are
//! [`ClusterApi`] (kube-rs in production, a fake in unit tests).

mod ca_store;
pub(crate) mod cluster;
mod config;
mod error;
pub mod taints;
pub mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use tracing::{info, warn};
use verge_core::Group;
use verge_pki::token::{BOOTSTRAPPERS_GROUP, BootstrapToken, Usage, validate_token_secret};
use verge_pki::{Ca, CsrRequest};
use verge_proto::hub::Taint as RequestedTaint;

pub use ca_store::{CA_CERT_KEY, load_or_create};
pub use cluster::{
    ClusterApi, CsrRecord, KubeCluster, MESSAGE_GROUP_API_GROUP, MESSAGE_GROUP_RESOURCE,
    MESSAGE_GROUP_VERB, NODE_SIGNER, NodeOwner, ReviewedUser, TOKEN_ID_ANNOTATION, TokenSecret,
};
pub use config::TrustConfig;
pub use error::TrustError;

/// A signed node certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The client certificate, PEM.
    pub certificate_pem: String,
    /// The CertificateSigningRequest's name.
    pub csr_name: String,
    /// The node it names.
    pub node: String,
}

/// Refusals counted by kind since start.
#[derive(Debug, Default)]
pub struct Refusals {
    /// Joins with an unknown, expired, malformed or wrong-usage token.
    pub bad_token: AtomicU64,
    /// Malformed CSRs or CSRs for another subject.
    pub bad_csr: AtomicU64,
    /// Joins naming a Node that is not a Verge edge node.
    pub foreign_node: AtomicU64,
    /// Edge hellos naming another node than the client certificate.
    pub identity_mismatch: AtomicU64,
    /// Edge calls on a TLS session whose client certificate expired (or is not yet valid)
    /// since the session was made, e.g. resumed from a session ticket.
    pub expired_certificate: AtomicU64,
    /// Edge calls with a certificate bound to a Node that was deleted.
    pub revoked_certificate: AtomicU64,
    /// Controllers without an allowed, valid token.
    pub controller: AtomicU64,
}

/// The trust decisions of one cloudhub replica.
pub struct Trust {
    ca: Ca,
    api: Arc<dyn ClusterApi>,
    config: TrustConfig,
    refusals: Refusals,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("ca", &self.ca)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Trust {
    /// Decisions signed by `ca`, looked up through `api`.
    pub fn new(ca: Ca, api: Arc<dyn ClusterApi>, config: TrustConfig) -> Self {
        Self {
            ca,
            api,
            config,
            refusals: Refusals::default(),
        }
    }

    /// The Verge CA.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The settings.
    pub fn config(&self) -> &TrustConfig {
        &self.config
    }

    /// The refusal counters.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Counts and logs a refusal of `who` for `error`, and returns the error.
    pub fn refuse(&self, who: &str, error: TrustError) -> TrustError {
        let counter = match &error {
            TrustError::Token(_) | TrustError::TokenNotAuthenticated { .. } => {
                &self.refusals.bad_token
            }
            TrustError::Csr(_) | TrustError::OtherSubject { .. } => &self.refusals.bad_csr,
            TrustError::ForeignNode { .. } | TrustError::NodeTaken { .. } => {
                &self.refusals.foreign_node
            }
            TrustError::IdentityMismatch { .. } | TrustError::NoClientCertificate(_) => {
                &self.refusals.identity_mismatch
            }
            TrustError::CertificateNotCurrent { .. } => &self.refusals.expired_certificate,
            TrustError::NodeGone { .. } => &self.refusals.revoked_certificate,
            TrustError::ControllerUnauthenticated
            | TrustError::ControllerForbidden { .. }
            | TrustError::GroupTaken { .. } => &self.refusals.controller,
            _ => {
                warn!(who, %error, "trust check failed");
                return error;
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(reason) = crate::metrics::trust_refusal_reason(&error) {
            crate::metrics::global().refusal(reason);
        }
        warn!(who, reason = %error, "refused");
        error
    }

    /// The Secret of bootstrap token `token_id` (for [`Trust::ca_for_token`] only).
    ///
    /// # Errors
    /// [`TrustError::Token`] (`Unknown`) when it does not exist, [`TrustError::Cluster`].
    async fn token_secret(&self, token_id: &str) -> Result<TokenSecret, TrustError> {
        self.api
            .bootstrap_token_secret(token_id)
            .await?
            .ok_or_else(|| {
                TrustError::Token(verge_pki::token::TokenError::Unknown {
                    token_id: token_id.to_owned(),
                })
            })
    }

    /// Checks `token` against its Secret `(secret_type, data)` for joining (the policy a join's
    /// TokenReview applies, [`Trust::authenticate_join`]).
    fn check_token(
        token: &BootstrapToken,
        (secret_type, data): &TokenSecret,
    ) -> Result<(), TrustError> {
        validate_token_secret(
            token,
            secret_type,
            data,
            SystemTime::now(),
            Usage::Authentication,
        )?;
        Ok(())
    }

    /// The CA certificate (PEM) and HMAC-SHA256 of its DER keyed with the secret of bootstrap
    /// token `token_id`, which must be valid for joining (kubeadm's token-signed discovery:
    /// the edge trusts the CA because only someone knowing its token can make the MAC).
    /// Only with `trust.tokenCaDiscovery`: otherwise nothing is read (the Secret lives in
    /// `kube-system`, which the shipped RBAC does not let cloudhub read) and the edge is told
    /// to pin the CA.
    ///
    /// # Errors
    /// [`TrustError::TokenCaDiscoveryOff`] without `trust.tokenCaDiscovery`,
    /// [`TrustError::Token`] for an unknown, expired or wrong-usage token,
    /// [`TrustError::Cluster`] when the API server cannot be asked.
    pub async fn ca_for_token(&self, token_id: &str) -> Result<(String, Vec<u8>), TrustError> {
        if !self.config.token_ca_discovery {
            // The edge's configuration, not its credentials: logged, not counted.
            warn!(
                token_id,
                "GetCa refused: trust.tokenCaDiscovery is off; the edge must pin the CA"
            );
            return Err(TrustError::TokenCaDiscoveryOff);
        }
        let result = async {
            let stored = self.token_secret(token_id).await?;
            let secret = stored
                .1
                .get(verge_pki::token::TOKEN_SECRET_KEY)
                .and_then(|s| std::str::from_utf8(s).ok())
                .unwrap_or_default();
            let token = BootstrapToken::parse(&format!("{token_id}.{secret}"))?;
            Self::check_token(&token, &stored)?;
            let mac = verge_pki::token::ca_mac(&token, self.ca.cert_der());
            Ok((self.ca.cert_pem().to_owned(), mac))
        }
        .await;
        result.map_err(|e| self.refuse(&format!("token {token_id}"), e))
    }

    /// Signs a first node certificate for the CSR `csr_pem` if bootstrap token `token` is
    /// valid for joining (a TokenReview, `Trust::authenticate_join`), `taints` are valid
    /// ([`taints::node_taints`]) and no Node has the name it asks for: a join never takes
    /// over an existing Node, a kubelet's ([`TrustError::ForeignNode`]) or another edge
    /// node's ([`TrustError::NodeTaken`]; that node renews with its own certificate, or an
    /// operator deletes the Node first). It records the approved CSR, creates the Node (the
    /// edge label and `taints`, which a node cannot change later under NodeRestriction; the
    /// edge registers the rest when it connects) and binds the certificate to the Node's uid
    /// ([`verge_pki::Ca::sign_node_csr`]). Checks run before anything is written: a refused
    /// join creates no CSR and no Node. (A join whose last write, the certificate into the
    /// CSR, fails leaves its Node: the operator deletes it before joining again.)
    ///
    /// # Errors
    /// [`TrustError::Token`] (malformed), [`TrustError::TokenNotAuthenticated`],
    /// [`TrustError::BadTaint`], [`TrustError::Csr`], [`TrustError::ForeignNode`],
    /// [`TrustError::NodeTaken`], [`TrustError::Cluster`], [`TrustError::Pki`].
    pub async fn join(
        &self,
        token: &str,
        csr_pem: &str,
        taints: &[RequestedTaint],
    ) -> Result<Issued, TrustError> {
        // The shape first: a malformed token never reaches the API server.
        let token = BootstrapToken::parse(token).map_err(|e| self.refuse("join", e.into()))?;
        let who = format!("join with token {}", token.id());
        self.authenticate_join(&token)
            .await
            .map_err(|e| self.refuse(&who, e))?;
        // The edge's configuration is wrong, not its credentials: logged, not counted.
        let taints = taints::node_taints(taints).inspect_err(|error| {
            warn!(who, reason = %error, "join refused");
        })?;
        let csr = CsrRequest::parse(csr_pem).map_err(|e| self.refuse(&who, e.into()))?;
        let node = csr.node_name().to_owned();
        match self.api.node_owner(&node).await? {
            NodeOwner::Absent => {}
            NodeOwner::Edge { .. } => {
                return Err(self.refuse(&node, TrustError::NodeTaken { node: node.clone() }));
            }
            NodeOwner::Foreign => {
                return Err(self.refuse(&node, TrustError::ForeignNode { node: node.clone() }));
            }
        }
        let annotations = BTreeMap::from([(TOKEN_ID_ANNOTATION.to_owned(), token.id().to_owned())]);
        let csr_name = self
            .record(
                &csr,
                csr_pem,
                annotations,
                "VergeBootstrapTokenJoin",
                format!("node {node} joined with bootstrap token {}", token.id()),
                "join",
            )
            .await?;
        // The Node is made last, so the certificate can be bound to its uid: a deleted Node's
        // certificates are refused from then on, and registration cannot bring it back.
        let Some(uid) = self.api.create_edge_node(&node, &taints).await? else {
            return Err(self.refuse(&node, TrustError::NodeTaken { node: node.clone() }));
        };
        let issued = self.issue(&csr, Some(&uid), csr_name).await?;
        info!(node, csr = %issued.csr_name, token_id = token.id(), "node joined");
        Ok(issued)
    }

    /// Authenticates bootstrap `token` for a join: a TokenReview without audiences (bootstrap
    /// tokens have none) must authenticate it as `system:bootstrap:<token-id>` in group
    /// `system:bootstrappers`. The API server's bootstrap-token authenticator
    /// (`--enable-bootstrap-token-auth`, on in kubeadm clusters) applies the policy
    /// [`Trust::check_token`] applies to a Secret: the Secret
    /// `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` exists and
    /// is not being deleted, its id and secret match, `expiration` has not passed,
    /// `usage-bootstrap-authentication` is `"true"` and every `auth-extra-groups` entry is a
    /// `system:bootstrappers:` group. As before, `usage-bootstrap-signing` and extra groups
    /// are not required. What changes: cloudhub no longer reads the Secret for a join, and a
    /// refusal no longer says which check failed ([`TrustError::TokenNotAuthenticated`] for
    /// an unknown, mismatched, expired or wrong-usage token alike; only a malformed token is
    /// told apart, before the review). A token of another authenticator that looks like a
    /// bootstrap token (a static token `abcdef.0123456789abcdef`) is refused: its user is not
    /// the bootstrap user of its id.
    ///
    /// # Errors
    /// [`TrustError::TokenNotAuthenticated`], [`TrustError::Cluster`].
    async fn authenticate_join(&self, token: &BootstrapToken) -> Result<(), TrustError> {
        let exposed = token.expose();
        let user = self.api.review_token(exposed.as_str(), None).await?;
        if user.is_some_and(|user| is_bootstrap_user(token, &user)) {
            Ok(())
        } else {
            Err(TrustError::TokenNotAuthenticated {
                token_id: token.id().to_owned(),
            })
        }
    }

    /// Checks, each time a node's certificate is used (session start, tunnel, serving
    /// certificate, renewal; CONNECT routing checks the Node's label), that its name still
    /// belongs to it; returns the uid of its Node (`None` while none exists).
    ///
    /// - A Node of that name without the edge label (a kubelet's node took the name after the
    ///   edge joined): refused, so the kubelet node's exec, logs and port-forward streams
    ///   and serving certificates never go to an edge.
    /// - A certificate bound to a Node uid (`cert_uid`, every certificate cloudhub issues):
    ///   the Node must exist with that uid; a deleted Node, or one deleted and created again,
    ///   revoked it.
    /// - A certificate without a uid (issued before certificates were bound, or by a test
    ///   with the CA) passes while no Node of that name exists: the edge registers it after
    ///   it connects. Its next renewal binds it.
    ///
    /// # Errors
    /// [`TrustError::ForeignNode`], [`TrustError::NodeGone`] (counted and logged with
    /// `what`), [`TrustError::Cluster`].
    pub async fn check_edge_node(
        &self,
        node: &str,
        cert_uid: Option<&str>,
        what: &str,
    ) -> Result<Option<String>, TrustError> {
        let who = || format!("{what} of node {node}");
        let gone = || TrustError::NodeGone {
            node: node.to_owned(),
        };
        match (self.api.node_owner(node).await?, cert_uid) {
            (NodeOwner::Foreign, _) => Err(self.refuse(
                &who(),
                TrustError::ForeignNode {
                    node: node.to_owned(),
                },
            )),
            (NodeOwner::Absent, Some(_)) => Err(self.refuse(&who(), gone())),
            (NodeOwner::Absent, None) => Ok(None),
            (NodeOwner::Edge { uid }, Some(bound)) if bound != uid => {
                Err(self.refuse(&who(), gone()))
            }
            (NodeOwner::Edge { uid }, _) => Ok(Some(uid)),
        }
    }

    /// The names of edge Nodes deleted (or stripped of the edge label) from now on, for
    /// ending their sessions ([`ClusterApi::removed_edge_nodes`]).
    pub fn removed_edge_nodes(&self) -> futures::stream::BoxStream<'static, String> {
        self.api.removed_edge_nodes()
    }

    /// The edge Node at stream address `address`, as that watch last saw the edge Nodes
    /// ([`ClusterApi::edge_node_at`]).
    pub fn edge_node_at(&self, address: &std::net::Ipv6Addr) -> Option<String> {
        self.api.edge_node_at(address)
    }

    /// Signs a new certificate for `node` (authenticated by its current certificate, bound to
    /// `cert_uid`) from `csr_pem`, which must ask for the same node. The Node is checked as
    /// by [`Trust::check_edge_node`]; the new certificate is bound to the Node's uid (an
    /// unbound certificate gets bound once its Node exists).
    ///
    /// # Errors
    /// [`TrustError::Csr`], [`TrustError::OtherSubject`], [`TrustError::ForeignNode`],
    /// [`TrustError::NodeGone`], [`TrustError::Cluster`], [`TrustError::Pki`].
    pub async fn renew(
        &self,
        node: &str,
        cert_uid: Option<&str>,
        csr_pem: &str,
    ) -> Result<Issued, TrustError> {
        let uid = self.check_edge_node(node, cert_uid, "renewal").await?;
        let csr = CsrRequest::parse(csr_pem).map_err(|e| self.refuse(node, e.into()))?;
        if csr.node_name() != node {
            return Err(self.refuse(
                node,
                TrustError::OtherSubject {
                    node: node.to_owned(),
                    asked: csr.node_name().to_owned(),
                },
            ));
        }
        let csr_name = self
            .record(
                &csr,
                csr_pem,
                BTreeMap::new(),
                "VergeNodeRenewal",
                format!("node {node} renewed its own client certificate"),
                "renew",
            )
            .await?;
        let issued = self.issue(&csr, uid.as_deref(), csr_name).await?;
        info!(node, csr = %issued.csr_name, "node certificate renewed");
        Ok(issued)
    }

    /// Records an approved CSR; returns its name.
    async fn record(
        &self,
        csr: &CsrRequest,
        csr_pem: &str,
        annotations: BTreeMap<String, String>,
        reason: &str,
        message: String,
        kind: &str,
    ) -> Result<String, TrustError> {
        let node = csr.node_name();
        let validity = self.config.node_cert_validity;
        let record = CsrRecord {
            generate_name: format!("verge-{kind}-{node}-"),
            request_pem: csr_pem.to_owned(),
            expiration_seconds: i32::try_from(validity.as_secs()).unwrap_or(i32::MAX),
            annotations,
            approval_reason: reason.to_owned(),
            approval_message: message,
        };
        Ok(self.api.create_approved_csr(record).await?)
    }

    /// Signs `csr` (bound to Node `uid` when given) and writes the certificate into the
    /// recorded CSR `csr_name`.
    async fn issue(
        &self,
        csr: &CsrRequest,
        uid: Option<&str>,
        csr_name: String,
    ) -> Result<Issued, TrustError> {
        let validity = self.config.node_cert_validity;
        let certificate_pem = match uid {
            Some(uid) => self.ca.sign_node_csr(csr, uid, validity)?,
            None => self.ca.sign_client_csr(csr, validity)?,
        };
        self.api.issue_csr(&csr_name, &certificate_pem).await?;
        Ok(Issued {
            certificate_pem,
            csr_name,
            node: csr.node_name().to_owned(),
        })
    }

    /// The user of a controller's bearer `token` when a TokenReview for the ControllerHub
    /// audience authenticates it. What it may serve is decided by
    /// [`Trust::authorize_groups`] once its hello names its groups.
    ///
    /// # Errors
    /// [`TrustError::ControllerUnauthenticated`], [`TrustError::Cluster`].
    pub async fn review_controller(&self, token: &str) -> Result<ReviewedUser, TrustError> {
        let audience = &self.config.controller_audience;
        let Some(user) = self.api.review_token(token, Some(audience)).await? else {
            return Err(self.refuse("controller", TrustError::ControllerUnauthenticated));
        };
        Ok(user)
    }

    /// Whether `user` may serve every one of `groups`: Verge's own groups only for the users
    /// of `trust.controllerUsers`; a third-party group when a SubjectAccessReview allows the
    /// user verb `attach` on `messagegroups.verge.io` named after the group (an RBAC rule
    /// with `resourceNames`). Who serves a third-party group now is the registry's check.
    ///
    /// # Errors
    /// [`TrustError::ControllerForbidden`] for the first group refused,
    /// [`TrustError::Cluster`].
    pub async fn authorize_groups(
        &self,
        user: &ReviewedUser,
        groups: &[Group],
    ) -> Result<(), TrustError> {
        for group in groups {
            let why = if group.is_verge() {
                if self.config.controller_users.contains(&user.name) {
                    continue;
                }
                "Verge's own groups are served only by the users of trust.controllerUsers"
            } else {
                if self.api.may_attach_group(user, group.as_str()).await? {
                    continue;
                }
                "no RBAC rule grants it verb \"attach\" on resource \"messagegroups\" of API group \"verge.io\" with this group as resource name"
            };
            return Err(self.refuse(
                &user.name,
                TrustError::ControllerForbidden {
                    user: user.name.clone(),
                    group: group.to_string(),
                    why,
                },
            ));
        }
        Ok(())
    }
}

/// Whether `user`, as a TokenReview authenticated `token`, is the token's bootstrap user:
/// `system:bootstrap:<token-id>` in group `system:bootstrappers`.
fn is_bootstrap_user(token: &BootstrapToken, user: &ReviewedUser) -> bool {
    user.name == token.user_name() && user.groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP)
}

/// A [`ClusterApi`] with nothing in it, for unit tests that need a [`Trust`] but no
/// decisions.
#[cfg(test)]
pub(crate) struct EmptyCluster;

#[cfg(test)]
impl ClusterApi for EmptyCluster {
    fn bootstrap_token_secret<'a>(
        &'a self,
        _token_id: &'a str,
    ) -> futures::future::BoxFuture<'a, kube::Result<Option<cluster::TokenSecret>>> {
        Box::pin(async { Ok(None) })
    }
    fn node_owner<'a>(
        &'a self,
        _name: &'a str,
    ) -> futures::future::BoxFuture<'a, kube::Result<NodeOwner>> {
        Box::pin(async { Ok(NodeOwner::Absent) })
    }
    fn create_edge_node<'a>(
        &'a self,
        _name: &'a str,
        _taints: &'a [k8s_openapi::api::core::v1::Taint],
    ) -> futures::future::BoxFuture<'a, kube::Result<Option<String>>> {
        Box::pin(async { Ok(Some("uid".to_owned())) })
    }
    fn removed_edge_nodes(&self) -> futures::stream::BoxStream<'static, String> {
        Box::pin(futures::stream::pending())
    }
    fn create_approved_csr(
        &self,
        _record: CsrRecord,
    ) -> futures::future::BoxFuture<'_, kube::Result<String>> {
        Box::pin(async { Ok("csr".to_owned()) })
    }
    fn issue_csr<'a>(
        &'a self,
        _name: &'a str,
        _pem: &'a str,
    ) -> futures::future::BoxFuture<'a, kube::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn review_token<'a>(
        &'a self,
        _t: &'a str,
        _a: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, kube::Result<Option<ReviewedUser>>> {
        Box::pin(async { Ok(None) })
    }
    fn may_attach_group<'a>(
        &'a self,
        _user: &'a ReviewedUser,
        _group: &'a str,
    ) -> futures::future::BoxFuture<'a, kube::Result<bool>> {
        Box::pin(async { Ok(false) })
    }
}

#[cfg(test)]
impl Trust {
    /// A trust with a fresh CA and an [`EmptyCluster`].
    pub(crate) fn for_tests() -> Arc<Self> {
        let ca = Ca::generate("test", std::time::Duration::from_secs(600)).expect("CA");
        Arc::new(Self::new(
            ca,
            Arc::new(EmptyCluster),
            TrustConfig::default(),
        ))
    }
}
