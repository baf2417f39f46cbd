//! hold-upgrade on a real edge node (issue 36, docs/fleet.md "Holding updates"): a Deployment
//! whose pods carry `edge.kubeedge.io/hold-upgrade: "true"` runs its first pod at once; its
//! update's new pod is held on the node (Pending, condition `HeldUpgrade=True`, no container)
//! while the old pod keeps running in the same container, also across a restart of edgecore;
//! `kubectl annotate pod <new> edge.kubeedge.io/hold-upgrade=false --overwrite` releases it:
//! it starts, the rollout completes and the old pod goes. Then the same for a DaemonSet that
//! updates with `maxSurge: 1` (the recipe docs/fleet.md gives for DaemonSets).

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client};
use serde_json::json;
use verge_e2e::{Cloud, Edge, containers_with, create_namespace, wait_for};
use verge_testkit::wait::wait_node_ready;

const HOLD: &str = "edge.kubeedge.io/hold-upgrade";

#[tokio::test(flavor = "multi_thread")]
async fn an_update_waits_for_its_release() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-hold-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    let result = async {
        wait_node_ready(&client, &edge.name, Duration::from_secs(60)).await?;
        create_namespace(&client, &edge.name).await?;
        scenario(&cp, &client, &mut edge, "Deployment").await?;
        scenario(&cp, &client, &mut edge, "DaemonSet").await
    }
    .await;
    let logs = format!("{}\n--- edge ---\n{}", cloud.logs(30), edge.logs(60));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
    let _ = edge.kill9();
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{logs}"))
}

fn held_condition(pod: &Pod) -> Option<(String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "HeldUpgrade")
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The workload of `kind` (`Deployment` or `DaemonSet`) on the edge, updated once and held.
async fn scenario(
    cp: &verge_testkit::ControlPlane,
    client: &Client,
    edge: &mut Edge,
    kind: &str,
) -> anyhow::Result<()> {
    let ns = edge.name.clone();
    let app = format!("robot-{}", kind.to_lowercase());
    let workloads: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", kind)),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let template = |version: &str| {
        json!({
            "metadata": {"labels": {"app": app}, "annotations": {HOLD: "true"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": edge.name},
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "control", "image": verge_testkit::docker::TEST_IMAGE,
                    "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                    "env": [{"name": "VERSION", "value": version}]
                }]
            }
        })
    };
    let rolling = json!({"maxSurge": 1, "maxUnavailable": 0});
    let spec = if kind == "Deployment" {
        json!({"replicas": 1, "selector": {"matchLabels": {"app": app}},
               "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling},
               "template": template("1")})
    } else {
        json!({"selector": {"matchLabels": {"app": app}},
               "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling},
               "template": template("1")})
    };
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": kind, "metadata": {"name": app}, "spec": spec
    }))?;
    workloads.create(&PostParams::default(), &object).await?;
    let lp = ListParams::default().labels(&format!("app={app}"));
    // The first pod is not held.
    let first = wait_for("the first pod Running", Duration::from_secs(60), || async {
        let list = pods.list(&lp).await?;
        Ok(list
            .items
            .into_iter()
            .find(|p| phase(p) == "Running" && held_condition(p).is_none()))
    })
    .await?;
    let old_containers = containers_with(&[("io.kubernetes.pod.uid", &uid(&first))], false)?;
    ensure!(!old_containers.is_empty(), "the first pod's containers");

    // The update: its pod is held, the old one runs on.
    workloads
        .patch(
            &app,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": template("2")}})),
        )
        .await?;
    let held = wait_for(
        &format!("the {kind}'s new pod held"),
        Duration::from_secs(60),
        || async {
            let list = pods.list(&lp).await?;
            Ok(list.items.into_iter().find(|p| {
                uid(p) != uid(&first)
                    && held_condition(p) == Some(("True".to_owned(), "UpdateHoldActive".to_owned()))
            }))
        },
    )
    .await?;
    let held_name = held.metadata.name.clone().unwrap_or_default();
    let still_held = async |what: &str| -> anyhow::Result<()> {
        let pod = pods.get(&held_name).await?;
        ensure!(
            phase(&pod) == "Pending"
                && held_condition(&pod).is_some_and(|(s, _)| s == "True")
                && containers_with(&[("io.kubernetes.pod.uid", &uid(&pod))], true)?.is_empty(),
            "{what}: the held pod {:?}",
            pod.status
        );
        let old = pods
            .get(first.metadata.name.as_deref().unwrap_or_default())
            .await?;
        ensure!(
            phase(&old) == "Running"
                && containers_with(&[("io.kubernetes.pod.uid", &uid(&first))], false)?
                    == old_containers,
            "{what}: the old pod does not run on in its containers"
        );
        Ok(())
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    still_held("after 3 s").await?;

    // Held across a restart of edgecore.
    edge.kill9()?;
    edge.start()?;
    wait_node_ready(client, &edge.name, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    still_held("after a restart").await?;

    // Released with kubectl alone.
    let out = cp
        .kubectl_command()
        .args(["annotate", "pod", &held_name, "-n", &ns])
        .arg(format!("{HOLD}=false"))
        .arg("--overwrite")
        .output()?;
    ensure!(
        out.status.success(),
        "kubectl annotate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the rollout done", Duration::from_secs(90), || async {
        let list = pods.list(&lp).await?;
        let released = list.items.iter().any(|p| {
            p.metadata.name.as_deref() == Some(held_name.as_str())
                && phase(p) == "Running"
                && held_condition(p).is_some_and(|(s, _)| s == "False")
        });
        let old_gone = list.items.iter().all(|p| uid(p) != uid(&first));
        Ok((released && old_gone).then_some(()))
    })
    .await?;
    Ok(())
}
