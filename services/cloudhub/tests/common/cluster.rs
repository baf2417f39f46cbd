//! A fake of cloudhub's own `ClusterApi` trait for component tests: bootstrap-token Secrets,
//! Nodes, recorded CSRs and token reviews held in memory. Its TokenReview authenticates
//! bootstrap tokens from those Secrets as the API server's bootstrap-token authenticator does
//! (`verge_pki::validate_token_secret` for `usage-bootstrap-authentication`), and only when
//! the review names no audience. (The real API server is exercised by the e2e tests in
//! `tests/`.)

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Taint;
use verge_cloudhub::trust::{ClusterApi, CsrRecord, NodeOwner, ReviewedUser, TokenSecret};
use verge_pki::token::{BootstrapToken, Usage, validate_token_secret};

/// The controller token the fake's TokenReview accepts, and its user.
pub const CONTROLLER_TOKEN: &str = "controller-token";
/// The user of [`CONTROLLER_TOKEN`].
pub const CONTROLLER_USER: &str = "system:serviceaccount:verge-system:edgecontroller";
/// A token the TokenReview authenticates as a user that is not an allowed controller.
pub const STRANGER_TOKEN: &str = "stranger-token";
/// A third party's controller token: RBAC lets its user serve [`ROBOTS_GROUP`].
pub const ROBOTS_TOKEN: &str = "robots-token";
/// The user of [`ROBOTS_TOKEN`].
pub const ROBOTS_USER: &str = "system:serviceaccount:robots:controller";
/// Another third party's token: RBAC lets its user serve [`ROBOTS_GROUP`] too, and
/// `lights.example.com`.
pub const RIVAL_TOKEN: &str = "rival-token";
/// The user of [`RIVAL_TOKEN`].
pub const RIVAL_USER: &str = "system:serviceaccount:rival:controller";
/// The third-party group of the fake's RBAC rules.
pub const ROBOTS_GROUP: &str = "robots.example.com";
/// A token of the bootstrap-token shape that another authenticator (a static token file)
/// authenticates, as [`LOOKALIKE_USER`], with or without an audience.
pub const LOOKALIKE_TOKEN: &str = "static.0123456789abcdef";
/// The user of [`LOOKALIKE_TOKEN`].
pub const LOOKALIKE_USER: &str = "kubernetes-admin";

/// In-memory cluster state.
#[derive(Debug, Default)]
pub struct FakeCluster {
    /// `token-id` → (Secret type, data).
    pub tokens: Mutex<BTreeMap<String, TokenSecret>>,
    /// Node name → owner.
    pub nodes: Mutex<BTreeMap<String, NodeOwner>>,
    /// CSRs created: (name, record, certificate once issued).
    pub csrs: Mutex<Vec<(String, CsrRecord, Option<String>)>>,
    /// The taints each Node was created with (`create_edge_node`).
    pub node_taints: Mutex<BTreeMap<String, Vec<Taint>>>,
    /// The tokens of TokenReviews without an audience (bootstrap-token reviews), in order.
    pub bootstrap_reviews: Mutex<Vec<String>>,
    /// The token ids whose bootstrap-token Secret was read (`bootstrap_token_secret`), in
    /// order.
    pub secret_reads: Mutex<Vec<String>>,
}

impl FakeCluster {
    /// Adds a bootstrap token `id.secret` with the given usages and expiration (RFC 3339).
    pub fn add_token(&self, id: &str, secret: &str, usages: &[&str], expiration: Option<&str>) {
        let mut data = BTreeMap::from([
            ("token-id".to_owned(), id.as_bytes().to_vec()),
            ("token-secret".to_owned(), secret.as_bytes().to_vec()),
        ]);
        for usage in usages {
            data.insert(format!("usage-bootstrap-{usage}"), b"true".to_vec());
        }
        if let Some(expiration) = expiration {
            data.insert("expiration".to_owned(), expiration.as_bytes().to_vec());
        }
        self.tokens.lock().unwrap().insert(
            id.to_owned(),
            ("bootstrap.kubernetes.io/token".to_owned(), data),
        );
    }
}

impl FakeCluster {
    /// The user the API server's bootstrap-token authenticator gives `token`: checked against
    /// its Secret in [`FakeCluster::tokens`] now, for `usage-bootstrap-authentication`.
    fn bootstrap_user(&self, token: &str) -> Option<ReviewedUser> {
        let token = BootstrapToken::parse(token).ok()?;
        let (secret_type, data) = self.tokens.lock().unwrap().get(token.id()).cloned()?;
        let grant = validate_token_secret(
            &token,
            &secret_type,
            &data,
            SystemTime::now(),
            Usage::Authentication,
        )
        .ok()?;
        Some(ReviewedUser {
            name: grant.user,
            groups: grant.groups,
        })
    }
}

impl ClusterApi for FakeCluster {
    fn bootstrap_token_secret<'a>(
        &'a self,
        token_id: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<TokenSecret>>> {
        self.secret_reads.lock().unwrap().push(token_id.to_owned());
        let found = self.tokens.lock().unwrap().get(token_id).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn node_owner<'a>(&'a self, name: &'a str) -> BoxFuture<'a, kube::Result<NodeOwner>> {
        let owner = self
            .nodes
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or(NodeOwner::Absent);
        Box::pin(async move { Ok(owner) })
    }

    fn create_edge_node<'a>(
        &'a self,
        name: &'a str,
        taints: &'a [Taint],
    ) -> BoxFuture<'a, kube::Result<Option<String>>> {
        let mut nodes = self.nodes.lock().unwrap();
        let created = (!nodes.contains_key(name)).then(|| {
            let uid = format!("uid-{name}-{}", nodes.len());
            nodes.insert(name.to_owned(), NodeOwner::Edge { uid: uid.clone() });
            self.node_taints
                .lock()
                .unwrap()
                .insert(name.to_owned(), taints.to_vec());
            uid
        });
        Box::pin(async move { Ok(created) })
    }

    fn removed_edge_nodes(&self) -> futures::stream::BoxStream<'static, String> {
        Box::pin(futures::stream::pending())
    }

    fn create_approved_csr(&self, record: CsrRecord) -> BoxFuture<'_, kube::Result<String>> {
        let mut csrs = self.csrs.lock().unwrap();
        let name = format!("{}{}", record.generate_name, csrs.len());
        csrs.push((name.clone(), record, None));
        Box::pin(async move { Ok(name) })
    }

    fn issue_csr<'a>(
        &'a self,
        name: &'a str,
        certificate_pem: &'a str,
    ) -> BoxFuture<'a, kube::Result<()>> {
        for csr in self.csrs.lock().unwrap().iter_mut() {
            if csr.0 == name {
                csr.2 = Some(certificate_pem.to_owned());
            }
        }
        Box::pin(async move { Ok(()) })
    }

    /// Without an audience: bootstrap tokens of [`FakeCluster::tokens`] (recorded in
    /// [`FakeCluster::bootstrap_reviews`]); with one: the controller tokens above. The
    /// [`LOOKALIKE_TOKEN`] either way.
    fn review_token<'a>(
        &'a self,
        token: &'a str,
        audience: Option<&'a str>,
    ) -> BoxFuture<'a, kube::Result<Option<ReviewedUser>>> {
        if audience.is_none() {
            self.bootstrap_reviews
                .lock()
                .unwrap()
                .push(token.to_owned());
        }
        let user = if token == LOOKALIKE_TOKEN {
            Some(ReviewedUser {
                name: LOOKALIKE_USER.to_owned(),
                groups: vec!["system:masters".to_owned()],
            })
        } else if audience.is_none() {
            self.bootstrap_user(token)
        } else {
            let name = match token {
                CONTROLLER_TOKEN => Some(CONTROLLER_USER),
                STRANGER_TOKEN => Some("system:serviceaccount:default:default"),
                ROBOTS_TOKEN => Some(ROBOTS_USER),
                RIVAL_TOKEN => Some(RIVAL_USER),
                _ => None,
            };
            name.map(|name| ReviewedUser {
                name: name.to_owned(),
                groups: vec!["system:serviceaccounts".to_owned()],
            })
        };
        Box::pin(async move { Ok(user) })
    }

    /// The fake's RBAC: [`ROBOTS_USER`] may serve [`ROBOTS_GROUP`]; [`RIVAL_USER`] that and
    /// `lights.example.com`; nobody else anything.
    fn may_attach_group<'a>(
        &'a self,
        user: &'a ReviewedUser,
        group: &'a str,
    ) -> BoxFuture<'a, kube::Result<bool>> {
        let allowed = match user.name.as_str() {
            ROBOTS_USER => group == ROBOTS_GROUP,
            RIVAL_USER => group == ROBOTS_GROUP || group == "lights.example.com",
            _ => false,
        };
        Box::pin(async move { Ok(allowed) })
    }
}
