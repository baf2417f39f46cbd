//! Constructors and typed accessors for [`Message`].

use std::time::{SystemTime, UNIX_EPOCH};

use verge_core::{Group, NodeResource, Operation, ResourceKey};

use crate::message::{Header, Message, Route};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Message {
    /// A new message with a fresh id (`id` must be unique; callers pass a UUID) and the
    /// current timestamp.
    pub fn build(
        id: impl Into<String>,
        source: &str,
        group: Group,
        operation: Operation,
        resource: impl Into<String>,
        content: Vec<u8>,
    ) -> Self {
        Self {
            header: Some(Header {
                id: id.into(),
                timestamp_ms: now_ms(),
                ..Header::default()
            }),
            route: Some(Route {
                source: source.to_owned(),
                group: group.as_str().to_owned(),
                operation: operation.as_str().to_owned(),
                resource: resource.into(),
            }),
            content,
            trace_context: None,
        }
    }

    /// An answer (`ack`, `response`, `error`) to the message with id `parent_id`.
    pub fn reply(
        id: impl Into<String>,
        parent_id: impl Into<String>,
        source: &str,
        group: Group,
        operation: Operation,
        resource: impl Into<String>,
        content: Vec<u8>,
    ) -> Self {
        let mut m = Self::build(id, source, group, operation, resource, content);
        if let Some(h) = m.header.as_mut() {
            h.parent_id = parent_id.into();
        }
        m
    }

    /// Sets the object's uid and resourceVersion in the header.
    #[must_use]
    pub fn with_object(
        mut self,
        uid: impl Into<String>,
        resource_version: impl Into<String>,
    ) -> Self {
        let h = self.header.get_or_insert_with(Header::default);
        h.uid = uid.into();
        h.resource_version = resource_version.into();
        self
    }
}

/// Typed accessors for [`Message`]; each fails with a [`verge_core::Error`] that says what is
/// malformed.
pub trait MessageExt {
    /// `header.id`, or `""`.
    fn id(&self) -> &str;
    /// `header.parent_id`, or `""`.
    fn parent_id(&self) -> &str;
    /// The parsed `route.operation`.
    fn operation(&self) -> verge_core::Result<Operation>;
    /// The parsed `route.group`.
    fn group(&self) -> verge_core::Result<Group>;
    /// `route.resource` as an edge-side key (`<ns>/<type>/<name>`).
    fn edge_key(&self) -> verge_core::Result<ResourceKey>;
    /// `route.resource` as a cloud-side key (`node/<node>/<ns>/<type>/<name>`).
    fn node_resource(&self) -> verge_core::Result<NodeResource>;
    /// `route.resource` as given, or `""`.
    fn resource(&self) -> &str;
}

impl MessageExt for Message {
    fn id(&self) -> &str {
        self.header.as_ref().map_or("", |h| h.id.as_str())
    }

    fn parent_id(&self) -> &str {
        self.header.as_ref().map_or("", |h| h.parent_id.as_str())
    }

    fn operation(&self) -> verge_core::Result<Operation> {
        self.route
            .as_ref()
            .map_or("", |r| r.operation.as_str())
            .parse()
    }

    fn group(&self) -> verge_core::Result<Group> {
        self.route.as_ref().map_or("", |r| r.group.as_str()).parse()
    }

    fn edge_key(&self) -> verge_core::Result<ResourceKey> {
        self.resource().parse()
    }

    fn node_resource(&self) -> verge_core::Result<NodeResource> {
        self.resource().parse()
    }

    fn resource(&self) -> &str {
        self.route.as_ref().map_or("", |r| r.resource.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn build_and_read_back() {
        let m = Message::build(
            "1",
            "edged",
            Group::Resource,
            Operation::Update,
            "default/pod/a",
            b"{}".to_vec(),
        )
        .with_object("uid-1", "42");
        let bytes = m.encode_to_vec();
        let back = Message::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(back.id(), "1");
        assert_eq!(back.operation(), Ok(Operation::Update));
        assert_eq!(back.group(), Ok(Group::Resource));
        assert_eq!(back.edge_key().expect("key").name, "a");
        assert_eq!(back.header.expect("header").resource_version, "42");
    }
}
