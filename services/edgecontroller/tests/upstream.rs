//! Component test: edgecontroller against a real API server (verge-testkit) and an in-test
//! ControllerHub (a fake of our own service) that plays cloudhub.

mod common;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use verge_core::Operation;
use verge_edgecontroller::Config;
use verge_proto::MessageExt;
use verge_proto::hub::{NodeSession, hub_frame};

use common::{Attach, Controller, msg, reason};

#[tokio::test]
async fn registers_node_reports_status_and_renews_lease() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;

    let (addr, mut attaches) = common::start().await?;
    let election = common::leader_election(&client, "up").await?;
    let config = Config {
        cloudhub: vec![format!("https://{addr}")],
        cloudhub_auth: common::hub_auth(),
        leader_election: election.clone(),
        ..Config::default()
    };
    let controller = Controller::spawn(config, client.clone());
    let (mut h, hello) = common::next_hello(&mut attaches).await?;
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
    // Registration creates the node.
    let object = json!({
        "metadata": { "name": node, "labels": { "node-role.kubernetes.io/edge": "", "a": "1" } },
        "spec": { "taints": [{ "key": "edge", "value": "x", "effect": "NoSchedule" }] }
    });
    let answer = h
        .ask(node, msg(Operation::Insert, node_path.clone(), object))
        .await?;
    assert_eq!(answer.operation()?, Operation::Ack, "{}", reason(&answer));
    let created = nodes.get(node).await?;
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("node-role.kubernetes.io/edge")
            .map(String::as_str),
        Some("")
    );

    // Someone else taints the node; a second registration merges and keeps that taint.
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
    let object = json!({ "metadata": { "name": node, "labels": { "b": "2" } } });
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
        keys.contains(&"edge".into()) && keys.contains(&"example.com/keep".into()),
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
        let spec = stored.spec.context("lease spec")?;
        assert_eq!(spec.holder_identity.as_deref(), Some(node));
        assert_eq!(serde_json::to_value(spec.renew_time)?, json!(renew));
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
