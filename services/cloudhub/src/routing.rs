//! Pure routing rules: validating messages at the boundary and rewriting resource paths
//! between the edge side (`<ns>/<type>/<name>`) and the cloud side
//! (`node/<node>/<ns>/<type>/<name>`), as KubeEdge cloudhub does with its `node/<node>/`
//! resource prefix.

use verge_core::{Group, NodeResource, Operation, ResourceKey};
use verge_proto::hub::Routed;
use verge_proto::{Message, MessageExt};

use crate::{Error, Result};

/// The `route.source` of messages cloudhub produces itself.
pub const SOURCE: &str = "cloudhub";

/// What to do with a message received from an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upstream {
    /// A keepalive: answer it, forward nothing.
    Keepalive,
    /// Forward to a controller serving this group; the resource is now cloud-side.
    Forward(Group),
}

fn malformed(message: &Message) -> impl Fn(verge_core::Error) -> Error + '_ {
    |source| Error::MalformedRoute {
        id: message.id().to_owned(),
        source,
    }
}

/// Validates a message from the session of `node` and rewrites its resource, in place, to
/// the cloud side.
///
/// An empty resource is allowed for answers (`ack`, `response`, `error`), `keepalive` and
/// `resync`.
///
/// # Errors
/// [`Error::MissingId`], or [`Error::MalformedRoute`] for an unknown group or operation or an
/// unparsable resource path.
pub(crate) fn upstream(node: &str, message: &mut Message) -> Result<Upstream> {
    if message.id().is_empty() {
        return Err(Error::MissingId);
    }
    let operation = message.operation().map_err(malformed(message))?;
    let group = message.group().map_err(malformed(message))?;
    if operation == Operation::Keepalive {
        return Ok(Upstream::Keepalive);
    }
    let may_be_empty = operation.is_answer() || operation == Operation::Resync;
    if !(may_be_empty && message.resource().is_empty()) {
        let key: ResourceKey = message.edge_key().map_err(malformed(message))?;
        let cloud = NodeResource::new(node, key).to_string();
        if let Some(route) = message.route.as_mut() {
            route.resource = cloud;
        }
    }
    Ok(Upstream::Forward(group))
}

/// Validates a downstream message from a controller and strips its resource to the edge side.
/// Returns the target node and the message to enqueue.
///
/// The resource must be `node/<node>/<ns>/<type>/<name>` with `<node>` equal to
/// `Routed.node`; answers (`ack`, `response`, `error`) may have an empty resource.
///
/// # Errors
/// [`Error::UnexpectedFrame`] without a message or node, [`Error::MissingId`],
/// [`Error::MalformedRoute`], [`Error::NodeMismatch`].
pub(crate) fn downstream(routed: Routed) -> Result<(String, Message)> {
    let Routed { node, message } = routed;
    let mut message = message.ok_or(Error::UnexpectedFrame("Routed without a message"))?;
    if node.is_empty() {
        return Err(Error::UnexpectedFrame("Routed without a node"));
    }
    if message.id().is_empty() {
        return Err(Error::MissingId);
    }
    let operation = message.operation().map_err(malformed(&message))?;
    message.group().map_err(malformed(&message))?;
    if operation.is_answer() && message.resource().is_empty() {
        return Ok((node, message));
    }
    let resource: NodeResource = message.node_resource().map_err(malformed(&message))?;
    if resource.node != node {
        return Err(Error::NodeMismatch {
            id: message.id().to_owned(),
            routed: node,
            resource: message.resource().to_owned(),
        });
    }
    if let Some(route) = message.route.as_mut() {
        route.resource = resource.key.to_string();
    }
    Ok((node, message))
}

/// Cloudhub's answer to the edge keepalive `parent_id` (group `hub`, empty resource).
pub(crate) fn keepalive_reply_to(parent_id: &str) -> Message {
    Message::reply(
        new_id(),
        parent_id,
        SOURCE,
        Group::Hub,
        Operation::Keepalive,
        "",
        Vec::new(),
    )
}

/// An `error` answer (group `group`, edge-side `resource`) to the message `parent_id`,
/// carrying `reason` (UTF-8) in `content`.
pub(crate) fn error_reply(parent_id: &str, group: Group, resource: &str, reason: &str) -> Message {
    let content = reason.as_bytes().to_vec();
    Message::reply(
        new_id(),
        parent_id,
        SOURCE,
        group,
        Operation::Error,
        resource,
        content,
    )
}

/// A fresh message or session id (UUID v4).
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Checks that `name` is a DNS-1123 subdomain, as Kubernetes requires of node names
/// (`IsDNS1123Subdomain`): at most 253 characters, lower-case alphanumerics, `-` and `.`,
/// every dot-separated label starting and ending with an alphanumeric.
///
/// # Errors
/// [`Error::InvalidNodeName`] naming the rule broken.
pub fn validate_node_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidNodeName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > 253 {
        return bad("must be at most 253 characters");
    }
    for label in name.split('.') {
        let bytes = label.as_bytes();
        let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
            return bad("must not contain empty labels");
        };
        if !bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        {
            return bad("must consist of lower-case alphanumerics, '-' and '.'");
        }
        if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
            return bad("labels must start and end with an alphanumeric character");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(op: Operation, resource: &str) -> Message {
        Message::build("m1", "edged", Group::Resource, op, resource, Vec::new())
    }

    #[test]
    fn upstream_adds_prefix() {
        let mut message = msg(Operation::Update, "default/pod/a");
        let action = upstream("edge-1", &mut message).expect("ok");
        assert_eq!(action, Upstream::Forward(Group::Resource));
        assert_eq!(message.resource(), "node/edge-1/default/pod/a");
        let action = upstream("edge-1", &mut msg(Operation::Keepalive, "")).expect("ok");
        assert_eq!(action, Upstream::Keepalive);
    }

    #[test]
    fn upstream_rejects_bad_input() {
        assert!(matches!(
            upstream("n", &mut msg(Operation::Update, "nope")),
            Err(Error::MalformedRoute { .. })
        ));
        let mut no_id = msg(Operation::Ack, "");
        no_id.header = None;
        assert!(matches!(upstream("n", &mut no_id), Err(Error::MissingId)));
        assert!(upstream("n", &mut msg(Operation::Ack, "")).is_ok());
    }

    #[test]
    fn downstream_strips_prefix_and_checks_node() {
        let routed = |node: &str, r: &str| Routed {
            node: node.into(),
            message: Some(msg(Operation::Insert, r)),
        };
        let (node, m) = downstream(routed("e1", "node/e1/default/pod/a")).expect("ok");
        assert_eq!((node.as_str(), m.resource()), ("e1", "default/pod/a"));
        assert!(matches!(
            downstream(routed("e2", "node/e1/default/pod/a")),
            Err(Error::NodeMismatch { .. })
        ));
        assert!(downstream(routed("e1", "default/pod/a")).is_err());
    }

    #[test]
    fn node_names() {
        for ok in ["edge-1", "a", "edge.zone-1.example"] {
            assert!(validate_node_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Edge", "-a", "a-", "a..b", "a_b", "a/b"] {
            assert!(validate_node_name(bad).is_err(), "{bad}");
        }
    }
}
