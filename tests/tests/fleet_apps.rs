//! NodeGroups and EdgeApplications on real edge nodes (issue 36, docs/fleet.md): fleetcontroller
//! as its own service account with the shipped RBAC, two edgecores, the API server's
//! scheduler and Deployment controller.
//!
//! Group `north` names edge A, group `south` selects edge B by a label. One EdgeApplication
//! places a Deployment on both, with north's replicas and south's image (a tag of the local
//! test image): each group's copy runs on its own node with its override. Changing south's
//! override changes only south's Deployment; a manifest naming another namespace gets a
//! Warning event and nothing else; dropping a group deletes its copy.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use verge_e2e::{Cloud, Edge, create_namespace, ready_status, wait_for};
use verge_testkit::docker::TEST_IMAGE;

/// The tag of the test image south's image overrider selects (made locally by `docker tag`).
const SOUTH_TAG: &str = "fleet-south";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "apps.kubeedge.io".to_owned(),
        version: "v1alpha1".to_owned(),
        api_version: "apps.kubeedge.io/v1alpha1".to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edge_application_runs_each_groups_copy_on_its_group() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    cloud.start_fleetcontroller(&cp).await?;
    let pid = std::process::id();
    let (a, b, ns) = (
        format!("e2e-fleet-a-{pid}"),
        format!("e2e-fleet-b-{pid}"),
        format!("e2e-fleet-{pid}"),
    );
    let repository = TEST_IMAGE.split(':').next().unwrap_or(TEST_IMAGE);
    verge_e2e::docker(&["tag", TEST_IMAGE, &format!("{repository}:{SOUTH_TAG}")])?;
    let mut edge_a = Edge::new(&a, &cloud)?;
    let mut edge_b = Edge::new(&b, &cloud)?;
    edge_a.start()?;
    edge_b.start()?;
    let result = scenario(&client, &a, &b, &ns).await;
    let logs = format!(
        "{}\n--- edge A ---\n{}\n--- edge B ---\n{}",
        cloud.logs(40),
        edge_a.logs(30),
        edge_b.logs(30)
    );
    edge_a.kill9()?;
    edge_b.kill9()?;
    cleanup(&client, &ns, &[&a, &b]).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{logs}"))
}

async fn scenario(client: &Client, a: &str, b: &str, ns: &str) -> anyhow::Result<()> {
    let pid = std::process::id();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in [a, b] {
        wait_for(
            &format!("node {node} Ready"),
            Duration::from_secs(60),
            || async {
                Ok(nodes
                    .get_opt(node)
                    .await?
                    .filter(|n| ready_status(n).as_deref() == Some("True")))
            },
        )
        .await?;
    }
    let site = format!("south-{pid}");
    nodes
        .patch(
            b,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"verge-e2e/site": site}}})),
        )
        .await?;
    let (north, south) = (format!("north-{pid}"), format!("south-{pid}"));
    let groups: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("NodeGroup", "nodegroups"));
    let apply = PatchParams::apply("verge-e2e");
    for (name, spec) in [
        (&north, json!({"nodes": [a]})),
        (&south, json!({"matchLabels": {"verge-e2e/site": site}})),
    ] {
        let group = json!({"apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "NodeGroup",
            "metadata": {"name": name}, "spec": spec});
        groups.patch(name, &apply, &Patch::Apply(&group)).await?;
    }
    // Members are labelled and reported.
    for (group, node) in [(&north, a), (&south, b)] {
        wait_for(&format!("{node} a Ready member of {group}"), Duration::from_secs(30), || async {
            let labelled = nodes.get(node).await?.metadata.labels.unwrap_or_default()
                .get("apps.kubeedge.io/belonging-to") == Some(group);
            let status = groups.get(group).await?.data["status"]["nodeStatuses"].clone();
            let reported = status == json!([{"nodeName": node, "readyStatus": "Ready", "selectionStatus": "Succeeded"}]);
            Ok((labelled && reported).then_some(()))
        })
        .await?;
    }

    create_namespace(client, ns).await?;
    let apps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &resource("EdgeApplication", "edgeapplications"),
    );
    let app = |south_replicas: u32, groups_json: Value| {
        json!({"apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
        "metadata": {"name": "shop"},
        "spec": {
            "workloadTemplate": {"manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                          "template": {"metadata": {"labels": {"app": "web"}},
                                       "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                                           {"name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never",
                                            "command": ["sleep", "3600"]}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                 "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"k": "v"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere", "namespace": "kube-system"}}
            ]},
            "workloadScope": {"targetNodeGroups": groups_json.as_array().cloned().unwrap_or_default().into_iter().map(|g| {
                if g == json!("south") {
                    json!({"name": south, "overriders": {"replicas": south_replicas,
                        "imageOverriders": [{"component": "Tag", "operator": "replace", "value": SOUTH_TAG}]}})
                } else {
                    json!({"name": north, "overriders": {"replicas": 2}})
                }
            }).collect::<Vec<_>>()}
        }})
    };
    apps.patch(
        "shop",
        &apply,
        &Patch::Apply(&app(1, json!(["north", "south"]))),
    )
    .await?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (web_north, web_south) = (format!("web-{north}"), format!("web-{south}"));
    // Each copy runs its replicas on its group's node, with its image.
    for (deployment, node, replicas, image) in [
        (&web_north, a, 2, TEST_IMAGE.to_owned()),
        (
            &web_south,
            b,
            1,
            format!(
                "{repository}:{SOUTH_TAG}",
                repository = TEST_IMAGE.split(':').next().unwrap_or(TEST_IMAGE)
            ),
        ),
    ] {
        wait_for(
            &format!("{deployment}: {replicas} Running pods on {node}"),
            Duration::from_secs(120),
            || async {
                let running: Vec<Pod> = pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(deployment.as_str()))
                    })
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .collect();
                let placed = running.iter().all(|p| {
                    let spec = p.spec.as_ref();
                    spec.and_then(|s| s.node_name.as_deref()) == Some(node)
                        && spec.is_some_and(|s| {
                            s.containers[0].image.as_deref() == Some(image.as_str())
                        })
                });
                Ok((running.len() == replicas && placed).then_some(()))
            },
        )
        .await?;
    }
    // Shared objects are made once; the Service keeps each group's traffic in the group.
    let service = Api::<Service>::namespaced(client.clone(), ns)
        .get("web")
        .await?;
    ensure!(
        service
            .metadata
            .annotations
            .unwrap_or_default()
            .get("apps.kubeedge.io/service-topology")
            .map(String::as_str)
            == Some("range-nodegroup"),
        "the Service carries no range-nodegroup topology"
    );
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("settings")
        .await?;
    // The manifest naming kube-system is refused with a Warning event; nothing is made there.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the InvalidManifest event",
        Duration::from_secs(30),
        || async {
            Ok(events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("InvalidManifest")
                        && e.note.as_deref().is_some_and(|n| n.contains("kube-system"))
                }))
        },
    )
    .await?;
    ensure!(
        Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .get_opt("elsewhere")
            .await?
            .is_none(),
        "an EdgeApplication wrote into another namespace"
    );
    // Every object is reported; the status settles on Available for the made ones.
    wait_for(
        "status: both Deployments Available",
        Duration::from_secs(60),
        || async {
            let status = apps.get("shop").await?.data["status"]["workloadStatus"].clone();
            let available = |name: &str| {
                status.as_array().into_iter().flatten().any(|s| {
                    s["identifier"]["name"] == json!(name) && s["conditions"] == json!("Available")
                })
            };
            Ok(
                (available(&web_north) && available(&web_south) && available("settings"))
                    .then_some(()),
            )
        },
    )
    .await?;

    // Changing south's override changes only south's copy.
    let north_before = deployments.get(&web_north).await?.metadata.generation;
    apps.patch(
        "shop",
        &apply,
        &Patch::Apply(&app(2, json!(["north", "south"]))),
    )
    .await?;
    wait_for("south scaled to 2", Duration::from_secs(30), || async {
        Ok((deployments.get(&web_south).await?.spec.replicas == Some(2)).then_some(()))
    })
    .await?;
    let north_after = deployments.get(&web_north).await?;
    ensure!(
        north_after.metadata.generation == north_before && north_after.spec.replicas == Some(2),
        "north's Deployment changed with south's override"
    );

    // Dropping a group deletes its copy.
    apps.patch("shop", &apply, &Patch::Apply(&app(2, json!(["north"]))))
        .await?;
    wait_for("south's copy deleted", Duration::from_secs(30), || async {
        Ok(deployments
            .get_opt(&web_south)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    ensure!(
        deployments.get_opt(&web_north).await?.is_some(),
        "north's copy went too"
    );
    Ok(())
}

async fn cleanup(client: &Client, ns: &str, nodes: &[&str]) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    let groups: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("NodeGroup", "nodegroups"));
    let pid = std::process::id();
    for group in [format!("north-{pid}"), format!("south-{pid}")] {
        let _ = groups.delete(&group, &DeleteParams::default()).await;
    }
    let api: Api<Node> = Api::all(client.clone());
    for node in nodes {
        let _ = verge_e2e::remove_managed_containers(|n| n == *node);
        let _ = api.delete(node, &DeleteParams::default()).await;
    }
}
