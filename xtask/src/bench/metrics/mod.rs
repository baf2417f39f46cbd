//! `cargo xtask bench metrics`: the kubelet's resource endpoints on an edge node (issue 34).
//! One local edge node (the release build of cloudhub, edgecontroller and edgecore) and the
//! kit's kubelet node (kubelet and containerd of the pinned release) on one control plane,
//! each with the same N pods (busybox `sleep`; N = 20, then 100). For each node and each of
//! `/metrics/resource` (what metrics-server scrapes) and `/stats/summary`:
//! - scrape latency as metrics-server scrapes ([`scrape`]): an HTTPS `CONNECT` to the
//!   kit's streams front (a cloudhub of the same build) with metrics-server's client
//!   certificate, then TLS to the node's `Hostname` address and GETs on that kept-alive
//!   connection; for the edge node the front goes on to the cloudhub holding the session and
//!   the tunnel to edgecore, for the kubelet it dials the kubelet directly (the API server's
//!   node proxy cannot be used for the kit's kubelet: its `Hostname` does not resolve);
//! - the agent's CPU time per scrape (edgecore's, kubelet's): its CPU time over the scrapes
//!   minus its idle rate over the same time, measured just before, divided by the scrapes;
//! - edgecore's resident memory before and after the scrapes.

mod report;
mod scrape;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use verge_testkit::{KubeletNode, KubeletNodeConfig};

use super::scale::proc::cpu_seconds;
use crate::local;
use scrape::Scraper;

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
    /// The agent's idle CPU seconds per second just before (the kubelet's includes its
    /// cAdvisor housekeeping).
    pub idle_cpu_per_s: f64,
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
    // metrics-server's user may read the kubelet's metrics and stats (edgecore accepts its
    // certificate by name).
    let rbac = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "verge-bench-metrics"},
         "rules": [{"apiGroups": [""], "resources": ["nodes/metrics", "nodes/stats"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "verge-bench-metrics"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "verge-bench-metrics"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": verge_testkit::metrics_server::CLIENT_NAME}]}]});
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), rbac.to_string())?;
    let out = cp
        .kubectl_command()
        .args(["apply", "-f"])
        .arg(file.path())
        .output()?;
    if !out.status.success() {
        bail!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }
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
        let mut edge = Scraper::connect(cp, &hostname(&admin, NODE).await?, 10250).await?;
        let port = node.kubelet_port();
        let mut kubelet = Scraper::connect(cp, &hostname(&admin, node.name()).await?, port).await?;
        for endpoint in ENDPOINTS {
            eprintln!(
                "bench metrics:   {} scrapes of {endpoint} each",
                args.scrapes
            );
            let e = block(&mut edge, endpoint, verge.edgecore_pid, args.scrapes).await?;
            let k = block(&mut kubelet, endpoint, kubelet_pid, args.scrapes).await?;
            blocks.push((e, k));
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

/// Node `node`'s `Hostname` address (for an edge its stream address).
async fn hostname(admin: &kube::Client, node: &str) -> anyhow::Result<String> {
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone())
        .get(node)
        .await?;
    node.status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .find(|a| a.type_ == "Hostname")
        .map(|a| a.address)
        .context("the node has no Hostname address")
}

/// `scrapes` GETs of `/<endpoint>` on `scraper` one after another (after 5 of warm-up),
/// with `agent`'s CPU time over them less its idle rate just before.
async fn block(
    scraper: &mut Scraper,
    endpoint: &str,
    agent: u32,
    scrapes: usize,
) -> anyhow::Result<Block> {
    let path = format!("/{endpoint}");
    for _ in 0..5 {
        scraper.get(&path).await?;
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
        bytes = scraper.get(&path).await?;
        latencies.push(started.elapsed());
    }
    let busy = cpu()? - busy0 - idle_rate * t1.elapsed().as_secs_f64();
    latencies.sort();
    Ok(Block {
        latencies,
        cpu_per_scrape: busy.max(0.0) / scrapes as f64,
        idle_cpu_per_s: idle_rate,
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
