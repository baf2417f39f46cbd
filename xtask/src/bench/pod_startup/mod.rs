//! `cargo xtask bench pod-startup`: the time from create to Running as observed through the
//! API (a watch) on one edge node, against raw `docker run -d` of the same image measured in
//! the same run, at the same concurrency: first N pods one at a time (the latency of the
//! whole path: API, scheduler-free binding, cloudhub, redb, Docker, status back) against N
//! sequential `docker run -d`, then N pods created concurrently against N concurrent
//! `docker run -d` (throughput of the engine). Prints n, p50, p90, p99 (with at least 20
//! samples) and max of each, the ratios, and edgecore's resident memory with 0 and with N
//! pods running; then the same N pods one at a time, and N at once, on a traced Verge, cut
//! into stages ([`stages`]). Writes the tables to `docs/benchmarks.md`.

mod report;
mod shapes;
mod stages;

pub(crate) use shapes::Shape;

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;

use crate::local;

/// Arguments of `cargo xtask bench pod-startup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods per mode (one at a time, then all at once), and `docker run`s of the baseline
    /// in each mode. A p99 is printed only with at least 20.
    #[arg(long, default_value_t = 20)]
    pub pods: usize,
    /// Pods running in all for the last memory figure (more are created at once after the
    /// burst; no more when not above `--pods`).
    #[arg(long, default_value_t = 100)]
    pub memory_pods: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;
const NODE: &str = "verge-bench-1";
const NAMESPACE: &str = "verge-bench";
/// The app container of every bench pod.
const CONTAINER: &str = "main";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.pods.max(1);
    let env = super::env::TracedEnv::up("bench", !args.debug).await?;
    let run_dir = env.run_dir.clone();
    let result = measure(&env, (n, args.memory_pods), !args.debug).await;
    env.down(&[&run_dir, &run_dir.join("traced")]).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    env: &super::env::TracedEnv,
    (n, memory_pods): (usize, usize),
    release: bool,
) -> anyhow::Result<()> {
    let cp = &env.cp;
    let (run_dir, bin_dir) = (env.run_dir.as_path(), env.bin_dir.as_path());
    // A fresh edge: the pods an earlier run left in its store would start again with it.
    for dir in [run_dir.to_owned(), run_dir.join("traced")] {
        local::stop_processes(&dir);
        let _ = std::fs::remove_dir_all(dir.join("edge"));
    }
    let verge = local::start(run_dir, bin_dir, cp, NODE, None).await?;
    verge.wait_ready(cp, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle =
        local::status_kib(verge.edgecore_pid, "VmRSS").context("reading edgecore RSS")?;

    eprintln!("bench: {n} sequential `docker run -d`, then {n} concurrent ones");
    let docker_one = shapes::docker_baseline(Shape::One, n, false)?;
    let docker_all = shapes::docker_baseline(Shape::One, n, true)?;
    eprintln!("bench: the same on a user-defined network at fixed addresses");
    let network_one = shapes::docker_baseline_on_network(n, false)?;
    let network_all = shapes::docker_baseline_on_network(n, true)?;

    let client = cp.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // Pods an interrupted run left on its (stopped) nodes would hold the namespace up.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let _ = force_delete_all(&pods).await;
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    while namespaces.get_opt(NAMESPACE).await?.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    local::create_namespace(&client, NAMESPACE).await?;

    eprintln!("bench: {n} pods one at a time");
    let verge_one = sorted_times(&one_at_a_time(&pods, NODE, "one", n, Shape::One).await?);
    // Gone again before the burst, so the memory figure counts exactly N pods.
    delete_and_wait(&pods, n).await?;
    let mut shapes = Vec::new();
    for shape in Shape::OTHERS {
        eprintln!(
            "bench: {n} pods of {} one at a time, and their baseline",
            shape.describe()
        );
        let docker = shapes::docker_baseline(shape, n, false)?;
        let prefix = format!("shape{}", shapes.len());
        let verge = sorted_times(&one_at_a_time(&pods, NODE, &prefix, n, shape).await?);
        delete_and_wait(&pods, n).await?;
        shapes.push((shape, verge, docker));
    }

    eprintln!("bench: {n} pods created at once");
    let verge_all = sorted_times(&at_once(&pods, NODE, "bench", 0..n).await?);
    let rss_busy = rss_after_burst(verge.edgecore_pid).await?;
    let many = memory_pods.max(n);
    if many > n {
        eprintln!(
            "bench: {} more pods at once, {many} in all (memory)",
            many - n
        );
        at_once(&pods, NODE, "bench", n..many).await?;
    }
    let rss_many = rss_after_burst(verge.edgecore_pid).await?;
    local::stop_processes(run_dir);
    local::remove_containers(run_dir);
    // Their node is gone: removed at once, without waiting for an edge to confirm.
    force_delete_all(&pods).await?;
    // The traced Verge runs alone: its controllers take the same leader Leases (the only
    // ones their RBAC may update).
    let traced = traced_stages(env, &pods, n).await?;

    let results = report::Results {
        n,
        release,
        verge_one,
        docker_one,
        verge_all,
        docker_all,
        network_one,
        network_all,
        shapes,
        rss_kib: [(0, rss_idle), (n, rss_busy.1), (many, rss_many.1)],
        rss_burst_kib: [rss_busy.0, rss_many.0],
        stage_table: stages::table(&traced.one.0, &traced.one.1),
        burst_stage_table: stages::table(&traced.burst.0, &traced.burst.1),
    };
    results.record()?;
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

/// The stages of a traced pass's pods whose trace was complete, and the names of the others.
type TracedPods = (Vec<stages::Stages>, Vec<String>);

/// What the traced pass found ([`traced_stages`]).
struct Traced {
    /// The pods started one at a time.
    one: TracedPods,
    /// The pods created at once.
    burst: TracedPods,
}

/// The traced pass: `n` pods one at a time on a second Verge exporting every span to
/// Jaeger, then `n` created at once there, each pod cut into stages ([`stages`]). The
/// second Verge is stopped and its pods and containers removed before it returns.
async fn traced_stages(
    env: &super::env::TracedEnv,
    pods: &Api<Pod>,
    n: usize,
) -> anyhow::Result<Traced> {
    let (cp, jaeger) = (&env.cp, &env.jaeger);
    let traced_node = format!("{NODE}-traced");
    eprintln!("bench: {n} pods one at a time on {traced_node}, traced (stages)");
    let traced_dir = env.run_dir.join("traced");
    let endpoint = jaeger.otlp_grpc_endpoint();
    let traced = local::start(&traced_dir, &env.bin_dir, cp, &traced_node, Some(&endpoint)).await?;
    traced.wait_ready(cp, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = one_at_a_time(pods, &traced_node, "traced", n, Shape::One).await?;
    let one = stages::from_jaeger(jaeger, CONTAINER, &started).await?;
    delete_and_wait(pods, n).await?;
    eprintln!("bench: {n} pods created at once on {traced_node}, traced (stages)");
    let started = at_once(pods, &traced_node, "traced-burst", 0..n).await?;
    let burst = stages::from_jaeger(jaeger, CONTAINER, &started).await?;
    for (_, untraced) in [&one, &burst] {
        if !untraced.is_empty() {
            eprintln!("bench: no complete trace of {}", untraced.join(", "));
        }
    }
    // Their node stops now: its pods are removed at once, its containers by the bench.
    local::stop_processes(&traced_dir);
    local::remove_containers(&traced_dir);
    force_delete_all(pods).await?;
    Ok(Traced { one, burst })
}

/// The sorted create → Running times of `started`.
fn sorted_times(started: &[Started]) -> Vec<Duration> {
    let mut times: Vec<Duration> = started.iter().map(|p| p.took).collect();
    times.sort();
    times
}

/// Deletes the bench namespace's `n` pods and waits until they are gone.
async fn delete_and_wait(pods: &Api<Pod>, n: usize) -> anyhow::Result<()> {
    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64);
    while !pods.list(&Default::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the one-at-a-time pods were not removed in time");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Deletes every pod of the bench namespace at once (grace period 0), without waiting for
/// an edge to confirm: for pods of a stopped node, whose deletion would otherwise hang.
async fn force_delete_all(pods: &Api<Pod>) -> anyhow::Result<()> {
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &Default::default(),
    )
    .await?;
    Ok(())
}

/// After a burst of pods is Running, edgecore's VmRSS (KiB) twice: 3 s after it, while the
/// burst's transient memory (its concurrent Docker requests) may still be resident, and then
/// settled, 15 s after it, when jemalloc has returned what was freed (its decay is 1 s) and
/// what is left is what the pods hold.
async fn rss_after_burst(pid: u32) -> anyhow::Result<(u64, u64)> {
    let rss = || local::status_kib(pid, "VmRSS").context("reading edgecore RSS");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let burst = rss()?;
    tokio::time::sleep(Duration::from_secs(12)).await;
    Ok((burst, rss()?))
}

/// Creates pods `<prefix>-<i>` of one container on `node` for `range` at once; returns them
/// (in no order) once all are Running.
async fn at_once(
    pods: &Api<Pod>,
    node: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
) -> anyhow::Result<Vec<Started>> {
    let count = range.len() as u64;
    let mut running = watch_running(pods.clone());
    let creates = range.map(|i| {
        let pods = pods.clone();
        async move {
            let name = format!("{prefix}-{i}");
            let pod = Shape::One.pod(&name, node)?;
            let (created_at, t0) = (SystemTime::now(), Instant::now());
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok((name, (created_at, t0)))
        }
    });
    let created: HashMap<String, (SystemTime, Instant)> = futures::future::try_join_all(creates)
        .await?
        .into_iter()
        .collect();
    let times = running
        .wait_for(
            created
                .iter()
                .map(|(name, (_, t0))| (name.clone(), *t0))
                .collect(),
            Duration::from_secs(60 + 3 * count),
        )
        .await;
    running.task.abort();
    Ok(times?
        .into_iter()
        .map(|(name, took)| Started {
            created_at: created[&name].0,
            name,
            took,
        })
        .collect())
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
    /// each pod's name and create -> Running time, in the order they were seen.
    pub(super) async fn wait_for(
        &mut self,
        mut created: HashMap<String, Instant>,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(String, Duration)>> {
        let deadline = Instant::now() + timeout;
        let mut times = Vec::with_capacity(created.len());
        while !created.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some((name, at))) = tokio::time::timeout(left, self.rx.recv()).await else {
                bail!("{} pods not Running within {timeout:?}", created.len());
            };
            if let Some(t0) = created.remove(&name) {
                times.push((name, at - t0));
            }
        }
        Ok(times)
    }
}

/// A pod started by [`one_at_a_time`]: its name, when its create call began (wall clock),
/// and how long until a watch saw it Running.
#[derive(Debug, Clone)]
pub(super) struct Started {
    pub(super) name: String,
    pub(super) created_at: SystemTime,
    pub(super) took: Duration,
}

/// Creates `n` pods `<prefix>-<i>` of `shape` on `node` one after another, each waited for
/// until a watch sees it Running; returns them in creation order.
pub(super) async fn one_at_a_time(
    pods: &Api<Pod>,
    node: &str,
    prefix: &str,
    n: usize,
    shape: Shape,
) -> anyhow::Result<Vec<Started>> {
    let mut running = watch_running(pods.clone());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let (created_at, t0) = (SystemTime::now(), Instant::now());
        pods.create(&PostParams::default(), &shape.pod(&name, node)?)
            .await?;
        let took = running
            .wait_for([(name.clone(), t0)].into(), Duration::from_secs(60))
            .await?;
        out.push(Started {
            name,
            created_at,
            took: took[0].1,
        });
    }
    running.task.abort();
    Ok(out)
}
