//! `cargo xtask bench metrics`: the kubelet's resource endpoints on an edge node (issue 34).
//! One local edge node (the release build of cloudhub, edgecontroller and edgecore) and the
//! kit's kubelet node (kubelet and containerd of the pinned release) on one control plane,
//! each with the same N pods (busybox `sleep`; N = 20, then 100). For each node and each of
//! `/metrics/resource` (what metrics-server scrapes) and `/stats/summary`:
//! - scrape latency through the API server's node proxy: for the edge node through its
//!   egress selector, the streams front (the same build), the cloudhub holding the session
//!   and the tunnel to edgecore; for the kubelet through the same front, dialled directly;
//! - the agent's CPU time per scrape (edgecore's, kubelet's): its CPU time over the scrapes
//!   minus its idle rate over the same time, measured just before, divided by the scrapes;
//! - edgecore's resident memory before and after the scrapes.

mod report;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use verge_testkit::{KubeletNode, KubeletNodeConfig};

use super::scale::proc::cpu_seconds;
use crate::local;

/// Arguments of `cargo xtask bench metrics`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pod counts per node, in order (pods are added to reach each).
    #[arg(long, value_delimiter = ',', default_value = "20,100")]
    pub pods: Vec<usize>,
    /// Scrapes per node, endpoint and pod count (after 5 of warm-up).
    #[arg(long, default_value_t = 100)]
    pub scrapes: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const NODE: &str = "verge-bench-metrics";
const NAMESPACE: &str = "verge-bench-metrics";
/// How long the idle CPU rate is measured before each block of scrapes.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// The endpoints measured.
pub const ENDPOINTS: [&str; 2] = ["metrics/resource", "stats/summary"];

/// One block of scrapes of one endpoint of one node.
pub struct Block {
    /// Sorted latencies.
    pub latencies: Vec<Duration>,
    /// The agent's CPU seconds per scrape (idle rate subtracted).
    pub cpu_per_scrape: f64,
    /// Bytes of the last answer.
    pub bytes: usize,
}

/// What was measured at one pod count.
pub struct Round {
    /// Pods on each node.
    pub pods: usize,
    /// Per endpoint ([`ENDPOINTS`]): (edge node, kubelet node).
    pub blocks: Vec<(Block, Block)>,
    /// edgecore's settled RSS (KiB) before and after the scrapes of this round.
    pub edgecore_kib: (u64, u64),
}

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.pods.is_empty() || args.scrapes == 0 {
        bail!("--pods and --scrapes must not be empty or zero");
    }
    super::env::with_one_node(
        "bench-metrics",
        NODE,
        !args.debug,
        true,
        async |cp, verge| {
            let node = KubeletNodeConfig::from_env().up(cp).await?;
            let result = measure(cp, verge, &node, &args).await;
            node.stop().await?;
            report::report(&args, &result?)
        },
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    node: &KubeletNode,
    args: &Args,
) -> anyhow::Result<Vec<Round>> {
    let admin = cp.client().await?;
    local::create_namespace(&admin, NAMESPACE).await?;
    let image = verge_testkit::docker::TEST_IMAGE;
    tokio::task::block_in_place(|| node.import_image(image))?;
    let kubelet_pid = node
        .pids()
        .into_iter()
        .find_map(|(name, pid)| (name == "kubelet").then_some(pid))
        .context("no kubelet pid")?;
    let mut rounds = Vec::new();
    let mut made = 0;
    for (i, &pods) in args.pods.iter().enumerate() {
        eprintln!(
            "bench metrics: [{}/{}] {pods} pods on each node",
            i + 1,
            args.pods.len()
        );
        for n in made..pods {
            create_pod(&admin, &format!("e{n:03}"), NODE).await?;
            create_pod(&admin, &format!("k{n:03}"), node.name()).await?;
        }
        made = made.max(pods);
        wait_running(&admin, 2 * made).await?;
        let before = local::settled_rss(verge.edgecore_pid).await?;
        let mut blocks = Vec::new();
        for endpoint in ENDPOINTS {
            eprintln!(
                "bench metrics:   {} scrapes of {endpoint} each",
                args.scrapes
            );
            let edge = block(&admin, NODE, endpoint, verge.edgecore_pid, args.scrapes).await?;
            let kubelet = block(&admin, node.name(), endpoint, kubelet_pid, args.scrapes).await?;
            blocks.push((edge, kubelet));
        }
        let after = local::settled_rss(verge.edgecore_pid).await?;
        rounds.push(Round {
            pods,
            blocks,
            edgecore_kib: (before, after),
        });
    }
    Ok(rounds)
}

/// `scrapes` GETs of `/api/v1/nodes/<node>/proxy/<endpoint>` one after another (after 5 of
/// warm-up), with `agent`'s CPU time over them less its idle rate just before.
async fn block(
    admin: &kube::Client,
    node: &str,
    endpoint: &str,
    agent: u32,
    scrapes: usize,
) -> anyhow::Result<Block> {
    let path = format!("/api/v1/nodes/{node}/proxy/{endpoint}");
    let get = || async {
        let request = http::Request::get(&path).body(Vec::new())?;
        let text = admin
            .request_text(request)
            .await
            .with_context(|| format!("GET {path}"))?;
        anyhow::Ok(text.len())
    };
    for _ in 0..5 {
        get().await?;
    }
    let cpu = || cpu_seconds(agent).context("reading the agent's CPU time");
    let (idle0, t0) = (cpu()?, Instant::now());
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle_rate = (cpu()? - idle0) / t0.elapsed().as_secs_f64();
    let (busy0, t1) = (cpu()?, Instant::now());
    let mut latencies = Vec::with_capacity(scrapes);
    let mut bytes = 0;
    for _ in 0..scrapes {
        let started = Instant::now();
        bytes = get().await?;
        latencies.push(started.elapsed());
    }
    let busy = cpu()? - busy0 - idle_rate * t1.elapsed().as_secs_f64();
    latencies.sort();
    Ok(Block {
        latencies,
        cpu_per_scrape: busy.max(0.0) / scrapes as f64,
        bytes,
    })
}

/// Pod `name` on node `node`: busybox `sleep`, 1 s grace.
async fn create_pod(admin: &kube::Client, name: &str, node: &str) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": { "nodeName": node, "terminationGracePeriodSeconds": 1,
            "tolerations": [{ "operator": "Exists" }],
            "containers": [{ "name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
    }))?;
    api.create(&PostParams::default(), &pod).await?;
    Ok(())
}

/// Waits until `n` pods of the namespace are Running (3 s a pod at most, plus a minute).
async fn wait_running(admin: &kube::Client, n: usize) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60 + 3 * n as u64);
    loop {
        let running = api
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{running} of {n} pods Running in time");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
