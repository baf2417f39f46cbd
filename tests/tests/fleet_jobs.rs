//! KubeEdge's `operations.kubeedge.io` jobs at fleetcontroller (issue 36, docs/fleet.md
//! "Jobs"): fleetcontroller as its own service account with the shipped RBAC and the real API
//! server. A job whose fields carry shell syntax ends in `Failure` naming the field, whatever
//! the kind, and selects no node; a valid job starts its selected edge nodes (by label or by
//! name; `InProgress`), marks a named node that is no edge node `Failure`, and fails as a whole
//! without starting any node when more nodes failed than its `failureTolerate` allows. The
//! Nodes here are API objects without an edgecore, so started tasks stay `InProgress`.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use verge_e2e::{Cloud, operations_job, wait_for};

const KINDS: [&str; 3] = ["NodeUpgradeJob", "ImagePrePullJob", "ConfigUpdateJob"];

#[tokio::test(flavor = "multi_thread")]
async fn jobs_are_checked_field_by_field_and_given_their_edge_nodes() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    cloud.start_fleetcontroller(&cp).await?;
    let pid = std::process::id();
    let (edge, cloud_node) = (
        format!("e2e-jobs-edge-{pid}"),
        format!("e2e-jobs-cloud-{pid}"),
    );
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, edge_label) in [(&edge, true), (&cloud_node, false)] {
        let mut labels = json!({"verge-e2e/jobs": pid.to_string()});
        if edge_label {
            labels["node-role.kubernetes.io/edge"] = json!("");
        }
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
        nodes.create(&PostParams::default(), &node).await?;
    }
    let result = scenario(&client, &edge, &cloud_node).await;
    let logs = cloud.logs(40);
    for kind in KINDS {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &operations_job(kind));
        for job in api.list(&Default::default()).await?.items {
            let name = job.metadata.name.unwrap_or_default();
            if name.ends_with(&format!("-{pid}")) {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
    for node in [&edge, &cloud_node] {
        let _ = nodes.delete(node, &DeleteParams::default()).await;
    }
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{logs}"))
}

async fn scenario(client: &Client, edge: &str, cloud_node: &str) -> anyhow::Result<()> {
    let pid = std::process::id();
    let create =
        async |kind: &str, name: &str, spec: Value| -> anyhow::Result<Api<DynamicObject>> {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &operations_job(kind));
            let job = json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": kind,
            "metadata": {"name": name}, "spec": spec});
            api.patch(name, &PatchParams::apply("verge-e2e"), &Patch::Apply(&job))
                .await?;
            Ok(api)
        };
    let status_of = async |api: &Api<DynamicObject>, name: &str| -> anyhow::Result<Value> {
        wait_for(
            &format!("{name} has a status"),
            Duration::from_secs(30),
            || async {
                let status = api.get(name).await?.data["status"].clone();
                Ok(status["phase"].is_string().then_some(status))
            },
        )
        .await
    };

    // Shell syntax in any field that could reach a node: refused, naming the field.
    let refused = [
        (
            "NodeUpgradeJob",
            json!({"version": "v1.16.0; rm -rf /", "nodeNames": [edge]}),
            "spec.version",
        ),
        (
            "NodeUpgradeJob",
            json!({"version": "v1.16.0", "image": "repo/edgecore$(id)", "nodeNames": [edge]}),
            "spec.image",
        ),
        (
            "NodeUpgradeJob",
            json!({"version": "v1.16.0", "nodeNames": ["edge`reboot`"]}),
            "spec.nodeNames[0]",
        ),
        (
            "ImagePrePullJob",
            json!({"imagePrePullTemplate": {"images": ["busybox && reboot"], "nodeNames": [edge]}}),
            "spec.imagePrePullTemplate.images[0]",
        ),
        (
            "ImagePrePullJob",
            json!({"imagePrePullTemplate": {"images": ["busybox"], "nodeNames": [edge], "imageSecrets": "default/x|sh"}}),
            "spec.imagePrePullTemplate.imageSecrets",
        ),
        (
            "ConfigUpdateJob",
            json!({"nodeNames": [edge], "updateFields": {"edged.maxPods;reboot": "1"}}),
            "spec.updateFields[\"edged.maxPods;reboot\"]",
        ),
    ];
    for (i, (kind, spec, field)) in refused.into_iter().enumerate() {
        let name = format!("refused-{i}-{pid}");
        let api = create(kind, &name, spec).await?;
        let status = status_of(&api, &name).await?;
        let reason = status["reason"].as_str().unwrap_or_default();
        ensure!(
            status["phase"] == "Failure" && reason.starts_with(&format!("invalid spec: {field}: ")),
            "{kind} {name}: {status}"
        );
        ensure!(
            status.get("nodeStatus").is_none(),
            "{name}: a refused job selected nodes: {status}"
        );
    }

    // A label selector picks the edge node only (the cloud node carries the label too).
    let name = format!("prepull-labels-{pid}");
    let api = create(
        "ImagePrePullJob",
        &name,
        json!({"imagePrePullTemplate": {"images": ["busybox:1.36"],
            "labelSelector": {"matchLabels": {"verge-e2e/jobs": pid.to_string()}}}}),
    )
    .await?;
    let status = status_of(&api, &name).await?;
    ensure!(
        status["phase"] == "InProgress"
            && status["nodeStatus"] == json!([{"nodeName": edge, "phase": "InProgress"}]),
        "{name}: {status}"
    );

    // By name: the cloud node and an absent one fail; with the default tolerance (0.1) the
    // job fails and the edge node never starts, with 0.7 it goes on with the edge node.
    for (tolerate, phase, edge_phase) in [
        ("", "Failure", "Pending"),
        ("0.7", "InProgress", "InProgress"),
    ] {
        let name = format!(
            "upgrade-names-{}-{pid}",
            if tolerate.is_empty() {
                "default"
            } else {
                "tolerant"
            }
        );
        let mut spec =
            json!({"version": "v1.16.0", "nodeNames": [edge, cloud_node, format!("gone-{pid}")]});
        if !tolerate.is_empty() {
            spec["failureTolerate"] = json!(tolerate);
        }
        let api = create("NodeUpgradeJob", &name, spec).await?;
        let status = status_of(&api, &name).await?;
        let entries = status["nodeStatus"].as_array().cloned().unwrap_or_default();
        let phase_of = |node: &str| {
            entries
                .iter()
                .find(|e| e["nodeName"] == node)
                .map(|e| e["phase"].clone())
        };
        ensure!(
            status["phase"] == phase
                && entries.len() == 3
                && phase_of(edge) == Some(json!(edge_phase))
                && phase_of(cloud_node) == Some(json!("Failure")),
            "{name}: {status}"
        );
    }
    Ok(())
}
