//! [`Kind`]: what a message is, with the data that belongs to it.

use crate::{MessageId, Operation, ResourceKey};

/// The identity of the object a message carries (`header.uid` and
/// `header.resource_version`): Kubernetes `metadata.uid` and `metadata.resourceVersion`,
/// each empty when unknown (a delete carries the uid only, an edge report no version). The
/// edge applies an object only when it is newer than what it holds (`crate::is_newer`,
/// architecture.md §3.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ObjectVersion {
    /// `metadata.uid`, or empty.
    pub uid: String,
    /// `metadata.resourceVersion`, or empty.
    pub resource_version: String,
}

impl ObjectVersion {
    /// A version of object `uid` at `resource_version`.
    pub fn new(uid: impl Into<String>, resource_version: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            resource_version: resource_version.into(),
        }
    }

    /// The uid alone (deletions, status reports).
    pub fn uid(uid: impl Into<String>) -> Self {
        Self::new(uid, "")
    }
}

/// How an upsert writes its object (the wire operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Write {
    /// `insert`: create (cloud -> edge: a new object; edge -> cloud: a registration or an
    /// event).
    Insert,
    /// `update`: replace with the carried full copy (or the status, for status types).
    Update,
    /// `patch`: apply the JSON merge patch (RFC 7386) in the body.
    Patch,
}

/// How an answered message went (the answer's operation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// `ack`: the receiver committed the message (edge) or the API server accepted it
    /// (controller). The body is empty.
    Ack,
    /// `response`: the answer to a query; the body holds the object's JSON.
    Response,
    /// `error`: the receiver refused the message for this UTF-8 reason (on the wire: the
    /// content). The body is not used.
    Error(String),
}

/// What a message is. The wire operation follows from it ([`Kind::operation`]); the resource
/// key is the edge-side `<namespace>/<type>/<name>` (the cloud-side `node/<node>/` prefix is
/// [`crate::Envelope::node`]).
///
/// Devices travel as object messages in group [`crate::Group::Device`]: Devices and
/// DeviceModels downstream, [`crate::ResourceType::DeviceStatus`] reports upstream; more
/// kinds may be added (the enum is non-exhaustive).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// Create or replace the object at `key` (`insert` / `update` / `patch`); the body holds
    /// its JSON (or the merge patch).
    Upsert {
        /// How it writes.
        write: Write,
        /// The object.
        key: ResourceKey,
        /// Its uid and resourceVersion.
        version: ObjectVersion,
    },
    /// Delete the object at `key` (`delete`); cloud -> edge: the object left the API server
    /// or no longer concerns the node; edge -> cloud: the edge completed a pod deletion.
    Delete {
        /// The object.
        key: ResourceKey,
        /// Its uid (the resourceVersion is normally empty).
        version: ObjectVersion,
    },
    /// Ask for the object at `key` (`query`, header `sync`): answered by
    /// [`Outcome::Response`] or [`Outcome::Error`]. The body may hold a request (a
    /// TokenRequest for `serviceaccounttoken`).
    Query {
        /// The object asked for.
        key: ResourceKey,
    },
    /// The answer (`ack` / `response` / `error`) to message `to` (`header.parent_id`).
    Answer {
        /// The answered message.
        to: MessageId,
        /// How it went.
        outcome: Outcome,
        /// The answered message's resource, when the answer names it (empty on the wire
        /// otherwise).
        key: Option<ResourceKey>,
    },
    /// Stream liveness (`keepalive`, group `hub`): the edge sends one every keepalive interval,
    /// cloudhub answers each with `answers` set.
    Keepalive {
        /// The keepalive this one answers (`header.parent_id`), if any.
        answers: Option<MessageId>,
    },
    /// The end marker of a resync by inventory (`resync`), about the node's own
    /// `_/node/<node>` key; the body is the JSON summary `{"updates": n, "deletes": n}`.
    Resync {
        /// `_/node/<node>`.
        key: ResourceKey,
    },
}

impl Kind {
    /// The wire operation.
    pub fn operation(&self) -> Operation {
        match self {
            Self::Upsert { write, .. } => match write {
                Write::Insert => Operation::Insert,
                Write::Update => Operation::Update,
                Write::Patch => Operation::Patch,
            },
            Self::Delete { .. } => Operation::Delete,
            Self::Query { .. } => Operation::Query,
            Self::Answer { outcome, .. } => match outcome {
                Outcome::Ack => Operation::Ack,
                Outcome::Response => Operation::Response,
                Outcome::Error(_) => Operation::Error,
            },
            Self::Keepalive { .. } => Operation::Keepalive,
            Self::Resync { .. } => Operation::Resync,
        }
    }

    /// The edge-side resource key, if the message names one.
    pub fn key(&self) -> Option<&ResourceKey> {
        match self {
            Self::Upsert { key, .. }
            | Self::Delete { key, .. }
            | Self::Query { key }
            | Self::Resync { key } => Some(key),
            Self::Answer { key, .. } => key.as_ref(),
            Self::Keepalive { .. } => None,
        }
    }

    /// The object's uid and resourceVersion, for upserts and deletes.
    pub fn version(&self) -> Option<&ObjectVersion> {
        match self {
            Self::Upsert { version, .. } | Self::Delete { version, .. } => Some(version),
            _ => None,
        }
    }

    /// The id of the message this one answers (`header.parent_id`): set for answers and
    /// for keepalive answers.
    pub fn parent(&self) -> Option<&MessageId> {
        match self {
            Self::Answer { to, .. } => Some(to),
            Self::Keepalive { answers } => answers.as_ref(),
            _ => None,
        }
    }
}
