//! Partition an edge for 2 minutes while the cloud changes and the edge's containers crash;
//! after the link heals both sides converge. Counts lost and duplicated effects; requires 0.
//!
//! The edge runs in a network namespace whose only link to the cloud is a veth pair
//! (`verge_testkit::netns`); the test cuts it.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use verge_e2e::{
    Cloud, Edge, containers_with, create_namespace, docker, ready_status, via_host, wait_for,
};
use verge_testkit::netns::EdgeNetns;

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;
const PARTITION: Duration = Duration::from_secs(120);

fn pod(
    ns: &str,
    name: &str,
    node: &str,
    container: serde_json::Value,
    volumes: serde_json::Value,
) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "nodeSelector": {verge_core::EDGE_NODE_LABEL: ""},
                 "terminationGracePeriodSeconds": 2,
                 "containers": [container], "volumes": volumes}
    }))?)
}

/// A container that sleeps for an hour.
fn sleeper() -> serde_json::Value {
    json!({"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]})
}

fn app_ids(uid: &str, all: bool) -> anyhow::Result<Vec<String>> {
    containers_with(
        &[
            ("io.kubernetes.pod.uid", uid),
            ("io.kubernetes.container.name", "main"),
        ],
        all,
    )
}

/// The pod `name` once its phase is Running.
async fn running(pods: &Api<Pod>, name: &str) -> anyhow::Result<Option<Pod>> {
    Ok(pods
        .get_opt(name)
        .await?
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
}

async fn node_ready(nodes: &Api<Node>, name: &str) -> anyhow::Result<bool> {
    Ok(nodes
        .get_opt(name)
        .await?
        .is_some_and(|n| ready_status(&n).as_deref() == Some("True")))
}

#[tokio::test(flavor = "multi_thread")]
async fn partition_two_minutes_then_converge() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client: Client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let netns = EdgeNetns::create(11)?;
    let name = format!("e2e-part-{}", std::process::id());
    let mut edge = Edge::with_config(&name, &cloud, |c| {
        via_host(c, &cloud, netns.host_addr());
        c.edged.node_ip = Some(netns.edge_addr().into());
    })?;
    edge.start_in(&netns)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let logs = |cloud: &Cloud, edge: &Edge| {
        format!("{}\n--- edgecore ---\n{}", cloud.logs(40), edge.logs(80))
    };
    if let Err(e) = wait_for("edge Ready", Duration::from_secs(30), || async {
        Ok(node_ready(&nodes, &name).await?.then_some(()))
    })
    .await
    {
        anyhow::bail!("{e:#}\n{}", logs(&cloud, &edge));
    }
    let ns = name.clone();
    create_namespace(&client, &ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"v": "1"}}))?,
    )
    .await?;
    let keep = pod(
        &ns,
        "keep",
        &name,
        json!({"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
               "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}),
        json!([{"name": "cfg", "configMap": {"name": "cfg"}}]),
    )?;
    let crash = pod(
        &ns,
        "crash",
        &name,
        json!({"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", "sleep 3; exit 1"]}),
        json!([]),
    )?;
    let doomed = pod(&ns, "doomed", &name, sleeper(), json!([]))?;
    for p in [&keep, &crash, &doomed] {
        pods.create(&PostParams::default(), p).await?;
    }
    let keep_pod = wait_for("keep Running", Duration::from_secs(30), || {
        running(&pods, "keep")
    })
    .await?;
    let doomed_pod = wait_for("doomed Running", Duration::from_secs(30), || {
        running(&pods, "doomed")
    })
    .await?;
    let keep_uid = keep_pod.metadata.uid.clone().unwrap_or_default();
    let doomed_uid = doomed_pod.metadata.uid.clone().unwrap_or_default();
    let keep_container = app_ids(&keep_uid, false)?
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("keep container"))?;
    // ---- partition ----
    let (cut_at, edge_restarts) =
        partition_with_changes(&netns, &nodes, &pods, &cms, &name, &keep_container)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}\n{}", logs(&cloud, &edge)))?;
    // Edge pods tolerate the unreachable taint forever (no eviction on a lost link): they ask
    // for edge nodes, so the API server's admission policy gave them the toleration at
    // creation (deploy/cloud/access/offline-tolerations.yaml).
    let r = wait_for(
        "keep tolerates unreachable without seconds",
        Duration::from_secs(30),
        || async {
            let keep_now = pods.get("keep").await?;
            let tolerations = keep_now
                .spec
                .and_then(|s| s.tolerations)
                .unwrap_or_default();
            let evicting = tolerations.iter().any(|t| {
                t.key.as_deref() == Some("node.kubernetes.io/unreachable")
                    && t.toleration_seconds.is_some()
            });
            Ok((!evicting).then_some(()))
        },
    )
    .await;
    r.context("edge pods keep an unreachable toleration with seconds")?;
    // ---- heal ----
    netns.heal()?;
    let healed = Instant::now();
    eprintln!("link healed after {:?}", cut_at.elapsed());
    let lost = lost_effects(
        &nodes,
        &pods,
        &name,
        &keep_container,
        &doomed_uid,
        edge_restarts,
    )
    .await?;
    // Duplicated effects: keep's container must be the same one (no re-create), with no
    // restart, and exactly one container ever.
    let mut duplicated = Vec::new();
    let keep_all = app_ids(&keep_uid, true)?;
    if keep_all != vec![keep_container.clone()] {
        duplicated.push(format!("keep's containers changed: {keep_all:?}"));
    }
    eprintln!(
        "converged {:?} after heal; lost effects: {} {lost:?}; duplicated effects: {} {duplicated:?}",
        healed.elapsed(),
        lost.len(),
        duplicated.len()
    );
    anyhow::ensure!(
        lost.is_empty() && duplicated.is_empty(),
        "lost {lost:?}, duplicated {duplicated:?}\n{}",
        logs(&cloud, &edge)
    );

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    edge.kill9()?;
    verge_e2e::remove_managed_containers(|n| n == name)?;
    nodes.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// Waits (90 s each) for every effect of the partition to show on both sides after the heal;
/// returns the ones that never did: the node's status, the pod created, the configmap update
/// seen in `keep`, the pod deleted (`doomed`), and the edge's status (crash's restarts).
async fn lost_effects(
    nodes: &Api<Node>,
    pods: &Api<Pod>,
    name: &str,
    keep_container: &str,
    doomed_uid: &str,
    edge_restarts: i32,
) -> anyhow::Result<Vec<String>> {
    let mut lost = Vec::new();
    let converge = Duration::from_secs(90);
    let r = wait_for("node Ready after heal", converge, || async {
        Ok(node_ready(nodes, name).await?.then_some(()))
    })
    .await;
    if r.is_err() {
        lost.push("node status".to_owned());
    }
    let fresh_ok = wait_for("fresh Running", converge, || running(pods, "fresh")).await;
    match fresh_ok {
        Ok(p) => {
            let n = app_ids(p.metadata.uid.as_deref().unwrap_or_default(), true)?.len();
            if n != 1 {
                lost.push(format!(
                    "fresh has {n} containers (duplicated or lost create)"
                ));
            }
        }
        Err(_) => lost.push("fresh pod create".to_owned()),
    }
    let cfg_ok = wait_for("configmap v2 in keep", converge, || {
        let id = keep_container.to_owned();
        async move { Ok((docker(&["exec", &id, "cat", "/cfg/v"])? == "2").then_some(())) }
    })
    .await;
    if cfg_ok.is_err() {
        lost.push("configmap update".to_owned());
    }
    let del_ok = wait_for("doomed deleted on both sides", converge, || {
        let pods = pods.clone();
        let uid = doomed_uid.to_owned();
        async move {
            Ok(
                (pods.get_opt("doomed").await?.is_none() && app_ids(&uid, true)?.is_empty())
                    .then_some(()),
            )
        }
    })
    .await;
    if del_ok.is_err() {
        lost.push("pod deletion".to_owned());
    }
    let status_ok = wait_for("crash's restarts visible in the API", converge, || {
        let pods = pods.clone();
        async move {
            let p = pods.get("crash").await?;
            let rc = p
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.first().map(|c| c.restart_count))
                .unwrap_or(0);
            Ok((rc >= edge_restarts).then_some(()))
        }
    })
    .await;
    if status_ok.is_err() {
        lost.push("edge status (crash restartCount)".to_owned());
    }
    Ok(lost)
}

/// Cuts the edge's link for [`PARTITION`], makes the cloud changes the edge cannot hear (a new
/// pod `fresh`, configmap `cfg` to v2, pod `doomed` deleted) and checks that the edge keeps
/// working on its own (`keep` runs throughout, `crash` restarts at least twice). Returns when
/// the cut started and crash's highest restart count on the edge.
async fn partition_with_changes(
    netns: &EdgeNetns,
    nodes: &Api<Node>,
    pods: &Api<Pod>,
    cms: &Api<ConfigMap>,
    name: &str,
    keep_container: &str,
) -> anyhow::Result<(Instant, i32)> {
    let ns = name;
    netns.cut()?;
    let cut_at = Instant::now();
    eprintln!("link cut");
    wait_for(
        "node NotReady during the partition",
        Duration::from_secs(60),
        || async { Ok((!node_ready(nodes, name).await?).then_some(())) },
    )
    .await?;
    // Cloud changes while the edge cannot hear: a new pod, a configmap update, a deletion.
    let fresh = pod(ns, "fresh", name, sleeper(), json!([]))?;
    pods.create(&PostParams::default(), &fresh).await?;
    cms.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await?;
    pods.delete("doomed", &DeleteParams::default()).await?;
    // The edge keeps working on its own: keep stays up, crash restarts.
    let crash_uid = pods.get("crash").await?.metadata.uid.unwrap_or_default();
    let crash_before = app_ids(&crash_uid, true)?.len();
    while cut_at.elapsed() < PARTITION {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let state = docker(&["inspect", "-f", "{{.State.Running}}", keep_container])?;
        anyhow::ensure!(
            state == "true",
            "keep's container stopped during the partition"
        );
    }
    let crash_instances = app_ids(&crash_uid, true)?;
    let edge_restarts = crash_instances
        .iter()
        .filter_map(|id| {
            docker(&[
                "inspect",
                "-f",
                "{{index .Config.Labels \"io.verge.restart-count\"}}",
                id,
            ])
            .ok()
        })
        .filter_map(|s| s.parse::<i32>().ok())
        .max()
        .unwrap_or(0);
    eprintln!(
        "crash restarted on the edge during the partition: restart count {edge_restarts} ({crash_before} instances before)"
    );
    anyhow::ensure!(
        edge_restarts >= 2,
        "crash kept restarting while partitioned"
    );
    anyhow::ensure!(
        pods.get_opt("keep").await?.is_some(),
        "keep was evicted during the partition"
    );

    Ok((cut_at, edge_restarts))
}
