//! Pod status reports and completed pod deletions, as the kubelet's status manager does them
//! (`pkg/kubelet/status`: `PatchPodStatus` with a uid precondition, then a grace-0 delete
//! with a uid precondition once the pod terminated).

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tracing::{Instrument as _, debug, info};

use verge_core::{ResourceKey, ResourceType};

use crate::cache::{Cached, Caches};
use crate::desired::is_bound_to;
use crate::{Error, Result};

/// A pod named by an upstream path, with the uid from the message header (may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod uid the edge means (`header.uid`), or empty.
    pub uid: String,
}

impl PodRef {
    fn describe(&self) -> String {
        format!("pod {}/{}", self.namespace, self.name)
    }

    /// The pod of this namespace and name in edgecontroller's own pod cache, if any.
    fn cached(&self, caches: &Caches) -> Option<std::sync::Arc<Pod>> {
        let key = ResourceKey::new(&self.namespace, ResourceType::Pod, &self.name);
        match caches.get(&key) {
            Some(Cached::Pod(pod)) => Some(pod),
            _ => None,
        }
    }
}

/// Checks that `pod` is bound to `node` (`spec.nodeName`), the only pods a node may write.
///
/// # Errors
/// [`Error::Forbidden`] otherwise.
pub fn check_bound(node: &str, pod: &Pod, what: &str) -> Result<()> {
    if is_bound_to(pod, node) {
        return Ok(());
    }
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    Err(Error::Forbidden {
        node: node.to_owned(),
        what: format!("{what} (bound to {bound:?})"),
    })
}

/// The node-owned pod conditions that come and go (in-place resize).
const NODE_OWNED_TRANSIENT: [&str; 2] = ["PodResizePending", "PodResizeInProgress"];

/// The strategic merge patch of a status report: the status plus `metadata.uid`, which the
/// API server checks as a precondition (a recreated pod of the same name is not touched).
///
/// `status.conditions` merge by `type`, so a field a condition no longer has would survive
/// from the stored one (a Ready condition turned `True` keeping its old `reason:
/// ContainersNotReady`). Each reported condition therefore sets `reason` and `message` to
/// `null` when it has none, which deletes them, as the kubelet's two-way merge patch does.
///
/// `status.podIPs` and `status.hostIPs` merge by `ip` too, so a new address (a sandbox made
/// again after a reboot or a re-install, with another IP) would be added beside the old one,
/// which the API server refuses (`may specify no more than one IP for each IP family`). A
/// reported list therefore replaces the stored one (the `$patch: replace` directive).
///
/// The node owns the resize conditions (`PodResizePending`, `PodResizeInProgress`; the
/// kubelet's `PodConditionsByKubelet`): a report with conditions that leaves one out deletes
/// it (`$patch: delete` by `type`), as the kubelet's patch from its last status does when a
/// resize is done. Conditions other writers own (readiness gates, `DisruptionTarget`) are
/// never touched.
pub fn status_patch(uid: &str, status: &PodStatus) -> Value {
    let mut status = json!(status);
    for list in ["podIPs", "hostIPs"] {
        if let Some(ips) = status.get_mut(list).and_then(Value::as_array_mut)
            && !ips.is_empty()
        {
            ips.push(json!({ "$patch": "replace" }));
        }
    }
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            for field in ["reason", "message"] {
                condition.entry(field).or_insert(Value::Null);
            }
        }
        for kind in NODE_OWNED_TRANSIENT {
            if !conditions.iter().any(|c| c["type"] == kind) {
                conditions.push(json!({ "type": kind, "$patch": "delete" }));
            }
        }
    }
    json!({ "metadata": { "uid": uid }, "status": status })
}

/// Whether `error`, answering a read or write of `pod` as node `node`, says the pod is gone:
/// a 404, or the Node authorizer's 403 ("no relationship found", which is all a node hears
/// of a deleted pod) while edgecontroller's own pod cache (`cached`) holds
/// - no pod of that name, or one of another uid than the edge means (deleted or replaced);
/// - or that very pod, bound to `node` and being deleted: `spec.nodeName` cannot change, so
///   the authorizer's graph loses the pod only once it is deleted, and the cache has not seen
///   the deletion yet (a grace-0 delete is seen by the edge as an update and then a removal,
///   and the edge may report the deletion again in between).
///
/// The kubelet's status manager does nothing for a pod it cannot find; a report for it is
/// done, not retried. A 403 for a pod the cache holds otherwise (bound to another node, or
/// new and not yet in the authorizer's graph) stays an error.
fn is_gone(error: &kube::Error, node: &str, pod: &PodRef, cached: Option<&Pod>) -> bool {
    match error {
        kube::Error::Api(s) if s.is_not_found() => true,
        kube::Error::Api(s) if s.code == 403 => cached.is_none_or(|current| {
            let same = current.metadata.uid.as_deref() == Some(pod.uid.as_str());
            if pod.uid.is_empty() {
                return false;
            }
            !same || (is_bound_to(current, node) && current.metadata.deletion_timestamp.is_some())
        }),
        _ => false,
    }
}

/// Writes the edge's `status` to the pod's status subresource. A pod that is gone (404) is
/// left alone: the report is done, as the kubelet drops the status of a pod the API server
/// no longer has.
///
/// # Errors
/// [`Error::Kube`] when the pod cannot be read or the patch is refused (a uid mismatch is a
/// conflict); [`Error::Forbidden`] when the pod is not bound to `node` or the header uid
/// names another pod.
pub async fn report_status(
    client: &kube::Client,
    caches: &Caches,
    node: &str,
    pod: &PodRef,
    status: &PodStatus,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    // The pod as edgecontroller's own watch holds it (the watch that sent it to the node, so
    // it is there before any report of it); read from the API server only when it is not.
    let current = match pod.cached(caches) {
        Some(cached) => cached,
        None => match api
            .get(&pod.name)
            .instrument(verge_telemetry::propagation::in_trace(|| {
                verge_telemetry::span!(
                    "kube.get_pod",
                    k8s.namespace.name = %pod.namespace,
                    k8s.pod.name = %pod.name,
                )
            }))
            .await
        {
            Ok(current) => std::sync::Arc::new(current),
            Err(error) if is_gone(&error, node, pod, None) => {
                debug!("the pod is gone; its status report is dropped");
                return Ok(());
            }
            Err(error) => return Err(Error::kube("get pod")(error)),
        },
    };
    check_bound(node, &current, &pod.describe())?;
    let uid = current.metadata.uid.clone().unwrap_or_default();
    if !pod.uid.is_empty() && pod.uid != uid {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!(
                "{} with uid {:?} (the pod has uid {uid:?})",
                pod.describe(),
                pod.uid
            ),
        });
    }
    let patched = api
        .patch_status(
            &pod.name,
            &PatchParams::default(),
            &Patch::Strategic(status_patch(&uid, status)),
        )
        .instrument(verge_telemetry::propagation::in_trace(|| {
            verge_telemetry::span!(
                "kube.patch_pod_status",
                k8s.namespace.name = %pod.namespace,
                k8s.pod.name = %pod.name,
                k8s.pod.uid = %uid,
                k8s.pod.phase = status.phase.as_deref().unwrap_or_default(),
            )
        }))
        .await;
    match patched {
        Ok(_) => {
            debug!("pod status patched");
            Ok(())
        }
        // Deleted since the cache saw it: the report is done.
        Err(error) if is_gone(&error, node, pod, pod.cached(caches).as_deref()) => {
            debug!("the pod is gone; its status report is dropped");
            Ok(())
        }
        Err(error) => Err(Error::kube("patch pod status")(error)),
    }
}

/// Deletes the pod object after the edge terminated it: grace period 0 and a uid
/// precondition, as the kubelet does. A pod that is already gone, or was replaced by another
/// pod of the same name (other uid), counts as deleted.
///
/// # Errors
/// [`Error::Forbidden`] when the pod is bound to another node; [`Error::Kube`] when the API
/// server refuses the read or delete.
pub async fn delete(
    client: &kube::Client,
    caches: &Caches,
    node: &str,
    pod: &PodRef,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let current = match api.get(&pod.name).await {
        Ok(current) => current,
        Err(error) if is_gone(&error, node, pod, pod.cached(caches).as_deref()) => return Ok(()),
        Err(error) => return Err(Error::kube("get pod")(error)),
    };
    let uid = current.metadata.uid.clone().unwrap_or_default();
    if !pod.uid.is_empty() && pod.uid != uid {
        debug!(current = %uid, "pod was replaced; the edge's pod is gone");
        return Ok(());
    }
    check_bound(node, &current, &pod.describe())?;
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name, &params).await {
        Ok(_) => {
            info!("pod deleted");
            Ok(())
        }
        // Gone, or replaced in between (uid precondition failed): nothing left to delete.
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(error) => Err(Error::kube("delete pod")(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_gone_on_404_or_on_403_when_edgecontroller_holds_no_such_pod_or_it_was_being_deleted()
     {
        let api = |code: u16, message: &str| {
            let reason = if code == 404 { "NotFound" } else { "Forbidden" };
            kube::Error::Api(
                kube::core::Status::failure(message, reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        let pod = PodRef {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
        };
        let cached = |uid: &str, node: &str, deleting: bool| -> Pod {
            let mut meta = json!({ "uid": uid });
            if deleting {
                meta["deletionTimestamp"] = json!("2026-12-07T07:00:00Z");
            }
            serde_json::from_value(json!({ "metadata": meta,
                "spec": { "nodeName": node, "containers": [] } }))
            .expect("pod")
        };
        let no_relationship = api(
            403,
            "pods \"p\" is forbidden: User \"system:node:e\" cannot get resource \"pods\": \
             node: no relationship found between node 'e' and this object",
        );
        let gone = |error: &kube::Error, pod: &PodRef, cached: Option<&Pod>| {
            is_gone(error, "e", pod, cached)
        };
        assert!(gone(&api(404, "pods \"p\" not found"), &pod, None));
        // Deleted (not cached) or replaced (another uid): gone.
        assert!(gone(&no_relationship, &pod, None));
        assert!(gone(
            &no_relationship,
            &pod,
            Some(&cached("u2", "edge-2", false))
        ));
        // The same pod, bound to another node: an error, being deleted or not.
        assert!(!gone(
            &no_relationship,
            &pod,
            Some(&cached("u1", "edge-2", false))
        ));
        assert!(!gone(
            &no_relationship,
            &pod,
            Some(&cached("u1", "edge-2", true))
        ));
        // The same pod, bound to this node: new (the authorizer has not seen it yet) is an
        // error; being deleted, it is gone (deleted before the cache saw it).
        assert!(!gone(
            &no_relationship,
            &pod,
            Some(&cached("u1", "e", false))
        ));
        assert!(gone(&no_relationship, &pod, Some(&cached("u1", "e", true))));
        let no_uid = PodRef {
            uid: String::new(),
            ..pod.clone()
        };
        assert!(!gone(
            &no_relationship,
            &no_uid,
            Some(&cached("u2", "e", true))
        ));
        assert!(!gone(&api(500, "etcd"), &pod, None));
    }

    #[test]
    fn only_bound_pods_may_be_written() {
        let pod: Pod = serde_json::from_value(json!({ "spec": { "nodeName": "edge-1",
            "containers": [] } }))
        .expect("pod");
        assert!(check_bound("edge-1", &pod, "pod ns/p").is_ok());
        let err = check_bound("edge-2", &pod, "pod ns/p").expect_err("other node");
        assert!(err.to_string().contains("may not write pod ns/p"), "{err}");
        assert!(check_bound("edge-1", &Pod::default(), "pod ns/p").is_err());
    }

    #[test]
    fn status_patch_has_uid_precondition() {
        let status = PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        };
        let patch = status_patch("u-1", &status);
        assert_eq!(patch["metadata"]["uid"], "u-1");
        assert_eq!(patch["status"]["phase"], "Running");
    }

    #[test]
    fn conditions_without_reason_delete_the_stored_one() {
        let status: PodStatus = serde_json::from_value(json!({ "conditions": [
            { "type": "Ready", "status": "True" },
            { "type": "Initialized", "status": "False", "reason": "ContainersNotInitialized",
              "message": "containers with incomplete status: [init]" },
        ] }))
        .expect("status");
        let patch = status_patch("u-1", &status);
        let ready = &patch["status"]["conditions"][0];
        assert!(ready["reason"].is_null() && ready.get("reason").is_some());
        assert!(ready["message"].is_null() && ready.get("message").is_some());
        let initialized = &patch["status"]["conditions"][1];
        assert_eq!(initialized["reason"], "ContainersNotInitialized");
        // The resize conditions the report leaves out are deleted; no other.
        assert_eq!(
            patch["status"]["conditions"][2],
            json!({ "type": "PodResizePending", "$patch": "delete" })
        );
        assert_eq!(
            patch["status"]["conditions"][3],
            json!({ "type": "PodResizeInProgress", "$patch": "delete" })
        );
        assert_eq!(
            patch["status"]["conditions"].as_array().map(Vec::len),
            Some(4)
        );
        let resizing: PodStatus = serde_json::from_value(json!({ "conditions": [
            { "type": "PodResizeInProgress", "status": "True" },
        ] }))
        .expect("status");
        let patch = status_patch("u-1", &resizing);
        assert_eq!(
            patch["status"]["conditions"].as_array().map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn reported_addresses_replace_the_stored_ones() {
        let status: PodStatus = serde_json::from_value(json!({
            "podIP": "10.244.1.7", "podIPs": [{ "ip": "10.244.1.7" }],
            "hostIPs": [{ "ip": "192.0.2.1" }],
        }))
        .expect("status");
        let patch = status_patch("u-1", &status);
        assert_eq!(
            patch["status"]["podIPs"],
            json!([{ "ip": "10.244.1.7" }, { "$patch": "replace" }])
        );
        assert_eq!(
            patch["status"]["hostIPs"],
            json!([{ "ip": "192.0.2.1" }, { "$patch": "replace" }])
        );
        // No addresses reported: the stored ones stay.
        let patch = status_patch("u-1", &PodStatus::default());
        assert!(patch["status"].get("podIPs").is_none());
    }
}
