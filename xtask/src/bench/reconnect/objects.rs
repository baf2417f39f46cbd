//! The API objects of the benchmark: N edge Nodes, `CONFIGMAPS` shared ConfigMaps and one
//! Pod per node that references every ConfigMap through `envFrom`, so each node holds
//! [`OBJECTS_PER_NODE`] objects — its own Node, its pod and the ConfigMaps — while the API
//! server holds only N nodes, N pods and the ConfigMaps.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use verge_core::{ResourceKey, ResourceType};

use super::edge::SimEdge;

/// The namespace of the pods and ConfigMaps.
pub const NAMESPACE: &str = "verge-bench-reconnect";
/// ConfigMaps every pod references.
pub const CONFIGMAPS: usize = 99;
/// Objects each node holds: its own Node object (edgecontroller sends every edge node its
/// Node), its pod and the ConfigMaps.
pub const OBJECTS_PER_NODE: usize = CONFIGMAPS + 2;
/// API requests in flight while creating the objects.
const IN_FLIGHT: usize = 16;
const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("verge-sim-{i:05}")
}

fn pod_name(i: usize) -> String {
    format!("sim-{i:05}")
}

fn configmap_name(i: usize) -> String {
    format!("shared-{i:03}")
}

/// Creates the namespace, the ConfigMaps, `nodes` edge Nodes and one pod per node; returns
/// how long it took.
///
/// # Errors
/// API errors.
pub async fn create(client: &kube::Client, nodes: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    crate::local::create_namespace(client, NAMESPACE).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    create_all(&configmaps, (0..CONFIGMAPS).map(configmap)).await?;
    let node_api: Api<Node> = Api::all(client.clone());
    create_all(&node_api, (0..nodes).map(node)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    create_all(&pods, (0..nodes).map(pod)).await?;
    Ok(started.elapsed())
}

pub(in crate::bench) async fn create_all<K>(
    api: &Api<K>,
    objects: impl Iterator<Item = serde_json::Value>,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|value| async move {
            let object: K = serde_json::from_value(value)?;
            api.create(&PostParams::default(), &object).await?;
            anyhow::Ok(())
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Waits until no benchmark Node changed in anything but its status for `quiet` (at most
/// `limit`): kube-controller-manager
/// keeps editing new Nodes for a while (the TTL controller's `node.alpha.kubernetes.io/ttl`
/// annotation follows the cluster size; the node lifecycle controller marks silent nodes),
/// and each such edit is a real change that edgecontroller sends down. Returns the time
/// waited and whether the nodes settled (`false`: `limit` reached).
///
/// # Errors
/// API errors.
pub async fn settle_nodes(
    client: &kube::Client,
    quiet: Duration,
    limit: Duration,
) -> anyhow::Result<(Duration, bool)> {
    let started = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    let lp = kube::api::ListParams::default().labels("verge.io/bench=reconnect");
    let mut last: HashMap<String, String> = HashMap::new();
    let mut unchanged_since = Instant::now();
    while started.elapsed() < limit {
        // What edgecontroller sends a Node for: anything but its status.
        let now: HashMap<String, String> = nodes
            .list(&lp)
            .await?
            .items
            .into_iter()
            .map(|n| {
                let without_status = json!({
                    "labels": n.metadata.labels,
                    "annotations": n.metadata.annotations,
                    "spec": n.spec,
                });
                (
                    n.metadata.name.unwrap_or_default(),
                    without_status.to_string(),
                )
            })
            .collect();
        if now != last {
            last = now;
            unchanged_since = Instant::now();
        } else if unchanged_since.elapsed() >= quiet {
            return Ok((started.elapsed(), true));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((started.elapsed(), false))
}

/// Gives every node the inventory it would hold after a full sync: its Node, the ConfigMaps,
/// its pod and every Service and EndpointSlice, at their current uid and resourceVersion (for
/// `--warm-only`).
///
/// # Errors
/// API errors, or a pod or node missing.
pub async fn fill_inventories(client: &kube::Client, edges: &mut [SimEdge]) -> anyhow::Result<()> {
    let lp = kube::api::ListParams::default();
    let version = |meta: &ObjectMeta| {
        (
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        )
    };
    let configmaps: Vec<(ResourceKey, (String, String))> =
        Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
            .list(&lp)
            .await?
            .items
            .iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("shared-"))
            })
            .map(|c| {
                let name = c.metadata.name.clone().unwrap_or_default();
                let key = ResourceKey::new(NAMESPACE, ResourceType::ConfigMap, name);
                (key, version(&c.metadata))
            })
            .collect();
    // Every node holds every Service and EndpointSlice of the cluster too.
    let mut shared: Vec<(ResourceKey, (String, String))> = Vec::new();
    for service in Api::<Service>::all(client.clone()).list(&lp).await?.items {
        let meta = &service.metadata;
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        shared.push((
            ResourceKey::new(ns, ResourceType::Service, name),
            version(meta),
        ));
    }
    for slice in Api::<EndpointSlice>::all(client.clone())
        .list(&lp)
        .await?
        .items
    {
        let meta = &slice.metadata;
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        shared.push((
            ResourceKey::new(ns, ResourceType::EndpointSlice, name),
            version(meta),
        ));
    }
    let pods: HashMap<String, (String, String)> = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                version(&p.metadata),
            )
        })
        .collect();
    let nodes: HashMap<String, (String, String)> = Api::<Node>::all(client.clone())
        .list(&kube::api::ListParams::default().labels("verge.io/bench=reconnect"))
        .await?
        .items
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                version(&n.metadata),
            )
        })
        .collect();
    for edge in edges {
        let pod = pod_name(edge.index);
        let held = pods
            .get(&pod)
            .with_context(|| format!("pod {pod} missing"))?;
        let node = nodes
            .get(&edge.name)
            .with_context(|| format!("node {} missing", edge.name))?;
        edge.held = configmaps.iter().chain(shared.iter()).cloned().collect();
        edge.held.insert(
            ResourceKey::new(NAMESPACE, ResourceType::Pod, pod),
            held.clone(),
        );
        edge.held.insert(
            ResourceKey::cluster(ResourceType::Node, edge.name.clone()),
            node.clone(),
        );
    }
    Ok(())
}

fn configmap(i: usize) -> serde_json::Value {
    json!({
        "metadata": {"name": configmap_name(i)},
        "data": {"index": i.to_string(), "payload": "x".repeat(64)}
    })
}

fn node(i: usize) -> serde_json::Value {
    json!({
        "metadata": {
            "name": node_name(i),
            "labels": {"node-role.kubernetes.io/edge": "", "verge.io/bench": "reconnect"}
        }
    })
}

/// Lease renewal period of the simulated nodes (the kubelet's default: 10 s).
const RENEW: Duration = Duration::from_secs(10);

/// Makes the `nodes` simulated nodes look like healthy, connected edge nodes to the node
/// lifecycle controller, as edgecore's own reports would: `Ready=True` once, then the node
/// Lease renewed every [`RENEW`] until the returned task is aborted. Without this the
/// controller keeps tainting and untainting the silent nodes (rate-limited, for minutes), and
/// each such edit of a Node is a real change that edgecontroller sends down. Done here, by the
/// benchmark, so the measured phases carry only resync traffic.
///
/// # Errors
/// API errors of the first round.
pub async fn heartbeat(
    client: &kube::Client,
    nodes: usize,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let node_api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    futures::stream::iter(0..nodes)
        .map(|i| {
            let (node_api, leases) = (node_api.clone(), leases.clone());
            async move {
                let name = node_name(i);
                let now = micro_time();
                let status = json!({"status": {"conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "simulated edge node", "lastHeartbeatTime": now,
                    "lastTransitionTime": now
                }]}});
                node_api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                let lease: Lease = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}
                }))?;
                leases.create(&PostParams::default(), &lease).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::time::sleep(RENEW).await;
            let renew = json!({"spec": {"renewTime": micro_time()}});
            let renew = &renew;
            futures::stream::iter(0..nodes)
                .map(|i| {
                    let leases = leases.clone();
                    async move {
                        let patch = Patch::Merge(renew);
                        let _ = leases
                            .patch(&node_name(i), &PatchParams::default(), &patch)
                            .await;
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect::<()>()
                .await;
        }
    }))
}

/// Now as a Kubernetes `MicroTime` (RFC 3339, microseconds, UTC).
fn micro_time() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Pod `i`, bound to node `i`; it tolerates every taint (the node lifecycle controller taints
/// the simulated nodes, which never report status) and mounts no service account token (so
/// it references no `kube-root-ca.crt`).
fn pod(i: usize) -> serde_json::Value {
    let env_from: Vec<_> = (0..CONFIGMAPS)
        .map(|c| json!({"configMapRef": {"name": configmap_name(c)}}))
        .collect();
    json!({
        "metadata": {"name": pod_name(i)},
        "spec": {
            "nodeName": node_name(i),
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "main",
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "envFrom": env_from
            }]
        }
    })
}
