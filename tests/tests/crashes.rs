//! Crashes and restarts: edgecore `kill -9` in the middle of a burst of downstream messages,
//! cloudhub `kill -9`, an offline reboot of the edge, and a kube-apiserver restart. Each test
//! has its own edge node (and, for the API server restart, its own control plane).

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use verge_core::ResourceType;
use verge_e2e::{
    Cloud, Edge, containers_with, create_namespace, docker, ready_status, sleeper_pod, via_host,
    wait_for, wait_running,
};
use verge_testkit::netns::EdgeNetns;

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;

/// These scenarios kill and restart processes and load the machine; they run one at a time
/// so each one's time bounds hold on a 2-core CI machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn wait_ready(
    nodes: &Api<Node>,
    name: &str,
    want: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(&format!("node {name} Ready={want}"), timeout, || async {
        let ready = nodes
            .get_opt(name)
            .await?
            .is_some_and(|n| ready_status(&n).as_deref() == Some("True"));
        Ok((ready == want).then_some(()))
    })
    .await
}

/// Waits until edge `name` (already started) is Ready, then creates its namespace (also
/// named `name`); returns that namespace's Pods API.
async fn ready_with_namespace(client: &Client, name: &str) -> anyhow::Result<Api<Pod>> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_ready(&nodes, name, true, Duration::from_secs(30)).await?;
    create_namespace(client, name).await?;
    Ok(Api::namespaced(client.clone(), name))
}

fn running_app(uid: &str) -> anyhow::Result<Vec<String>> {
    containers_with(
        &[
            ("io.kubernetes.pod.uid", uid),
            ("io.kubernetes.container.name", "main"),
        ],
        false,
    )
}

async fn cleanup(client: &Client, ns: &str, node: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    let _ = verge_e2e::remove_managed_containers(|n| n == node);
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(node, &DeleteParams::default()).await;
}

/// 200 configmaps, all mounted by one pod (projected, optional sources), are created in a
/// burst; edgecore is killed with SIGKILL in the middle and restarted. Afterwards redb holds
/// every configmap whole, at the API's resourceVersion, and the pod's files match — each
/// change applied exactly once in effect (the pod's container never restarted).
#[tokio::test(flavor = "multi_thread")]
async fn kill_edgecore_during_a_burst_of_200() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let _serial = SERIAL.lock().await;
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-burst-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    let pods = ready_with_namespace(&client, &name).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    const N: usize = 200;
    let sources: Vec<_> = (0..N)
        .map(|i| {
            json!({"configMap": {"name": format!("burst-{i}"), "optional": true,
                                      "items": [{"key": "v", "path": format!("burst-{i}")}]}})
        })
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "reader", "namespace": name},
        "spec": {"nodeName": name, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                                 "command": ["sleep", "3600"],
                                 "volumeMounts": [{"name": "all", "mountPath": "/burst"}]}],
                 "volumes": [{"name": "all", "projected": {"sources": sources}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let p = wait_running(&pods, "reader", Duration::from_secs(180)).await?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let container = running_app(&uid)?
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no container"))?;

    let created = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let burst = {
        let cms = cms.clone();
        let created = created.clone();
        tokio::spawn(async move {
            stream::iter(0..N)
                .for_each_concurrent(8, |i| {
                    let cms = cms.clone();
                    let created = created.clone();
                    async move {
                        let cm: ConfigMap = serde_json::from_value(json!({
                            "metadata": {"name": format!("burst-{i}")}, "data": {"v": format!("value-{i}")}
                        }))
                        .expect("valid configmap");
                        if cms.create(&PostParams::default(), &cm).await.is_ok() {
                            created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
                .await;
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while created.load(std::sync::atomic::Ordering::Relaxed) < N / 3 {
        anyhow::ensure!(
            Instant::now() < deadline && !burst.is_finished(),
            "only {} of {N} configmaps created",
            created.load(std::sync::atomic::Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    edge.kill9()?;
    eprintln!(
        "edgecore killed after {} configmaps were created",
        created.load(std::sync::atomic::Ordering::Relaxed)
    );
    burst.await?;
    edge.start()?;

    let r = wait_for("all 200 files in the pod", Duration::from_secs(120), || {
        let id = container.clone();
        async move {
            let n: usize =
                docker(&["exec", &id, "sh", "-c", "ls /burst | grep -c burst-"])?.parse()?;
            Ok((n == N).then_some(()))
        }
    })
    .await;
    if let Err(e) = r {
        anyhow::bail!(
            "{e:#}\n{}\n--- edgecore ---\n{}",
            cloud.logs(30),
            edge.logs(60)
        );
    }
    let contents = docker(&[
        "exec",
        &container,
        "sh",
        "-c",
        "for f in /burst/burst-*; do echo \"$f=$(cat $f)\"; done",
    ])?;
    for line in contents.lines() {
        let (path, value) = line.split_once('=').unwrap_or((line, ""));
        let i = path.trim_start_matches("/burst/burst-");
        assert_eq!(value, format!("value-{i}"), "file {path}");
    }
    assert_eq!(
        running_app(&uid)?,
        vec![container.clone()],
        "the pod's container was never re-created"
    );

    // redb: every configmap whole, at the API's resourceVersion.
    edge.kill9()?;
    let store = verge_edgecore::MetaStore::open(&edge.data_dir().join("edgecore.redb"))?;
    let held = store.list(ResourceType::ConfigMap)?;
    let mut matched = 0;
    for cm in cms.list(&Default::default()).await?.items {
        let cm_name = cm.metadata.name.clone().unwrap_or_default();
        if !cm_name.starts_with("burst-") {
            continue;
        }
        let (_, obj) = held
            .iter()
            .find(|(k, _)| k.name == cm_name)
            .ok_or_else(|| anyhow::anyhow!("{cm_name} missing from redb"))?;
        let stored: ConfigMap = serde_json::from_slice(&obj.content)?;
        assert_eq!(
            stored.metadata.resource_version, cm.metadata.resource_version,
            "{cm_name}"
        );
        assert_eq!(
            obj.resource_version,
            cm.metadata.resource_version.clone().unwrap_or_default()
        );
        matched += 1;
    }
    assert_eq!(matched, N);
    eprintln!("redb holds all {N} configmaps whole at the API's resourceVersion");
    drop(store);
    cleanup(&client, &name, &name).await;
    Ok(())
}

/// A cloud process that dies in [`cloud_process_dies`].
#[derive(Debug, Clone, Copy)]
enum Victim {
    Cloudhub,
    Edgecontroller,
}

/// `victim` dies (SIGKILL) while a pod is created in the cloud and an edge container exits
/// (edged restarts it); after `victim` restarts, the edge reconnects or the controller
/// rebuilds its state from the API server and the edge's inventory, and both directions
/// catch up: the new pod runs, the restart shows in the API.
async fn cloud_process_dies(victim: Victim) -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let _serial = SERIAL.lock().await;
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-{victim:?}-{}", std::process::id()).to_lowercase();
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    let pods = ready_with_namespace(&client, &name).await?;
    pods.create(
        &PostParams::default(),
        &sleeper_pod(&name, "before", &name)?,
    )
    .await?;
    let before = wait_running(&pods, "before", Duration::from_secs(30)).await?;
    let before_uid = before.metadata.uid.clone().unwrap_or_default();

    match victim {
        Victim::Cloudhub => cloud.cloudhub.kill9()?,
        Victim::Edgecontroller => cloud.edgecontroller.kill9()?,
    };
    pods.create(
        &PostParams::default(),
        &sleeper_pod(&name, "during", &name)?,
    )
    .await?;
    let id = running_app(&before_uid)?
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no container"))?;
    docker(&["kill", &id])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    match victim {
        Victim::Cloudhub => cloud.restart_cloudhub_hard().await?,
        Victim::Edgecontroller => cloud.restart_edgecontroller_hard()?,
    }
    let restarted = Instant::now();
    let r = async {
        wait_running(&pods, "during", Duration::from_secs(60)).await?;
        restarts_at_least(&pods, "before", 1, Duration::from_secs(60)).await
    }
    .await;
    if let Err(e) = r {
        anyhow::bail!(
            "{e:#}\n{}\n--- edgecore ---\n{}",
            cloud.logs(40),
            edge.logs(60)
        );
    }
    eprintln!(
        "converged {:?} after the {victim:?} restart",
        restarted.elapsed()
    );
    edge.kill9()?;
    cleanup(&client, &name, &name).await;
    Ok(())
}

/// Waits until the API shows `restartCount >= n` for pod `name`'s first container.
async fn restarts_at_least(
    pods: &Api<Pod>,
    name: &str,
    n: i32,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(
        &format!("{name}'s restartCount >= {n} in the API"),
        timeout,
        || async {
            let p = pods.get(name).await?;
            let rc = p
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.first().map(|c| c.restart_count))
                .unwrap_or(0);
            Ok((rc >= n).then_some(()))
        },
    )
    .await
}

/// cloudhub dies and comes back: edges reconnect and resync, no message lost.
#[tokio::test(flavor = "multi_thread")]
async fn kill_cloudhub_loses_nothing() -> anyhow::Result<()> {
    cloud_process_dies(Victim::Cloudhub).await
}

/// edgecontroller dies and comes back: it rebuilds its state from the API server and the
/// edges' inventories.
#[tokio::test(flavor = "multi_thread")]
async fn kill_edgecontroller_rebuilds_state() -> anyhow::Result<()> {
    cloud_process_dies(Victim::Edgecontroller).await
}

/// Offline reboot: edgecore stops, every container of the node is removed (as after a host
/// reboot), the cloud stays unreachable, edgecore starts: every pod is Running again within
/// 10 s, from redb alone.
#[tokio::test(flavor = "multi_thread")]
async fn offline_reboot_brings_pods_back() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let _serial = SERIAL.lock().await;
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let netns = EdgeNetns::create(12)?;
    let name = format!("e2e-reboot-{}", std::process::id());
    let mut edge = Edge::with_config(&name, &cloud, |c| {
        via_host(c, &cloud, netns.host_addr());
        c.edged.node_ip = Some(netns.edge_addr().into());
    })?;
    edge.start_in(&netns)?;
    let pods = ready_with_namespace(&client, &name).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut uids = Vec::new();
    for p in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &sleeper_pod(&name, p, &name)?)
            .await?;
    }
    for p in ["a", "b", "c"] {
        uids.push(
            wait_running(&pods, p, Duration::from_secs(30))
                .await?
                .metadata
                .uid
                .unwrap_or_default(),
        );
    }

    netns.cut()?;
    edge.kill9()?;
    verge_e2e::remove_managed_containers(|n| n == name)?;
    let started = Instant::now();
    edge.start_in(&netns)?;
    let r = wait_for(
        "every pod's container running again, offline",
        Duration::from_secs(10),
        || {
            let uids = uids.clone();
            async move {
                for uid in &uids {
                    if running_app(uid)?.is_empty() {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            }
        },
    )
    .await;
    if let Err(e) = r {
        anyhow::bail!("{e:#}\n--- edgecore ---\n{}", edge.logs(80));
    }
    eprintln!(
        "all 3 pods running again {:?} after an offline restart",
        started.elapsed()
    );
    netns.heal()?;
    wait_ready(&nodes, &name, true, Duration::from_secs(60)).await?;
    for p in ["a", "b", "c"] {
        wait_running(&pods, p, Duration::from_secs(30)).await?;
    }
    edge.kill9()?;
    cleanup(&client, &name, &name).await;
    Ok(())
}

/// kube-apiserver restarts (SIGKILL, then started again): edgecontroller recovers and the
/// edge's statuses catch up. Runs on a control plane of its own.
#[tokio::test(flavor = "multi_thread")]
async fn apiserver_restart_statuses_catch_up() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let _serial = SERIAL.lock().await;
    verge_testkit::shared().await?; // docker, image, build
    let state = tempfile::tempdir()?;
    let config = verge_testkit::ControlPlaneConfig {
        state_dir: state.path().join("cp"),
        ..verge_testkit::ControlPlaneConfig::from_env()
    };
    let mut cp = config.up().await?;
    let result = async {
        let client = cp.client().await?;
        let cloud = Cloud::start(&cp).await?;
        let name = format!("e2e-apisrv-{}", std::process::id());
        let mut edge = Edge::new(&name, &cloud)?;
        edge.start()?;
        let pods = ready_with_namespace(&client, &name).await?;
        pods.create(&PostParams::default(), &sleeper_pod(&name, "p", &name)?)
            .await?;
        let p = wait_running(&pods, "p", Duration::from_secs(30)).await?;
        let uid = p.metadata.uid.clone().unwrap_or_default();

        cp.restart_component("kube-apiserver")?;
        // While the API server is down, the pod's container dies and edged restarts it.
        let id = running_app(&uid)?
            .first()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no container"))?;
        docker(&["kill", &id])?;
        let restarted = Instant::now();
        let back = wait_for("API server back", Duration::from_secs(180), || {
            let cp = cp.clone();
            let name = name.clone();
            async move {
                let c = cp.client().await?;
                let nodes: Api<Node> = Api::all(c.clone());
                Ok(nodes.get_opt(&name).await.ok().map(|_| c))
            }
        })
        .await;
        let client = match back {
            Ok(c) => c,
            Err(e) => anyhow::bail!(
                "{e:#}\n--- kube-apiserver ---\n{}",
                verge_testkit::process::log_tail(&cp.log_path("kube-apiserver"), 40)
            ),
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &name);
        let r = restarts_at_least(&pods, "p", 1, Duration::from_secs(90)).await;
        if let Err(e) = r {
            anyhow::bail!(
                "{e:#}\n{}\n--- edgecore ---\n{}",
                cloud.logs(40),
                edge.logs(40)
            );
        }
        // And the controller still applies new work.
        pods.create(&PostParams::default(), &sleeper_pod(&name, "after", &name)?)
            .await?;
        wait_running(&pods, "after", Duration::from_secs(60)).await?;
        eprintln!(
            "statuses caught up {:?} after the API server restart",
            restarted.elapsed()
        );
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await?;
        edge.kill9()?;
        verge_e2e::remove_managed_containers(|n| n == name)?;
        anyhow::Ok(())
    }
    .await;
    config.down()?;
    result
}
