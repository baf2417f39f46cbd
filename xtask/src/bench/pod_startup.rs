//! `cargo xtask bench pod-startup`: the time from create to Running as observed through the
//! API (a watch) on one edge node, against raw `docker run -d` of the same image measured in
//! the same run, at the same concurrency: first N pods one at a time (the latency of the
//! whole path: API, scheduler-free binding, cloudhub, redb, Docker, status back) against N
//! sequential `docker run -d`, then N pods created concurrently against N concurrent
//! `docker run -d` (throughput of the engine). Prints n, p50, p90, p99 (with at least 20
//! samples) and max of each, the ratios, and edgecore's resident memory with 0 and with N
//! pods running, and writes the table to `docs/benchmarks.md`.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use verge_testkit::ControlPlaneConfig;
use verge_testkit::docker::docker;

use crate::local;

/// Arguments of `cargo xtask bench pod-startup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods per mode (one at a time, then all at once), and `docker run`s of the baseline
    /// in each mode. A p99 is printed only with at least 20.
    #[arg(long, default_value_t = 20)]
    pub pods: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;
const NODE: &str = "verge-bench-1";
const NAMESPACE: &str = "verge-bench";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.pods.max(1);
    local::ensure_host().await?;
    let run_dir = verge_testkit::paths::run_dir().join("bench");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        ..ControlPlaneConfig::from_env()
    };
    let cp = crate::control_plane::up(&config).await?;
    let bin_dir = local::build_bins(!args.debug)?;
    let verge = local::start(&run_dir, &bin_dir, &cp, NODE, None).await?;
    let result = measure(&cp, &verge, n, !args.debug).await;
    local::stop_processes(&run_dir);
    local::remove_containers(&run_dir);
    crate::control_plane::down(&config).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    n: usize,
    release: bool,
) -> anyhow::Result<()> {
    verge.wait_ready(cp, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;

    eprintln!("bench: {n} sequential `docker run -d`, then {n} concurrent ones");
    let docker_one = docker_run_baseline(n, false)?;
    let docker_all = docker_run_baseline(n, true)?;

    let client = cp.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    while namespaces.get_opt(NAMESPACE).await?.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    local::create_namespace(&client, NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut running = watch_running(pods.clone());

    eprintln!("bench: {n} pods one at a time");
    let mut verge_one = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("one-{i}");
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &bench_pod(&name)?)
            .await?;
        let times = running
            .wait_for([(name, t0)].into(), Duration::from_secs(60))
            .await?;
        verge_one.extend(times);
    }
    verge_one.sort();
    // Gone again before the burst, so the memory figure counts exactly N pods.
    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64);
    while !pods.list(&Default::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the one-at-a-time pods were not removed in time");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    eprintln!("bench: {n} pods created at once");
    let creates = (0..n).map(|i| {
        let pods = pods.clone();
        async move {
            let name = format!("bench-{i}");
            let pod = bench_pod(&name)?;
            let t0 = Instant::now();
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok((name, t0))
        }
    });
    let created: HashMap<String, Instant> = futures::future::try_join_all(creates)
        .await?
        .into_iter()
        .collect();
    let mut verge_all = running
        .wait_for(created, Duration::from_secs(60 + 3 * n as u64))
        .await?;
    verge_all.sort();
    running.task.abort();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_busy =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;

    let mut table = String::from(
        "| mode | what | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n",
    );
    for (mode, verge, docker) in [
        ("one at a time", &verge_one, &docker_one),
        ("all at once", &verge_all, &docker_all),
    ] {
        table.push_str(&rows(mode, verge, docker));
    }
    let memory = format!(
        "edgecore resident memory (VmRSS): {:.1} MiB with 0 pods, {:.1} MiB with {n} pods.",
        rss_idle as f64 / 1024.0,
        rss_busy as f64 / 1024.0
    );
    println!(
        "pod-startup on one edge node (image {IMAGE}; a pod is an infra and an app container)"
    );
    println!("{table}\n{memory}");
    let body = format!(
        "{n} pods one at a time, then {n} pods created concurrently, on one edge node (image \
         `{IMAGE}`; a pod is an infra and an app container), timed from the create call to \
         `phase: Running` seen by an API watch; baseline: `docker run -d` of the same image \
         and command, sequential and then {n} concurrent, timed until the command returns \
         (container started). Verge binaries: {} build.\n\n{table}\n{memory}\n",
        if release { "release" } else { "debug" }
    );
    super::record::write(
        "pod-startup",
        "pod-startup: create → Running vs `docker run -d`",
        &body,
    )?;

    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

/// Table rows of one mode: Verge, the docker baseline, and the ratios.
fn rows(mode: &str, verge: &[Duration], docker: &[Duration]) -> String {
    let (v, d) = (super::Summary::of(verge), super::Summary::of(docker));
    let ratio = |a: Duration, b: Duration| format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64());
    let p99 = match (v.p99, d.p99) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "–".to_owned(),
    };
    format!(
        "| {mode} | verge: create → Running | {} |\n\
         | {mode} | docker run -d | {} |\n\
         | {mode} | ratio verge / docker | | {} | {} | {p99} | {} |\n",
        super::record::duration_cells(&v),
        super::record::duration_cells(&d),
        ratio(v.p50, d.p50),
        ratio(v.p90, d.p90),
        ratio(v.max, d.max),
    )
}

/// Pods of the bench namespace seen `Running` by a watch, with the time they were seen.
pub(super) struct RunningWatch {
    rx: tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

/// Starts watching `pods` for `phase: Running`.
pub(super) fn watch_running(pods: Api<Pod>) -> RunningWatch {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
                continue;
            };
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                let _ = tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    RunningWatch { rx, task }
}

impl RunningWatch {
    /// Waits until every pod of `created` (name -> create time) was seen Running; returns
    /// each pod's create -> Running time.
    pub(super) async fn wait_for(
        &mut self,
        mut created: HashMap<String, Instant>,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Duration>> {
        let deadline = Instant::now() + timeout;
        let mut times = Vec::with_capacity(created.len());
        while !created.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some((name, at))) = tokio::time::timeout(left, self.rx.recv()).await else {
                bail!("{} pods not Running within {timeout:?}", created.len());
            };
            if let Some(t0) = created.remove(&name) {
                times.push(at - t0);
            }
        }
        Ok(times)
    }
}

/// The benchmark's pod `name`, bound to the edge node.
fn bench_pod(name: &str) -> anyhow::Result<Pod> {
    bench_pod_on(name, NODE)
}

/// A pod `name` bound to `node`: one container of [`IMAGE`] sleeping an hour.
pub(super) fn bench_pod_on(name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}]
        }
    }))?)
}

/// `docker run -d` of the image `n` times, one after another or all at once (a thread
/// each), timing each until the command returns (the container is started); the containers
/// are removed afterwards. Returns the sorted times.
fn docker_run_baseline(n: usize, concurrent: bool) -> anyhow::Result<Vec<Duration>> {
    let run = || -> anyhow::Result<(Duration, String)> {
        let t0 = Instant::now();
        let id = docker(&["run", "-d", IMAGE, "sleep", "3600"])?;
        Ok((t0.elapsed(), id))
    };
    let results: Vec<anyhow::Result<(Duration, String)>> = if concurrent {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n).map(|_| s.spawn(run)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("docker run thread panicked")))
                })
                .collect()
        })
    } else {
        (0..n).map(|_| run()).collect()
    };
    let mut times = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    let mut failure = None;
    for r in results {
        match r {
            Ok((t, id)) => {
                times.push(t);
                ids.push(id);
            }
            Err(e) => failure = Some(e),
        }
    }
    let rm: Vec<&str> = ["rm", "-f"]
        .into_iter()
        .chain(ids.iter().map(String::as_str))
        .collect();
    let _ = docker(&rm);
    if let Some(e) = failure {
        return Err(e);
    }
    times.sort();
    Ok(times)
}
