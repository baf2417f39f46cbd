//! The node's Services and EndpointSlices, parsed once and shared by the Service proxy and
//! the resolver: [`ServiceCatalog`] follows the store (metamanager's events), parses only the
//! object that changed (into the trimmed [`objects`] types), and publishes a [`Snapshot`]
//! after each burst of changes ([`DEBOUNCE`]). Without it each consumer listed and parsed
//! every Service and EndpointSlice again at every change: a node receiving a thousand
//! Services parsed millions of objects and held two parsed copies at once.
//!
//! Built from redb at start, the first snapshot is complete before any session: Services and
//! names work offline and right after a restart.

pub mod objects;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;
use verge_metamanager::StoreEvent;

pub use objects::{EndpointSlice, Service};

/// How long store changes are gathered before a new snapshot is published.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// The Services and EndpointSlices the node holds, by store key.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    services: BTreeMap<ResourceKey, Arc<Service>>,
    slices: BTreeMap<ResourceKey, Arc<EndpointSlice>>,
}

impl Snapshot {
    /// The Services, in key order.
    pub fn services(&self) -> impl Iterator<Item = &Service> + Clone {
        self.services.values().map(AsRef::as_ref)
    }

    /// The EndpointSlices, in key order.
    pub fn slices(&self) -> impl Iterator<Item = &EndpointSlice> + Clone {
        self.slices.values().map(AsRef::as_ref)
    }

    /// How many Services and EndpointSlices it holds.
    pub fn len(&self) -> (usize, usize) {
        (self.services.len(), self.slices.len())
    }

    /// Every stored Service and EndpointSlice of `store`.
    fn load(store: &MetaStore) -> Self {
        Self {
            services: load(store, ResourceType::Service),
            slices: load(store, ResourceType::EndpointSlice),
        }
    }

    /// Takes the stored state of `key` (a Service or an EndpointSlice): parsed, or gone when
    /// deleted or unparsable.
    fn refresh(&mut self, store: &MetaStore, key: &ResourceKey) {
        match key.kind {
            ResourceType::Service => refresh(&mut self.services, store, key),
            ResourceType::EndpointSlice => refresh(&mut self.slices, store, key),
            _ => {}
        }
    }
}

/// Follows the store and publishes [`Snapshot`]s; see the module docs.
#[derive(Debug)]
pub struct ServiceCatalog {
    store: MetaStore,
    events: broadcast::Receiver<StoreEvent>,
    published: watch::Sender<Arc<Snapshot>>,
}

impl ServiceCatalog {
    /// The catalog of `store`, following `events` (from metamanager); its first snapshot is
    /// what the store holds now.
    pub fn new(store: MetaStore, events: broadcast::Receiver<StoreEvent>) -> Self {
        let first = Snapshot::load(&store);
        Self {
            store,
            events,
            published: watch::channel(Arc::new(first)).0,
        }
    }

    /// The snapshots: the current one at once, each later one as `changed()`.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.published.subscribe()
    }

    /// Follows the store until `shutdown` or until metamanager's events end. A lagging
    /// receiver (changes missed) loads everything again. Changes go into the published
    /// snapshot in place (copied first only while a consumer holds it), and consumers are
    /// told once per burst.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let first = tokio::select! {
                () = shutdown.cancelled() => return,
                ev = self.events.recv() => ev,
            };
            let mut reload = false;
            match first {
                Ok(ev) if !is_followed(&ev.key) => continue,
                Ok(ev) => self.refresh(&ev.key),
                Err(broadcast::error::RecvError::Lagged(_)) => reload = true,
                Err(broadcast::error::RecvError::Closed) => return,
            }
            // Gather the rest of the burst.
            let gather = tokio::time::sleep(DEBOUNCE);
            tokio::pin!(gather);
            loop {
                tokio::select! {
                    () = &mut gather => break,
                    ev = self.events.recv() => match ev {
                        Ok(ev) if is_followed(&ev.key) && !reload => self.refresh(&ev.key),
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => reload = true,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
            if reload {
                let loaded = Arc::new(Snapshot::load(&self.store));
                self.published.send_replace(loaded);
            } else {
                self.published.send_modify(|_| {});
            }
        }
    }

    /// Takes the stored state of `key` into the published snapshot without telling the
    /// consumers yet.
    fn refresh(&self, key: &ResourceKey) {
        self.published.send_if_modified(|snapshot| {
            Arc::make_mut(snapshot).refresh(&self.store, key);
            false
        });
    }
}

/// Whether the catalog follows changes of `key`.
fn is_followed(key: &ResourceKey) -> bool {
    matches!(
        key.kind,
        ResourceType::Service | ResourceType::EndpointSlice
    )
}

fn load<T: DeserializeOwned>(
    store: &MetaStore,
    kind: ResourceType,
) -> BTreeMap<ResourceKey, Arc<T>> {
    crate::stored::list_keyed(store, kind)
        .into_iter()
        .map(|(key, object)| (key, Arc::new(object)))
        .collect()
}

fn refresh<T: DeserializeOwned>(
    map: &mut BTreeMap<ResourceKey, Arc<T>>,
    store: &MetaStore,
    key: &ResourceKey,
) {
    match store.get(key) {
        Ok(Some(stored)) => match crate::stored::parse(key, &stored.content) {
            Some(object) => {
                map.insert(key.clone(), Arc::new(object));
            }
            None => {
                map.remove(key);
            }
        },
        Ok(None) => {
            map.remove(key);
        }
        Err(e) => {
            warn!(object = %key, error = %verge_runtime::ErrorChain(&e), "reading the store failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verge_core::TraceContext;
    use verge_metamanager::Applied;

    fn event(key: &ResourceKey, applied: Applied) -> StoreEvent {
        StoreEvent {
            key: key.clone(),
            uid: "u".into(),
            applied,
            trace: TraceContext::default(),
        }
    }

    fn service(name: &str, ip: &str, rv: &str) -> (ResourceKey, Vec<u8>, String) {
        let key = ResourceKey::new("shop", ResourceType::Service, name);
        let json = serde_json::json!({ "metadata": { "name": name, "namespace": "shop" },
            "spec": { "clusterIP": ip } });
        (key, serde_json::to_vec(&json).expect("json"), rv.to_owned())
    }

    #[tokio::test]
    async fn changed_objects_are_parsed_again_and_deleted_ones_leave() {
        let dir = tempfile::tempdir().expect("dir");
        let store = MetaStore::open(&dir.path().join("s.redb")).expect("store");
        let (web, json, rv) = service("web", "10.96.0.20", "1");
        store.upsert_if_newer(&web, "u", &rv, &json).expect("put");
        let (events, rx) = broadcast::channel(16);
        let catalog = ServiceCatalog::new(store.clone(), rx);
        let mut snapshots = catalog.subscribe();
        assert_eq!(
            snapshots.borrow_and_update().len(),
            (1, 0),
            "loaded at start"
        );
        let shutdown = CancellationToken::new();
        let task = verge_runtime::tasks::spawn("catalog", catalog.run(shutdown.clone()));

        let (db, json, rv) = service("db", "10.96.0.30", "2");
        store.upsert_if_newer(&db, "u", &rv, &json).expect("put");
        let (web2, json, rv) = service("web", "10.96.0.21", "3");
        store.upsert_if_newer(&web2, "u", &rv, &json).expect("put");
        events.send(event(&db, Applied::Stored)).expect("send");
        events.send(event(&web, Applied::Stored)).expect("send");
        snapshots.changed().await.expect("a snapshot");
        let snapshot = Arc::clone(&snapshots.borrow_and_update());
        let ips: Vec<_> = snapshot
            .services()
            .filter_map(|s| s.spec.as_ref()?.cluster_ip.clone())
            .collect();
        assert_eq!(ips, ["10.96.0.30", "10.96.0.21"], "one burst, one snapshot");

        store.delete(&db, "u").expect("delete");
        events.send(event(&db, Applied::Deleted)).expect("send");
        snapshots.changed().await.expect("a snapshot");
        assert_eq!(snapshots.borrow_and_update().len(), (1, 0));
        shutdown.cancel();
        task.await.expect("catalog task");
    }
}
