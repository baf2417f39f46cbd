//! Upstream: what edges report, applied to the API server.
//!
//! A message arrives as `Routed{node, message}` with a cloud-side path
//! `node/<node>/<namespace>/<type>/<name>`. [`parse`] turns it into an [`Inbound`] once, at the
//! boundary (checking that a node only writes its own objects); [`handle`] applies it with
//! kube-rs and builds the answer: `ack` after the API server accepted the write, `error` with
//! a UTF-8 reason otherwise (docs/protocol.md, "Messages").
//!
//! - [`node`]: node registration (`insert _/node/<node>`) and status
//!   (`update _/nodestatus/<node>`).
//! - [`lease`]: node lease renewal (`update kube-node-lease/lease/<node>`).

pub mod lease;
pub mod node;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use tracing::{debug, warn};
use verge_core::{CLUSTER_SCOPE, Group, NodeResource, Operation, ResourceType};
use verge_proto::{Message, MessageExt};

use crate::{Error, Result};

/// The `source` of every message edgecontroller sends.
pub const SOURCE: &str = "edgecontroller";

/// The namespace of node leases (Kubernetes `kube-node-lease`).
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// A write an edge asks for, parsed and checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `insert _/node/<node>`: register the node (create, or merge labels and taints).
    RegisterNode(Box<Node>),
    /// `update _/nodestatus/<node>`: strategic-merge-patch the node's status.
    NodeStatus(Box<NodeStatus>),
    /// `update kube-node-lease/lease/<node>`: renew the node's lease.
    RenewLease(Box<Lease>),
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
/// [`Error::Route`] for an unparsable route, [`Error::Forbidden`] when the path or the object
/// names another node (or the lease is outside `kube-node-lease`), [`Error::Decode`] for bad
/// JSON content, [`Error::Unsupported`] for any other operation/type.
pub fn parse(node: &str, message: &Message) -> Result<Inbound> {
    let operation = message.operation()?;
    if matches!(
        operation,
        Operation::Ack | Operation::Response | Operation::Error
    ) {
        return Ok(Inbound::Answer {
            operation,
            parent_id: message.parent_id().to_owned(),
        });
    }
    let unsupported = || Error::Unsupported {
        operation: operation.to_string(),
        resource: message.resource().to_owned(),
    };
    if message.group()? != Group::Resource {
        return Err(unsupported());
    }
    let path: NodeResource = message.node_resource()?;
    let forbidden = |what: String| Error::Forbidden {
        node: node.to_owned(),
        what,
    };
    if path.node != node {
        return Err(forbidden(format!("objects of node {:?}", path.node)));
    }
    let key = &path.key;
    let content = message.content.as_slice();
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
                key.namespace == LEASE_NAMESPACE,
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

fn decode<T: serde::de::DeserializeOwned>(content: &[u8], kind: &'static str) -> Result<T> {
    serde_json::from_slice(content).map_err(|source| Error::Decode { kind, source })
}

/// Applies one upstream message from `node` and returns the answer to send back (`None` for
/// answers from the edge, which are not answered, and for messages without an id).
#[tracing::instrument(
    skip_all,
    fields(id = %message.id(), node = %node, resource = %message.resource())
)]
pub async fn handle(client: &kube::Client, node: &str, message: &Message) -> Option<Message> {
    if message.id().is_empty() {
        warn!("upstream message without id dropped");
        return None;
    }
    let result = match parse(node, message) {
        Ok(Inbound::Answer {
            operation,
            parent_id,
        }) => {
            debug!(%operation, %parent_id, "edge answered a downstream message");
            return None;
        }
        Ok(Inbound::Request(request)) => apply(client, node, request).await,
        Err(error) => Err(error),
    };
    Some(match result {
        Ok(()) => {
            debug!("applied");
            answer(message, Operation::Ack, Vec::new())
        }
        Err(error) => {
            warn!(error = %error.reason(), "upstream message rejected");
            answer(message, Operation::Error, error.reason().into_bytes())
        }
    })
}

async fn apply(client: &kube::Client, node: &str, request: Request) -> Result<()> {
    match request {
        Request::RegisterNode(object) => node::register(client, node, *object).await,
        Request::NodeStatus(status) => node::report_status(client, node, *status).await,
        Request::RenewLease(object) => lease::renew(client, node, *object).await,
    }
}

/// An answer (`ack`/`error`) to `message`: a new id, `parent_id` = the message's id, group
/// `resource`, the same resource path.
pub fn answer(message: &Message, operation: Operation, content: Vec<u8>) -> Message {
    Message::reply(
        uuid::Uuid::new_v4().to_string(),
        message.id(),
        SOURCE,
        Group::Resource,
        operation,
        message.resource(),
        content,
    )
}

#[cfg(test)]
mod tests;
