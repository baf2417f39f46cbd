//! Issue 33, the edge API: an unmodified in-cluster client on an edge node works. kubectl of
//! the pinned release, in a pod of the edge node with no kubeconfig, takes the in-cluster
//! configuration (`KUBERNETES_SERVICE_HOST`/`PORT` from edged, the projected service-account
//! token and `ca.crt`). The Service proxy sends the `kubernetes` Service to the node's edge
//! API, whose certificate (of the node's name-constrained CA) the pod's `ca.crt` verifies: edged
//! appends that CA to the `kube-root-ca.crt` it projects. Online the edge API carries every
//! request to the API server through cloudhub with the pod's own token, so the API server
//! authorizes the pod's service account (without a binding the list is forbidden); with the
//! link cut, a request gets the edge API's 503 naming the cut link.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{DeleteParams, LogParams, PostParams};
use serde_json::json;
use verge_e2e::{Cloud, Edge, create_namespace, docker, main_container, wait_for, wait_running};

/// The image of kubectl: the control plane's static kubectl on the test busybox.
const KUBECTL_IMAGE: &str = "verge-test/kubectl:latest";

/// Makes [`KUBECTL_IMAGE`] from the kit's kubectl (replacing an older one).
fn kubectl_image(cp: &verge_testkit::ControlPlane) -> anyhow::Result<()> {
    let root = tempfile::tempdir()?;
    verge_testkit::docker::busybox_rootfs(root.path())?;
    std::fs::copy(cp.kubectl(), root.path().join("bin/kubectl"))
        .with_context(|| format!("copying {}", cp.kubectl().display()))?;
    verge_testkit::docker::import_rootfs(
        root.path(),
        KUBECTL_IMAGE,
        &["ENV PATH=/bin", r#"ENTRYPOINT ["/bin/kubectl"]"#],
    )
}

/// A pod on `node` running `kubectl get pods -o name` with the in-cluster configuration.
fn lister(ns: &str, name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "nodeName": node, "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": KUBECTL_IMAGE,
                "imagePullPolicy": "Never",
                // No flag that overrides the client configuration: with one, kubectl
                // (client-go's deferred loading) no longer falls back to in-cluster config.
                "args": ["get", "pods", "-o", "name"] }] }
    }))?)
}

/// Runs pod `name` to its end; its phase and log.
async fn run_to_end(pods: &Api<Pod>, pod: &Pod) -> anyhow::Result<(String, String)> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), pod).await?;
    let phase = wait_for(
        &format!("pod {name} to end"),
        Duration::from_secs(90),
        || async {
            let phase = pods
                .get(&name)
                .await?
                .status
                .and_then(|s| s.phase)
                .unwrap_or_default();
            Ok(matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase))
        },
    )
    .await?;
    let log = pods.logs(&name, &LogParams::default()).await?;
    Ok((phase, log))
}

#[tokio::test]
async fn in_cluster_kubectl_on_an_edge_pod_lists_its_namespace() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    verge_testkit::docker::ensure_docker()?;
    kubectl_image(&cp)?;
    let mut cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-incluster-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
    create_namespace(&client, &name).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &name);
    let result = async {
        // Without a binding the API server forbids the pod's service account: the request
        // reached it with the pod's own credentials.
        let (phase, log) = run_to_end(&pods, &lister(&name, "denied", &name)?).await?;
        ensure!(
            phase == "Failed" && log.contains("forbidden"),
            "unbound service account: phase {phase}, log {log:?}"
        );
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": { "name": "view", "namespace": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "view" },
            "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": name }]
        }))?;
        Api::<RoleBinding>::namespaced(client.clone(), &name)
            .create(&PostParams::default(), &binding)
            .await?;
        let (phase, log) = run_to_end(&pods, &lister(&name, "allowed", &name)?).await?;
        ensure!(
            phase == "Succeeded" && log.contains("pod/denied") && log.contains("pod/allowed"),
            "bound service account: phase {phase}, log {log:?}"
        );
        edge_api_online_and_offline(&pods, &name, &mut cloud, &client).await
    }
    .await;
    let _ = pods
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
    result
        .map_err(|e: anyhow::Error| anyhow::anyhow!("{e:#}\n{}\n{}", cloud.logs(30), edge.logs(80)))
}

/// A pod on `node` that keeps running with kubectl in it (for `docker exec`).
fn kubectl_pod(ns: &str, name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "main", "image": KUBECTL_IMAGE,
                "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"] }] }
    }))?)
}

/// Runs kubectl with `args` in container `id` (in-cluster configuration): its output, or
/// the error with kubectl's message.
fn kubectl_in(id: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec!["exec", id, "kubectl"];
    all.extend_from_slice(args);
    docker(&all)
}

/// The pod's `ca.crt` holds the cluster CA and the node's; kubectl lists through the edge
/// API online; with cloudhub gone the edge API answers 503 naming the cut link; after the
/// heal kubectl lists again.
async fn edge_api_online_and_offline(
    pods: &Api<Pod>,
    ns: &str,
    cloud: &mut Cloud,
    client: &kube::Client,
) -> anyhow::Result<()> {
    pods.create(&PostParams::default(), &kubectl_pod(ns, "client", ns)?)
        .await?;
    let uid = wait_running(pods, "client", Duration::from_secs(60))
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let id = main_container(&uid)?;
    let ca = docker(&[
        "exec",
        &id,
        "cat",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    ])?;
    ensure!(
        ca.matches("BEGIN CERTIFICATE").count() == 2,
        "ca.crt should hold the cluster CA and the edge API's:\n{ca}"
    );
    let listed = kubectl_in(&id, &["get", "pods", "-o", "name"])?;
    ensure!(listed.contains("pod/client"), "online list: {listed:?}");
    cloud.cloudhub.kill9()?;
    let refusal = wait_for(
        "the edge API's offline answer",
        Duration::from_secs(60),
        || async {
            Ok(match kubectl_in(&id, &["get", "--raw", "/version"]) {
                Err(e) if format!("{e:#}").contains("link to the cloud is down") => {
                    Some(format!("{e:#}"))
                }
                _ => None,
            })
        },
    )
    .await?;
    ensure!(
        refusal.contains("ServiceUnavailable") || refusal.contains("503"),
        "offline answer: {refusal}"
    );
    cloud.restart_cloudhub_hard().await?;
    verge_testkit::wait::wait_node_ready(client, ns, Duration::from_secs(60)).await?;
    let listed = wait_for(
        "kubectl to list after the heal",
        Duration::from_secs(60),
        || async { Ok(kubectl_in(&id, &["get", "pods", "-o", "name"]).ok()) },
    )
    .await?;
    ensure!(
        listed.contains("pod/client"),
        "list after the heal: {listed:?}"
    );
    Ok(())
}
