//! The pods admitted on this node and still holding their share of it, at their allocated
//! resources (kubelet: the allocation manager's allocated pods, those `HandlePodAdditions`
//! admits a new pod against and `handlePodResourcesResize` weighs a resize against), shared
//! by every pod worker.
//!
//! A worker admits its pod with [`Admitted::admit`], which checks the pod against the others
//! ([`super::fit`]) and registers it in one step under the lock, so two workers starting at
//! once cannot both take the last of a resource or the same host port. It keeps the
//! [`Ticket`] it gets while the pod is active; dropping it (the pod reached a terminal phase,
//! its containers were stopped after a deletion, or its worker ended) frees the pod's share.
//!
//! # Resizes
//! A pod is counted at its allocated resources: those of its spec when it is admitted, or
//! those of its resize [`Checkpoint`] when one was found on disk at start-up
//! ([`Admitted::with_allocations`]; kubelet: `AddPod` takes the allocation from its checkpoint
//! after a restart). Its share changes only when a resize is allocated: [`Admitted::resize`]
//! checks the new requests against the node less the *other* pods' shares
//! ([`super::fit::fit_resize`]: `Infeasible` or `Deferred`) and records them under the same
//! lock, so a resize and an admission cannot both take the same room.
//!
//! # After an edgecore restart
//! Every stored pod gets a new worker, all at once. The kubelet re-admits them one at a time
//! in creation order; edged instead [restores](Admitted::restore) first, without checks, the
//! pods that had been admitted before ([`ran_before`]: containers of theirs exist on the
//! node, or their status says Running), and only then starts the workers: a restored pod's
//! worker [claims](Admitted::claim) its entry and is not checked again, and pods that never
//! ran are admitted against the restored ones. Creation order alone would not do: a pod
//! created earlier but delivered later (the edge may be offline) could take the place of a
//! pod already running, which would then be rejected and its containers left orphaned; and
//! workers start concurrently, so their admission order is not their spawn order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Pod;

use super::fit::{Allocatable, Insufficient, Requests, Usage, fit, fit_resize};
use crate::resize::Checkpoint;

/// The registry of admitted pods; cheap to clone (clones share it).
#[derive(Debug, Clone)]
pub struct Admitted {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    allocatable: Allocatable,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// By pod uid.
    pods: HashMap<String, Entry>,
    /// The resize checkpoints found on disk at start-up, by pod uid, until their pod is
    /// admitted or restored.
    saved: HashMap<String, Checkpoint>,
}

#[derive(Debug)]
struct Entry {
    usage: Usage,
    /// Whether a worker holds its [`Ticket`] (a [restored](Admitted::restore) pod's is not
    /// held until its worker [claims](Admitted::claim) it).
    claimed: bool,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A state left by a panicking holder is still consistent (single inserts, removes
        // and updates).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// What pod `uid` (`pod`) takes at its allocated resources: those of its saved
    /// checkpoint if there is one (taken), else those of its spec.
    fn allocated_usage(&mut self, uid: &str, pod: &Pod) -> Usage {
        match self.saved.remove(uid) {
            Some(checkpoint) => Usage::of_pod(&checkpoint.allocated_pod(pod)),
            None => Usage::of_pod(pod),
        }
    }
}

/// A pod's place in the registry; dropping it frees the pod's share of the node.
#[derive(Debug)]
pub struct Ticket {
    inner: Arc<Inner>,
    uid: String,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.inner.lock().pods.remove(&self.uid);
    }
}

impl Admitted {
    /// An empty registry for a node of `allocatable`.
    pub fn new(allocatable: Allocatable) -> Self {
        Self::with_allocations(allocatable, HashMap::new())
    }

    /// An empty registry for a node of `allocatable`, whose pods are counted at the
    /// allocation of their resize checkpoint in `saved` (by pod uid; read at start-up,
    /// [`Checkpoint::load_all`]) when they are admitted or restored.
    pub fn with_allocations(allocatable: Allocatable, saved: HashMap<String, Checkpoint>) -> Self {
        Self {
            inner: Arc::new(Inner {
                allocatable,
                state: Mutex::new(State {
                    pods: HashMap::new(),
                    saved,
                }),
            }),
        }
    }

    /// The node's allocatable the pods are weighed against.
    pub fn allocatable(&self) -> Allocatable {
        self.inner.allocatable
    }

    /// Admits pod `uid` (`pod`, at its allocated resources) if it fits beside the pods
    /// registered ([`fit`]), registering it; a pod registered already (restored) is admitted
    /// as it is.
    ///
    /// # Errors
    /// The kubelet's `(reason, message)` when it does not fit (e.g. `OutOfcpu`,
    /// `NodePorts`); nothing is registered then.
    pub fn admit(&self, uid: &str, pod: &Pod) -> Result<Ticket, (&'static str, String)> {
        let mut state = self.inner.lock();
        if let Some(entry) = state.pods.get_mut(uid) {
            entry.claimed = true;
        } else {
            let usage = state.allocated_usage(uid, pod);
            let others = state.pods.values().map(|e| &e.usage);
            if let Some(refused) = fit(&usage, others, &self.inner.allocatable) {
                return Err(refused);
            }
            let claimed = true;
            state.pods.insert(uid.to_owned(), Entry { usage, claimed });
        }
        drop(state);
        Ok(self.ticket(uid))
    }

    /// Registers `pods` (at their allocated resources) without checking them against each
    /// other or the node (they were admitted before edgecore restarted; see the module docs).
    /// Pods without a uid, and pods registered already, are skipped.
    pub fn restore<'a>(&self, pods: impl IntoIterator<Item = &'a Pod>) {
        let mut state = self.inner.lock();
        for pod in pods {
            let Some(uid) = pod.metadata.uid.as_deref() else {
                continue;
            };
            if state.pods.contains_key(uid) {
                continue;
            }
            let usage = state.allocated_usage(uid, pod);
            let claimed = false;
            state.pods.insert(uid.to_owned(), Entry { usage, claimed });
        }
    }

    /// The ticket of pod `uid` if it was [restored](Self::restore) and no worker holds it
    /// yet.
    pub fn claim(&self, uid: &str) -> Option<Ticket> {
        let mut state = self.inner.lock();
        let entry = state.pods.get_mut(uid).filter(|e| !e.claimed)?;
        entry.claimed = true;
        drop(state);
        Some(self.ticket(uid))
    }

    /// Allocates to pod `uid` the effective requests `requests` of its resized spec
    /// ([`Requests::of_pod`]) if they fit the node beside the other registered pods
    /// ([`fit_resize`]), recording them as its share. A pod not registered (not admitted, or
    /// no longer active) is only checked.
    ///
    /// # Errors
    /// [`Insufficient`] (`Infeasible` or `Deferred`, with the message) when they do not fit;
    /// the pod keeps its share then.
    pub fn resize(&self, uid: &str, requests: &Requests) -> Result<(), Insufficient> {
        let mut state = self.inner.lock();
        let host_ports = state
            .pods
            .get(uid)
            .map(|e| e.usage.host_ports.clone())
            .unwrap_or_default();
        let usage = Usage {
            requests: *requests,
            host_ports,
        };
        let others = state
            .pods
            .iter()
            .filter(|(u, _)| u.as_str() != uid)
            .map(|(_, e)| &e.usage);
        fit_resize(&usage, others, &self.inner.allocatable)?;
        if let Some(entry) = state.pods.get_mut(uid) {
            entry.usage = usage;
        }
        Ok(())
    }

    /// Whether pod `uid` holds its share of the node.
    pub fn contains(&self, uid: &str) -> bool {
        self.inner.lock().pods.contains_key(uid)
    }

    /// The effective requests pod `uid` holds, if it holds a share.
    pub fn requests(&self, uid: &str) -> Option<Requests> {
        self.inner.lock().pods.get(uid).map(|e| e.usage.requests)
    }

    fn ticket(&self, uid: &str) -> Ticket {
        Ticket {
            inner: Arc::clone(&self.inner),
            uid: uid.to_owned(),
        }
    }
}

/// Whether stored pod `pod` had been admitted on this node before edgecore restarted: it is
/// not terminal (phase `Succeeded` or `Failed`: the kubelet's inactive pods) and either
/// containers of it exist on the node (`with_containers`: pod uids, from their labels) or
/// its status says `Running` (only this node reports the status of a pod bound to it).
pub fn ran_before(pod: &Pod, with_containers: &HashSet<String>) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    let uid = pod.metadata.uid.as_deref();
    phase == Some("Running") || uid.is_some_and(|u| with_containers.contains(u))
}

#[cfg(test)]
#[path = "admitted_tests.rs"]
mod tests;
