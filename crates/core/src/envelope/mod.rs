//! The typed message envelope: what crosses cloud <-> edge, as every component works on it
//! (architecture.md §2). The protobuf `verge.message.v1.Message` is its wire form only; `verge-proto`
//! converts between the two where a stream begins or ends.
//!
//! # Layout
//! - [`MessageId`] (`id.rs`): the id, made by its constructor.
//! - [`Module`] (`module.rs`): who sent it.
//! - [`Kind`] (`kind.rs`): what it is: upsert / delete of an object with its
//!   [`ObjectVersion`], query, [`Outcome`] of an answered message, keepalive, resync marker.
//! - [`TraceContext`] (`trace.rs`): the W3C trace context it carries.

mod id;
mod kind;
mod module;
#[cfg(test)]
mod tests;
mod trace;

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

pub use id::{MAX_MESSAGE_ID_BYTES, MessageId};
pub use kind::{Kind, ObjectVersion, Outcome, Write};
pub use module::Module;
pub use trace::TraceContext;

use crate::{Group, NodeResource, Operation, ResourceKey};

/// One message, typed (KubeEdge: beehive `model.Message` with header, router and content).
///
/// The resource is held parsed in [`Kind`] as an edge-side [`ResourceKey`]; [`Envelope::node`]
/// says which side the message is on: `Some(node)` between cloudhub and a controller (path
/// `node/<node>/<namespace>/<type>/<name>`), `None` between an edge and cloudhub (path
/// `<namespace>/<type>/<name>`), as docs/protocol.md "Paths" describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Unique id (`header.id`).
    pub id: MessageId,
    /// Creation time in milliseconds since the Unix epoch, UTC (`header.timestamp_ms`).
    pub timestamp_ms: i64,
    /// The sending module (`route.source`).
    pub source: Module,
    /// The controller group that handles it in the cloud (`route.group`).
    pub group: Group,
    /// The node of a cloud-side path, `None` on the edge side.
    pub node: Option<String>,
    /// What it is.
    pub kind: Kind,
    /// The W3C trace context (`trace_context`).
    pub trace: TraceContext,
    /// The payload (`content`): an object's JSON, a request, a summary; empty for acks,
    /// keepalives and deletes. For [`Outcome::Error`] the reason is the wire content instead.
    pub body: Vec<u8>,
}

/// Milliseconds since the Unix epoch, now (0 before 1970, saturating far in the future).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Envelope {
    /// A new edge-side message with a fresh id, the current time and no trace context.
    pub fn new(source: Module, group: Group, kind: Kind, body: Vec<u8>) -> Self {
        Self {
            id: MessageId::new(),
            timestamp_ms: now_ms(),
            source,
            group,
            node: None,
            kind,
            trace: TraceContext::default(),
            body,
        }
    }

    /// The same message addressed to (or coming from) `node` in the cloud: its path gains
    /// the `node/<node>/` prefix.
    #[must_use]
    pub fn at_node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// A keepalive from `source` (group `hub`, no resource), or its answer when `answers`
    /// names the keepalive answered. Its id is [`MessageId::short`]: it only pairs the
    /// keepalive with its answer.
    pub fn keepalive(source: Module, answers: Option<MessageId>) -> Self {
        Self {
            id: MessageId::short(),
            ..Self::new(source, Group::Hub, Kind::Keepalive { answers }, Vec::new())
        }
    }

    /// An answer from `source` to this message: same group, node and resource, a fresh id,
    /// `parent_id` = this id. `body` is the response's object (empty for `ack` and `error`).
    /// The trace context is carried over.
    pub fn answer(&self, source: Module, outcome: Outcome, body: Vec<u8>) -> Self {
        let kind = Kind::Answer {
            to: self.id.clone(),
            outcome,
            key: self.kind.key().cloned(),
        };
        Self {
            node: self.node.clone(),
            trace: self.trace.clone(),
            ..Self::new(source, self.group, kind, body)
        }
    }

    /// The wire operation.
    pub fn operation(&self) -> Operation {
        self.kind.operation()
    }

    /// The edge-side resource key, if the message names one.
    pub fn key(&self) -> Option<&ResourceKey> {
        self.kind.key()
    }

    /// The cloud-side resource, when the message names one and is on the cloud side.
    pub fn node_resource(&self) -> Option<NodeResource> {
        match (&self.node, self.kind.key()) {
            (Some(node), Some(key)) => Some(NodeResource::new(node.clone(), key.clone())),
            _ => None,
        }
    }

    /// The id of the message this one answers (`header.parent_id`), if any.
    pub fn parent(&self) -> Option<&MessageId> {
        self.kind.parent()
    }

    /// Whether this answers another message (`ack`, `response`, `error`).
    pub fn is_answer(&self) -> bool {
        matches!(self.kind, Kind::Answer { .. })
    }

    /// The reason of an `error` answer.
    pub fn error_reason(&self) -> Option<&str> {
        match &self.kind {
            Kind::Answer {
                outcome: Outcome::Error(reason),
                ..
            } => Some(reason),
            _ => None,
        }
    }

    /// The key a per-node delivery queue coalesces this message under (cloudhub, protocol.md
    /// "Delivery"): the resource of an object message (upsert, delete, query, resync);
    /// `None` for answers and keepalives, which are sent once, in order, uncoalesced.
    pub fn delivery_key(&self) -> Option<&ResourceKey> {
        match &self.kind {
            Kind::Upsert { key, .. }
            | Kind::Delete { key, .. }
            | Kind::Query { key }
            | Kind::Resync { key } => Some(key),
            Kind::Answer { .. } | Kind::Keepalive { .. } => None,
        }
    }

    /// Whether this carries the whole state of its object (`insert`, `update`, `delete`,
    /// `resync`), so an older message waiting for the same [`Envelope::delivery_key`] is moot
    /// and may be replaced; `patch` and `query` queue behind instead.
    pub fn supersedes(&self) -> bool {
        matches!(
            self.kind,
            Kind::Upsert {
                write: Write::Insert | Write::Update,
                ..
            } | Kind::Delete { .. }
                | Kind::Resync { .. }
        )
    }

    /// The wire resource path (`route.resource`): `node/<node>/<ns>/<type>/<name>` on the
    /// cloud side, `<ns>/<type>/<name>` on the edge side, empty when the message names none.
    pub fn path(&self) -> String {
        match (&self.node, self.kind.key()) {
            (_, None) => String::new(),
            (None, Some(key)) => key.to_string(),
            (Some(node), Some(key)) => format!("node/{node}/{key}"),
        }
    }

    /// The bytes this message is counted with in byte budgets (issue 31): its body, path and
    /// id, plus 128 for the rest of its framing.
    pub fn budget_size(&self) -> usize {
        self.body.len() + self.path().len() + self.id.as_str().len() + 128
    }
}

/// `<operation> <path> (<id>)`, for logs.
impl fmt::Display for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.operation(), self.path(), self.id)
    }
}
