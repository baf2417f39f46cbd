//! Per-node knowledge of what was sent, and the plan of what to send next: the downstream
//! bookkeeping every controller shares. What a controller sends is its own
//! ([`NodeObjects`]: the object type, version and fingerprint, the managed types, the order
//! and the messages); this module keeps the rest.
//!
//! [`NodeState::held`] starts as the node's inventory and is updated optimistically with every
//! message sent; a `DeliveryError` from cloudhub or an `error` answer from the edge makes it
//! forget that message's object again, so the next change, retry or resync sends it once
//! more.
//!
//! No echo of changes the edge does not act on: for every held object the state also keeps
//! the [`Fingerprint`] of the held version ([`Contents`]), recorded when the object is sent
//! or found current. A newer version with the same fingerprint (the edge's own status report
//! changed the resourceVersion, nothing else) is not sent; the node keeps holding the older
//! version, which differs only in status. The contents of a node outlive its session (the
//! downstream task keeps them across reconnects), but not a controller restart: a restarted
//! controller resends, once, each object whose status changed since the edge received it.
//!
//! The `resync` marker shares a cloudhub delivery key with the objects of
//! [`NodeObjects::own_key`] (edgecontroller: the node's Node object, `_/node/<node>`), or has
//! a key of its own (`None`). Cloudhub replaces a waiting message by a newer one of its key,
//! so at most one message of that key is unanswered at a time: an update or delete of the
//! own key, or the marker, waits until the previous one was answered or failed
//! ([`NodeState::answered`] tells the caller to plan again).

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::time::Instant;

use verge_core::{Envelope, ResourceKey, ResourceType};
use verge_proto::Inventory;

use crate::diff::{self, Diff, Version, Versions};
use crate::fingerprint::Fingerprint;

/// Messages remembered per node for delivery errors; older ones are forgotten beyond this.
const MAX_IN_FLIGHT: usize = 4096;

/// What one controller sends down, and how (associated functions only: implement it on a
/// unit type).
pub trait NodeObjects {
    /// A cached object the controller sends.
    type Object;

    /// The object's uid and resourceVersion.
    fn version(object: &Self::Object) -> Version;

    /// The object's content, without what the edge does not act on (status).
    fn fingerprint(object: &Self::Object) -> Fingerprint;

    /// Whether held objects of `kind` are this controller's (deleted when not desired).
    fn is_managed(kind: ResourceType) -> bool;

    /// What `node` holds of this controller's objects, from its inventory.
    fn held_from_inventory(node: &str, inventory: &Inventory) -> Versions;

    /// The object key whose messages share the `resync` marker's delivery key, if any.
    fn own_key(node: &str) -> Option<ResourceKey>;

    /// Puts the updates and the deletes of one plan in the order they are sent.
    fn order(updates: &mut [ResourceKey], deletes: &mut [(ResourceKey, String)]);

    /// The `update` message of `object` for `node`.
    fn update_message(node: &str, key: &ResourceKey, object: &Self::Object) -> Envelope;

    /// The `delete` message of `key` at `uid` for `node`.
    fn delete_message(node: &str, key: &ResourceKey, uid: &str) -> Envelope;

    /// The `resync` marker for `node`, summarizing the updates and deletes before it.
    fn resync_message(node: &str, updates: usize, deletes: usize) -> Envelope;
}

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
    /// The newest resourceVersion seen with the same fingerprint (saves hashing the same
    /// version again).
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

    fn record<P: NodeObjects>(&mut self, key: &ResourceKey, object: &P::Object) {
        let held = P::version(object);
        let content = Content {
            same_as: held.resource_version.clone(),
            held,
            fingerprint: P::fingerprint(object),
        };
        self.0.insert(key.clone(), content);
    }

    /// Whether the node's `held` version of `key` has the content of `object`.
    fn unchanged<P: NodeObjects>(
        &mut self,
        key: &ResourceKey,
        held: &Version,
        object: &P::Object,
    ) -> bool {
        let Some(content) = self.0.get_mut(key).filter(|c| c.held == *held) else {
            return false;
        };
        let current = P::version(object).resource_version;
        if content.same_as == current {
            return true;
        }
        if P::fingerprint(object) != content.fingerprint {
            return false;
        }
        content.same_as = current;
        true
    }
}

/// What a connected node holds of `P`'s objects, as far as the controller knows.
#[derive(Debug, Clone)]
pub struct NodeState<P> {
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
    /// The object key sharing the marker's delivery key ([`NodeObjects::own_key`]).
    own: Option<ResourceKey>,
    /// The unanswered message of the marker's delivery key, if any.
    own_in_flight: Option<String>,
    /// When the session started, until the edge answered its `resync` marker
    /// (`verge_controller_resync_duration_seconds`).
    resync_since: Option<Instant>,
    objects: PhantomData<fn() -> P>,
}

impl<P: NodeObjects> NodeState<P> {
    /// The state of `node` that just connected with `inventory`; `remembered` are the
    /// contents of its previous session (those of versions it still holds are kept). The
    /// next [`NodeState::plan_objects`] ends with the `resync` marker.
    pub fn connected(node: &str, inventory: &Inventory, remembered: Contents) -> Self {
        let held = P::held_from_inventory(node, inventory);
        let mut contents = remembered;
        contents.0.retain(|key, c| held.get(key) == Some(&c.held));
        Self {
            held,
            contents,
            in_flight: HashMap::new(),
            resync_pending: true,
            resync_counts: (0, 0),
            own: P::own_key(node),
            own_in_flight: None,
            resync_since: Some(Instant::now()),
            objects: PhantomData,
        }
    }

    /// The content fingerprints of held objects, as far as known.
    pub fn contents(&self) -> &Contents {
        &self.contents
    }

    /// Ends the session; returns what is worth remembering for the next one.
    pub fn into_contents(self) -> Contents {
        self.contents
    }

    /// The messages that bring `node` to hold `wanted`, in [`NodeObjects::order`], then the
    /// `resync` marker if it is pending. Records them as held. A message of the marker's
    /// delivery key waits while another one is unanswered (module docs); the marker also
    /// waits for an own-key message of this plan.
    pub fn plan_objects(
        &mut self,
        node: &str,
        wanted: &BTreeMap<ResourceKey, P::Object>,
    ) -> Vec<Envelope> {
        let versions: Versions = wanted
            .iter()
            .map(|(key, object)| (key.clone(), P::version(object)))
            .collect();
        let contents = &mut self.contents;
        let Diff {
            mut updates,
            mut deletes,
        } = diff::diff_by_content(&versions, &self.held, P::is_managed, |key, held| {
            wanted
                .get(key)
                .is_some_and(|object| contents.unchanged::<P>(key, held, object))
        });
        // Objects found current get a fingerprint, so a later status-only change is
        // recognised.
        for (key, version) in &versions {
            if self.held.get(key) == Some(version)
                && !self.contents.0.get(key).is_some_and(|c| c.held == *version)
                && let Some(object) = wanted.get(key)
            {
                self.contents.record::<P>(key, object);
            }
        }
        if self.own_in_flight.is_some()
            && let Some(own) = &self.own
        {
            updates.retain(|key| key != own);
            deletes.retain(|(key, _)| key != own);
        }
        P::order(&mut updates, &mut deletes);
        if self.in_flight.len() + updates.len() + deletes.len() + 1 > MAX_IN_FLIGHT {
            self.in_flight.clear();
        }
        let (update_count, delete_count) = (updates.len(), deletes.len());
        let mut messages = Vec::with_capacity(update_count + delete_count + 1);
        for key in updates {
            let Some(object) = wanted.get(&key) else {
                continue;
            };
            let message = P::update_message(node, &key, object);
            if self.own.as_ref() == Some(&key) {
                self.own_in_flight = Some(message.id.to_string());
            }
            self.held.insert(key.clone(), P::version(object));
            self.contents.record::<P>(&key, object);
            self.in_flight
                .insert(message.id.to_string(), Sent::Update(key));
            messages.push(message);
        }
        for (key, uid) in deletes {
            let message = P::delete_message(node, &key, &uid);
            if self.own.as_ref() == Some(&key) {
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
                crate::metrics::global().resync_objects(updates, deletes);
                let marker = P::resync_message(node, updates, deletes);
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
    /// plan, e.g. for edgecontroller's Node object whose status the edge reports every few
    /// seconds.
    pub fn is_current(&mut self, key: &ResourceKey, object: Option<&P::Object>) -> bool {
        match (self.held.get(key), object) {
            (None, None) => true,
            (Some(held), Some(object)) => {
                let version = P::version(object);
                *held == version
                    || (held.uid == version.uid && self.contents.unchanged::<P>(key, held, object))
            }
            _ => false,
        }
    }

    /// Clears the marker's key if `id` is its unanswered message; returns whether it was.
    fn own_answered(&mut self, id: &str) -> bool {
        let own = self.own_in_flight.as_deref() == Some(id);
        if own {
            self.own_in_flight = None;
        }
        own
    }

    /// The edge acknowledged message `id`. Returns whether the node should be planned again
    /// now (a message of the marker's key, an own-key object or the pending marker, may
    /// have waited for this answer).
    pub fn answered(&mut self, id: &str) -> bool {
        if self.in_flight.remove(id) == Some(Sent::Resync)
            && let Some(since) = self.resync_since.take()
        {
            crate::metrics::global().resync_done(since.elapsed());
        }
        self.own_answered(id) && (self.own.is_some() || self.resync_pending)
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
