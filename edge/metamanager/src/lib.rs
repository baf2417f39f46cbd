//! metamanager: persists every object the cloud sends, in redb, *before* acknowledging it
//! (KubeEdge: metamanager). architecture.md §3.1: downstream is at-least-once and idempotent.
//!
//! For each downstream message from edgehub:
//! * `insert` / `update` of `<ns>/<type>/<name>` with JSON content: stored if its
//!   resourceVersion is newer than the stored one ([`MetaStore::upsert_if_newer`]), then
//!   `ack`ed — a stale or duplicate copy is acked too, and changes nothing;
//! * `delete`: removed (unless the stored object has another uid), then `ack`ed;
//! * content that is not JSON, or an operation edgecore does not handle yet (`patch`,
//!   `query`): answered with `error` and a UTF-8 reason; nothing changes (a message whose
//!   route does not parse never gets here: edgehub answers it `error` at the stream);
//! * `response` / `error` answering a waiting [`QueryRegistry::query`]: handed to it;
//! * `ack` / `error` / `response` from the cloud for other upstream messages: logged (edgehub
//!   hands the answers to outbox reports to the outbox before they get here).
//!
//! After every commit that changed the store (stored or deleted), a [`StoreEvent`] goes to
//! the subscribers of [`MetaManager::subscribe`] (edged), so they act only on committed
//! objects. A subscriber that lags behind gets `RecvError::Lagged` and must relist the store.
//!
//! Replies carry `parent_id` = the answered message's id, group `resource` (or the message's
//! group), source `metamanager` and the same resource path.
//!
//! # Layout
//! - `lib.rs`: [`MetaManager`], [`StoreEvent`] and [`Applied`].
//! - `query`: [`QueryRegistry`], the cloud queries edged waits on.
//! - [`error`](mod@error): the crate's [`Error`].
//!
//! The crate sits on the edge store, edgehub (answers go up through it) and the apps bridge
//! (third-party groups' messages); edged and devicetwin follow its [`StoreEvent`]s.

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod error;
mod query;

pub use error::{Error, Result};

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing::{debug, error, info, warn};
use verge_core::{
    Envelope, Kind, Module, ObjectVersion, Outcome, ResourceKey, TraceContext, Write,
};

pub use query::{MAX_PENDING_QUERIES, QueryRegistry};
use verge_edge_store::MetaStore;

use crate::error::Error as MetaError;
use verge_runtime::ErrorChain;

use verge_edgehub::EdgeHubHandle;

/// What a downstream object message did to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Stored (new, or newer than the stored copy).
    Stored,
    /// Not stored: the stored copy is as new or newer.
    Stale,
    /// Removed.
    Deleted,
    /// Delete of an object that is not stored (or has another uid): nothing to do.
    Absent,
}

/// A committed change of the store, as announced by [`MetaManager::subscribe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreEvent {
    /// The object's edge key (`<namespace>/<type>/<name>`).
    pub key: ResourceKey,
    /// The uid in the message header (may be empty for a delete).
    pub uid: String,
    /// [`Applied::Stored`] or [`Applied::Deleted`].
    pub applied: Applied,
    /// The W3C context of the `metamanager.apply` span that committed the change (empty
    /// when not traced), so edged's work on it continues the trace of the cloud's change.
    pub trace: TraceContext,
}

/// Capacity of the [`StoreEvent`] broadcast; a slower subscriber sees `Lagged` and relists.
const EVENT_CAPACITY: usize = 1024;

/// The metamanager component: applies downstream messages and answers them.
#[derive(Debug)]
pub struct MetaManager {
    store: MetaStore,
    downstream: mpsc::Receiver<Envelope>,
    hub: EdgeHubHandle,
    events: broadcast::Sender<StoreEvent>,
    queries: QueryRegistry,
    /// Where third-party groups' messages go; `None`: refused (no broker configured).
    apps: Option<verge_edge_apps::AppsHandle>,
}

impl MetaManager {
    /// A metamanager over `store`, reading `downstream` and answering through `hub`.
    pub fn new(store: MetaStore, downstream: mpsc::Receiver<Envelope>, hub: EdgeHubHandle) -> Self {
        Self {
            store,
            downstream,
            hub,
            events: broadcast::channel(EVENT_CAPACITY).0,
            queries: QueryRegistry::new(),
            apps: None,
        }
    }

    /// Hands downstream messages of third-party groups to the apps module (without it they
    /// are answered `error`).
    #[must_use]
    pub fn with_apps(mut self, apps: verge_edge_apps::AppsHandle) -> Self {
        self.apps = Some(apps);
        self
    }

    /// The registry of queries waiting for the cloud's `response`/`error`; this metamanager
    /// hands every such answer to it first (share it with edged's `StoreObjects`).
    pub fn queries(&self) -> QueryRegistry {
        self.queries.clone()
    }

    /// Committed store changes from now on (see [`StoreEvent`]).
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    /// Applies downstream messages in order until `shutdown` or until edgehub is gone.
    ///
    /// # Errors
    /// None for now; store failures are answered with `error` and logged.
    #[tracing::instrument(name = "metamanager", skip_all)]
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        loop {
            let msg = tokio::select! {
                () = shutdown.cancelled() => break,
                msg = self.downstream.recv() => match msg {
                    Some(msg) => msg,
                    None => break,
                },
            };
            if let Some(reply) = self.handle(msg).await {
                // Not `send().await`: edgehub may itself be waiting on our queue. A dropped
                // ack is redelivered by the cloud (at-least-once), and this is logged.
                if let Err(e) = self.hub.try_send(reply) {
                    error!(error = %e, "reply not queued; the cloud will redeliver");
                }
            }
        }
        info!("metamanager stopped");
        Ok(())
    }

    /// Applies one downstream message; returns the reply to send, if any.
    #[tracing::instrument(skip_all, fields(id = %msg.id, resource = %msg.path()))]
    pub async fn handle(&self, mut msg: Envelope) -> Option<Envelope> {
        if !msg.group.is_verge() {
            return self.deliver_to_apps(&msg).await;
        }
        match &msg.kind {
            Kind::Answer {
                to,
                outcome: Outcome::Ack,
                ..
            } => {
                debug!(parent_id = %to, "cloud acked");
                None
            }
            Kind::Answer { to, .. } => {
                let parent_id = to.clone();
                let msg = self.queries.complete(msg)?;
                match msg.error_reason() {
                    Some(reason) => warn!(%parent_id, %reason, "cloud answered error"),
                    None => debug!(%parent_id, "cloud response (no waiter yet)"),
                }
                None
            }
            Kind::Keepalive { .. } => None,
            Kind::Upsert {
                write: Write::Insert | Write::Update,
                ..
            }
            | Kind::Delete { .. } => Some(match self.apply_traced(&mut msg).await {
                Ok(applied) => {
                    debug!(?applied, "applied");
                    reply(&msg, Outcome::Ack)
                }
                Err(error) => {
                    let reason = ErrorChain(&error).to_string();
                    warn!(%reason, "rejected downstream message");
                    reply(&msg, Outcome::Error(reason))
                }
            }),
            Kind::Resync { .. } => {
                // The end marker of a resync by inventory (docs/protocol.md): every message
                // before it has been applied in order; nothing to store.
                info!(summary = %String::from_utf8_lossy(&msg.body), "resync complete");
                Some(reply(&msg, Outcome::Ack))
            }
            _ => {
                let op = msg.operation();
                let reason = format!("operation {op} is not supported by edgecore");
                Some(reply(&msg, Outcome::Error(reason)))
            }
        }
    }

    /// A message of a third-party group: committed to the apps inbox, then acknowledged
    /// (a resend is acknowledged again and published once); a controller's `response` to
    /// an app's message goes to the app too, other answers (acks, errors) stop here. Refused with `error` without the apps module, when the inbox
    /// is full, or when it cannot be routed to a topic; nothing is stored then.
    async fn deliver_to_apps(&self, msg: &Envelope) -> Option<Envelope> {
        // Acks and errors answer the edge's own upstream messages: edgehub's drain handles
        // those in flight, and what reaches here is stale (e.g. cloudhub's "no controller
        // attached" for a resend the controller had already acked). Only a controller's
        // `response` is news for an app.
        match &msg.kind {
            Kind::Answer {
                outcome: Outcome::Response,
                ..
            } => {}
            Kind::Answer { to, outcome, .. } => {
                debug!(parent_id = %to, ?outcome, "answer to an app's message; nothing to deliver");
                return None;
            }
            Kind::Keepalive { .. } => return None,
            _ => {}
        }
        let refuse = |reason: String| {
            warn!(%reason, "rejected downstream message");
            (!msg.is_answer()).then(|| reply(msg, Outcome::Error(reason)))
        };
        let Some(apps) = &self.apps else {
            return refuse(format!(
                "group {} is a third-party group and this edgecore has no MQTT broker for edge apps (eventBus.enable)",
                msg.group
            ));
        };
        match apps.deliver(&self.store, msg).await {
            Ok(verge_edge_store::InboxPut::Added(seq)) => {
                debug!(seq, "committed for edge apps");
                (!msg.is_answer()).then(|| reply(msg, Outcome::Ack))
            }
            Ok(verge_edge_store::InboxPut::Duplicate) => {
                debug!("seen before; acknowledged again");
                (!msg.is_answer()).then(|| reply(msg, Outcome::Ack))
            }
            Ok(verge_edge_store::InboxPut::Full) => refuse(format!(
                "edge apps inbox full: {} messages wait for the MQTT broker",
                verge_edge_apps::MAX_PENDING
            )),
            Err(error) => refuse(ErrorChain(&error).to_string()),
        }
    }

    /// [`MetaManager::apply_object`] in a `metamanager.apply` span continuing the message's
    /// trace (the commit of a cloud change, parent of edged's work on it).
    async fn apply_traced(&self, msg: &mut Envelope) -> Result<Applied> {
        let span = verge_telemetry::propagation::continued(&msg.trace, || {
            verge_telemetry::span!(
                "metamanager.apply",
                verge.message.id = %msg.id,
                verge.resource = %msg.path(),
                verge.operation = %msg.operation(),
                otel.status_code = tracing::field::Empty,
            )
        });
        let result = self.apply_object(msg).instrument(span.clone()).await;
        if result.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        result
    }

    /// Validates and commits an upsert/delete, then announces a change to the subscribers.
    /// Moves the body out of `msg` (the reply does not need it). `Err` is the reason to
    /// answer with.
    async fn apply_object(&self, msg: &mut Envelope) -> Result<Applied> {
        let (key, version, delete) = match &msg.kind {
            Kind::Upsert { key, version, .. } => (key.clone(), version.clone(), false),
            Kind::Delete { key, version } => (key.clone(), version.clone(), true),
            _ => {
                let operation = msg.operation();
                return Err(MetaError::NotAnObject { operation });
            }
        };
        if !delete {
            serde_json::from_slice::<serde::de::IgnoredAny>(&msg.body)
                .map_err(MetaError::ContentNotJson)?;
        }
        let content = std::mem::take(&mut msg.body);
        let (k, v) = (key.clone(), version.clone());
        let applied = self
            .store
            .blocking(move |s| apply(s, delete, &k, &v, &content))
            .await
            .inspect_err(|e| error!(error = %ErrorChain(e), "store failed"))?;
        if matches!(applied, Applied::Stored | Applied::Deleted) {
            // No subscriber (edged not running) is fine.
            let uid = version.uid;
            let trace = verge_telemetry::propagation::inject_current();
            let _ = self.events.send(StoreEvent {
                key,
                uid,
                applied,
                trace,
            });
        }
        Ok(applied)
    }
}

/// Applies an upsert (`delete` false) or a delete to the store (blocking).
fn apply(
    store: &MetaStore,
    delete: bool,
    key: &ResourceKey,
    version: &ObjectVersion,
    content: &[u8],
) -> Result<Applied> {
    if delete {
        return Ok(if store.delete(key, &version.uid)? {
            Applied::Deleted
        } else {
            Applied::Absent
        });
    }
    let ObjectVersion {
        uid,
        resource_version,
    } = version;
    Ok(
        if store.upsert_if_newer(key, uid, resource_version, content)? {
            Applied::Stored
        } else {
            Applied::Stale
        },
    )
}

/// metamanager's answer to `msg` (same group and resource).
fn reply(msg: &Envelope, outcome: Outcome) -> Envelope {
    msg.answer(Module::MetaManager, outcome, Vec::new())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use verge_core::{Group, Operation, ResourceType};
    use verge_proto::{Message, MessageExt};

    use super::*;
    use verge_edgehub::EdgeHub;

    fn manager() -> (tempfile::TempDir, MetaManager) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetaStore::open(&dir.path().join("edgecore.redb")).expect("open");
        let (down_tx, down_rx) = mpsc::channel(4);
        let (_hub, handle) = EdgeHub::new(
            Arc::new(verge_edgehub::HubSettings {
                node_name: "edge-1".to_owned(),
                data_dir: dir.path().to_owned(),
                edge_hub: verge_edgehub::EdgeHubConfig::default(),
            }),
            store.clone(),
            down_tx,
        );
        (dir, MetaManager::new(store, down_rx, handle))
    }

    /// The wire message a controller sends: object `uid-1` at `rv`.
    fn wire(id: &str, op: Operation, resource: &str, rv: &str, content: &[u8]) -> Message {
        Message::build(
            id,
            "edgecontroller",
            Group::Resource,
            op,
            resource,
            content.to_vec(),
        )
        .with_object("uid-1", rv)
    }

    fn msg(id: &str, op: Operation, resource: &str, rv: &str, content: &[u8]) -> Envelope {
        Envelope::try_from(wire(id, op, resource, rv, content)).expect("valid")
    }

    /// As edgehub hands a wire message to metamanager: a bad route is answered at the stream.
    async fn handle(
        m: &MetaManager,
        id: &str,
        op: Operation,
        resource: &str,
        rv: &str,
        content: &[u8],
    ) -> Option<Envelope> {
        match Envelope::try_from(wire(id, op, resource, rv, content)) {
            Ok(msg) => m.handle(msg).await,
            Err(error) => verge_edgehub::refusal(&error),
        }
    }

    fn answer(reply: Option<Envelope>) -> (Operation, String, String) {
        let reply = Message::from(reply.expect("a reply"));
        let op = reply.operation().expect("operation");
        (
            op,
            reply.parent_id().to_owned(),
            reply.resource().to_owned(),
        )
    }

    #[tokio::test]
    async fn stores_then_acks_and_rejects_malformed() {
        let (_dir, m) = manager();
        let key = ResourceKey::new("ns", ResourceType::Secret, "s");
        let r = m
            .handle(msg("1", Operation::Insert, "ns/secret/s", "7", b"{}"))
            .await;
        assert_eq!(
            answer(r),
            (Operation::Ack, "1".into(), "ns/secret/s".into())
        );
        let r = m
            .handle(msg(
                "2",
                Operation::Update,
                "ns/secret/s",
                "6",
                b"{\"old\":1}",
            ))
            .await;
        assert_eq!(answer(r).0, Operation::Ack, "stale copies are acked");
        let stored = m.store.get(&key).expect("get").expect("stored");
        assert_eq!(
            (stored.resource_version.as_str(), stored.content.as_slice()),
            ("7", &b"{}"[..])
        );

        for (id, op, path, content) in [
            ("3", Operation::Update, "ns/secret/s", &b"{oops"[..]),
            ("4", Operation::Insert, "ns/nope/s", &b"{}"[..]),
            ("5", Operation::Patch, "ns/secret/s", &b"{}"[..]),
        ] {
            let r = handle(&m, id, op, path, "9", content).await;
            assert_eq!(answer(r).0, Operation::Error, "message {id}");
        }
        assert_eq!(
            m.store
                .get(&key)
                .expect("get")
                .expect("kept")
                .resource_version,
            "7"
        );

        let r = m
            .handle(msg("6", Operation::Delete, "ns/secret/s", "8", b""))
            .await;
        assert_eq!(answer(r).0, Operation::Ack);
        assert!(m.store.get(&key).expect("get").is_none());

        let cloud_ack = Message::reply(
            "7",
            "x",
            "edgecontroller",
            Group::Resource,
            Operation::Ack,
            "",
            Vec::new(),
        );
        let cloud_ack = Envelope::try_from(cloud_ack).expect("valid");
        assert!(m.handle(cloud_ack).await.is_none());
    }

    #[tokio::test]
    async fn third_party_groups_are_refused_and_nothing_is_stored() {
        let (_dir, m) = manager();
        let group: Group = "robots.example.com".parse().expect("group");
        let command = Message::build(
            "c-1",
            "robots-controller",
            group,
            Operation::Update,
            "default/robot/arm",
            b"{}".to_vec(),
        );
        let r = m.handle(Envelope::try_from(command).expect("valid")).await;
        let reply = Message::from(r.expect("a reply"));
        assert_eq!(reply.operation().expect("op"), Operation::Error);
        assert!(
            String::from_utf8_lossy(&reply.content).contains("eventBus.enable"),
            "{reply:?}"
        );
        assert_eq!(m.store.identities().expect("inventory").len(), 0);
    }
}
