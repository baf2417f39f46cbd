//! A fake of cloudhub's own `ClusterApi` trait for component tests: bootstrap-token Secrets,
//! Nodes, recorded CSRs and token reviews held in memory. (The real API server is exercised by
//! the e2e tests in `tests/`.)

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::future::BoxFuture;
use verge_cloudhub::trust::{ClusterApi, CsrRecord, NodeOwner, ReviewedUser, TokenSecret};

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

/// In-memory cluster state.
#[derive(Debug, Default)]
pub struct FakeCluster {
    /// `token-id` → (Secret type, data).
    pub tokens: Mutex<BTreeMap<String, TokenSecret>>,
    /// Node name → owner.
    pub nodes: Mutex<BTreeMap<String, NodeOwner>>,
    /// CSRs created: (name, record, certificate once issued).
    pub csrs: Mutex<Vec<(String, CsrRecord, Option<String>)>>,
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

impl ClusterApi for FakeCluster {
    fn bootstrap_token_secret<'a>(
        &'a self,
        token_id: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<TokenSecret>>> {
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
    ) -> BoxFuture<'a, kube::Result<Option<String>>> {
        let mut nodes = self.nodes.lock().unwrap();
        let created = (!nodes.contains_key(name)).then(|| {
            let uid = format!("uid-{name}-{}", nodes.len());
            nodes.insert(name.to_owned(), NodeOwner::Edge { uid: uid.clone() });
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

    fn review_token<'a>(
        &'a self,
        token: &'a str,
        _audience: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<ReviewedUser>>> {
        let user = match token {
            CONTROLLER_TOKEN => Some(CONTROLLER_USER),
            STRANGER_TOKEN => Some("system:serviceaccount:default:default"),
            ROBOTS_TOKEN => Some(ROBOTS_USER),
            RIVAL_TOKEN => Some(RIVAL_USER),
            _ => None,
        };
        let user = user.map(|name| ReviewedUser {
            name: name.to_owned(),
            groups: vec!["system:serviceaccounts".to_owned()],
        });
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
