//! Offline autonomy, cloud side: pods on edge nodes are not evicted when the link is lost
//! (architecture.md §3.4; docs/offline.md).
//!
//! When an edge node stops sending heartbeats, the node lifecycle controller marks it
//! `Ready=Unknown` and taints it `node.kubernetes.io/unreachable:NoExecute` (a `Ready=False`
//! node gets `node.kubernetes.io/not-ready:NoExecute`). The taint eviction controller then
//! deletes every pod on the node whose toleration of the taint has run out; the
//! `DefaultTolerationSeconds` admission plugin gives every pod such a toleration with
//! `tolerationSeconds: 300`. For an edge node a lost link is normal operation: edgecore
//! keeps the pods running, so deleting their objects in the cloud would only make the edge
//! delete them when the link returns. KubeEdge adds the tolerations through an admission
//! webhook. Verge's default is the API server's own MutatingAdmissionPolicy
//! `verge-edge-offline-tolerations` at a pod's creation, for pods that ask for edge nodes
//! (deploy/cloud/access/offline-tolerations.yaml, same rule as [`rule::kept_tolerations`]).
//! This task is the optional complement for the pods the scheduler put on an edge node
//! without their asking (`patchOfflineTolerations`, with
//! deploy/cloud/optional/offline-toleration-patch.yaml granting `patch` on pods):
//!
//! As soon as the watch cache shows an edge node (one labelled
//! `node-role.kubernetes.io/edge`) that is not Ready or carries either taint
//! ([`rule::node_needs_tolerations`]), [`run`] makes the tolerations of the pods bound to it
//! last forever, well within the 300 s the taint eviction controller waits: the
//! admission default's `tolerationSeconds: 300` is removed, a missing toleration is added
//! (the exact rule is [`rule::kept_tolerations`]). A pod keeps the Kubernetes behaviour when
//! it is annotated `verge.io/evict-on-unreachable: "true"`, or when its owner set another
//! `tolerationSeconds` for the taint. The patch is a JSON merge patch of `spec.tolerations`
//! carrying the pod's `metadata.resourceVersion`, so a pod that changed in between is not
//! touched (409) and is looked at again in its new version. The API server allows exactly
//! these two changes on a running pod (`validateOnlyAddedTolerations`).
//!
//! Pods of a Ready node are not touched: a patch would make their `metadata.generation` 2
//! where Kubernetes promises 1 until the spec changes (the node conformance specs check it),
//! and would cost an API write per pod created.
//!
//! The task is woken by every change of the pod and node caches (and the end of each list)
//! and rescans all bound pods (cheap: no API call for a pod that needs no change). A failed patch is retried on the
//! pod's next change or at the next periodic rescan ([`RESCAN`]).
//!
//! - [`rule`]: which tolerations a pod should have; pure.

pub mod rule;

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cache::Caches;

/// How often all pods are looked at again even without a change, retrying failed patches.
pub const RESCAN: Duration = Duration::from_secs(60);

/// A patch tried for one version of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attempt {
    resource_version: String,
    ok: bool,
}

/// Patches the tolerations of pods bound to edge nodes until `shutdown` (see the module
/// docs). Needs `patch` on `pods` (not granted by the default install).
pub async fn run(client: kube::Client, caches: Caches, shutdown: CancellationToken) {
    // Not `Caches::wait_ready`: a store wakes only one waiter (the downstream task). A scan
    // of a partly listed cache is harmless; the end of each list notifies again.
    let mut attempts = HashMap::new();
    let mut rescan = tokio::time::interval(RESCAN);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            _ = rescan.tick() => attempts.retain(|_, a: &mut Attempt| a.ok),
            () = caches.pods_or_nodes_changed.notified() => {}
        }
        if !scan(&client, &caches, &mut attempts, &shutdown).await {
            break;
        }
    }
    debug!("toleration task ended");
}

/// Patches every pod on an edge node that needs it and was not tried at its current version.
/// `attempts` keeps only pods that still need a patch. Returns `false` at shutdown.
async fn scan(
    client: &kube::Client,
    caches: &Caches,
    attempts: &mut HashMap<(String, String), Attempt>,
    shutdown: &CancellationToken,
) -> bool {
    let mut still = HashMap::new();
    for pod in caches.pods.state() {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let Some(node) = node.and_then(|n| caches.nodes.get(&ObjectRef::new(n))) else {
            continue; // not on an edge node (the cache holds only those)
        };
        if !rule::node_needs_tolerations(&node) {
            continue;
        }
        let Some(tolerations) = rule::kept_tolerations(&pod) else {
            continue;
        };
        let key = (pod.namespace().unwrap_or_default(), pod.name_any());
        let resource_version = pod.resource_version().unwrap_or_default();
        let attempt = match attempts.remove(&key) {
            Some(a) if a.resource_version == resource_version => a,
            _ => {
                let patch = rule::patch(&resource_version, &tolerations);
                let ok = tokio::select! {
                    ok = apply(client, &pod, patch) => ok,
                    () = shutdown.cancelled() => return false,
                };
                Attempt {
                    resource_version,
                    ok,
                }
            }
        };
        still.insert(key, attempt);
    }
    *attempts = still;
    true
}

/// Sends one toleration patch; returns whether nothing is left to retry at this version.
async fn apply(client: &kube::Client, pod: &Pod, patch: serde_json::Value) -> bool {
    let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {
            info!(namespace = %namespace, pod = %name,
                "pod tolerates unreachable/not-ready edge node without time limit");
            true
        }
        // Changed or deleted in between: the cache will show the new version (or none).
        Err(kube::Error::Api(s)) if s.code == 409 || s.is_not_found() => {
            debug!(namespace = %namespace, pod = %name, code = s.code,
                "pod changed before its toleration patch");
            true
        }
        Err(error) => {
            warn!(%error, namespace = %namespace, pod = %name,
                "cannot patch pod tolerations; retrying later");
            false
        }
    }
}
