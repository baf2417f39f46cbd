//! Component test of the downstream side and the pod/event/query/token handlers: edgecontroller
//! against a real API server (verge-testkit) and an in-test ControllerHub playing cloudhub.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use verge_core::Operation;
use verge_edgecontroller::offline::rule::{NOT_READY_TAINT, UNREACHABLE_TAINT};
use verge_proto::hub::{DeliveryError, hub_frame};
use verge_proto::{Inventory, InventoryEntry, Message, MessageExt};

use common::probe::{
    Probe, WAIT, ack, ask, connect, disconnect, entry, next_own, wait_for_delete,
    wait_for_service_account,
};
use common::{Attach, msg, reason};

#[tokio::test]
async fn sends_objects_down_and_serves_pods_queries_tokens() -> anyhow::Result<()> {
    let common::Attached {
        client,
        controller,
        hub: mut h,
        election,
        ..
    } = common::attached_with("down", |c| c.patch_offline_tolerations = true).await?;

    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (node, ns) = (format!("ec-down-{id}"), format!("ec-down-{id}"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns } }))?,
        )
        .await?;
    let result = tokio::time::timeout(
        Duration::from_secs(180),
        scenario(&mut h, &client, &node, &ns),
    )
    .await
    .context("scenario timed out")
    .and_then(|r| r);

    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    controller.stop().await?;
    common::delete_lease(&client, &election).await;
    result
}

async fn scenario(
    attach: &mut Attach,
    client: &kube::Client,
    node: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let h = &mut Probe::new(attach);
    wait_for_service_account(client, ns).await?;

    // A registered edge node, a pod bound to it mounting `cfg`, a second pod, an unused map.
    let registration = json!({ "metadata": { "name": node,
        "labels": { "node-role.kubernetes.io/edge": "" } } });
    common::create_joined_node(&Api::all(client.clone()), node, &[]).await?;
    let a = ask(
        h,
        node,
        msg(
            Operation::Insert,
            format!("node/{node}/_/node/{node}"),
            registration,
        ),
    )
    .await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    // The edge reports its status every few seconds (keeps the node Ready, so the node
    // lifecycle controller does not taint it meanwhile).
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = Arc::new(AtomicBool::new(true));
    let heartbeat = tokio::spawn(heartbeats(nodes.clone(), node.to_owned(), ready.clone()));
    // The pods come once the node is Ready without a taint: a pod of a node that is not
    // (yet) Ready gets its unreachable toleration patched, which the test checks later.
    let mut node_ready = false;
    for _ in 0..60 {
        let current = nodes.get(node).await?;
        if !verge_edgecontroller::offline::rule::node_needs_tolerations(&current) {
            node_ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ensure!(node_ready, "node {node} not Ready and untainted after 30 s");
    let result = objects_and_queries(h, client, node, ns, &ready).await;
    heartbeat.abort();
    result?;

    // The Node object is deleted from the API server: `delete` comes down.
    let uid = nodes.get(node).await?.metadata.uid.unwrap_or_default();
    nodes.delete(node, &DeleteParams::default()).await?;
    wait_for_delete(h, &format!("node/{node}/_/node/{node}"), &uid).await
}

/// Patches the node's Ready condition with a fresh heartbeat time every 2 s: `True`, or
/// `False` while `ready` is unset.
async fn heartbeats(nodes: Api<Node>, node: String, ready: Arc<AtomicBool>) {
    loop {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (status, reason) = if ready.load(Ordering::SeqCst) {
            ("True", "KubeletReady")
        } else {
            ("False", "KubeletNotReady")
        };
        let status = json!({ "status": { "conditions": [{ "type": "Ready", "status": status,
            "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now }] } });
        let patch = Patch::Strategic(status);
        if let Err(error) = nodes
            .patch_status(&node, &PatchParams::default(), &patch)
            .await
        {
            tracing::debug!(%error, "heartbeat failed");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Downstream objects (the node's own Node object included), queries, pod status, tokens.
async fn objects_and_queries(
    h: &mut Probe<'_>,
    client: &kube::Client,
    node: &str,
    ns: &str,
    ready: &AtomicBool,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let node_path = format!("node/{node}/_/node/{node}");
    let pp = PostParams::default();
    for name in ["cfg", "unused"] {
        let cm = json!({ "metadata": { "name": name }, "data": { "k": "v1" } });
        configmaps.create(&pp, &serde_json::from_value(cm)?).await?;
    }
    let pod = |name: &str, volumes: serde_json::Value| {
        // `r` opts out of the unreachable toleration patch.
        let annotations = if name == "r" {
            json!({ "verge.io/evict-on-unreachable": "true" })
        } else {
            json!({})
        };
        serde_json::from_value::<Pod>(json!({
            "metadata": { "name": name, "annotations": annotations },
            "spec": { "nodeName": node, "automountServiceAccountToken": false,
                "containers": [{ "name": "c", "image": "busybox" }], "volumes": volumes }
        }))
    };
    let p = pods
        .create(
            &pp,
            &pod(
                "p",
                // A projected token (API server audience): the Node authorizer lets the node
                // request exactly the tokens its pods' volumes declare.
                json!([{ "name": "v", "configMap": { "name": "cfg" } },
                    { "name": "t", "projected": { "sources": [
                        { "serviceAccountToken": { "path": "token" } }] } }]),
            )?,
        )
        .await?;
    let q = pods.create(&pp, &pod("q", json!([]))?).await?;
    pods.create(&pp, &pod("r", json!([]))?).await?;

    // Connect with an empty inventory: the node's own Node object, the pods and `cfg` come
    // down, `unused` does not; then the resync marker.
    connect(h, node, Inventory::default()).await?;
    let mut own = None;
    let mut want = vec![
        node_path.clone(),
        format!("node/{node}/{ns}/configmap/cfg"),
        format!("node/{node}/{ns}/pod/p"),
        format!("node/{node}/{ns}/pod/q"),
        format!("node/{node}/{ns}/pod/r"),
    ];
    // The marker counts the updates before it; objects the caches saw only after the connect
    // may come after it.
    let (mut updates, mut marker) = (0, None);
    while !want.is_empty() || marker.is_none() {
        let m = next_own(h, WAIT)
            .await?
            .with_context(|| format!("initial objects {want:?} or marker missing"))?;
        if m.operation()? == Operation::Resync {
            ensure!(marker.is_none(), "second marker");
            marker = Some(serde_json::from_slice::<serde_json::Value>(&m.content)?);
            ensure!(
                m.resource() == format!("node/{node}/_/node/{node}"),
                "{m:?}"
            );
            ack(h, node, &m).await?;
            continue;
        }
        ensure!(m.operation()? == Operation::Update, "{m:?}");
        let header = m.header.clone().context("header")?;
        ensure!(!header.uid.is_empty() && !header.resource_version.is_empty());
        if m.resource() == node_path {
            let sent: Node = serde_json::from_slice(&m.content)?;
            ensure!(sent.metadata.name.as_deref() == Some(node), "{sent:?}");
            own = Some(header);
            // The marker shares the Node's delivery key: it follows the Node's ack.
            ack(h, node, &m).await?;
        }
        want.retain(|r| r != m.resource());
        updates += u32::from(marker.is_none());
    }
    let marker = marker.context("no marker")?;
    // Every Service and EndpointSlice of the cluster came too (before the marker: the caches
    // had listed them).
    ensure!(
        !h.shared.is_empty(),
        "no Service came down (the `kubernetes` one at least)"
    );
    let shared = u32::try_from(h.shared_updates)?;
    ensure!(
        marker == json!({ "updates": updates + shared, "deletes": 0 }),
        "{marker}"
    );

    // Pods of a Ready node keep the admission defaults; once the node is not Ready they
    // tolerate an unreachable node forever, except the opted-out `r`.
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_for_tolerations(&pods, &["p", "q", "r"], Some(300)).await?;
    ready.store(false, Ordering::SeqCst);
    wait_for_tolerations(&pods, &["p", "q"], None).await?;
    wait_for_tolerations(&pods, &["r"], Some(300)).await?;
    ready.store(true, Ordering::SeqCst);
    // The patched pods come down again; wait until the caches settled (remembering the
    // newest version of the Node object received, as the edge would).
    while let Some(m) = next_own(h, Duration::from_secs(3)).await? {
        if m.resource() == node_path && m.operation()? == Operation::Update {
            ack(h, node, &m).await?;
            own = m.header;
        }
    }
    let own = own.context("no Node object")?;

    // Reconnect with an inventory equal to the cache: only the marker.
    disconnect(h, node).await?;
    let mut inventory = Inventory::default();
    for name in ["p", "q", "r"] {
        let pod = pods.get(name).await?;
        inventory
            .entries
            .push(entry("pod", ns, name, &pod.metadata));
    }
    inventory.entries.push(InventoryEntry {
        r#type: "node".into(),
        namespace: "_".into(),
        name: node.into(),
        uid: own.uid.clone(),
        resource_version: own.resource_version.clone(),
    });
    inventory.entries.push(entry(
        "configmap",
        ns,
        "cfg",
        &configmaps.get("cfg").await?.metadata,
    ));
    inventory.entries.extend(h.shared.values().cloned());
    connect(h, node, inventory).await?;
    expect_marker(h, node, json!({ "updates": 0, "deletes": 0 })).await?;
    if let Some(m) = next_own(h, Duration::from_secs(2)).await? {
        bail!("current inventory got {} {}", m.operation()?, m.resource());
    }

    // The edge's node status report changes only the status: not sent down.
    let before = nodes.get(node).await?.metadata.resource_version;
    let status = json!({ "conditions": [{ "type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "edge report" }] });
    let a = ask(
        h,
        node,
        msg(
            Operation::Update,
            format!("node/{node}/_/nodestatus/{node}"),
            status,
        ),
    )
    .await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    let after = nodes.get(node).await?.metadata.resource_version;
    ensure!(before != after, "status report changed nothing");
    if let Some(m) = next_own(h, Duration::from_secs(2)).await? {
        bail!("node status echoed: {} {}", m.operation()?, m.resource());
    }
    // A label change is.
    let patch = Patch::Merge(json!({ "metadata": { "labels": { "verge.io/zone": "z1" } } }));
    let relabelled = nodes.patch(node, &PatchParams::default(), &patch).await?;
    let m = next_own(h, WAIT).await?.context("no node update")?;
    ensure!(
        m.operation()? == Operation::Update && m.resource() == node_path,
        "{} {}",
        m.operation()?,
        m.resource()
    );
    let sent: Node = serde_json::from_slice(&m.content)?;
    let zone = sent
        .metadata
        .labels
        .unwrap_or_default()
        .remove("verge.io/zone");
    ensure!(zone.as_deref() == Some("z1"), "{zone:?}");
    ensure!(
        m.header.as_ref().map(|h| &h.uid) == relabelled.metadata.uid.as_ref(),
        "Node update without its uid"
    );
    ack(h, node, &m).await?;

    // A change of `cfg` is sent down.
    let patch = Patch::Merge(json!({ "data": { "k": "v2" } }));
    let changed = configmaps
        .patch("cfg", &PatchParams::default(), &patch)
        .await?;
    let m = next_own(h, WAIT).await?.context("no configmap update")?;
    ensure!(
        m.resource() == format!("node/{node}/{ns}/configmap/cfg"),
        "{}",
        m.resource()
    );
    let sent: ConfigMap = serde_json::from_slice(&m.content)?;
    ensure!(sent.metadata.resource_version == changed.metadata.resource_version);

    // Cloudhub could not deliver it (queue full): it is sent again after a backoff (~1 s).
    let resent = tokio::time::Instant::now();
    h.h.send(hub_frame::Frame::DeliveryError(DeliveryError {
        node: node.into(),
        message_id: m.id().into(),
        reason: "queue full".into(),
        failure: verge_proto::hub::DeliveryFailure::QueueFull.into(),
    }))
    .await?;
    let again = next_own(h, Duration::from_secs(5))
        .await?
        .context("no re-send after a delivery error")?;
    ensure!(
        again.resource() == m.resource() && again.id() != m.id(),
        "{again:?}"
    );
    ensure!(
        again.header.as_ref().map(|h| &h.resource_version)
            == m.header.as_ref().map(|h| &h.resource_version)
    );
    ensure!(
        resent.elapsed() >= Duration::from_millis(400),
        "re-sent without backoff"
    );
    // The edge acks it: the backoff is reset.
    ack(h, node, &again).await?;

    // Queries: a referenced configmap is answered, an unreferenced one refused.
    let a = ask(
        h,
        node,
        msg(
            Operation::Query,
            format!("node/{node}/{ns}/configmap/cfg"),
            json!(null),
        ),
    )
    .await?;
    ensure!(a.operation()? == Operation::Response, "{}", reason(&a));
    let a = ask(
        h,
        node,
        msg(
            Operation::Query,
            format!("node/{node}/{ns}/configmap/unused"),
            json!(null),
        ),
    )
    .await?;
    ensure!(
        a.operation()? == Operation::Error && reason(&a).contains("forbidden"),
        "{}",
        reason(&a)
    );

    // ClusterTrustBundles: read as the node (which may read every bundle), by name; a
    // missing one is an empty list.
    let bundles: Api<ClusterTrustBundle> = Api::all(client.clone());
    let ctb_name = format!("{ns}-root");
    let ca = verge_pki::Ca::generate("ec-down-ctb", Duration::from_secs(3600))?;
    bundles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ctb_name },
                "spec": { "trustBundle": ca.cert_pem() } }))?,
        )
        .await?;
    for (name, expected) in [(ctb_name.as_str(), 1), ("ec-down-missing", 0)] {
        let a = ask(
            h,
            node,
            msg(
                Operation::Query,
                format!("node/{node}/_/clustertrustbundle/{name}"),
                json!(null),
            ),
        )
        .await?;
        ensure!(a.operation()? == Operation::Response, "{}", reason(&a));
        let list: serde_json::Value = serde_json::from_slice(&a.content)?;
        let items = list["items"].as_array().map_or(0, Vec::len);
        ensure!(items == expected, "{name}: {list}");
    }
    bundles.delete(&ctb_name, &DeleteParams::default()).await?;

    // Pod status: patched with the uid precondition. A second report with another pod IP (the
    // sandbox made again) replaces the first IP instead of being refused beside it (issue 32).
    let p_uid = p.metadata.uid.clone().unwrap_or_default();
    for ip in ["10.244.250.7", "10.244.250.9"] {
        let status = json!({ "phase": "Running", "podIP": ip, "podIPs": [{ "ip": ip }],
            "conditions": [{ "type": "Ready", "status": "True" }] });
        let m = msg(
            Operation::Update,
            format!("node/{node}/{ns}/podstatus/p"),
            status,
        )
        .with_object(&p_uid, "");
        let a = ask(h, node, m).await?;
        ensure!(a.operation()? == Operation::Ack, "{ip}: {}", reason(&a));
    }
    let status = pods.get_status("p").await?.status.unwrap_or_default();
    ensure!(status.phase.as_deref() == Some("Running"), "{status:?}");
    let ips: Vec<_> = status
        .pod_ips
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip)
        .collect();
    ensure!(
        status.pod_ip.as_deref() == Some("10.244.250.9") && ips == ["10.244.250.9"],
        "pod IPs after a new sandbox: {:?} {ips:?}",
        status.pod_ip
    );
    // The status change is not echoed down.
    if let Some(m) = next_own(h, Duration::from_secs(2)).await? {
        bail!("status report echoed: {} {}", m.operation()?, m.resource());
    }
    // Another node may not report it.
    let other = format!("{node}-x");
    let m = msg(
        Operation::Update,
        format!("node/{other}/{ns}/podstatus/p"),
        json!({}),
    )
    .with_object(&p_uid, "");
    let a = ask(h, &other, m).await?;
    ensure!(a.operation()? == Operation::Error, "{}", reason(&a));

    // Service account token for the pod's account.
    let request = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": { "audiences": [], "expirationSeconds": 3600,
            "boundObjectRef": { "kind": "Pod", "apiVersion": "v1", "name": "p", "uid": p_uid } } });
    let m = msg(
        Operation::Query,
        format!("node/{node}/{ns}/serviceaccounttoken/default"),
        request,
    );
    let a = ask(h, node, m).await?;
    ensure!(a.operation()? == Operation::Response, "{}", reason(&a));
    let token: serde_json::Value = serde_json::from_slice(&a.content)?;
    ensure!(
        token["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{token}"
    );

    // The edge deletes `q` after terminating it: gone from the API server, `delete` comes down.
    let q_uid = q.metadata.uid.clone().unwrap_or_default();
    let m = Message::build(
        uuid::Uuid::new_v4().to_string(),
        "edged",
        verge_core::Group::Resource,
        Operation::Delete,
        format!("node/{node}/{ns}/pod/q"),
        vec![],
    )
    .with_object(&q_uid, "");
    let a = ask(h, node, m).await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    ensure!(pods.get_opt("q").await?.is_none(), "q still exists");
    wait_for_delete(h, &format!("node/{node}/{ns}/pod/q"), &q_uid).await?;

    // The test deletes `p`: the pod and its no longer needed configmap are deleted on the edge.
    pods.delete(
        "p",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await?;
    wait_for_delete(h, &format!("node/{node}/{ns}/pod/p"), &p_uid).await?;
    let cfg_uid = changed.metadata.uid.unwrap_or_default();
    wait_for_delete(h, &format!("node/{node}/{ns}/configmap/cfg"), &cfg_uid).await?;
    Ok(())
}

/// Expects the next downstream message to be the `resync` marker with `summary`.
async fn expect_marker(
    h: &mut Probe<'_>,
    node: &str,
    summary: serde_json::Value,
) -> anyhow::Result<()> {
    // Services and EndpointSlices other tests changed meanwhile come (and count) too.
    let shared_before = h.shared_updates;
    let m = next_own(h, WAIT).await?.context("no resync marker")?;
    let mut summary = summary;
    if let Some(updates) = summary["updates"].as_u64() {
        summary["updates"] = json!(updates + u64::try_from(h.shared_updates - shared_before)?);
    }
    ensure!(
        m.operation()? == Operation::Resync,
        "{} {}",
        m.operation()?,
        m.resource()
    );
    ensure!(
        m.resource() == format!("node/{node}/_/node/{node}"),
        "{}",
        m.resource()
    );
    let content: serde_json::Value = serde_json::from_slice(&m.content)?;
    ensure!(content == summary, "{content}");
    ack(h, node, &m).await
}

/// Waits until `names` tolerate both node taints with `seconds` (`None`: forever).
async fn wait_for_tolerations(
    pods: &Api<Pod>,
    names: &[&str],
    seconds: Option<i64>,
) -> anyhow::Result<()> {
    let mut last = None;
    for _ in 0..60 {
        let mut all = true;
        for name in names {
            let pod = pods.get(name).await?;
            let tolerations = pod.spec.and_then(|s| s.tolerations).unwrap_or_default();
            for taint in [NOT_READY_TAINT, UNREACHABLE_TAINT] {
                let found = tolerations.iter().find(|t| t.key.as_deref() == Some(taint));
                if found.map(|t| t.toleration_seconds) != Some(seconds) {
                    all = false;
                }
            }
            last = Some(tolerations);
        }
        if all {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("tolerations of {names:?} not {seconds:?}: {last:?}")
}
