//! Pure routing rules: validating messages at the boundary and rewriting resource paths
//! between the edge side (`<ns>/<type>/<name>`) and the cloud side
//! (`node/<node>/<ns>/<type>/<name>`), as KubeEdge cloudhub does with its `node/<node>/`
//! resource prefix.

use verge_core::{Envelope, Group, Kind, MessageId, Module, Outcome, ResourceKey};

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

/// Validates a message from the session of `node` and moves its resource, in place, to the
/// cloud side (`node/<node>/` prefix).
///
/// # Errors
/// [`Error::MalformedRoute`] when the edge used a cloud-side path (an edge only speaks for
/// itself).
pub(crate) fn upstream(node: &str, envelope: &mut Envelope) -> Result<Upstream> {
    if envelope.node.is_some() {
        return Err(wrong_side(envelope, "expected <namespace>/<type>/<name>"));
    }
    if matches!(envelope.kind, Kind::Keepalive { .. }) {
        return Ok(Upstream::Keepalive);
    }
    if envelope.key().is_some() {
        envelope.node = Some(node.to_owned());
    }
    Ok(Upstream::Forward(envelope.group))
}

/// Validates a downstream message from a controller for `node` (`Routed.node`) and moves its
/// resource to the edge side. Returns the message to enqueue.
///
/// The resource must be `node/<node>/<ns>/<type>/<name>` with `<node>` equal to `node`;
/// answers (`ack`, `response`, `error`) may have no resource.
///
/// # Errors
/// [`Error::UnexpectedFrame`] without a node, [`Error::MalformedRoute`] for an edge-side
/// path, [`Error::NodeMismatch`].
pub(crate) fn downstream(node: &str, mut envelope: Envelope) -> Result<Envelope> {
    if node.is_empty() {
        return Err(Error::UnexpectedFrame("Routed without a node"));
    }
    if envelope.is_answer() && envelope.key().is_none() {
        envelope.node = None;
        return Ok(envelope);
    }
    match envelope.node.as_deref() {
        Some(n) if n == node => {}
        Some(_) => {
            return Err(Error::NodeMismatch {
                id: envelope.id.to_string(),
                routed: node.to_owned(),
                resource: envelope.path(),
            });
        }
        None => {
            return Err(wrong_side(
                &envelope,
                "expected node/<node>/<namespace>/<type>/<name>",
            ));
        }
    }
    envelope.node = None;
    Ok(envelope)
}

/// [`Error::MalformedRoute`] for a message whose resource path is of the other side's form
/// (`expected` says which form this side takes).
fn wrong_side(envelope: &Envelope, expected: &'static str) -> Error {
    Error::MalformedRoute {
        id: envelope.id.to_string(),
        source: verge_proto::Error::Invalid {
            id: envelope.id.to_string(),
            field: "route.resource",
            source: verge_core::Error::ResourcePath {
                path: envelope.path(),
                reason: expected,
            },
        },
    }
}

/// Cloudhub's answer to the edge keepalive `parent` (group `hub`, no resource).
pub(crate) fn keepalive_reply_to(parent: MessageId) -> Envelope {
    Envelope::keepalive(Module::CloudHub, Some(parent))
}

/// An `error` answer (group `group`, edge-side `key`) to the message `parent`, carrying
/// `reason`.
pub(crate) fn error_reply(
    parent: MessageId,
    group: Group,
    key: Option<ResourceKey>,
    reason: &str,
) -> Envelope {
    let kind = Kind::Answer {
        to: parent,
        outcome: Outcome::Error(reason.to_owned()),
        key,
    };
    Envelope::new(Module::CloudHub, group, kind, Vec::new())
}

/// A fresh session id (UUID v4).
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
    use verge_core::Operation;
    use verge_proto::hub::Routed;
    use verge_proto::{Message, MessageExt};

    use super::*;

    fn msg(op: Operation, resource: &str) -> Message {
        Message::build("m1", "edged", Group::Resource, op, resource, Vec::new())
    }

    /// As the edge stream does: read the wire message, route it, write it back.
    fn upstream(node: &str, message: &mut Message) -> Result<Upstream> {
        let mut envelope = Envelope::try_from(message.clone())?;
        let action = super::upstream(node, &mut envelope)?;
        *message = envelope.into();
        Ok(action)
    }

    /// As the controller stream does.
    fn downstream(routed: Routed) -> Result<(String, Message)> {
        let message = routed.message.ok_or(Error::UnexpectedFrame("no message"))?;
        let envelope = super::downstream(&routed.node, Envelope::try_from(message)?)?;
        Ok((routed.node, envelope.into()))
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
        assert!(matches!(
            upstream("n", &mut msg(Operation::Update, "node/x/default/pod/a")),
            Err(Error::MalformedRoute { .. })
        ));
        let mut no_id = msg(Operation::Ack, "");
        no_id.header = None;
        assert!(matches!(upstream("n", &mut no_id), Err(Error::MissingId)));
        let mut ack = Message::reply(
            "m1",
            "p1",
            "edged",
            Group::Resource,
            Operation::Ack,
            "",
            vec![],
        );
        assert!(upstream("n", &mut ack).is_ok());
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
