//! Synchronous queries to the cloud (KubeEdge: beehive's `SendSync`, whose answer edgehub
//! routes back to the waiting caller by `parent_id`).
//!
//! [`QueryRegistry::query`] registers the message id, sends the `query` (header `sync`)
//! through the [`EdgeHubHandle`] and waits for the cloud's `response` (-> its content) or
//! `error` (-> [`QueryRefused`](crate::error::Error::QueryRefused)) with `parent_id` = that id. metamanager offers every
//! downstream `response`/`error` to [`QueryRegistry::complete`] first.

use crate::error::Error as MetaError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use verge_edgehub::Error as HubError;

use tokio::sync::oneshot;
use verge_core::{Envelope, Group, Kind, MessageId, Module, Outcome, ResourceKey};

use crate::error::Result;
use verge_edgehub::EdgeHubHandle;

/// How many queries may wait for an answer at once (architecture.md §3.5: bounded everything).
pub const MAX_PENDING_QUERIES: usize = 1024;

type Pending = Arc<Mutex<HashMap<MessageId, oneshot::Sender<Envelope>>>>;

/// Queries waiting for the cloud's answer, keyed by message id; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct QueryRegistry {
    pending: Pending,
}

/// Removes a pending entry when the waiting query ends (answer, timeout or cancellation).
struct Registration {
    pending: Pending,
    id: MessageId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.pending).remove(&self.id);
    }
}

fn lock(
    pending: &Pending,
) -> std::sync::MutexGuard<'_, HashMap<MessageId, oneshot::Sender<Envelope>>> {
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

impl QueryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many queries wait for an answer now.
    pub fn pending(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Hands `msg` (a downstream `response` or `error`) to the query waiting for its
    /// `parent_id`. Returns `msg` back when nobody waits for it (a late answer after a
    /// timeout, or an answer to something else), so the caller can log it.
    pub fn complete(&self, msg: Envelope) -> Option<Envelope> {
        let Some(parent) = msg.parent() else {
            return Some(msg);
        };
        let waiter = lock(&self.pending).remove(parent);
        match waiter {
            Some(tx) => tx.send(msg).err(),
            None => Some(msg),
        }
    }

    /// Sends `query <key>` with `content` (group `resource`, from `source`, header `sync`)
    /// through `hub` and returns the content of the cloud's `response`.
    ///
    /// # Errors
    /// [`CloudUnreachable`](crate::error::Error::CloudUnreachable) at once when no cloudhub session is up (offline: callers
    /// fall back to what they hold instead of waiting); [`QueryRefused`](crate::error::Error::QueryRefused) when the
    /// cloud answers `error`; [`QueryTimeout`](crate::error::Error::QueryTimeout) when no
    /// answer arrives within `timeout` (the message may still be queued or sent);
    /// [`QueueFull`](verge_edgehub::Error::QueueFull) when [`MAX_PENDING_QUERIES`] already wait; [`HubStopped`](verge_edgehub::Error::HubStopped)
    /// when edgehub is gone.
    pub async fn query(
        &self,
        hub: &EdgeHubHandle,
        source: Module,
        key: &ResourceKey,
        content: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let resource = key.to_string();
        if !hub.connected() {
            return Err(MetaError::CloudUnreachable { resource });
        }
        let kind = Kind::Query { key: key.clone() };
        let msg = Envelope::new(source, Group::Resource, kind, content);
        let id = msg.id.clone();
        let (tx, rx) = oneshot::channel();
        let _registration = {
            let mut pending = lock(&self.pending);
            if pending.len() >= MAX_PENDING_QUERIES {
                return Err(HubError::QueueFull {
                    capacity: MAX_PENDING_QUERIES,
                }
                .into());
            }
            pending.insert(id.clone(), tx);
            Registration {
                pending: Arc::clone(&self.pending),
                id,
            }
        };
        let answer = tokio::time::timeout(timeout, async {
            hub.send(msg).await?;
            rx.await
                .map_err(|_| crate::error::Error::from(HubError::HubStopped))
        })
        .await
        .map_err(|_| MetaError::QueryTimeout {
            resource: resource.clone(),
            timeout,
        })??;
        match answer.kind {
            Kind::Answer {
                outcome: Outcome::Response,
                ..
            } => Ok(answer.body),
            Kind::Answer {
                outcome: Outcome::Error(reason),
                ..
            } => Err(MetaError::QueryRefused { resource, reason }),
            _ => Err(MetaError::QueryRefused {
                resource,
                reason: String::from_utf8_lossy(&answer.body).into_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use verge_core::{Operation, ResourceType};
    use verge_proto::{Message, MessageExt};

    use super::*;

    fn answer(parent: &str, op: Operation, content: &[u8]) -> Envelope {
        Envelope::try_from(Message::reply(
            "a",
            parent,
            "edgecontroller",
            Group::Resource,
            op,
            "",
            content.to_vec(),
        ))
        .expect("valid")
    }

    /// A fake cloud side: reads the upstream channel and answers through the registry.
    #[tokio::test]
    async fn round_trip_response_error_and_timeout() {
        let (hub, mut upstream) = EdgeHubHandle::detached(4);
        let registry = QueryRegistry::new();
        let cloud = registry.clone();
        tokio::spawn(async move {
            while let Some(q) = upstream.recv().await {
                let q = Message::from(q);
                let sync = q.header.as_ref().is_some_and(|h| h.sync);
                assert!(sync, "queries are sync");
                assert_eq!(q.operation().expect("op"), Operation::Query);
                let reply = match q.resource() {
                    "ns/configmap/ok" => answer(q.id(), Operation::Response, b"{\"v\":1}"),
                    "ns/configmap/bad" => answer(q.id(), Operation::Error, b"not referenced"),
                    _ => continue, // never answered
                };
                assert!(cloud.complete(reply).is_none(), "a query waits");
            }
        });
        let key = |n: &str| ResourceKey::new("ns", ResourceType::ConfigMap, n);
        let t = Duration::from_secs(5);
        let got = registry
            .query(&hub, Module::Edged, &key("ok"), Vec::new(), t)
            .await;
        assert_eq!(got.expect("response"), b"{\"v\":1}");
        let err = registry
            .query(&hub, Module::Edged, &key("bad"), Vec::new(), t)
            .await;
        assert!(
            matches!(err, Err(MetaError::QueryRefused { ref reason, .. }) if reason == "not referenced")
        );
        let short = Duration::from_millis(50);
        let err = registry
            .query(&hub, Module::Edged, &key("silent"), Vec::new(), short)
            .await;
        assert!(matches!(err, Err(MetaError::QueryTimeout { .. })));
        assert_eq!(registry.pending(), 0, "timed-out queries are forgotten");
        let late = answer("unknown", Operation::Response, b"");
        assert!(registry.complete(late).is_some(), "nobody waits");
    }

    #[tokio::test]
    async fn metamanager_hands_answers_to_waiting_queries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = verge_edge_store::MetaStore::open(&dir.path().join("s.redb")).expect("open");
        let (hub, mut upstream) = EdgeHubHandle::detached(4);
        let (_down_tx, down_rx) = tokio::sync::mpsc::channel(1);
        let meta = crate::MetaManager::new(store, down_rx, hub.clone());
        let registry = meta.queries();
        let key = ResourceKey::new("ns", ResourceType::Secret, "s");
        let waiting = tokio::spawn(async move {
            let t = Duration::from_secs(5);
            registry
                .query(&hub, Module::Edged, &key, Vec::new(), t)
                .await
        });
        let sent = upstream.recv().await.expect("query sent");
        let reply = answer(sent.id.as_str(), Operation::Response, b"{}");
        assert!(meta.handle(reply).await.is_none(), "no reply to an answer");
        let got = waiting.await.expect("join").expect("response");
        assert_eq!(got, b"{}");
    }
}
