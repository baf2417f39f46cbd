//! The conversion between the typed [`Envelope`] of `verge-core` and its wire form
//! [`Message`]: `TryFrom<Message> for Envelope` where a stream (or a stored record) is read,
//! `From<Envelope> for Message` where one is written. Nothing else in Verge looks at the
//! `Message` fields (architecture.md §2).
//!
//! Field mapping (docs/protocol.md): `header.id` <-> [`Envelope::id`]; `header.parent_id`
//! <-> the answered id of [`Kind::Answer`] / [`Kind::Keepalive`]; `header.uid` and
//! `header.resource_version` <-> the [`ObjectVersion`] of upserts and deletes (ignored on
//! other kinds); `header.sync` is set exactly on queries; `route.operation` follows from the
//! [`Kind`]; `route.resource` is parsed into the kind's [`ResourceKey`] plus
//! [`Envelope::node`] (`node/<node>/<ns>/<type>/<name>`, five segments) or `None`
//! (`<ns>/<type>/<name>`); `content` is the body, except for `error` answers whose content is
//! the reason; an empty `trace_context` is omitted.

use prost::Message as _;
use verge_core::{
    Envelope, Group, Kind, MessageId, Module, NodeResource, ObjectVersion, Operation, Outcome,
    ResourceKey, TraceContext, Write,
};

use crate::message::{self, Header, Message, Route};
use crate::{Error, Result};

/// Parses a wire path: `None` when empty, else the node of a cloud-side path and the key.
fn parse_path(path: &str) -> verge_core::Result<Option<(Option<String>, ResourceKey)>> {
    if path.is_empty() {
        return Ok(None);
    }
    if path.starts_with("node/") && path.split('/').count() == 5 {
        let NodeResource { node, key } = path.parse::<NodeResource>()?;
        return Ok(Some((Some(node), key)));
    }
    Ok(Some((None, path.parse::<ResourceKey>()?)))
}

impl TryFrom<Message> for Envelope {
    type Error = Error;

    /// Reads a wire message.
    ///
    /// # Errors
    /// [`Error::Missing`] without `header.id`, `route`, a resource for an object message or
    /// `header.parent_id` for an `ack`/`response`/`error`; [`Error::Invalid`] for an empty
    /// source, an unknown group or operation, an unparsable resource path.
    fn try_from(message: Message) -> Result<Self> {
        let Message {
            header,
            route,
            content,
            trace_context,
        } = message;
        let header = header.unwrap_or_default();
        // A refused id is named in errors (and logs) by its start only.
        let raw_id = if header.id.len() > verge_core::envelope::MAX_MESSAGE_ID_BYTES {
            let mut end = 64;
            while !header.id.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &header.id[..end])
        } else {
            header.id.clone()
        };
        let missing = |field| Error::Missing {
            id: raw_id.clone(),
            field,
        };
        let invalid = |field: &'static str| {
            let id = raw_id.clone();
            move |source| Error::Invalid { id, field, source }
        };
        let id = match MessageId::parse(header.id) {
            Ok(id) => id,
            Err(verge_core::Error::EmptyMessageId) => return Err(missing("header.id")),
            Err(other) => return Err(invalid("header.id")(other)),
        };
        let route = route.ok_or_else(|| missing("route"))?;
        let source: Module = route.source.parse().map_err(invalid("route.source"))?;
        let group: Group = route.group.parse().map_err(invalid("route.group"))?;
        let operation: Operation = route
            .operation
            .parse()
            .map_err(invalid("route.operation"))?;
        let path = parse_path(&route.resource).map_err(invalid("route.resource"))?;
        let (node, key) = match path {
            Some((node, key)) => (node, Some(key)),
            None => (None, None),
        };
        // A third party's resource types exist only in its own group's messages.
        if group.is_verge()
            && let Some(app) = key.as_ref().filter(|k| !k.kind.is_verge())
        {
            return Err(invalid("route.resource")(
                verge_core::Error::UnknownResourceType(app.kind.as_str().to_owned()),
            ));
        }
        let parent = match header.parent_id.as_str() {
            "" => None,
            p => Some(MessageId::parse(p).map_err(invalid("header.parent_id"))?),
        };
        let version = ObjectVersion {
            uid: header.uid,
            resource_version: header.resource_version,
        };
        let object_key = || key.clone().ok_or_else(|| missing("route.resource"));
        let answer_to = || parent.clone().ok_or_else(|| missing("header.parent_id"));
        let mut body = content;
        let upsert = |write| -> Result<Kind> {
            Ok(Kind::Upsert {
                write,
                key: object_key()?,
                version: version.clone(),
            })
        };
        let kind = match operation {
            Operation::Insert => upsert(Write::Insert)?,
            Operation::Update => upsert(Write::Update)?,
            Operation::Patch => upsert(Write::Patch)?,
            Operation::Delete => Kind::Delete {
                key: object_key()?,
                version: version.clone(),
            },
            Operation::Query => Kind::Query { key: object_key()? },
            Operation::Resync => Kind::Resync { key: object_key()? },
            Operation::Keepalive => Kind::Keepalive {
                answers: parent.clone(),
            },
            Operation::Ack | Operation::Response | Operation::Error => {
                let outcome = match operation {
                    Operation::Ack => Outcome::Ack,
                    Operation::Response => Outcome::Response,
                    _ => Outcome::Error(
                        String::from_utf8_lossy(&std::mem::take(&mut body)).into_owned(),
                    ),
                };
                Kind::Answer {
                    to: answer_to()?,
                    outcome,
                    key: key.clone(),
                }
            }
        };
        let trace = trace_context.map_or_else(TraceContext::default, |t| TraceContext {
            traceparent: t.traceparent,
            tracestate: t.tracestate,
        });
        Ok(Self {
            id,
            timestamp_ms: header.timestamp_ms,
            source,
            group,
            node,
            kind,
            trace,
            body,
        })
    }
}

impl From<Envelope> for Message {
    /// Writes the wire form (see the module docs for the mapping).
    fn from(envelope: Envelope) -> Self {
        let resource = envelope.path();
        let operation = envelope.operation();
        let Envelope {
            id,
            timestamp_ms,
            source,
            group,
            node: _,
            kind,
            trace,
            body,
        } = envelope;
        let parent_id = kind.parent().map(ToString::to_string).unwrap_or_default();
        let version = kind.version().cloned().unwrap_or_default();
        let sync = matches!(kind, Kind::Query { .. });
        let content = match kind {
            Kind::Answer {
                outcome: Outcome::Error(reason),
                ..
            } => reason.into_bytes(),
            _ => body,
        };
        Self {
            header: Some(Header {
                id: id.into_string(),
                parent_id,
                timestamp_ms,
                resource_version: version.resource_version,
                sync,
                uid: version.uid,
            }),
            route: Some(Route {
                source: source.as_str().to_owned(),
                group: group.as_str().to_owned(),
                operation: operation.as_str().to_owned(),
                resource,
            }),
            content,
            trace_context: (!trace.is_empty()).then_some(message::TraceContext {
                traceparent: trace.traceparent,
                tracestate: trace.tracestate,
            }),
        }
    }
}

/// The protobuf encoding of `envelope` (its wire `Message`), for storage.
pub fn encode(envelope: &Envelope) -> Vec<u8> {
    Message::from(envelope.clone()).encode_to_vec()
}

/// Reads an envelope stored with [`encode`].
///
/// # Errors
/// [`Error::Decode`] for bytes that are not a `Message`, else as `TryFrom<Message>`.
pub fn decode(bytes: &[u8]) -> Result<Envelope> {
    Message::decode(bytes).map_err(Error::Decode)?.try_into()
}

#[cfg(test)]
mod tests;
