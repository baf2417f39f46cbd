//! Component test: edgecontroller against a real API server (verge-testkit) and an in-test
//! ControllerHub (a fake of our own service) that plays cloudhub.

mod common;

use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use verge_core::Operation;
use verge_proto::MessageExt;
use verge_proto::hub::{NodeSession, hub_frame};

use common::{Attach, msg, reason};

#[tokio::test]
async fn registers_node_reports_status_and_renews_lease() -> anyhow::Result<()> {
    let common::Attached {
        client,
        controller,
        hub: mut h,
        hello,
        election,
    } = common::attached("up").await?;
    assert_eq!(hello.name, "edgecontroller");
    assert_eq!(hello.groups, vec!["resource".to_owned()]);

    let node = format!("ec-it-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    h.send(hub_frame::Frame::Session(NodeSession {
        node: node.clone(),
        connected: true,
        inventory: None,
        cloudhub: "fake".into(),
    }))
    .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let result = scenario(&mut h, &node, &nodes, &leases).await;

    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    let _ = leases.delete(&node, &DeleteParams::default()).await;
    controller.stop().await?;
    common::delete_lease(&client, &election).await;
    result
}

async fn scenario(
    h: &mut Attach,
    node: &str,
    nodes: &Api<Node>,
    leases: &Api<Lease>,
) -> anyhow::Result<()> {
    let node_path = format!("node/{node}/_/node/{node}");
    // Registration never creates a Node: cloudhub does at join (with the edge's taints), so
    // a deleted Node's old certificate cannot bring it back.
    let object = json!({
        "metadata": { "name": node, "labels": { "node-role.kubernetes.io/edge": "", "a": "1" } },
        "spec": { "taints": [{ "key": "edge", "value": "x", "effect": "NoSchedule" }] }
    });
    let answer = h
        .ask(
            node,
            msg(Operation::Insert, node_path.clone(), object.clone()),
        )
        .await?;
    assert_eq!(
        answer.operation()?,
        Operation::Error,
        "absent Node registered"
    );
    assert!(
        nodes.get_opt(node).await?.is_none(),
        "registration created the Node"
    );
    common::create_joined_node(nodes, node, &[("edge", "x")]).await?;
    let answer = h
        .ask(node, msg(Operation::Insert, node_path.clone(), object))
        .await?;
    assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    let created = nodes.get(node).await?;
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        (labels.get("node-role.kubernetes.io/edge"), labels.get("a")),
        (Some(&String::new()), Some(&"1".to_owned()))
    );

    // Someone else taints the node; a second registration merges labels, keeps that taint
    // and adds no taint of its own (NodeRestriction: a node never changes its taints).
    let keep = json!({ "key": "example.com/keep", "effect": "NoSchedule" });
    let mut taints = created.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(serde_json::from_value(keep)?);
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": taints } })),
        )
        .await?;
    let object = json!({ "metadata": { "name": node, "labels": { "b": "2" } },
        "spec": { "taints": [{ "key": "late", "effect": "NoSchedule" }] } });
    let answer = h
        .ask(node, msg(Operation::Insert, node_path, object))
        .await?;
    assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    let merged = nodes.get(node).await?;
    let labels = merged.metadata.labels.unwrap_or_default();
    assert_eq!(
        (labels.get("a"), labels.get("b")),
        (Some(&"1".into()), Some(&"2".into()))
    );
    let keys: Vec<String> = merged
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert!(
        keys.contains(&"edge".into())
            && keys.contains(&"example.com/keep".into())
            && !keys.contains(&"late".into()),
        "{keys:?}"
    );

    // Status: conditions merge by type.
    let status_path = format!("node/{node}/_/nodestatus/{node}");
    for (kind, value) in [("Ready", "True"), ("MemoryPressure", "False")] {
        let status = json!({ "conditions": [{ "type": kind, "status": value,
            "reason": "Test", "lastHeartbeatTime": "2025-01-01T00:00:00Z" }] });
        let answer = h
            .ask(node, msg(Operation::Update, status_path.clone(), status))
            .await?;
        assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    }
    let conditions = nodes
        .get_status(node)
        .await?
        .status
        .and_then(|s| s.conditions);
    let types: Vec<String> = conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert!(
        types.contains(&"Ready".into()) && types.contains(&"MemoryPressure".into()),
        "{types:?}"
    );
    // An idle edge's periodic report (`node::report::heartbeat`): type, status and heartbeat
    // only; the condition keeps its reason.
    let beat = json!({ "conditions": [{ "type": "Ready", "status": "True",
        "lastHeartbeatTime": "2025-01-01T00:05:00Z" }] });
    let answer = h
        .ask(node, msg(Operation::Update, status_path.clone(), beat))
        .await?;
    assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    let status = nodes.get_status(node).await?.status.unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(ready.reason.as_deref(), Some("Test"), "{ready:?}");
    assert_eq!(
        ready
            .last_heartbeat_time
            .map(|t| t.0.to_string())
            .as_deref(),
        Some("2025-01-01T00:05:00Z"),
    );

    // Lease: created owned by the node, then renewed.
    let lease_path = format!("node/{node}/kube-node-lease/lease/{node}");
    for renew in ["2025-01-01T00:00:00.000001Z", "2025-01-01T00:00:10.000002Z"] {
        let lease = json!({ "metadata": { "name": node },
            "spec": { "holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew } });
        let answer = h
            .ask(node, msg(Operation::Update, lease_path.clone(), lease))
            .await?;
        assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
        let stored = leases.get(node).await?;
        let spec = stored.spec.clone().context("lease spec")?;
        assert_eq!(spec.holder_identity.as_deref(), Some(node));
        // The edge's renewTime, or a later one of the renewer's (the node is connected).
        assert!(
            renew_time(&stored)? >= time(renew)?,
            "{:?}",
            spec.renew_time
        );
        let owner = &stored.metadata.owner_references.context("owner")?[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", node));
        assert_eq!(
            Some(&owner.uid),
            nodes.get(node).await?.metadata.uid.as_ref()
        );
    }

    // A node may not write another node's objects; nothing is created.
    let other = format!("{node}-other");
    let object = json!({ "metadata": { "name": other } });
    let answer = h
        .ask(
            node,
            msg(
                Operation::Insert,
                format!("node/{node}/_/node/{other}"),
                object,
            ),
        )
        .await?;
    assert_eq!(answer.operation()?, Operation::Error);
    assert!(
        reason(&answer).contains("may not write"),
        "{}",
        reason(&answer)
    );
    assert!(nodes.get_opt(&other).await?.is_none());

    // Unsupported resources are answered with an error.
    let answer = h
        .ask(
            node,
            msg(
                Operation::Update,
                format!("node/{node}/default/pod/p"),
                json!({}),
            ),
        )
        .await?;
    assert_eq!(answer.operation()?, Operation::Error);
    assert!(
        reason(&answer).contains("unsupported"),
        "{}",
        reason(&answer)
    );

    // Status and lease of a node that never registered: error, nothing created.
    let ghost = format!("{node}-ghost");
    for path in [
        format!("node/{ghost}/_/nodestatus/{ghost}"),
        format!("node/{ghost}/kube-node-lease/lease/{ghost}"),
    ] {
        let answer = h
            .ask(&ghost, msg(Operation::Update, path, json!({})))
            .await?;
        assert_eq!(answer.operation()?, Operation::Error);
        assert!(
            reason(&answer).contains("not registered"),
            "{}",
            reason(&answer)
        );
    }
    assert!(leases.get_opt(&ghost).await?.is_none());
    Ok(())
}

/// `spec.renewTime` of `lease`.
fn renew_time(lease: &Lease) -> anyhow::Result<DateTime<Utc>> {
    let time = lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .context("no renewTime")?;
    time_value(&serde_json::to_value(time)?)
}

fn time(text: &str) -> anyhow::Result<DateTime<Utc>> {
    Ok(DateTime::parse_from_rfc3339(text)?.with_timezone(&Utc))
}

fn time_value(value: &serde_json::Value) -> anyhow::Result<DateTime<Utc>> {
    time(value.as_str().context("renewTime is not a string")?)
}

/// Polls `leases` for `node` until `done` holds (or fails after `within`).
async fn lease_until(
    leases: &Api<Lease>,
    node: &str,
    within: Duration,
    what: &str,
    done: impl Fn(Option<&Lease>) -> bool,
) -> anyhow::Result<Option<Lease>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let lease = leases.get_opt(node).await?;
        if done(lease.as_ref()) {
            return Ok(lease);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?} (lease: {lease:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The edge sends its Lease once; edgecontroller renews it every quarter of its duration
/// while the session lives, stops when it ends, adopts it on a session without a Lease
/// message, and stops on a 404 until the edge's next Lease message.
#[tokio::test]
async fn renews_the_lease_while_the_session_lives() -> anyhow::Result<()> {
    let common::Attached {
        client,
        controller,
        hub: mut h,
        election,
        ..
    } = common::attached("renew").await?;
    let node = format!(
        "ec-renew-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let result = renewals(&mut h, &node, &leases).await;

    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    let _ = leases.delete(&node, &DeleteParams::default()).await;
    controller.stop().await?;
    common::delete_lease(&client, &election).await;
    result
}

async fn renewals(h: &mut Attach, node: &str, leases: &Api<Lease>) -> anyhow::Result<()> {
    let session = |connected| {
        hub_frame::Frame::Session(NodeSession {
            node: node.to_owned(),
            connected,
            inventory: None,
            cloudhub: "fake".into(),
        })
    };
    h.send(session(true)).await?;
    let object = json!({ "metadata": { "name": node,
        "labels": { "node-role.kubernetes.io/edge": "" } } });
    common::register(h, node, object).await?;
    // A 4 s Lease: renewed every second.
    let lease_message = || {
        msg(
            Operation::Update,
            format!("node/{node}/kube-node-lease/lease/{node}"),
            json!({ "metadata": { "name": node }, "spec": { "holderIdentity": "holder-x",
                "leaseDurationSeconds": 4, "renewTime": "2025-01-01T00:00:00.000001Z" } }),
        )
    };
    let answer = h.ask(node, lease_message()).await?;
    assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    let sent = Utc::now();
    let renewed_after = |t: DateTime<Utc>| {
        move |l: Option<&Lease>| l.and_then(|l| renew_time(l).ok()).is_some_and(|r| r > t)
    };
    // Renewed by edgecontroller (at most 1.25 intervals after the edge's), then again.
    let first = lease_until(
        leases,
        node,
        Duration::from_secs(5),
        "first renewal",
        renewed_after(sent),
    )
    .await?
    .context("lease")?;
    let spec = first.spec.clone().context("spec")?;
    assert_eq!(spec.holder_identity.as_deref(), Some("holder-x"));
    assert_eq!(spec.lease_duration_seconds, Some(4));
    lease_until(
        leases,
        node,
        Duration::from_secs(3),
        "second renewal",
        renewed_after(renew_time(&first)?),
    )
    .await?;

    // The session ends: no more renewals.
    h.send(session(false)).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ended = renew_time(&leases.get(node).await?)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        renew_time(&leases.get(node).await?)?,
        ended,
        "renewed after the session ended"
    );

    // A session without a Lease message (its edge sent it to a former leader): adopted, at its
    // own 4 s duration.
    h.send(session(true)).await?;
    let adopted = lease_until(
        leases,
        node,
        Duration::from_secs(5),
        "adoption",
        renewed_after(ended),
    )
    .await?
    .context("lease")?;
    lease_until(
        leases,
        node,
        Duration::from_secs(3),
        "renewal after adoption",
        renewed_after(renew_time(&adopted)?),
    )
    .await?;

    // The Lease is deleted: not recreated until the edge sends its Lease again.
    leases.delete(node, &DeleteParams::default()).await?;
    lease_until(
        leases,
        node,
        Duration::from_secs(10),
        "lease deleted",
        |l| l.is_none(),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        leases.get_opt(node).await?.is_none(),
        "recreated without the edge"
    );
    let answer = h.ask(node, lease_message()).await?;
    assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    let again = Utc::now();
    lease_until(
        leases,
        node,
        Duration::from_secs(5),
        "renewal after the new Lease message",
        renewed_after(again),
    )
    .await?;
    h.send(session(false)).await?;
    Ok(())
}

/// Issue 31, weakness 3: an edge advertises labels that pods select nodes by. NodeRestriction's
/// rules and the operator's `reservedNodeLabels` keep them off its Node, at creation and on
/// a later registration; the labels a kubelet may set still land.
#[tokio::test]
async fn an_edge_cannot_give_its_node_reserved_labels() -> anyhow::Result<()> {
    let common::Attached {
        client,
        controller,
        hub: mut h,
        election,
        ..
    } = common::attached_with("labels", |c| {
        c.reserved_node_labels = vec!["example.com/trusted".into(), "corp.example/".into()];
    })
    .await?;
    let node = format!(
        "ec-labels-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let result = reserved_labels(&mut h, &node, &nodes).await;

    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    controller.stop().await?;
    common::delete_lease(&client, &election).await;
    result
}

async fn reserved_labels(h: &mut Attach, node: &str, nodes: &Api<Node>) -> anyhow::Result<()> {
    h.send(hub_frame::Frame::Session(NodeSession {
        node: node.to_owned(),
        connected: true,
        inventory: None,
        cloudhub: "fake".into(),
    }))
    .await?;
    let refused = [
        "node-role.kubernetes.io/control-plane",
        "node-restriction.kubernetes.io/secure",
        "example.com/trusted",
        "corp.example/tier",
    ];
    let allowed = [
        "node-role.kubernetes.io/edge",
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "example.com/line",
    ];
    for attempt in ["create", "merge"] {
        let labels: serde_json::Map<String, serde_json::Value> = refused
            .iter()
            .chain(&allowed)
            .map(|k| ((*k).to_owned(), json!(attempt)))
            .collect();
        let object = json!({ "metadata": { "name": node, "labels": labels } });
        common::register(h, node, object).await?;
        let labels = nodes.get(node).await?.metadata.labels.unwrap_or_default();
        for key in refused {
            assert!(!labels.contains_key(key), "{attempt}: {key} in {labels:?}");
        }
        for key in allowed {
            assert!(
                labels.contains_key(key),
                "{attempt}: {key} not in {labels:?}"
            );
        }
        assert_eq!(
            labels.get("example.com/line").map(String::as_str),
            Some(attempt)
        );
    }
    Ok(())
}
