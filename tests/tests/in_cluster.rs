//! Issue 33, the edge API: an unmodified in-cluster client on an edge node works. kubectl of
//! the pinned release, in a pod of the edge node with no kubeconfig, takes the in-cluster
//! configuration (`KUBERNETES_SERVICE_HOST`/`PORT` from edged, the projected service-account
//! token and `ca.crt`). The Service proxy sends the `kubernetes` Service to the node's edge
//! API, whose serving certificate the cluster CA signed (cloudhub approves it for the
//! Service's names and cluster IP only), so the pod's unchanged `ca.crt` (the namespace's
//! `kube-root-ca.crt`) verifies it. Online the edge API carries every
//! request to the API server through cloudhub with the pod's own token, so the API server
//! authorizes the pod's service account (without a binding the list is forbidden); kubectl
//! reads pods, configmaps, a custom resource and discovery. With the link cut the same reads
//! answer from the node (what the API server answered online, for the
//! users it allowed), a write gets the edge API's 503 naming the cut link, a request the API
//! server denied stays denied, forged, expired and other nodes' pods' tokens are refused, and a
//! token of the pod the API server never saw used is verified with the issuer's kept keys.

mod in_cluster_support;

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use in_cluster_support as python;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
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
    verge_testkit::python_kube::ensure_image()?;
    let mut cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-incluster-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
    // On a node's first start the edge API serves once its cluster-signed certificate is
    // issued, a moment after the node is Ready; a pod started before gets "connection
    // refused" (architecture.md §13).
    wait_for(
        "the edge API listening",
        Duration::from_secs(60),
        || async { Ok(edge.log().contains("edge API listening").then_some(())) },
    )
    .await?;
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

/// Runs kubectl with `args` and token `token` in container `id`, at the `kubernetes` Service
/// with the pod's `ca.crt` (explicit flags, so not the in-cluster token).
fn kubectl_with_token(id: &str, token: &str, args: &str) -> anyhow::Result<String> {
    let script = format!(
        "kubectl --server=https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT \\
         --certificate-authority=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt \\
         --token={token} {args}"
    );
    docker(&["exec", id, "sh", "-c", &script])
}

/// `kubectl` with `args` in `id` must fail with an error containing `expected`.
fn refused(id: &str, args: &[&str], expected: &str, what: &str) -> anyhow::Result<()> {
    match kubectl_in(id, args) {
        Ok(out) => bail!("{what}: kubectl {args:?} answered {out:?}"),
        Err(e) if format!("{e:#}").contains(expected) => Ok(()),
        Err(e) => bail!("{what}: kubectl {args:?}: expected {expected:?}, got {e:#}"),
    }
}

/// A JWT with `claims`, signed by nobody.
fn forged_token(claims: &serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    format!(
        "{}.{}.{}",
        b64(br#"{"alg":"RS256","kid":"forged"}"#),
        b64(claims.to_string().as_bytes()),
        b64(b"not a signature")
    )
}

/// The reads the test makes online and again offline, and what each must show.
const READS: &[(&[&str], &str)] = &[
    (&["get", "pods", "-o", "name"], "pod/client"),
    (&["get", "configmaps", "-o", "name"], "configmap/settings"),
    (
        &[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.mode}",
        ],
        "watched",
    ),
    (
        &["get", "widgets", "-o", "name"],
        "widget.example.verge.io/w1",
    ),
    (&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"], "3"),
    (&["get", "--raw", "/version"], "gitVersion"),
    (
        &["api-resources", "--namespaced=true", "-o", "name"],
        "configmaps",
    ),
];

/// The pod's `ca.crt` is the namespace's `kube-root-ca.crt`; kubectl reads through the edge API
/// online; with cloudhub gone the same reads answer from the node, a write gets the 503
/// naming the cut link and denied or unauthenticated requests stay refused; after the heal
/// kubectl sees the change made in the cloud during the cut.
async fn edge_api_online_and_offline(
    pods: &Api<Pod>,
    ns: &str,
    cloud: &mut Cloud,
    client: &kube::Client,
) -> anyhow::Result<()> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "settings", "namespace": ns }, "data": { "mode": "online" }
    }))?;
    configmaps.create(&PostParams::default(), &settings).await?;
    custom_resource(client, ns).await?;
    pods.create(&PostParams::default(), &kubectl_pod(ns, "client", ns)?)
        .await?;
    let client_pod = wait_running(pods, "client", Duration::from_secs(60)).await?;
    let uid = client_pod.metadata.uid.clone().unwrap_or_default();
    let id = main_container(&uid)?;
    let ca = docker(&[
        "exec",
        &id,
        "cat",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    ])?;
    let root: ConfigMap = configmaps.get("kube-root-ca.crt").await?;
    let cluster_ca = root
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .unwrap_or_default();
    ensure!(
        ca.trim() == cluster_ca.trim(),
        "ca.crt should be kube-root-ca.crt's, as the API server publishes it:\n{ca}"
    );

    pods.create(
        &PostParams::default(),
        &python::python_pod(ns, "python", ns)?,
    )
    .await?;
    let python_pod = wait_running(pods, "python", Duration::from_secs(60)).await?;
    let py = main_container(&python_pod.metadata.uid.clone().unwrap_or_default())?;

    // Online: through the edge API to the API server. A watch sees a change made in the
    // cloud; the Python client's watch opened now lasts through the cut and the heal.
    python::check_read(&py, "online")?;
    python::start_watch(&py, "py-online")?;
    python::wait_for_output(&py, "py-online", "list 1").await?;
    watch_in(&id, "settings", "configmap settings", "{.data.mode}")?;
    configmaps
        .patch(
            "settings",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "data": { "mode": "watched" } })),
        )
        .await?;
    wait_for_line(&id, "settings", "watched").await?;
    python::wait_for_output(&py, "py-online", r#""mode": "watched""#).await?;
    // A pod that ends while the link is cut: its status is the node's own change.
    pods.create(&PostParams::default(), &worker_pod(ns, ns)?)
        .await?;
    wait_running(pods, "worker", Duration::from_secs(60)).await?;
    // The API server's decision on watching pods, for the offline watch below.
    let _ = docker(&[
        "exec", &id, "timeout", "3", "kubectl", "get", "pods", "-w", "-o", "name",
    ]);
    for (args, expected) in READS {
        let out = kubectl_in(&id, args)?;
        ensure!(out.contains(expected), "online kubectl {args:?}: {out:?}");
    }
    refused(
        &id,
        &["get", "secrets"],
        "forbidden",
        "online, secrets without RBAC",
    )?;
    // Tokens the edge API refuses itself: forged (the API server refuses it too), expired,
    // and bound to a pod of another node.
    let user = format!("system:serviceaccount:{ns}:default");
    let bound = |exp: u64| {
        forged_token(&json!({ "sub": user, "exp": exp,
            "kubernetes.io": { "namespace": ns, "pod": { "name": "client", "uid": uid } } }))
    };
    let forged = bound(4_000_000_000);
    let expired = bound(1_000_000_000);
    let elsewhere = token_of_pod_elsewhere(pods, client, ns).await?;
    let token_refusals = |phase: &'static str| {
        for (token, expected, what) in [
            (&forged, "must be logged in", "a forged token"),
            (&expired, "must be logged in", "an expired token"),
            (
                &elsewhere,
                "must be logged in",
                "a token of another node's pod",
            ),
        ] {
            match kubectl_with_token(&id, token, "get pods -o name") {
                Ok(out) => bail!("{phase}, {what} listed pods: {out:?}"),
                Err(e) if format!("{e:#}").contains(expected) => {}
                Err(e) => bail!("{phase}, {what}: {e:#}"),
            }
        }
        Ok(())
    };
    token_refusals("online")?;
    // A token of the client pod the API server issues now and never sees used (as one edged
    // rotates into the pod just before a cut): offline the node verifies its signature with
    // the issuer's keys it kept.
    let unused = bound_token(client, ns, &client_pod).await?;

    // Offline: cloudhub is gone.
    cloud.cloudhub.kill9()?;
    // The write's answer names the cut link (kubectl prints the Status message of the 503).
    wait_for(
        "the edge API's offline answer to a write",
        Duration::from_secs(60),
        || async {
            Ok(
                match kubectl_in(&id, &["create", "configmap", "written-offline"]) {
                    Err(e) if format!("{e:#}").contains("link to the cloud is down") => Some(()),
                    _ => None,
                },
            )
        },
    )
    .await?;
    for (args, expected) in READS {
        let out = kubectl_in(&id, args).with_context(|| format!("offline kubectl {args:?}"))?;
        ensure!(out.contains(expected), "offline kubectl {args:?}: {out:?}");
    }
    refused(
        &id,
        &["get", "secrets"],
        "forbidden",
        "offline, secrets without RBAC",
    )?;
    // A watch opened offline sees the node's own change: the worker's end.
    watch_in(&id, "pods", "pods", "{.metadata.name} {.status.phase}")?;
    wait_for_line(&id, "pods", "worker Succeeded").await?;
    token_refusals("offline")?;
    // The Python client reads offline, and a watch it opens offline (its list answered by
    // the node) lasts through the heal like the one opened online.
    python::check_read(&py, "offline")?;
    python::start_watch(&py, "py-offline")?;
    python::wait_for_output(&py, "py-offline", "list 1").await?;
    let out = kubectl_with_token(&id, &unused, "get pods -o name")
        .context("offline, a token the API server issued but never saw used")?;
    ensure!(
        out.contains("pod/client"),
        "offline, the unused token: {out:?}"
    );
    // A change in the cloud during the cut.
    configmaps
        .patch(
            "settings",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "data": { "mode": "healed" } })),
        )
        .await?;

    cloud.restart_cloudhub_hard().await?;
    verge_testkit::wait::wait_node_ready(client, ns, Duration::from_secs(60)).await?;
    wait_for(
        "kubectl to see the change after the heal",
        Duration::from_secs(60),
        || async {
            Ok(kubectl_in(
                &id,
                &[
                    "get",
                    "configmap",
                    "settings",
                    "-o",
                    "jsonpath={.data.mode}",
                ],
            )
            .ok()
            .filter(|mode| mode == "healed"))
        },
    )
    .await?;
    // Both Python watches resumed from their last resourceVersion, through the cut and the
    // heal, and saw the change made during the cut without listing again.
    for log in ["py-online", "py-offline"] {
        python::wait_for_output(&py, log, r#""mode": "healed""#).await?;
        python::listed_once(&py, log)?;
    }
    Ok(())
}

/// A token bound to a pod of `ns` that no edge node runs (bound to a node that does not
/// exist): the API server issues it, and would accept it.
async fn token_of_pod_elsewhere(
    pods: &Api<Pod>,
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<String> {
    let pod = pods
        .create(
            &PostParams::default(),
            &kubectl_pod(ns, "elsewhere", "no-such-node")?,
        )
        .await?;
    bound_token(client, ns, &pod).await
}

/// A token of `ns`'s default service account bound to `pod`: the TokenRequest edged makes
/// for its pods (name and uid, the API server's default audience, 10 minutes).
async fn bound_token(client: &kube::Client, ns: &str, pod: &Pod) -> anyhow::Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = verge_edgecore::edged::objects::token_request(pod, Vec::new(), 600);
    let answer = accounts
        .create_token_request("default", &PostParams::default(), &request)
        .await?;
    answer
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .context("no token in the TokenRequest answer")
}

/// A pod on `node` that runs for 25 s and ends (`restartPolicy: Never`).
fn worker_pod(ns: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": "worker", "namespace": ns },
        "spec": { "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "containers": [{ "name": "main", "image": KUBECTL_IMAGE,
                "imagePullPolicy": "Never", "command": ["/bin/sleep", "25"] }] }
    }))?)
}

/// Starts `kubectl get <what> --watch -o jsonpath=<template>` in the background in container
/// `id`, one line per object and event into `/tmp/<log>.log`.
fn watch_in(id: &str, log: &str, what: &str, template: &str) -> anyhow::Result<()> {
    let script = format!(
        "kubectl get {what} --watch -o jsonpath='{template}{{\"\\n\"}}' > /tmp/{log}.log 2>&1"
    );
    docker(&["exec", "-d", id, "sh", "-c", &script]).map(|_| ())
}

/// Waits until `/tmp/<log>.log` in `id` has a line containing `expected`.
async fn wait_for_line(id: &str, log: &str, expected: &str) -> anyhow::Result<()> {
    let path = format!("/tmp/{log}.log");
    wait_for(
        &format!("{expected:?} in the {log} watch"),
        Duration::from_secs(60),
        || async {
            Ok(docker(&["exec", id, "cat", &path])
                .ok()
                .filter(|l| l.contains(expected)))
        },
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        let log = docker(&["exec", id, "cat", &path]).unwrap_or_default();
        anyhow::anyhow!("{e:#}; the watch printed:\n{log}")
    })
}

/// The custom resource the test reads: CRD `widgets.example.verge.io` (made once), Widget
/// `w1` (`spec.size: 3`) in `ns`, and a Role letting the namespace's `default` service account
/// read widgets (`view` does not cover custom resources).
async fn custom_resource(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "widgets.example.verge.io" },
        "spec": { "group": "example.verge.io", "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }] }
    }))?;
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    wait_for(
        "the Widget CRD to be established",
        Duration::from_secs(30),
        || async {
            let crd = crds.get("widgets.example.verge.io").await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        },
    )
    .await?;
    let resource = ApiResource {
        group: "example.verge.io".into(),
        version: "v1".into(),
        api_version: "example.verge.io/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.verge.io/v1", "kind": "Widget",
        "metadata": { "name": "w1", "namespace": ns }, "spec": { "size": 3 }
    }))?;
    widgets.create(&PostParams::default(), &widget).await?;
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": { "name": "widget-reader", "namespace": ns },
        "rules": [{ "apiGroups": ["example.verge.io"], "resources": ["widgets"],
            "verbs": ["get", "list", "watch"] }]
    }))?;
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "widget-reader", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
            "name": "widget-reader" },
        "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": ns }]
    }))?;
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}
