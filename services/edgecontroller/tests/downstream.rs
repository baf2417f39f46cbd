//! Component test of the downstream side and the pod/event/query/token handlers: edgecontroller
//! against a real API server (verge-testkit) and an in-test ControllerHub playing cloudhub.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use verge_core::Operation;
use verge_edgecontroller::{Config, EdgeController};
use verge_proto::hub::{NodeSession, Routed, controller_frame, hub_frame};
use verge_proto::{Inventory, InventoryEntry, Message, MessageExt};

use common::{Attach, msg, reason};

/// How long a step waits for an expected downstream message.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn sends_objects_down_and_serves_pods_queries_tokens() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let (addr, mut attaches) = common::start().await?;
    let config = Config {
        cloudhub: format!("http://{addr}"),
        ..Config::default()
    };
    let shutdown = CancellationToken::new();
    let controller =
        tokio::spawn(EdgeController::new(config, client.clone()).run(shutdown.clone()));
    let mut h = common::next_attach(&mut attaches).await?;
    let controller_frame::Frame::Hello(_) = h.next().await? else {
        bail!("no hello")
    };

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
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), controller).await???;
    result
}

async fn scenario(
    attach: &mut Attach,
    client: &kube::Client,
    node: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let h = &mut Probe {
        h: attach,
        pending: VecDeque::new(),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    wait_for_service_account(client, ns).await?;

    // A registered edge node, a pod bound to it mounting `cfg`, a second pod, an unused map.
    let registration = json!({ "metadata": { "name": node,
        "labels": { "node-role.kubernetes.io/edge": "" } } });
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
    let pp = PostParams::default();
    for name in ["cfg", "unused"] {
        let cm = json!({ "metadata": { "name": name }, "data": { "k": "v1" } });
        configmaps.create(&pp, &serde_json::from_value(cm)?).await?;
    }
    let pod = |name: &str, volumes: serde_json::Value| {
        serde_json::from_value::<Pod>(json!({
            "metadata": { "name": name },
            "spec": { "nodeName": node, "automountServiceAccountToken": false,
                "containers": [{ "name": "c", "image": "busybox" }], "volumes": volumes }
        }))
    };
    let p = pods
        .create(
            &pp,
            &pod(
                "p",
                json!([{ "name": "v", "configMap": { "name": "cfg" } }]),
            )?,
        )
        .await?;
    let q = pods.create(&pp, &pod("q", json!([]))?).await?;

    // Connect with an empty inventory: both pods and `cfg` come down, `unused` does not.
    connect(h, node, Inventory::default()).await?;
    let mut want = vec![
        format!("node/{node}/{ns}/configmap/cfg"),
        format!("node/{node}/{ns}/pod/p"),
        format!("node/{node}/{ns}/pod/q"),
    ];
    while !want.is_empty() {
        let m = next_downstream(h, WAIT)
            .await?
            .context("initial objects missing")?;
        ensure!(m.operation()? == Operation::Update, "{m:?}");
        let header = m.header.clone().context("header")?;
        ensure!(!header.uid.is_empty() && !header.resource_version.is_empty());
        want.retain(|r| r != m.resource());
    }

    // Reconnect with an inventory equal to the cache: no object messages.
    disconnect(h, node).await?;
    let mut inventory = Inventory::default();
    for name in ["p", "q"] {
        let pod = pods.get(name).await?;
        inventory
            .entries
            .push(entry("pod", ns, name, &pod.metadata));
    }
    inventory.entries.push(entry(
        "configmap",
        ns,
        "cfg",
        &configmaps.get("cfg").await?.metadata,
    ));
    connect(h, node, inventory).await?;
    if let Some(m) = next_downstream(h, Duration::from_secs(2)).await? {
        bail!("current inventory got {} {}", m.operation()?, m.resource());
    }

    // A change of `cfg` is sent down.
    let patch = Patch::Merge(json!({ "data": { "k": "v2" } }));
    let changed = configmaps
        .patch("cfg", &PatchParams::default(), &patch)
        .await?;
    let m = next_downstream(h, WAIT)
        .await?
        .context("no configmap update")?;
    ensure!(
        m.resource() == format!("node/{node}/{ns}/configmap/cfg"),
        "{}",
        m.resource()
    );
    let sent: ConfigMap = serde_json::from_slice(&m.content)?;
    ensure!(sent.metadata.resource_version == changed.metadata.resource_version);

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

    // Pod status: patched with the uid precondition.
    let p_uid = p.metadata.uid.clone().unwrap_or_default();
    let status =
        json!({ "phase": "Running", "conditions": [{ "type": "Ready", "status": "True" }] });
    let m = msg(
        Operation::Update,
        format!("node/{node}/{ns}/podstatus/p"),
        status,
    )
    .with_object(&p_uid, "");
    let a = ask(h, node, m).await?;
    ensure!(a.operation()? == Operation::Ack, "{}", reason(&a));
    let phase = pods.get_status("p").await?.status.and_then(|s| s.phase);
    ensure!(phase.as_deref() == Some("Running"), "{phase:?}");
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

/// An inventory entry for an object's metadata.
fn entry(kind: &str, ns: &str, name: &str, meta: &kube::api::ObjectMeta) -> InventoryEntry {
    InventoryEntry {
        r#type: kind.into(),
        namespace: ns.into(),
        name: name.into(),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
    }
}

async fn connect(h: &Probe<'_>, node: &str, inventory: Inventory) -> anyhow::Result<()> {
    h.h.send(hub_frame::Frame::Session(NodeSession {
        node: node.into(),
        connected: true,
        inventory: Some(inventory),
        cloudhub: "fake".into(),
    }))
    .await
}

async fn disconnect(h: &Probe<'_>, node: &str) -> anyhow::Result<()> {
    h.h.send(hub_frame::Frame::Session(NodeSession {
        node: node.into(),
        connected: false,
        inventory: None,
        cloudhub: "fake".into(),
    }))
    .await
}

/// The hub stream seen by the test, with downstream messages that arrived while the test
/// waited for an answer.
struct Probe<'a> {
    h: &'a mut Attach,
    pending: VecDeque<Message>,
}

/// The next downstream (non-answer) message within `wait`, or `None`.
async fn next_downstream(h: &mut Probe<'_>, wait: Duration) -> anyhow::Result<Option<Message>> {
    if let Some(m) = h.pending.pop_front() {
        return Ok(Some(m));
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let frame = tokio::time::timeout_at(deadline, h.h.from_controller.message()).await;
        let Ok(frame) = frame else { return Ok(None) };
        let frame = frame?.context("controller stream ended")?;
        match frame.frame {
            Some(controller_frame::Frame::Message(Routed {
                message: Some(m), ..
            })) if m.parent_id().is_empty() => {
                return Ok(Some(m));
            }
            other => tracing::debug!(?other, "skipped frame"),
        }
    }
}

/// Sends `message` from `node`; returns the answer, skipping downstream messages meanwhile.
async fn ask(h: &mut Probe<'_>, node: &str, message: Message) -> anyhow::Result<Message> {
    let id = message.id().to_owned();
    h.h.send(hub_frame::Frame::Message(Routed {
        node: node.into(),
        message: Some(message),
    }))
    .await?;
    loop {
        match h.h.next().await? {
            controller_frame::Frame::Message(Routed {
                message: Some(m), ..
            }) if m.parent_id() == id => {
                return Ok(m);
            }
            controller_frame::Frame::Message(Routed {
                message: Some(m), ..
            }) if m.parent_id().is_empty() => h.pending.push_back(m),
            other => tracing::debug!(?other, "skipped frame while waiting for an answer"),
        }
    }
}

/// Waits for `delete <resource>` with header uid `uid`, skipping other downstream messages.
async fn wait_for_delete(h: &mut Probe<'_>, resource: &str, uid: &str) -> anyhow::Result<()> {
    loop {
        let m = next_downstream(h, WAIT)
            .await?
            .with_context(|| format!("no delete of {resource}"))?;
        if m.operation()? == Operation::Delete && m.resource() == resource {
            ensure!(m.header.as_ref().is_some_and(|h| h.uid == uid), "{m:?}");
            return Ok(());
        }
    }
}

/// Waits until the controller-manager created the namespace's `default` ServiceAccount.
async fn wait_for_service_account(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    for _ in 0..120 {
        if accounts.get_opt("default").await?.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("ServiceAccount {ns}/default was not created")
}
