//! apps: edge applications of third-party groups (architecture.md §11), reached over the node's
//! MQTT broker with Verge's delivery guarantees (`proto/verge/apps/v1/apps.proto` is the contract;
//! KubeEdge has no counterpart: its router needs Rule objects, here the gRPC API and a topic are
//! the integration point).
//!
//! * Down: metamanager hands every downstream message of a third-party group
//!   ([`verge_core::AppGroup`]) to [`AppsHandle::deliver`], which commits it to the apps inbox
//!   (the edge store's `apps_inbox` table) before the message is acknowledged, recognising a resend by its id; the
//!   [`AppsBridge`] publishes it on `verge/apps/<group>/<ns>/<type>/<name>` (QoS 1) and forgets
//!   it once the broker acknowledged it.
//! * Up: an app publishes an [`AppMessage`] on `verge/apps/<group>/<ns>/<type>/<name>/reply`;
//!   the bridge commits it to the upstream outbox (key `app/<group>/<id>`) before it
//!   acknowledges the publish; edgehub sends it until the group's controller acknowledges it,
//!   across link losses and restarts.
//!
//! # Layout
//! - `lib.rs`: [`AppsHandle`], metamanager's way in, and the topics.
//! - `payload`: [`AppMessage`], the JSON payload.
//! - `bridge`: [`AppsBridge`], the MQTT connection.
//! - [`error`]: the crate's [`Error`].
//!
//! The crate sits on the edge store, edgehub (reports up) and the eventbus (the broker's
//! address and credentials of `eventBus:`); metamanager delivers to it.
//!
//! The inbox itself is a table of the edge store ([`verge_edge_store::InboxPut`]).

mod bridge;
pub mod error;
mod payload;

use std::sync::Arc;

use tokio::sync::Notify;
use verge_core::{
    Envelope, Group, Kind, Module, ObjectVersion, Operation, Outcome, ResourceKey, Write,
};

pub use bridge::AppsBridge;
pub use error::{Error, Result};
pub use payload::AppMessage;

use verge_edge_store::{InboxPut, MetaStore};

/// The topic prefix of edge apps: `verge/apps/<group>/<ns>/<type>/<name>`.
pub const TOPIC_PREFIX: &str = "verge/apps";
/// What the bridge subscribes to: every group's replies.
pub const REPLY_SUBSCRIPTION: &str = "verge/apps/+/+/+/+/reply";
/// Most downstream messages waiting in the inbox for the broker; a new one beyond it is
/// answered `error` (the controller sends it again later).
pub const MAX_PENDING: u64 = 10_000;
/// Most bytes (topics and payloads) of the downstream messages waiting in the inbox; a new one
/// beyond it is answered `error` as well (64 MiB: the store's disk stays bounded while the
/// broker is away, whatever the messages' sizes).
pub const MAX_PENDING_BYTES: u64 = 64 << 20;
/// Largest `content` an app may send up, in bytes (1 MiB).
pub const MAX_CONTENT: usize = 1024 * 1024;

/// The source module of what apps send up (`route.source`).
const SOURCE: &str = "apps";

/// metamanager's way to the apps module: cheap to clone.
#[derive(Debug, Clone)]
pub struct AppsHandle {
    wake: Arc<Notify>,
}

impl AppsHandle {
    /// Commits the downstream message `msg` of a third-party group to the inbox and wakes
    /// the bridge; [`InboxPut::Duplicate`] for a message seen before (acknowledge it again,
    /// publish nothing). Answers from the controller (`response`, `error`) go to the topic of
    /// the resource they name.
    ///
    /// # Errors
    /// The message names no resource (an answer without one cannot be routed to an app);
    /// the store fails.
    pub async fn deliver(&self, store: &MetaStore, msg: &Envelope) -> Result<InboxPut> {
        let (topic, payload) = downstream(msg).ok_or_else(|| Error::NotForApps {
            message: msg.to_string(),
        })?;
        let id = msg.id.to_string();
        let put = store
            .blocking(move |s| {
                s.app_inbox_put(&id, &topic, &payload, MAX_PENDING, MAX_PENDING_BYTES)
            })
            .await?;
        if matches!(put, InboxPut::Added(_)) {
            self.wake.notify_one();
        }
        Ok(put)
    }
}

/// The topic and payload of a downstream message of a third-party group; `None` when it
/// names no resource.
pub fn downstream(msg: &Envelope) -> Option<(String, Vec<u8>)> {
    let key = msg.key()?;
    let topic = format!("{TOPIC_PREFIX}/{}/{key}", msg.group);
    let (parent_id, content) = match &msg.kind {
        Kind::Answer {
            to,
            outcome: Outcome::Error(reason),
            ..
        } => (to.to_string(), reason.clone().into_bytes()),
        Kind::Answer { to, .. } => (to.to_string(), msg.body.clone()),
        _ => (String::new(), msg.body.clone()),
    };
    let payload = AppMessage {
        id: msg.id.to_string(),
        parent_id,
        operation: msg.operation().to_string(),
        resource: key.to_string(),
        content,
        timestamp_ms: msg.timestamp_ms,
    };
    Some((topic, payload.to_json()))
}

/// The upstream message an app published on `topic` with `payload`.
///
/// # Errors
/// A UTF-8 reason: not a reply topic of a third-party group, a malformed path, payload or
/// id, an operation apps may not send, content over [`MAX_CONTENT`].
pub fn upstream(topic: &str, payload: &[u8]) -> Result<Envelope, String> {
    let rest = topic
        .strip_prefix(TOPIC_PREFIX)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_suffix("/reply"))
        .ok_or_else(|| format!("{topic} is not verge/apps/<group>/<ns>/<type>/<name>/reply"))?;
    let (group, path) = rest
        .split_once('/')
        .ok_or_else(|| format!("{topic} names no resource"))?;
    let group: Group = group.parse().map_err(|e| format!("{e}"))?;
    if group.is_verge() {
        return Err(format!(
            "group {group} is Verge's own; apps use their own groups"
        ));
    }
    let key: ResourceKey = path
        .parse()
        .map_err(|e| format!("resource {path:?}: {e}"))?;
    let app = AppMessage::from_json(payload).map_err(|e| format!("payload: {e}"))?;
    if app.content.len() > MAX_CONTENT {
        return Err(format!(
            "content of {} bytes is over the {MAX_CONTENT}-byte limit",
            app.content.len()
        ));
    }
    let operation = match app.operation.as_str() {
        "" if app.parent_id.is_empty() => Operation::Update,
        "" => Operation::Response,
        op => op.parse().map_err(|e| format!("{e}"))?,
    };
    let version = ObjectVersion::default;
    let parent = || {
        verge_core::MessageId::parse(app.parent_id.clone())
            .map_err(|_| format!("operation {operation} needs parentId"))
    };
    let mut body = app.content;
    let kind = match operation {
        Operation::Insert | Operation::Update | Operation::Patch => Kind::Upsert {
            write: match operation {
                Operation::Insert => Write::Insert,
                Operation::Update => Write::Update,
                _ => Write::Patch,
            },
            key,
            version: version(),
        },
        Operation::Delete => Kind::Delete {
            key,
            version: version(),
        },
        Operation::Query => Kind::Query { key },
        Operation::Response => Kind::Answer {
            to: parent()?,
            outcome: Outcome::Response,
            key: Some(key),
        },
        Operation::Error => Kind::Answer {
            to: parent()?,
            outcome: Outcome::Error(
                String::from_utf8_lossy(&std::mem::take(&mut body)).into_owned(),
            ),
            key: Some(key),
        },
        other => return Err(format!("apps may not send operation {other}")),
    };
    let mut envelope = Envelope::new(Module::Other(SOURCE.to_owned()), group, kind, body);
    if !app.id.is_empty() {
        if app.id.len() > 128 || !app.id.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("id must be at most 128 visible ASCII characters".to_owned());
        }
        envelope.id = verge_core::MessageId::parse(app.id).map_err(|e| format!("{e}"))?;
    }
    if app.timestamp_ms > 0 {
        envelope.timestamp_ms = app.timestamp_ms;
    }
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn robots() -> Group {
        "robots.example.com".parse().expect("group")
    }

    #[test]
    fn a_command_becomes_its_topic_and_payload() {
        let key: ResourceKey = "default/robot/arm".parse().expect("key");
        let mut msg = Envelope::new(
            Module::Other("robots-controller".into()),
            robots(),
            Kind::Upsert {
                write: Write::Update,
                key,
                version: ObjectVersion::default(),
            },
            b"{\"move\":1}".to_vec(),
        );
        msg.timestamp_ms = 7;
        let (topic, payload) = downstream(&msg).expect("routable");
        assert_eq!(topic, "verge/apps/robots.example.com/default/robot/arm");
        let app = AppMessage::from_json(&payload).expect("json");
        assert_eq!(app.id, msg.id.to_string());
        assert_eq!(
            (app.operation.as_str(), app.resource.as_str()),
            ("update", "default/robot/arm")
        );
        assert_eq!(
            (app.content.as_slice(), app.timestamp_ms),
            (&b"{\"move\":1}"[..], 7)
        );
    }

    #[test]
    fn replies_become_upstream_answers_and_messages() {
        let topic = "verge/apps/robots.example.com/default/robot/arm/reply";
        let reply =
            upstream(topic, br#"{"id":"r-1","parentId":"c-1","content":"e30="}"#).expect("reply");
        assert_eq!(reply.id.as_str(), "r-1");
        assert_eq!(reply.group, robots());
        assert_eq!(reply.operation(), Operation::Response);
        assert_eq!(reply.parent().map(|p| p.to_string()), Some("c-1".into()));
        assert_eq!(reply.body, b"{}");
        assert_eq!(
            verge_edge_store::OutboxKey::of(&reply).map(|k| k.to_string()),
            Some("app/robots.example.com/r-1".into())
        );
        let own = upstream(topic, br#"{"content":"e30="}"#).expect("own message");
        assert_eq!(own.operation(), Operation::Update);
        assert_eq!(own.path(), "default/robot/arm");
        assert!(!own.id.as_str().is_empty());
    }

    #[test]
    fn bad_replies_are_refused_with_a_reason() {
        let ok = "verge/apps/robots.example.com/default/robot/arm/reply";
        for (topic, payload) in [
            (
                "verge/apps/robots.example.com/default/robot/arm",
                &b"{}"[..],
            ),
            ("verge/apps/resource/default/pod/web/reply", b"{}"),
            ("verge/apps/robots.example.com/default/robot/reply", b"{}"),
            (ok, b"not json"),
            (ok, br#"{"operation":"frobnicate"}"#),
            (ok, br#"{"operation":"keepalive"}"#),
            (ok, br#"{"operation":"error"}"#),
            (ok, br#"{"id":"a b"}"#),
        ] {
            assert!(upstream(topic, payload).is_err(), "{topic} {payload:?}");
        }
    }
}
