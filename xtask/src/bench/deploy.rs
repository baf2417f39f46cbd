//! `cargo xtask bench deploy`: the cloud side deployed as docs/install.md says, on the test
//! kit's kubelet node, against what Kubernetes alone takes on the same node in the same run.
//!
//! Measured: the image sizes; the baseline — three Deployments of two pause-image replicas
//! each (the cloud side's shape, no Verge code) from `kubectl apply` to Available; the time
//! from `kubectl apply -k deploy/cloud` to every Deployment Available, then to a pod Running
//! on an edge installed from `deploy/edge` and joined through cloudhub's Service; and the
//! edgecontroller leader fail-over: from deleting the leader's pod to the standby holding the
//! Lease, and to a pod created then Running on the edge. Images are built with `cargo xtask
//! images --profile <profile>` (cargo and Docker reuse unchanged binaries and layers). The
//! bench's own control plane and node live in `~/.cache/verge/run/bench-deploy` and are
//! stopped at the end.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use verge_testkit::deployment::{Deployment, SERVICES, TAG};
use verge_testkit::edge_install::EdgeInstall;
use verge_testkit::process::ChildProcess;
use verge_testkit::trust::{TokenKind, create_bootstrap_token};
use verge_testkit::wait::{create_namespace, wait_for, wait_node_ready};
use verge_testkit::{ControlPlaneConfig, KubeletNodeConfig};

use crate::{images, local};

/// Arguments of `cargo xtask bench deploy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cargo profile of the images (`release`: what users get).
    #[arg(long, default_value = "release")]
    pub profile: String,
}

/// The edge node's name.
const EDGE: &str = "verge-bench-deploy-edge";

/// The namespace of the baseline and of the edge's pods.
const BENCH_NS: &str = "verge-bench-deploy";

/// Replicas of each cloud Deployment in deploy/cloud (and of each baseline Deployment).
const REPLICAS: usize = 2;

/// How long any step may take.
const STEP: Duration = Duration::from_secs(180);

/// What one run measured.
struct Figures {
    sizes: Vec<(String, u64)>,
    baseline: Duration,
    available: Duration,
    edge_pod: Duration,
    lease: Duration,
    fail_over_pod: Duration,
}

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    local::ensure_host().await?;
    let dir = verge_testkit::paths::run_dir().join("bench-deploy");
    let cp_config = ControlPlaneConfig {
        state_dir: dir.join("control-plane"),
        ..ControlPlaneConfig::from_env()
    };
    let node_config = KubeletNodeConfig {
        run_dir: dir.join("kubelet-node"),
        ..KubeletNodeConfig::from_env()
    };
    eprintln!("bench: images (profile {})", args.profile);
    let image_args = images::Args {
        tag: TAG.to_owned(),
        save: None,
        profile: args.profile.clone(),
    };
    let built = tokio::task::spawn_blocking(move || images::build_all(&image_args)).await??;
    let edgecore = built
        .iter()
        .find(|b| b.reference == images::reference("edgecore", TAG))
        .map(|b| b.bin.clone())
        .context("no edgecore image was built")?;
    let sizes = built
        .iter()
        .map(|b| (b.reference.clone(), b.size))
        .collect();

    eprintln!("bench: control plane and kubelet node");
    let cp = crate::control_plane::up(&cp_config).await?;
    let env = Deployment::start(cp, &node_config).await?;
    let mut edge = None;
    let result = measure(&env, &dir, &edgecore, sizes, &mut edge).await;
    if let Some(mut p) = edge {
        let _ = p.kill9();
    }
    let _ = verge_testkit::docker::remove_managed_containers(|n| n == EDGE);
    node_config.down().await?;
    crate::control_plane::down(&cp_config).await?;
    let figures = result?;
    record(&figures, &args.profile)?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    env: &Deployment,
    dir: &Path,
    edgecore: &Path,
    sizes: Vec<(String, u64)>,
    edge_process: &mut Option<ChildProcess>,
) -> anyhow::Result<Figures> {
    create_namespace(&env.client, BENCH_NS).await?;
    let node = env.node().context("no kubelet node")?.name().to_owned();
    eprintln!("bench: baseline: 3 Deployments × {REPLICAS} pause replicas → Available");
    let baseline = pause_baseline(env, dir, &node)?;

    eprintln!("bench: kubectl apply -k deploy/cloud → every Deployment Available");
    let applied = Instant::now();
    env.apply()?;
    env.wait_available(STEP).await?;
    let available = applied.elapsed();

    eprintln!("bench: an edge from deploy/edge joins through the Service and runs a pod");
    let hub = env.cloudhub_ip().await?;
    let install = EdgeInstall::configure(&dir.join("edge"), EDGE, hub, None)?;
    let token =
        create_bootstrap_token(&env.client, TokenKind::Valid, Duration::from_secs(3600)).await?;
    let ca_hash = verge_testkit::trust::verge_ca_hash(&env.client).await?;
    install.join(edgecore, hub, &token, &ca_hash)?;
    let argv = install.command_line(edgecore)?;
    let (program, rest) = argv.split_first().context("empty ExecStart")?;
    *edge_process = Some(ChildProcess::spawn(program, rest, [("RUST_LOG", "info")])?);
    wait_node_ready(&env.client, EDGE, STEP).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), BENCH_NS);
    run_pod(&pods, "first").await?;
    let edge_pod = applied.elapsed();

    eprintln!("bench: the leading edgecontroller's pod is deleted");
    let leader = env.wait_lease_holder("edgecontroller", STEP, None).await?;
    let deleted = Instant::now();
    env.delete_pod(&leader).await?;
    env.wait_lease_holder("edgecontroller", STEP, Some(&leader))
        .await?;
    let lease = deleted.elapsed();
    run_pod(&pods, "after-fail-over").await?;
    let fail_over_pod = deleted.elapsed();
    let _ = Api::<Node>::all(env.client.clone())
        .delete(EDGE, &DeleteParams::default())
        .await;
    let _ = env.kubectl(&["delete", "namespace", BENCH_NS, "--wait=false"]);
    Ok(Figures {
        sizes,
        baseline,
        available,
        edge_pod,
        lease,
        fail_over_pod,
    })
}

/// Creates pod `name` (the test image, `sleep`) on the edge and waits until it is Running.
async fn run_pod(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": BENCH_NS},
        "spec": {"nodeName": EDGE, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                                 "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    wait_for(&format!("pod {name} Running"), STEP, || async {
        Ok(pods
            .get_opt(name)
            .await?
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
    })
    .await?;
    Ok(())
}

/// Three Deployments of [`REPLICAS`] pause-image pods on the kubelet node, from `kubectl
/// apply` until all are Available (`kubectl rollout status`); deleted afterwards.
fn pause_baseline(env: &Deployment, dir: &Path, node: &str) -> anyhow::Result<Duration> {
    let mut manifest = String::new();
    for i in 0..SERVICES.len() {
        let name = format!("baseline-{i}");
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": BENCH_NS},
            "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                           "terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "pause",
                                               "image": verge_testkit::kubelet_node::PAUSE_IMAGE,
                                               "imagePullPolicy": "Never"}]}}}
        });
        let _ = writeln!(manifest, "---\n{}", serde_json::to_string(&deployment)?);
    }
    std::fs::create_dir_all(dir)?;
    let path = dir.join("baseline.yaml");
    std::fs::write(&path, manifest)?;
    let file = path.display().to_string();
    let started = Instant::now();
    env.kubectl(&["apply", "-f", &file])?;
    for i in 0..SERVICES.len() {
        env.kubectl(&[
            "-n",
            BENCH_NS,
            "rollout",
            "status",
            &format!("deployment/baseline-{i}"),
            "--timeout",
            &format!("{}s", STEP.as_secs()),
        ])?;
    }
    let took = started.elapsed();
    env.kubectl(&["delete", "-f", &file, "--wait=true"])?;
    ensure!(
        took < STEP * 2,
        "the baseline took {took:?}: the node is not healthy"
    );
    Ok(took)
}

/// Prints the figures and writes them to `docs/benchmarks.md`.
fn record(f: &Figures, profile: &str) -> anyhow::Result<()> {
    let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let mut body = String::new();
    let _ = writeln!(body, "| image (profile {profile}) | size |\n|---|---:|");
    for (reference, size) in &f.sizes {
        let _ = writeln!(
            body,
            "| `{reference}` | {:.1} MB |",
            images::megabytes(*size)
        );
    }
    let ratio = f.available.as_secs_f64() / f.baseline.as_secs_f64().max(1e-3);
    let _ = writeln!(
        body,
        "\n| step | time | baseline (same node, same run) |\n|---|---:|---|\n\
         | `kubectl apply -k deploy/cloud` → every Deployment Available ({} × {REPLICAS} pods) \
         | {} | 3 Deployments × {REPLICAS} pause pods → Available: {} ({ratio:.1}×) |\n\
         | `kubectl apply -k deploy/cloud` → a pod Running on an edge joined through the Service \
         | {} | – |\n\
         | leader edgecontroller pod deleted → standby holds the Lease | {} | Lease duration 15 s |\n\
         | leader edgecontroller pod deleted → a new pod Running on the edge | {} | – |",
        SERVICES.len(),
        secs(f.available),
        secs(f.baseline),
        secs(f.edge_pod),
        secs(f.lease),
        secs(f.fail_over_pod),
    );
    eprintln!("{body}");
    super::record::write(
        "deploy",
        "deploy: the cloud side as pods on a kubelet node",
        &body,
    )
}
