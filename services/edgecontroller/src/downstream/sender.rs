//! Per-node knowledge of what was sent, and the plan of what to send next.
//!
//! [`NodeState::held`] starts as the node's inventory and is updated optimistically with every
//! message sent; a `DeliveryError` from cloudhub or an `error` answer from the edge makes it
//! forget that message's object again, so the next change, retry or resync sends it once
//! more.
//!
//! No status echo: for every held object the state also keeps the [`Fingerprint`] of the
//! held version ([`Contents`]), recorded when the object is sent or found current. A newer
//! version in the cache with the same fingerprint (the edge's own status report changed the
//! pod's resourceVersion, nothing else) is not sent; the node keeps holding the older
//! version, which differs only in status. The contents of a node outlive its session (the
//! downstream task keeps them across reconnects), but not a controller restart: a
//! restarted controller resends, once, each object whose status changed since the edge
//! received it.
//!
//! The node's own Node object and the `resync` marker share one cloudhub delivery key
//! (`_/node/<node>`), and cloudhub replaces a waiting message by a newer one of its key. So at
//! most one message of that key is unanswered at a time: a Node update or delete, or the
//! marker, waits until the previous one was answered or failed ([`NodeState::answered`] tells
//! the caller to plan again).

use std::collections::{BTreeMap, HashMap};

use verge_core::{Envelope, ResourceKey};
use verge_proto::Inventory;

use super::messages::{delete_message, resync_message, update_message};
use crate::cache::{Cached, Caches};
use crate::desired::{self, Diff, Version, Versions};
use crate::fingerprint::Fingerprint;

/// Messages remembered per node for delivery errors; older ones are forgotten beyond this.
const MAX_IN_FLIGHT: usize = 4096;

/// What one downstream message carried.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    /// An `update` of the key.
    Update(ResourceKey),
    /// A `delete` of the key at the uid.
    Delete(ResourceKey, String),
    /// The `resync` marker.
    Resync,
}

/// What the node holds of one object, in terms of content.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Content {
    /// The version the node holds.
    held: Version,
    /// The fingerprint of that version.
    fingerprint: Fingerprint,
    /// The newest resourceVersion seen in the cache with the same fingerprint (saves hashing
    /// the same cached version again).
    same_as: String,
}

/// The content fingerprints of the objects one node holds (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Contents(HashMap<ResourceKey, Content>);

impl Contents {
    /// Number of objects with a known fingerprint.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no fingerprint is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn record(&mut self, key: &ResourceKey, object: &Cached) {
        let held = object.version();
        let same_as = held.resource_version.clone();
        let fingerprint = object.fingerprint();
        let content = Content {
            held,
            fingerprint,
            same_as,
        };
        self.0.insert(key.clone(), content);
    }

    /// Whether the node's `held` version of `key` has the content of `object`.
    fn unchanged(&mut self, key: &ResourceKey, held: &Version, object: &Cached) -> bool {
        let Some(content) = self.0.get_mut(key).filter(|c| c.held == *held) else {
            return false;
        };
        let current = object.version().resource_version;
        if content.same_as == current {
            return true;
        }
        if object.fingerprint() != content.fingerprint {
            return false;
        }
        content.same_as = current;
        true
    }
}

/// What a connected node holds, as far as this controller knows.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Managed objects the node holds (inventory plus everything sent since).
    pub held: Versions,
    /// Content fingerprints of held objects.
    contents: Contents,
    /// Unanswered messages by id.
    in_flight: HashMap<String, Sent>,
    /// Whether the `resync` marker is still to be sent after the next plan.
    resync_pending: bool,
    /// Updates and deletes sent since the pending marker was due (its summary).
    resync_counts: (usize, usize),
    /// The unanswered message of the node's own key (`_/node/<node>`: its Node object or
    /// the marker), if any.
    own_in_flight: Option<String>,
}

impl NodeState {
    /// The state of a node that just connected with `inventory`; `remembered` are the
    /// contents of its previous session (those of versions it still holds are kept). The
    /// next [`NodeState::plan`] ends with the `resync` marker.
    pub fn connected(node: &str, inventory: &Inventory, remembered: Contents) -> Self {
        let held = desired::held_from_inventory(node, inventory);
        let mut contents = remembered;
        contents.0.retain(|key, c| held.get(key) == Some(&c.held));
        Self {
            held,
            contents,
            in_flight: HashMap::new(),
            resync_pending: true,
            resync_counts: (0, 0),
            own_in_flight: None,
        }
    }

    /// Ends the session; returns what is worth remembering for the next one.
    pub fn into_contents(self) -> Contents {
        self.contents
    }

    /// Computes what `node` misses from `caches` and returns the messages to send
    /// ([`NodeState::plan_objects`]).
    pub fn plan(&mut self, node: &str, caches: &Caches) -> Vec<Envelope> {
        self.plan_objects(node, &desired_objects(node, caches))
    }

    /// The messages that bring `node` to hold `wanted`, in order: its Node object first,
    /// configmaps and secrets before the pods that use them, pod deletes before those of the configmaps and secrets
    /// they used, then the `resync` marker if it is pending. Records them as held. A message
    /// of the node's own key (its Node object, the marker) waits while another one is
    /// unanswered (module docs); the marker also waits for a Node message of this plan.
    pub fn plan_objects(
        &mut self,
        node: &str,
        wanted: &BTreeMap<ResourceKey, Cached>,
    ) -> Vec<Envelope> {
        let versions: Versions = wanted
            .iter()
            .map(|(key, object)| (key.clone(), object.version()))
            .collect();
        let contents = &mut self.contents;
        let Diff {
            mut updates,
            mut deletes,
        } = desired::diff_by_content(&versions, &self.held, |key, held| {
            wanted
                .get(key)
                .is_some_and(|object| contents.unchanged(key, held, object))
        });
        // Objects found current get a fingerprint, so a later status-only change is
        // recognised.
        for (key, version) in &versions {
            if self.held.get(key) == Some(version)
                && !self.contents.0.get(key).is_some_and(|c| c.held == *version)
                && let Some(object) = wanted.get(key)
            {
                self.contents.record(key, object);
            }
        }
        let own = desired::node_key(node);
        if self.own_in_flight.is_some() {
            updates.retain(|key| *key != own);
            deletes.retain(|(key, _)| *key != own);
        }
        updates.sort_by_key(|key| std::cmp::Reverse(key.kind));
        deletes.sort_by_key(|(key, _)| key.kind);
        if self.in_flight.len() + updates.len() + deletes.len() + 1 > MAX_IN_FLIGHT {
            self.in_flight.clear();
        }
        let (update_count, delete_count) = (updates.len(), deletes.len());
        let mut messages = Vec::with_capacity(update_count + delete_count + 1);
        for key in updates {
            let Some(object) = wanted.get(&key) else {
                continue;
            };
            let message = update_message(node, &key, object);
            if key == own {
                self.own_in_flight = Some(message.id.to_string());
            }
            self.held.insert(key.clone(), object.version());
            self.contents.record(&key, object);
            self.in_flight
                .insert(message.id.to_string(), Sent::Update(key));
            messages.push(message);
        }
        for (key, uid) in deletes {
            let message = delete_message(node, &key, &uid);
            if key == own {
                self.own_in_flight = Some(message.id.to_string());
            }
            self.held.remove(&key);
            self.contents.0.remove(&key);
            self.in_flight
                .insert(message.id.to_string(), Sent::Delete(key, uid));
            messages.push(message);
        }
        if self.resync_pending {
            self.resync_counts.0 += update_count;
            self.resync_counts.1 += delete_count;
            if self.own_in_flight.is_none() {
                let (updates, deletes) = std::mem::take(&mut self.resync_counts);
                let marker = resync_message(node, updates, deletes);
                self.in_flight.insert(marker.id.to_string(), Sent::Resync);
                self.own_in_flight = Some(marker.id.to_string());
                self.resync_pending = false;
                messages.push(marker);
            }
        }
        messages
    }

    /// Whether the node holds `object` (the cached version of `key`, `None`: not cached) as
    /// far as the edge is concerned: at the same version, or at one that differs only in
    /// status; not held and not cached counts as current too. A cheap check before a full
    /// [`NodeState::plan`], e.g. for the node's own Node object whose status the edge
    /// reports every few seconds.
    pub fn is_current(&mut self, key: &ResourceKey, object: Option<&Cached>) -> bool {
        match (self.held.get(key), object) {
            (None, None) => true,
            (Some(held), Some(object)) => {
                let version = object.version();
                *held == version
                    || (held.uid == version.uid && self.contents.unchanged(key, held, object))
            }
            _ => false,
        }
    }

    /// Clears the node's own key if `id` is its unanswered message; returns whether it was.
    fn own_answered(&mut self, id: &str) -> bool {
        let own = self.own_in_flight.as_deref() == Some(id);
        if own {
            self.own_in_flight = None;
        }
        own
    }

    /// The edge acknowledged message `id`. Returns whether the node should be planned again
    /// now (a message of its own key may have waited for this answer).
    pub fn answered(&mut self, id: &str) -> bool {
        self.in_flight.remove(id);
        self.own_answered(id)
    }

    /// Message `id` was not delivered or not applied: forget its effect, so that the next
    /// change, retry or resync sends it again (a lost `resync` marker is sent after the next
    /// plan). Returns whether the id was known.
    pub fn failed(&mut self, id: &str) -> bool {
        self.own_answered(id);
        match self.in_flight.remove(id) {
            Some(Sent::Update(key)) => {
                self.held.remove(&key);
                self.contents.0.remove(&key);
                true
            }
            Some(Sent::Delete(key, uid)) => {
                // The node may still hold it, at an unknown version.
                self.held
                    .entry(key)
                    .or_insert_with(|| Version::new(uid, ""));
                true
            }
            Some(Sent::Resync) => {
                self.resync_pending = true;
                self.resync_counts = (0, 0);
                true
            }
            None => false,
        }
    }
}

/// The objects `node` should hold, from the caches: its own Node object (when it is a known
/// edge node), its pods and the configmaps and secrets they reference that exist.
pub fn desired_objects(node: &str, caches: &Caches) -> BTreeMap<ResourceKey, Cached> {
    let mut out = BTreeMap::new();
    let own = desired::node_key(node);
    if let Some(object) = caches.get(&own) {
        out.insert(own, object);
    }
    for pod in caches.pods_on(node) {
        for key in desired::references(&pod) {
            if let Some(object) = caches.get(&key) {
                out.insert(key, object);
            }
        }
        out.insert(desired::pod_key(&pod), Cached::Pod(pod));
    }
    out
}

#[cfg(test)]
mod tests;
