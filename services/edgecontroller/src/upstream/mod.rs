//! Upstream: what edges report, applied to the API server.
//!
//! A message arrives as an [`Envelope`] from `node` with a cloud-side path
//! `node/<node>/<namespace>/<type>/<name>` (read from the wire in `hub`). [`parse`] turns it
//! into an [`Inbound`] (checking that a node only writes its own objects); [`handle`] applies it with
//! kube-rs and builds the answer: `ack` after the API server accepted the write, `response`
//! with the object for queries, `error` with a UTF-8 reason otherwise (docs/protocol.md,
//! "Messages"). Pods, pod status, configmaps, secrets and tokens are only served for pods
//! bound to the asking node (`spec.nodeName`), as the Kubernetes node authorizer limits a
//! kubelet; service lists only for namespaces with such a pod (and the master service).
//!
//! - [`node`]: node registration (`insert _/node/<node>`) and status
//!   (`update _/nodestatus/<node>`).
//! - [`lease`]: node lease renewal (`update kube-node-lease/lease/<node>`, once per
//!   session; [`crate::renewer`] renews it from then on).
//! - [`pod`]: pod status (`update <ns>/podstatus/<name>`) and completed deletions
//!   (`delete <ns>/pod/<name>`).
//! - [`event`]: events (`insert <ns>/event/<name>`).
//! - [`query`]: configmap and secret queries (`query <ns>/configmap|secret/<name>`).
//! - [`services`]: service list queries (`query <ns>/servicelist/_`), for the kubelet's
//!   service environment variables.
//! - [`token`]: service account tokens (`query <ns>/serviceaccounttoken/<sa>`).
//! - [`pod_certificate`]: PodCertificateRequests (`query <ns>/podcertificaterequest/<name>`:
//!   created for a pod, or read), as the node.
//! - [`trust_bundles`]: ClusterTrustBundles (`query _/clustertrustbundle/<name>`,
//!   `query _/clustertrustbundlelist/<signer>`), read as the node.

pub mod event;
pub mod lease;
pub mod node;
pub mod node_labels;
pub mod pod;
pub mod pod_certificate;
pub mod query;
pub mod services;
pub mod token;
pub mod trust_bundles;

#[cfg(test)]
mod fake_api;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, NodeStatus, PodStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::{Instrument as _, debug, warn};
use verge_core::{
    CLUSTER_SCOPE, Envelope, Group, Kind, LIST_NAME, NODE_LEASE_NAMESPACE, NodeResource, Operation,
    Outcome, ResourceKey, ResourceType,
};

use crate::cache::Caches;
use crate::renewer::Renewer;
use crate::{Error, Result};
pub use node_labels::NodeLabelPolicy;
pub use pod::PodRef;

/// The `source` of every message edgecontroller sends.
pub const SOURCE: &str = "edgecontroller";

/// A write an edge asks for, parsed and checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `insert _/node/<node>`: register the node (create, or merge labels and taints).
    RegisterNode(Box<Node>),
    /// `update _/nodestatus/<node>`: strategic-merge-patch the node's status.
    NodeStatus(Box<NodeStatus>),
    /// `update kube-node-lease/lease/<node>`: renew the node's lease, and keep renewing it
    /// while the session lives ([`crate::renewer`]).
    RenewLease(Box<Lease>),
    /// `update <ns>/podstatus/<name>`: strategic-merge-patch a bound pod's status.
    PodStatus(PodRef, Box<PodStatus>),
    /// `delete <ns>/pod/<name>`: delete a bound pod the edge terminated (grace 0, uid).
    DeletePod(PodRef),
    /// `insert <ns>/event/<name>`: create the event.
    CreateEvent(Box<Event>),
    /// `query <ns>/configmap/<name>` or `<ns>/secret/<name>`: answer the object.
    Query(ResourceKey),
    /// `query <ns>/servicelist/_`: answer the Services of the namespace the node may see.
    ServiceList(String),
    /// `query <ns>/serviceaccounttoken/<sa>`: issue a token for a pod bound to the node.
    Token {
        /// The namespace.
        namespace: String,
        /// The service account.
        service_account: String,
        /// The TokenRequest (audiences, expirationSeconds, boundObjectRef = the pod).
        request: Box<TokenRequest>,
    },
    /// `query _/clustertrustbundle/<name>` or `_/clustertrustbundlelist/<signer>`: answer the
    /// ClusterTrustBundles the node's credentials read.
    TrustBundles(trust_bundles::Query),
    /// `query <ns>/podcertificaterequest/<name>`: create a PodCertificateRequest for the pod
    /// `<name>` (content: the request), or read the request `<name>` (no content), as the
    /// node.
    PodCertificate(pod_certificate::Query),
}

/// What a successfully applied request is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `ack`, empty content.
    Ack,
    /// `response` with this content (an object's JSON).
    Response(Vec<u8>),
}

/// What upstream handlers need: the API client, the watch caches and the Lease renewer.
#[derive(Clone)]
pub struct Context {
    /// The clients acting as each node: every API call made for a node goes through its own
    /// (the Node authorizer and NodeRestriction bound it).
    pub nodes: crate::node_clients::NodeClients,
    /// The watch caches (pods bound to nodes, for authorization).
    pub caches: Caches,
    /// Renews the Lease of every connected node after its edge sent it.
    pub renewer: Renewer,
    /// The labels an edge may give its Node (`reservedNodeLabels` and NodeRestriction's rules).
    pub node_labels: NodeLabelPolicy,
}

impl verge_controller::dispatch::Handler for Context {
    fn handle(
        &self,
        node: &str,
        message: &Envelope,
    ) -> impl std::future::Future<Output = Option<Envelope>> + Send {
        handle(self, node, message)
    }

    /// The renewer renews a node's Lease only while its session lives.
    fn on_session(&self, node: &str, connected: bool) {
        if connected {
            self.renewer.connected(node);
        } else {
            self.renewer.disconnected(node);
            self.nodes.forget(node);
        }
    }
}

/// An upstream message, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A write to apply and answer.
    Request(Request),
    /// The edge's answer (`ack`, `response`, `error`) to a downstream message; never answered.
    Answer {
        /// The answer's operation.
        operation: Operation,
        /// The id of the downstream message it answers.
        parent_id: String,
    },
}

/// Classifies `message`, received from the session of `node`.
///
/// # Errors
/// [`Error::Route`] for an edge-side path, [`Error::Forbidden`] when the path or the object
/// names another node (or the lease is outside `kube-node-lease`), [`Error::Decode`] for bad
/// JSON content, [`Error::Unsupported`] for any other operation/type.
pub fn parse(node: &str, message: &Envelope) -> Result<Inbound> {
    let operation = message.operation();
    if let Kind::Answer { to, .. } = &message.kind {
        return Ok(Inbound::Answer {
            operation,
            parent_id: to.to_string(),
        });
    }
    let unsupported = || Error::Unsupported {
        operation: operation.to_string(),
        resource: message.path(),
    };
    if message.group != Group::Resource {
        return Err(unsupported());
    }
    let path: NodeResource = message.node_resource().ok_or_else(|| {
        Error::Route(verge_proto::Error::Invalid {
            id: message.id.to_string(),
            field: "route.resource",
            source: verge_core::Error::ResourcePath {
                path: message.path(),
                reason: "expected node/<node>/<namespace>/<type>/<name>",
            },
        })
    })?;
    let forbidden = |what: String| Error::Forbidden {
        node: node.to_owned(),
        what,
    };
    if path.node != node {
        return Err(forbidden(format!("objects of node {:?}", path.node)));
    }
    let key = &path.key;
    let content = message.body.as_slice();
    let request = match (operation, key.kind) {
        (Operation::Insert, ResourceType::Node) => {
            check_own(
                node,
                key.namespace == CLUSTER_SCOPE,
                &key.name,
                "node",
                &path,
            )?;
            let object: Node = decode(content, "v1.Node")?;
            let name = object.metadata.name.as_deref().unwrap_or_default();
            if name != node {
                return Err(forbidden(format!("a Node object named {name:?}")));
            }
            Request::RegisterNode(Box::new(object))
        }
        (Operation::Update, ResourceType::NodeStatus) => {
            check_own(
                node,
                key.namespace == CLUSTER_SCOPE,
                &key.name,
                "node status",
                &path,
            )?;
            Request::NodeStatus(Box::new(decode(content, "v1.NodeStatus")?))
        }
        (Operation::Update, ResourceType::Lease) => {
            check_own(
                node,
                key.namespace == NODE_LEASE_NAMESPACE,
                &key.name,
                "lease",
                &path,
            )?;
            let object: Lease = decode(content, "coordination.k8s.io/v1.Lease")?;
            if let Some(name) = object.metadata.name.as_deref().filter(|n| *n != node) {
                return Err(forbidden(format!("a Lease object named {name:?}")));
            }
            Request::RenewLease(Box::new(object))
        }
        (Operation::Update, ResourceType::PodStatus) => Request::PodStatus(
            pod_ref(node, key, message)?,
            Box::new(decode(content, "v1.PodStatus")?),
        ),
        (Operation::Delete, ResourceType::Pod) => Request::DeletePod(pod_ref(node, key, message)?),
        (Operation::Insert, ResourceType::Event) => {
            let ns = namespaced(node, key)?;
            let object = decode(content, "v1.Event")?;
            Request::CreateEvent(Box::new(event::prepare(node, ns, &key.name, object)?))
        }
        (Operation::Query, ResourceType::ConfigMap | ResourceType::Secret) => {
            namespaced(node, key)?;
            Request::Query(key.clone())
        }
        (Operation::Query, ResourceType::ServiceList) if key.name == LIST_NAME => {
            Request::ServiceList(namespaced(node, key)?.to_owned())
        }
        (
            Operation::Query,
            ResourceType::ClusterTrustBundle | ResourceType::ClusterTrustBundleList,
        ) => Request::TrustBundles(trust_bundles::parse(node, key)?),
        (Operation::Query, ResourceType::PodCertificateRequest) => {
            let ns = namespaced(node, key)?;
            Request::PodCertificate(pod_certificate::parse(node, ns, &key.name, content)?)
        }
        (Operation::Query, ResourceType::ServiceAccountToken) => Request::Token {
            namespace: namespaced(node, key)?.to_owned(),
            service_account: key.name.clone(),
            request: Box::new(decode(content, "authentication.k8s.io/v1.TokenRequest")?),
        },
        _ => return Err(unsupported()),
    };
    Ok(Inbound::Request(request))
}

/// Checks that a node-scoped path is in the right namespace and names the node itself.
fn check_own(
    node: &str,
    namespace_ok: bool,
    name: &str,
    what: &str,
    path: &NodeResource,
) -> Result<()> {
    if namespace_ok && name == node {
        Ok(())
    } else {
        Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!("{what} {:?}", path.to_string()),
        })
    }
}

/// The namespace of a namespaced key.
fn namespaced<'a>(node: &str, key: &'a ResourceKey) -> Result<&'a str> {
    key.k8s_namespace().ok_or_else(|| Error::Forbidden {
        node: node.to_owned(),
        what: format!("cluster-scoped {key}"),
    })
}

/// The pod named by `key`, with the uid the message carries.
fn pod_ref(node: &str, key: &ResourceKey, message: &Envelope) -> Result<PodRef> {
    Ok(PodRef {
        namespace: namespaced(node, key)?.to_owned(),
        name: key.name.clone(),
        uid: message
            .kind
            .version()
            .map(|v| v.uid.clone())
            .unwrap_or_default(),
    })
}

fn decode<T: serde::de::DeserializeOwned>(content: &[u8], kind: &'static str) -> Result<T> {
    serde_json::from_slice(content).map_err(|source| Error::Decode { kind, source })
}

/// Applies one upstream message from `node` and returns the answer to send back (`None` for
/// answers from the edge, which are not answered).
#[tracing::instrument(
    skip_all,
    fields(id = %message.id, node = %node, resource = %message.path())
)]
pub async fn handle(context: &Context, node: &str, message: &Envelope) -> Option<Envelope> {
    let result = match parse(node, message) {
        Ok(Inbound::Answer {
            operation,
            parent_id,
        }) => {
            debug!(%operation, %parent_id, "edge answered a downstream message");
            return None;
        }
        Ok(Inbound::Request(request)) => {
            // A traced report (a pod's status from its sync) continues its trace here, down
            // to the API server write.
            let span = verge_telemetry::propagation::continued(&message.trace, || {
                verge_telemetry::span!(
                    "edgecontroller.upstream",
                    verge.node = %node,
                    verge.message.id = %message.id,
                    verge.resource = %message.path(),
                    verge.operation = %message.operation(),
                    otel.status_code = tracing::field::Empty,
                )
            });
            let result = apply(context, node, request).instrument(span.clone()).await;
            if result.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            result
        }
        Err(error) => Err(error),
    };
    Some(match result {
        Ok(Reply::Ack) => {
            debug!("applied");
            answer(message, Outcome::Ack, Vec::new())
        }
        Ok(Reply::Response(content)) => {
            debug!("answered");
            answer(message, Outcome::Response, content)
        }
        Err(error) => {
            if matches!(
                error,
                Error::Forbidden { .. }
                    | Error::NotReferenced { .. }
                    | Error::NotInNamespace { .. }
            ) {
                AUTHORIZATION_REFUSALS.fetch_add(1, Ordering::Relaxed);
                warn!(%node, reason = %error.reason(), "refused by node authorization");
            } else {
                warn!(error = %error.reason(), "upstream message rejected");
            }
            answer(message, Outcome::Error(error.reason()), Vec::new())
        }
    })
}

/// Upstream messages refused by node authorization since start: a node writing another
/// node's objects or a Node that is not a Verge edge node, or asking for objects or tokens
/// no pod of its own references, or for the services of a namespace without its pods. Each is also logged with the node and the reason.
pub static AUTHORIZATION_REFUSALS: AtomicU64 = AtomicU64::new(0);

async fn apply(context: &Context, node: &str, request: Request) -> Result<Reply> {
    let client = &context.nodes.of(node);
    match request {
        Request::RegisterNode(object) => {
            node::register(client, node, *object, &context.node_labels).await?
        }
        Request::NodeStatus(status) => node::report_status(client, node, *status).await?,
        Request::RenewLease(object) => {
            let renewal = lease::Renewal::from_lease(node, *object);
            let result = lease::renew(client, node, &renewal).await;
            context
                .renewer
                .lease_message(node, &renewal, result.is_ok());
            result?;
        }
        Request::PodStatus(pod, status) => {
            pod::report_status(client, &context.caches, node, &pod, &status).await?
        }
        Request::DeletePod(pod) => pod::delete(client, &context.caches, node, &pod).await?,
        Request::CreateEvent(object) => event::create(client, &object).await?,
        Request::Query(key) => {
            let json = query::answer(client, &context.caches, node, &key).await?;
            return Ok(Reply::Response(json));
        }
        Request::ServiceList(namespace) => {
            let json = services::answer(&context.caches, node, &namespace).await?;
            return Ok(Reply::Response(json));
        }
        Request::Token {
            namespace,
            service_account,
            request,
        } => {
            let json = token::request(client, node, &namespace, &service_account, &request);
            return Ok(Reply::Response(json.await?));
        }
        Request::TrustBundles(query) => {
            let json = trust_bundles::answer(client, &query).await?;
            return Ok(Reply::Response(json));
        }
        Request::PodCertificate(query) => {
            let json = pod_certificate::answer(client, node, query).await?;
            return Ok(Reply::Response(json));
        }
    }
    Ok(Reply::Ack)
}

/// An answer (`ack`/`response`/`error`) to `message`: a new id, `parent_id` = the message's
/// id, group `resource`, the same resource path; `body` is a response's object.
pub fn answer(message: &Envelope, outcome: Outcome, body: Vec<u8>) -> Envelope {
    crate::IDENTITY.answer(message, outcome, body)
}

#[cfg(test)]
mod tests;
