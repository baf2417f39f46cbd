//! Per-node knowledge of which Devices and DeviceModels were sent, and the plan of what to
//! send next (the same design as edgecontroller's pod sender).
//!
//! [`NodeState::held`] starts as the node's inventory (types `device` and `devicemodel`
//! only) and is updated optimistically with every message sent; a `DeliveryError` from
//! cloudhub or an `error` answer from the edge makes it forget that message's object
//! again, so the next change, retry or resync sends it once more.
//!
//! No echo of changes the edge does not act on: for every held object the state also keeps
//! the [`Fingerprint`] of the held version ([`Contents`]), recorded when it is sent or found
//! current. A newer version in the cache with the same fingerprint (only `status`,
//! `resourceVersion` or `managedFields` changed) is not sent. The contents of a node
//! outlive its session (the downstream task keeps them across reconnects), not a
//! controller restart.
//!
//! The `resync` marker has its own key (`_/device/<node>`); one marker is in flight at a
//! time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::api::DynamicObject;
use verge_controller::diff::{self, Diff, Version, Versions};
use verge_controller::fingerprint::Fingerprint;
use verge_core::{Envelope, ResourceKey, ResourceType};
use verge_proto::Inventory;

use super::messages::{delete_message, resync_message, update_message, version};
use crate::desired;

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
    /// The newest resourceVersion seen with the same fingerprint (saves hashing it again).
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

    fn record(&mut self, key: &ResourceKey, object: &DynamicObject) {
        let held = version(object);
        let content = Content {
            same_as: held.resource_version.clone(),
            held,
            fingerprint: Fingerprint::of(object),
        };
        self.0.insert(key.clone(), content);
    }

    /// Whether the node's `held` version of `key` has the content of `object`.
    fn unchanged(&mut self, key: &ResourceKey, held: &Version, object: &DynamicObject) -> bool {
        let Some(content) = self.0.get_mut(key).filter(|c| c.held == *held) else {
            return false;
        };
        let current = object.metadata.resource_version.clone().unwrap_or_default();
        if content.same_as == current {
            return true;
        }
        if Fingerprint::of(object) != content.fingerprint {
            return false;
        }
        content.same_as = current;
        true
    }
}

/// What a connected node holds, as far as devicecontroller knows.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Devices and DeviceModels the node holds (inventory plus everything sent since).
    pub held: Versions,
    /// Content fingerprints of held objects.
    contents: Contents,
    /// Unanswered messages by id.
    in_flight: HashMap<String, Sent>,
    /// Whether the `resync` marker is still to be sent after the next plan.
    resync_pending: bool,
    /// Updates and deletes sent since the pending marker was due (its summary).
    resync_counts: (usize, usize),
    /// The unanswered marker's id, if any.
    marker_in_flight: Option<String>,
}

impl NodeState {
    /// The state of a node that just connected with `inventory`; `remembered` are the
    /// contents of its previous session (those of versions it still holds are kept). The
    /// next [`NodeState::plan`] ends with the `resync` marker.
    pub fn connected(inventory: &Inventory, remembered: Contents) -> Self {
        let held = desired::held_from_inventory(inventory);
        let mut contents = remembered;
        contents.0.retain(|key, c| held.get(key) == Some(&c.held));
        Self {
            held,
            contents,
            resync_pending: true,
            ..Self::default()
        }
    }

    /// Ends the session; returns what is worth remembering for the next one.
    pub fn into_contents(self) -> Contents {
        self.contents
    }

    /// The messages that bring `node` to hold `wanted`, in order: models before the devices
    /// that use them, device deletes before model deletes, then the `resync` marker if it is
    /// pending. Records them as held.
    pub fn plan(
        &mut self,
        node: &str,
        wanted: &BTreeMap<ResourceKey, Arc<DynamicObject>>,
    ) -> Vec<Envelope> {
        let versions: Versions = wanted
            .iter()
            .map(|(key, object)| (key.clone(), version(object)))
            .collect();
        let contents = &mut self.contents;
        let Diff {
            mut updates,
            mut deletes,
        } = diff::diff_by_content(&versions, &self.held, desired::is_managed, |key, held| {
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
        updates.sort_by_key(|key| key.kind != ResourceType::DeviceModel);
        deletes.sort_by_key(|(key, _)| key.kind == ResourceType::DeviceModel);
        if self.in_flight.len() + updates.len() + deletes.len() + 1 > MAX_IN_FLIGHT {
            self.in_flight.clear();
        }
        let counts = (updates.len(), deletes.len());
        let mut messages = Vec::with_capacity(counts.0 + counts.1 + 1);
        for key in updates {
            let Some(object) = wanted.get(&key) else {
                continue;
            };
            let message = update_message(node, &key, object);
            self.held.insert(key.clone(), version(object));
            self.contents.record(&key, object);
            self.in_flight
                .insert(message.id.to_string(), Sent::Update(key));
            messages.push(message);
        }
        for (key, uid) in deletes {
            let message = delete_message(node, &key, &uid);
            self.held.remove(&key);
            self.contents.0.remove(&key);
            self.in_flight
                .insert(message.id.to_string(), Sent::Delete(key, uid));
            messages.push(message);
        }
        if self.resync_pending {
            self.resync_counts.0 += counts.0;
            self.resync_counts.1 += counts.1;
            if self.marker_in_flight.is_none() {
                let (updates, deletes) = std::mem::take(&mut self.resync_counts);
                let marker = resync_message(node, updates, deletes);
                self.in_flight.insert(marker.id.to_string(), Sent::Resync);
                self.marker_in_flight = Some(marker.id.to_string());
                self.resync_pending = false;
                messages.push(marker);
            }
        }
        messages
    }

    /// The edge acknowledged message `id`. Returns whether the node should be planned again
    /// now (a pending marker may have waited for this answer).
    pub fn answered(&mut self, id: &str) -> bool {
        self.in_flight.remove(id);
        self.marker_answered(id) && self.resync_pending
    }

    /// Clears the marker if `id` is it; returns whether it was.
    fn marker_answered(&mut self, id: &str) -> bool {
        let marker = self.marker_in_flight.as_deref() == Some(id);
        if marker {
            self.marker_in_flight = None;
        }
        marker
    }

    /// Message `id` was not delivered or not applied: forget its effect, so that the next
    /// change, retry or resync sends it again (a lost `resync` marker is sent after the next
    /// plan). Returns whether the id was known.
    pub fn failed(&mut self, id: &str) -> bool {
        self.marker_answered(id);
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

#[cfg(test)]
mod tests;
