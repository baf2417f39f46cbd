//! The API objects of the benchmark: N edge Nodes, `CONFIGMAPS` shared ConfigMaps and one
//! Pod per node that references every ConfigMap through `envFrom`, so each node holds
//! `1 + CONFIGMAPS` objects while the API server holds only N pods and the ConfigMaps.

use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// The namespace of the pods and ConfigMaps.
pub const NAMESPACE: &str = "verge-bench-reconnect";
/// ConfigMaps every pod references.
pub const CONFIGMAPS: usize = 99;
/// Objects each node holds: its pod and the ConfigMaps.
pub const OBJECTS_PER_NODE: usize = CONFIGMAPS + 1;
/// API requests in flight while creating the objects.
const IN_FLIGHT: usize = 16;
const IMAGE: &str = "verge-test/busybox:latest";

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("verge-sim-{i:05}")
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
        "metadata": {"name": format!("sim-{i:05}")},
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
