//! The API objects of the benchmark: N edge Nodes, `CONFIGMAPS` shared ConfigMaps and one
//! Pod per node that references every ConfigMap through `envFrom`, so each node holds
//! [`OBJECTS_PER_NODE`] objects — its own Node, its pod and the ConfigMaps — while the API
//! server holds only N nodes, N pods and the ConfigMaps.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
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

async fn create_all<K>(
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

/// Gives every node the inventory it would hold after a full sync: its Node, the ConfigMaps
/// and its pod, at their current uid and resourceVersion (for `--warm-only`).
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
        edge.held = configmaps.iter().cloned().collect();
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
