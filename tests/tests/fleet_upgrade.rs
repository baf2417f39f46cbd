//! NodeUpgradeJobs on real edge nodes (issue 36, docs/fleet.md "Jobs"): two edges, each
//! running its own copy of edgecore (what the job replaces) with a pod, the node's registry
//! login in `<dataDir>/config.json`, and the kit's registry (CNCF distribution, TLS, a login)
//! holding two edgecore builds in images of the upgrade layout (`/usr/local/bin/edgecore`):
//!
//! - another build of edgecore (the same binary with bytes appended: another digest). The job
//!   upgrades both nodes: each edgecore `exec`s the new binary on trial, which installs itself
//!   once connected; the process (pid) and the pods' containers stay, the node's binary is
//!   the new build and the previous one is kept; the job reports the versions and the edge
//!   session's downtime.
//! - a broken build (answers `--version`, exits at start). Its job rolls back by itself: the
//!   test restarts the dead edgecore from its installed binary as the shipped unit's
//!   `Restart=always` would, and that edgecore finds the trial unconfirmed, removes it and
//!   reports the failure; the pods' containers stay.
//!
//! - with `requireConfirmation`, the same build again on node B: the node waits
//!   (`WaitingConfirmation`) until the job's `operations.kubeedge.io/confirm` annotation names
//!   it, then upgrades.
//!
//! The time from job creation to done and the downtime are printed (`--nocapture`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use verge_e2e::{
    Cloud, Edge, containers_with, create_namespace, job_actions, operations_job, sleeper_pod,
    wait_job_final, wait_running,
};
use verge_testkit::registry::{Pushed, Registry};
use verge_testkit::wait::wait_node_ready;

/// The version of the running build, as edgecore reports it.
const RUNNING: &str = concat!("v", env!("CARGO_PKG_VERSION"));

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_keeps_pods_and_a_broken_build_rolls_back() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    cloud.start_fleetcontroller(&cp).await?;
    let registry = Registry::start().await?;
    let id = std::process::id();
    let (mut edges, mut installed) = (Vec::new(), Vec::new());
    for side in ["a", "b"] {
        let mut edge = Edge::new(&format!("e2e-upgrade-{side}-{id}"), &cloud)?;
        installed.push(edge.install_binary()?);
        // The node's own registry login, as the kubelet's <root-dir>/config.json.
        std::fs::create_dir_all(edge.data_dir())?;
        std::fs::write(
            edge.data_dir().join("config.json"),
            registry.docker_config_json(),
        )?;
        edge.start()?;
        edges.push(edge);
    }
    let work = tempfile::tempdir()?;
    let result = async {
        let builds = Builds::push(&registry, work.path(), &installed[0]).await?;
        scenario(&client, &mut edges, &installed, &builds).await?;
        Ok::<_, anyhow::Error>(builds)
    }
    .await;
    let logs: String = edges
        .iter()
        .map(|e| format!("--- {} ---\n{}\n", e.name, e.logs(60)))
        .collect();
    let logs = format!("{}\n{logs}", cloud.logs(40));
    let jobs: Api<DynamicObject> = Api::all_with(client.clone(), &operations_job("NodeUpgradeJob"));
    for job in ["upgrade", "broken", "confirm"] {
        let _ = jobs
            .delete(&format!("{job}-{id}"), &DeleteParams::default())
            .await;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces
        .delete(&format!("e2e-upgrade-{id}"), &DeleteParams::default())
        .await;
    if let Ok(builds) = &result {
        for image in [&builds.good_image, &builds.broken_image] {
            let _ = verge_testkit::docker::docker(&["rmi", &image.by_digest()]);
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for edge in &mut edges {
        let _ = edge.kill9();
        let _ = nodes.delete(&edge.name, &DeleteParams::default()).await;
    }
    result
        .map(drop)
        .map_err(|e| anyhow::anyhow!("{e:#}\n{logs}"))
}

/// The two builds in the registry.
struct Builds {
    /// The binary of the new build.
    good: Vec<u8>,
    good_image: Pushed,
    broken_image: Pushed,
    /// `<registry>/<repository>` (no tag).
    repository: String,
}

impl Builds {
    /// The new build is `installed` (an edge's binary) with bytes appended.
    async fn push(registry: &Registry, dir: &Path, installed: &Path) -> anyhow::Result<Self> {
        let id = std::process::id();
        let repository = format!("verge-e2e/edgecore-{id}");
        let mut good = std::fs::read(installed).context("the installed edgecore")?;
        good.extend_from_slice(format!("\nverge-e2e build {id}\n").as_bytes());
        let good_image = push_binary(registry, dir, "good", &good, &repository, "v0.2.0").await?;
        let broken = broken_build(dir)?;
        let broken_image =
            push_binary(registry, dir, "broken", &broken, &repository, "v0.3.0").await?;
        Ok(Self {
            good,
            good_image,
            broken_image,
            repository: registry.image(&repository),
        })
    }
}

/// An image holding `binary` at `/usr/local/bin/edgecore`, pushed as `<repository>:<tag>`.
async fn push_binary(
    registry: &Registry,
    dir: &Path,
    name: &str,
    binary: &[u8],
    repository: &str,
    tag: &str,
) -> anyhow::Result<Pushed> {
    use std::os::unix::fs::PermissionsExt as _;
    let root = dir.join(name);
    let bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&bin)?;
    std::fs::write(bin.join("edgecore"), binary)?;
    std::fs::set_permissions(bin.join("edgecore"), std::fs::Permissions::from_mode(0o755))?;
    let local = format!("verge-e2e/{name}-edgecore:{}", std::process::id());
    verge_testkit::docker::import_rootfs(&root, &local, &[])?;
    let pushed = registry
        .push(&local, &format!("{repository}:{tag}"))
        .await?;
    // Only the registry holds them now: the job must pull.
    let _ = verge_testkit::docker::docker(&["rmi", &local, &pushed.reference]);
    Ok(pushed)
}

/// A build that answers `--version` like edgecore and exits at start: compiled from a few
/// lines with the toolchain that builds the workspace.
fn broken_build(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let source = dir.join("broken.rs");
    std::fs::write(
        &source,
        r#"fn main() {
    if std::env::args().any(|a| a == "--version") {
        println!("edgecore 0.3.0-broken");
        return;
    }
    eprintln!("broken build: exits at start");
    std::process::exit(3);
}
"#,
    )?;
    let out = dir.join("broken-build");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let status = std::process::Command::new(rustc)
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status()
        .context("running rustc")?;
    ensure!(status.success(), "rustc broken.rs: {status}");
    Ok(std::fs::read(out)?)
}

fn job(name: &str, nodes: &[&str], version: &str, builds: &Builds, digest: &str) -> Value {
    json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "NodeUpgradeJob",
        "metadata": {"name": name},
        "spec": {"nodeNames": nodes, "version": version, "image": builds.repository,
                 "imageDigestGatter": {"amd64": digest},
                 "concurrency": 2, "timeoutSeconds": 90}})
}

/// `installed`: each edge's binary, in the order of `edges`.
async fn scenario(
    client: &Client,
    edges: &mut [Edge],
    installed: &[std::path::PathBuf],
    builds: &Builds,
) -> anyhow::Result<()> {
    let id = std::process::id();
    let ns = format!("e2e-upgrade-{id}");
    for edge in edges.iter() {
        wait_node_ready(client, &edge.name, Duration::from_secs(90)).await?;
    }
    create_namespace(client, &ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut containers = Vec::new();
    for edge in edges.iter() {
        let pod = format!(
            "keeps-running-{}",
            edge.name.split('-').nth(2).unwrap_or("x")
        );
        pods.create(&PostParams::default(), &sleeper_pod(&ns, &pod, &edge.name)?)
            .await?;
        let pod = wait_running(&pods, &pod, Duration::from_secs(90)).await?;
        let uid = pod.metadata.uid.unwrap_or_default();
        let ids = containers_with(&[("io.kubernetes.pod.uid", uid.as_str())], false)?;
        ensure!(!ids.is_empty(), "the containers of {uid}");
        containers.push((uid, ids));
    }
    let running_containers = || -> anyhow::Result<bool> {
        for (uid, ids) in &containers {
            if &containers_with(&[("io.kubernetes.pod.uid", uid.as_str())], false)? != ids {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let pids: Vec<Option<u32>> = edges
        .iter()
        .map(|e| {
            e.process
                .as_ref()
                .map(verge_testkit::process::ChildProcess::pid)
        })
        .collect();
    let original = std::fs::read(&installed[0])?;

    // The new build on both nodes.
    let jobs: Api<DynamicObject> = Api::all_with(client.clone(), &operations_job("NodeUpgradeJob"));
    let owned: Vec<String> = edges.iter().map(|e| e.name.clone()).collect();
    let names: Vec<&str> = owned.iter().map(String::as_str).collect();
    let upgrade = format!("upgrade-{id}");
    let object = job(
        &upgrade,
        &names,
        "v0.2.0",
        builds,
        &builds.good_image.digest,
    );
    let started = Instant::now();
    jobs.patch(
        &upgrade,
        &PatchParams::apply("verge-e2e"),
        &Patch::Apply(&object),
    )
    .await?;
    let status = wait_job_final(&jobs, &upgrade, Duration::from_secs(180), || Ok(())).await?;
    let took = started.elapsed();
    ensure!(status["phase"] == "Complated", "the upgrade: {status}");
    let mut downtimes = Vec::new();
    for entry in status["nodeStatus"].as_array().into_iter().flatten() {
        ensure!(
            entry["phase"] == "Successful"
                && entry["currentVersion"] == "v0.2.0"
                && entry["historicVersion"] == RUNNING,
            "a node's upgrade: {entry}"
        );
        ensure!(
            job_actions(entry) == ["Check", "BackUp", "Upgrade"],
            "the steps: {entry}"
        );
        let reason = entry["actionFlow"][2]["reason"]
            .as_str()
            .unwrap_or_default();
        let ms: u64 = reason
            .strip_prefix("edge session back ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("the downtime in {reason:?}"))?;
        downtimes.push(ms);
    }
    eprintln!(
        "two nodes upgraded in {:.1} s (job created → Complated); edge session downtime {downtimes:?} ms",
        took.as_secs_f64()
    );
    for (edge, (path, pid)) in edges.iter_mut().zip(installed.iter().zip(&pids)) {
        ensure!(
            std::fs::read(path)? == builds.good,
            "{} does not run the new build",
            edge.name
        );
        let previous = path.with_file_name("edgecore.previous");
        ensure!(
            std::fs::read(&previous)? == original,
            "the previous build is not kept"
        );
        ensure!(
            !path.with_file_name("edgecore.new").exists(),
            "the trial binary stayed"
        );
        let now = edge
            .process
            .as_ref()
            .map(verge_testkit::process::ChildProcess::pid);
        ensure!(
            now == *pid && edge.process.as_mut().is_some_and(|p| p.is_running()),
            "{}'s process was replaced, not exec'd",
            edge.name
        );
        wait_node_ready(client, &edge.name, Duration::from_secs(30)).await?;
    }
    ensure!(
        running_containers()?,
        "a pod's containers changed during the upgrade"
    );

    // The broken build on node A rolls back by itself.
    let broken = format!("broken-{id}");
    let object = job(
        &broken,
        &names[..1],
        "v0.3.0",
        builds,
        &builds.broken_image.digest,
    );
    jobs.patch(
        &broken,
        &PatchParams::apply("verge-e2e"),
        &Patch::Apply(&object),
    )
    .await?;
    let edge = &mut edges[0];
    let mut restarts = 0;
    let status = wait_job_final(&jobs, &broken, Duration::from_secs(180), || {
        // systemd's Restart=always: a dead edgecore is started again from its binary.
        if !edge.process.as_mut().is_some_and(|p| p.is_running()) {
            restarts += 1;
            edge.start()?;
        }
        Ok(())
    })
    .await?;
    let entry = &status["nodeStatus"][0];
    ensure!(
        status["phase"] == "Failure"
            && entry["phase"] == "Failure"
            && entry["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("rolled back: ")),
        "the broken job: {status}"
    );
    ensure!(
        entry["actionFlow"]
            .as_array()
            .and_then(|f| f.last())
            .map(|s| (&s["action"], &s["status"]))
            == Some((&json!("RollBack"), &json!("True"))),
        "the broken job's steps: {entry}"
    );
    ensure!(restarts >= 1, "the broken build never ran");
    ensure!(
        std::fs::read(&installed[0])? == builds.good,
        "the installed binary changed"
    );
    ensure!(
        !installed[0].with_file_name("edgecore.new").exists(),
        "the broken binary stayed"
    );
    wait_node_ready(client, &edges[0].name, Duration::from_secs(60)).await?;
    ensure!(
        running_containers()?,
        "a pod's containers changed during the roll-back"
    );

    // requireConfirmation: node B waits until the job's annotation confirms it.
    let confirm = format!("confirm-{id}");
    let mut object = job(
        &confirm,
        &names[1..],
        "v0.2.0",
        builds,
        &builds.good_image.digest,
    );
    object["spec"]["requireConfirmation"] = json!(true);
    jobs.patch(
        &confirm,
        &PatchParams::apply("verge-e2e"),
        &Patch::Apply(&object),
    )
    .await?;
    let waiting = verge_e2e::wait_for(
        "B waiting for confirmation",
        Duration::from_secs(60),
        || async {
            let status = jobs.get(&confirm).await?.data["status"].clone();
            let entry = status["nodeStatus"][0].clone();
            Ok((job_actions(&entry) == ["Check", "WaitingConfirmation"]).then_some(status))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = jobs.get(&confirm).await?.data["status"].clone();
    ensure!(
        status["phase"] != "Complated" && job_actions(&status["nodeStatus"][0]).len() == 2,
        "B did not wait: {status} (was {waiting})"
    );
    let annotation = json!({"metadata": {"annotations": {
        verge_core::task::CONFIRM_ANNOTATION: names[1]}}});
    jobs.patch(
        &confirm,
        &PatchParams::default(),
        &Patch::Merge(&annotation),
    )
    .await?;
    let status = wait_job_final(&jobs, &confirm, Duration::from_secs(120), || Ok(())).await?;
    let entry = &status["nodeStatus"][0];
    ensure!(
        status["phase"] == "Complated"
            && job_actions(entry) == ["Check", "WaitingConfirmation", "BackUp", "Upgrade"],
        "the confirmed job: {status}"
    );
    ensure!(
        running_containers()?,
        "a pod's containers changed during the confirmed upgrade"
    );
    Ok(())
}
