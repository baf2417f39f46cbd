//! [`ClusterApi`]: the Kubernetes API calls behind trust decisions, as a trait so the
//! decisions (in [`super::Trust`]) are unit-tested with a fake, and [`KubeCluster`], the
//! implementation on kube-rs used in production.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Secret, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use verge_core::well_known::EDGE_NODE_LABEL;

/// The signer of node client certificates (`spec.signerName` of their CSRs).
pub const NODE_SIGNER: &str = "verge.io/edge-node";

/// Annotation on a join's CSR naming the bootstrap token id used.
pub const TOKEN_ID_ANNOTATION: &str = "verge.io/bootstrap-token-id";

/// A bootstrap-token Secret as the trust checks read it: its `type` and decoded `data`.
pub type TokenSecret = (String, BTreeMap<String, Vec<u8>>);

/// What a node name refers to in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOwner {
    /// No Node of that name exists.
    Absent,
    /// A Verge edge node (it has the edge label).
    Edge {
        /// The Node's `metadata.uid`, which node certificates are bound to.
        uid: String,
    },
    /// A Node that is not a Verge edge node (e.g. a kubelet's): never taken over.
    Foreign,
}

/// A CertificateSigningRequest to record, approve and fill.
#[derive(Debug, Clone)]
pub struct CsrRecord {
    /// `metadata.generateName` prefix, e.g. `verge-join-edge-1-`.
    pub generate_name: String,
    /// The PKCS#10 request, PEM.
    pub request_pem: String,
    /// Requested lifetime, seconds (`spec.expirationSeconds`).
    pub expiration_seconds: i32,
    /// Annotations, e.g. the bootstrap token id.
    pub annotations: BTreeMap<String, String>,
    /// `reason` of the Approved condition, e.g. `VergeBootstrapTokenJoin`.
    pub approval_reason: String,
    /// `message` of the Approved condition.
    pub approval_message: String,
}

/// The Kubernetes API calls trust decisions need. Implementations return the API server's
/// error as is; callers decide what it means.
pub trait ClusterApi: Send + Sync + 'static {
    /// The bootstrap-token Secret `kube-system/bootstrap-token-<token_id>`: its `type` and
    /// `data`, or `None` when it does not exist. Only `Join.GetCa` reads it, and only with
    /// `trust.tokenCaDiscovery`: its proof over the CA is keyed with the token's secret, which
    /// no TokenReview reveals. A join's token is checked with [`ClusterApi::review_token`]
    /// instead.
    fn bootstrap_token_secret<'a>(
        &'a self,
        token_id: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<TokenSecret>>>;

    /// Whether Node `name` exists and is a Verge edge node.
    fn node_owner<'a>(&'a self, name: &'a str) -> BoxFuture<'a, kube::Result<NodeOwner>>;

    /// Creates Node `name` with the edge label and `taints` (`spec.taints`, already valid:
    /// the kubelet's `--register-with-taints`, which applies at creation only) and nothing
    /// else; its uid, or `None` when a Node of that name exists already (409).
    fn create_edge_node<'a>(
        &'a self,
        name: &'a str,
        taints: &'a [Taint],
    ) -> BoxFuture<'a, kube::Result<Option<String>>>;

    /// The names of edge Nodes that are deleted or lose the edge label from now on, as long
    /// as the stream is polled (a watch of the Nodes' metadata, re-established with backoff;
    /// names that vanished while it was re-listing come after the re-list).
    fn removed_edge_nodes(&self) -> futures::stream::BoxStream<'static, String>;

    /// The edge Node whose stream address (`verge_pki::stream_address`) is `address`, as the
    /// watch of [`removed_edge_nodes`](Self::removed_edge_nodes) last saw them; `None` when
    /// unknown (the default: no watch).
    fn edge_node_at(&self, address: &std::net::Ipv6Addr) -> Option<String> {
        let _ = address;
        None
    }

    /// Creates the CSR with signer [`NODE_SIGNER`] and approves it; returns its name.
    fn create_approved_csr(&self, record: CsrRecord) -> BoxFuture<'_, kube::Result<String>>;

    /// Writes the signed certificate (PEM) into the CSR's `status.certificate`.
    fn issue_csr<'a>(
        &'a self,
        name: &'a str,
        certificate_pem: &'a str,
    ) -> BoxFuture<'a, kube::Result<()>>;

    /// A TokenReview of `token`: the authenticated user, or `None`.
    ///
    /// With `Some(audience)` the review asks for that audience and a user is returned only
    /// when the API server says the token is valid for it (service-account tokens of
    /// controllers). With `None` the review names no audience, so the API server checks the
    /// token for its own audiences: bootstrap tokens have no audience, and a review that asks
    /// for one never authenticates them.
    fn review_token<'a>(
        &'a self,
        token: &'a str,
        audience: Option<&'a str>,
    ) -> BoxFuture<'a, kube::Result<Option<ReviewedUser>>>;

    /// A SubjectAccessReview: may `user` do verb `attach` on resource `messagegroups` of API
    /// group `verge.io` named `group` (the RBAC rule that lets a third-party controller serve
    /// a message group)?
    fn may_attach_group<'a>(
        &'a self,
        user: &'a ReviewedUser,
        group: &'a str,
    ) -> BoxFuture<'a, kube::Result<bool>>;
}

/// A user authenticated by a TokenReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewedUser {
    /// `status.user.username`, e.g. `system:serviceaccount:<namespace>:<name>`.
    pub name: String,
    /// `status.user.groups` (for the SubjectAccessReview: RBAC bindings to groups).
    pub groups: Vec<String>,
}

/// The API group of the RBAC rules for message groups (`verge.io`).
pub const MESSAGE_GROUP_API_GROUP: &str = "verge.io";
/// The RBAC resource of message groups (`messagegroups`).
pub const MESSAGE_GROUP_RESOURCE: &str = "messagegroups";
/// The RBAC verb that lets a controller serve a message group (`attach`).
pub const MESSAGE_GROUP_VERB: &str = "attach";

/// [`ClusterApi`] on a kube-rs client (needs: get, create, list and watch Nodes,
/// create/approve/update-status CSRs and `approve`/`sign` on signer `verge.io/edge-node`,
/// create TokenReviews (controllers' tokens and joins' bootstrap tokens) and
/// SubjectAccessReviews; see `deploy/cloud/access/rbac.yaml`; with `trust.tokenCaDiscovery`
/// also get Secrets in `kube-system`, for `GetCa`: `deploy/cloud/optional/token-ca-discovery.yaml`).
///
/// Edge Nodes seen by the watch of [`ClusterApi::removed_edge_nodes`] (name → uid) answer
/// [`ClusterApi::node_owner`] without a request: a session, a renewal and every stream
/// through a node then cost no GET. Whatever the watch has not seen (a Node just created by
/// a join, a kubelet's, an absent one) is read from the API server.
#[derive(Clone)]
pub struct KubeCluster {
    client: kube::Client,
    edge_nodes: EdgeNodes,
    addresses: EdgeAddresses,
}

/// Edge Node name → uid, as the edge-Node watch last saw them.
type EdgeNodes = Arc<RwLock<HashMap<String, String>>>;
/// Edge Node stream address → name, for the same Nodes.
type EdgeAddresses = Arc<RwLock<HashMap<std::net::Ipv6Addr, String>>>;

impl KubeCluster {
    /// Calls through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            edge_nodes: EdgeNodes::default(),
            addresses: EdgeAddresses::default(),
        }
    }
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeCluster")
    }
}

/// `Ok(None)` for a 404, the error otherwise.
fn absent_is_none<T>(result: kube::Result<T>) -> kube::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(error),
    }
}

impl ClusterApi for KubeCluster {
    fn bootstrap_token_secret<'a>(
        &'a self,
        token_id: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<TokenSecret>>> {
        Box::pin(async move {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), "kube-system");
            let name = format!("bootstrap-token-{token_id}");
            Ok(absent_is_none(api.get(&name).await)?.map(|secret| {
                let data = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, ByteString(v))| (k, v))
                    .collect();
                (secret.type_.unwrap_or_default(), data)
            }))
        })
    }

    fn node_owner<'a>(&'a self, name: &'a str) -> BoxFuture<'a, kube::Result<NodeOwner>> {
        Box::pin(async move {
            let watched = self
                .edge_nodes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(name)
                .cloned();
            if let Some(uid) = watched {
                return Ok(NodeOwner::Edge { uid });
            }
            let api: Api<Node> = Api::all(self.client.clone());
            Ok(match absent_is_none(api.get(name).await)? {
                None => NodeOwner::Absent,
                Some(node) if node.labels().contains_key(EDGE_NODE_LABEL) => NodeOwner::Edge {
                    uid: node.uid().unwrap_or_default(),
                },
                Some(_) => NodeOwner::Foreign,
            })
        })
    }

    fn create_edge_node<'a>(
        &'a self,
        name: &'a str,
        taints: &'a [Taint],
    ) -> BoxFuture<'a, kube::Result<Option<String>>> {
        Box::pin(async move {
            let api: Api<Node> = Api::all(self.client.clone());
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(BTreeMap::from([(
                        EDGE_NODE_LABEL.to_owned(),
                        String::new(),
                    )])),
                    ..ObjectMeta::default()
                },
                spec: (!taints.is_empty()).then(|| NodeSpec {
                    taints: Some(taints.to_vec()),
                    ..NodeSpec::default()
                }),
                status: None,
            };
            match api.create(&PostParams::default(), &node).await {
                Ok(created) => Ok(Some(created.uid().unwrap_or_default())),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
                Err(error) => Err(error),
            }
        })
    }

    fn removed_edge_nodes(&self) -> futures::stream::BoxStream<'static, String> {
        removed_edge_nodes(
            self.client.clone(),
            self.edge_nodes.clone(),
            self.addresses.clone(),
        )
    }

    fn edge_node_at(&self, address: &std::net::Ipv6Addr) -> Option<String> {
        self.addresses
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(address)
            .cloned()
    }

    fn create_approved_csr(&self, record: CsrRecord) -> BoxFuture<'_, kube::Result<String>> {
        Box::pin(async move {
            let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
            let csr = CertificateSigningRequest {
                metadata: ObjectMeta {
                    generate_name: Some(record.generate_name),
                    annotations: Some(record.annotations),
                    ..ObjectMeta::default()
                },
                spec: CertificateSigningRequestSpec {
                    request: ByteString(record.request_pem.into_bytes()),
                    signer_name: NODE_SIGNER.to_owned(),
                    expiration_seconds: Some(record.expiration_seconds),
                    usages: Some(vec![
                        "digital signature".to_owned(),
                        "client auth".to_owned(),
                    ]),
                    ..CertificateSigningRequestSpec::default()
                },
                status: None,
            };
            let created = api.create(&PostParams::default(), &csr).await?;
            let name = created.metadata.name.unwrap_or_default();
            approve(&api, &name, record.approval_reason, record.approval_message).await?;
            Ok(name)
        })
    }

    fn issue_csr<'a>(
        &'a self,
        name: &'a str,
        certificate_pem: &'a str,
    ) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
            let status = json!({
                "status": { "certificate": ByteString(certificate_pem.as_bytes().to_vec()) }
            });
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await?;
            Ok(())
        })
    }

    fn review_token<'a>(
        &'a self,
        token: &'a str,
        audience: Option<&'a str>,
    ) -> BoxFuture<'a, kube::Result<Option<ReviewedUser>>> {
        Box::pin(async move {
            let api: Api<TokenReview> = Api::all(self.client.clone());
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_owned(),
                    audiences: audience.map(|audience| vec![audience.to_owned()]),
                },
                ..TokenReview::default()
            };
            let status = api
                .create(&PostParams::default(), &review)
                .await?
                .status
                .unwrap_or_default();
            // Without an audience asked for, the API server's own audiences apply, which the
            // caller does not know: nothing to compare.
            let audience_ok = audience.is_none_or(|audience| {
                status
                    .audiences
                    .as_ref()
                    .is_some_and(|a| a.iter().any(|a| a == audience))
            });
            Ok(match (status.authenticated, audience_ok, status.user) {
                (Some(true), true, Some(user)) => user.username.map(|name| ReviewedUser {
                    name,
                    groups: user.groups.unwrap_or_default(),
                }),
                _ => None,
            })
        })
    }

    fn may_attach_group<'a>(
        &'a self,
        user: &'a ReviewedUser,
        group: &'a str,
    ) -> BoxFuture<'a, kube::Result<bool>> {
        Box::pin(async move {
            let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    groups: Some(user.groups.clone()),
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(MESSAGE_GROUP_API_GROUP.to_owned()),
                        resource: Some(MESSAGE_GROUP_RESOURCE.to_owned()),
                        verb: Some(MESSAGE_GROUP_VERB.to_owned()),
                        name: Some(group.to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    ..SubjectAccessReviewSpec::default()
                },
                ..SubjectAccessReview::default()
            };
            let status = api.create(&PostParams::default(), &review).await?.status;
            Ok(status.is_some_and(|s| s.allowed && !s.denied.unwrap_or(false)))
        })
    }
}

use kube::ResourceExt as _;

/// [`KubeCluster::removed_edge_nodes`]: a metadata watch of the Nodes with the edge label. A
/// Node that stops matching (deleted, or its label removed) comes as a delete event; after a
/// re-list, the names known before and missing from the list.
/// The names of edge Nodes removed from now on (see [`ClusterApi::removed_edge_nodes`]);
/// while it is polled, `known` holds every edge Node's uid as the watch sees it.
fn removed_edge_nodes(
    client: kube::Client,
    known: EdgeNodes,
    addresses: EdgeAddresses,
) -> futures::stream::BoxStream<'static, String> {
    use futures::StreamExt as _;
    use kube::runtime::WatchStreamExt as _;
    use kube::runtime::watcher::{self, Event};
    let api: Api<kube::core::PartialObjectMeta<Node>> = Api::all(client);
    let config = watcher::Config::default().labels(EDGE_NODE_LABEL);
    let mut listing = HashMap::<String, String>::new();
    watcher::watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let removed: Vec<String> = match event {
                Ok(Event::Apply(meta)) => {
                    let name = meta.name_any();
                    write(&addresses).insert(verge_pki::stream_address(&name), name.clone());
                    write(&known).insert(name, meta.uid().unwrap_or_default());
                    Vec::new()
                }
                Ok(Event::Delete(meta)) => {
                    let name = meta.name_any();
                    write(&addresses).remove(&verge_pki::stream_address(&name));
                    write(&known).remove(&name);
                    vec![name]
                }
                Ok(Event::Init) => {
                    listing.clear();
                    Vec::new()
                }
                Ok(Event::InitApply(meta)) => {
                    listing.insert(meta.name_any(), meta.uid().unwrap_or_default());
                    Vec::new()
                }
                Ok(Event::InitDone) => {
                    let mut known = write(&known);
                    let gone = known
                        .keys()
                        .filter(|name| !listing.contains_key(*name))
                        .cloned()
                        .collect();
                    *known = std::mem::take(&mut listing);
                    *write(&addresses) = known
                        .keys()
                        .map(|name| (verge_pki::stream_address(name), name.clone()))
                        .collect();
                    gone
                }
                Err(error) => {
                    tracing::warn!(%error, "watching edge Nodes (retried with backoff)");
                    Vec::new()
                }
            };
            futures::future::ready((!removed.is_empty()).then_some(removed))
        })
        .flat_map(futures::stream::iter)
        .boxed()
}

/// A map of the edge-Node watch, for writing.
fn write<K, V>(map: &RwLock<HashMap<K, V>>) -> std::sync::RwLockWriteGuard<'_, HashMap<K, V>> {
    map.write().unwrap_or_else(PoisonError::into_inner)
}

/// Adds the `Approved` condition with `reason` and `message` to CSR `name` (the
/// `/approval` subresource).
///
/// # Errors
/// The API server's.
pub(crate) async fn approve(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    reason: String,
    message: String,
) -> kube::Result<()> {
    let approval = CertificateSigningRequestStatus {
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: "Approved".to_owned(),
            status: "True".to_owned(),
            reason: Some(reason),
            message: Some(message),
            ..CertificateSigningRequestCondition::default()
        }]),
        certificate: None,
    };
    api.patch_approval(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": approval })),
    )
    .await?;
    Ok(())
}
