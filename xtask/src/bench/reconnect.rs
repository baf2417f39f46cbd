//! `cargo xtask bench reconnect`: N simulated edge nodes (tonic clients in this process, each
//! holding `OBJECTS_PER_NODE` objects) reconnect to a real cloudhub + edgecontroller at once;
//! prints the time until every node is resynced, the object messages sent per node when
//! nothing changed (goal: 0, only the inventory goes up) and cloudhub's peak resident memory.
//!
//! Two phases, both on the real control plane:
//! 1. cold: every node connects with an empty inventory and receives its objects;
//! 2. measured: every stream is dropped, then all N reconnect at once with their full
//!    inventories. A node is resynced when it received the `resync` end marker
//!    (docs/protocol.md); without markers (an edgecontroller that does not send them) the
//!    phase ends when every node holds its objects and no object message arrived for 2 s.
//!
//! Layout: [`objects`] (the API objects), [`edge`] (one simulated edge node), [`phase`](mod@phase) (all
//! nodes connect at once), [`rss`] (peak memory), [`report`] (the Markdown table).

pub(super) mod edge;
pub(super) mod objects;
mod phase;
mod report;
mod rss;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use verge_testkit::{ControlPlane, ControlPlaneConfig, daemon};

use self::edge::SimEdge;
use self::objects::OBJECTS_PER_NODE;
use self::phase::phase;
use self::report::Report;
use self::rss::RssSampler;
use super::percentile;
use crate::local::{free_port, status_kib, wait_for_port, write};

/// Arguments of `cargo xtask bench reconnect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of simulated edge nodes.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Overall time limit, in seconds (setup included).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Skip the cold phase: the nodes start with inventories built from the API objects, so
    /// cloudhub's peak memory is that of the reconnect alone.
    #[arg(long)]
    pub warm_only: bool,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

/// How long the benchmark Nodes must stay unchanged before the phases start (they are made
/// Ready and get Leases, see [`objects::heartbeat`]).
const SETTLE_QUIET: Duration = Duration::from_secs(10);
/// The longest wait for that.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.nodes.max(1);
    let run_dir = verge_testkit::paths::run_dir().join("bench-reconnect");
    // The kit's 10 s node-monitor grace period (fast NotReady for tests) is as short as the
    // simulated nodes' 10 s Lease renewal; the bench uses the Kubernetes default of 40 s.
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        node_monitor_grace_period: Duration::from_secs(40),
        // A thousand simulated nodes would exhaust the /16 of /24 pod CIDRs.
        disabled_controllers: vec!["node-ipam-controller".to_owned()],
        ..ControlPlaneConfig::from_env()
    };
    super::env::on_fresh_control_plane(
        "reconnect",
        &config,
        &run_dir,
        Duration::from_secs(args.timeout),
        !args.debug,
        async |cp, bin_dir| measure(cp, &run_dir, bin_dir, n, &args).await,
    )
    .await
}

/// The cloud processes under test.
pub(super) struct Services {
    pub(super) cloudhub: u32,
    pub(super) edgecontroller: u32,
    pub(super) edge_url: String,
}

async fn measure(
    cp: &ControlPlane,
    run_dir: &Path,
    bin_dir: &Path,
    n: usize,
    args: &Args,
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    eprintln!(
        "creating {n} edge nodes, {n} pods and {} configmaps",
        objects::CONFIGMAPS
    );
    let setup = objects::create(&client, n).await?;
    let heartbeat = objects::heartbeat(&client, n).await?;
    eprintln!(
        "  setup took {setup:.1?}; waiting until kube-controller-manager stops editing the nodes"
    );
    let (settled, quiet) = objects::settle_nodes(&client, SETTLE_QUIET, SETTLE_LIMIT).await?;
    if quiet {
        eprintln!("  nodes unchanged for {SETTLE_QUIET:?} after {settled:.1?}");
    } else {
        eprintln!("  warning: nodes still changing after {settled:.1?}; measuring anyway");
    }

    let services = start_services(run_dir, bin_dir, cp).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = (
        status_kib(services.cloudhub, "VmRSS").unwrap_or(0),
        status_kib(services.edgecontroller, "VmRSS").unwrap_or(0),
    );
    let sampler = RssSampler::start(&services);

    let endpoint = verge_proto::transport::endpoint(&services.edge_url)?
        .connect_timeout(Duration::from_secs(20))
        .tcp_nodelay(true);
    eprintln!("issuing {n} node certificates from the Verge CA");
    let mut edges = node_credentials(&client, n)
        .await?
        .into_iter()
        .enumerate()
        .map(|(i, tls)| SimEdge::new(i, objects::node_name(i), tls))
        .collect::<Vec<_>>();

    let (cold, markers) = if args.warm_only {
        objects::fill_inventories(&client, &mut edges).await?;
        (None, None)
    } else {
        eprintln!("phase 1 (cold): {n} nodes connect with empty inventories");
        let cold = phase(&endpoint, edges, None).await?;
        edges = cold.edges.clone();
        let markers = cold.markers == n;
        eprintln!(
            "  all {n} nodes hold {OBJECTS_PER_NODE} objects after {:.2?} ({})",
            cold.resynced_after,
            if markers {
                "resync markers"
            } else {
                "no resync markers: expected counts + 2 s quiet"
            }
        );
        (Some(cold), Some(markers))
    };
    let cold_rss = sampler.take();

    // Every stream was dropped when phase 1 stopped; let cloudhub and edgecontroller see the
    // disconnects before everyone comes back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!("phase 2: {n} nodes reconnect at once with full inventories");
    let warm = phase(&endpoint, edges, markers).await?;
    let markers = warm.markers == n;
    let warm_rss = sampler.take();
    let hwm = (
        status_kib(services.cloudhub, "VmHWM").unwrap_or(0),
        status_kib(services.edgecontroller, "VmHWM").unwrap_or(0),
    );
    sampler.stop();
    heartbeat.abort();

    let table = Report {
        n,
        setup,
        settled,
        quiet,
        cold: cold.as_ref(),
        warm: &warm,
        markers,
        idle,
        cold_rss,
        warm_rss,
        hwm,
    }
    .render();
    println!("{table}");
    let held_wrong = warm
        .stats
        .iter()
        .filter(|s| s.held_at_end != OBJECTS_PER_NODE)
        .count();
    if held_wrong > 0 {
        bail!("{held_wrong} nodes do not hold {OBJECTS_PER_NODE} objects after phase 2");
    }
    super::record::write(
        "reconnect",
        "reconnect: N edge nodes resync by inventory at once",
        &table,
    )
}

/// Starts cloudhub and edgecontroller (no edgecore) detached from `bin_dir` with their
/// shipped defaults, and waits until edgecontroller attached and listed its caches.
pub(super) async fn start_services(
    dir: &Path,
    bin_dir: &Path,
    cp: &ControlPlane,
) -> anyhow::Result<Services> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let edge_port = free_port()?;
    let ctrl_port = free_port()?;
    // Shipped defaults: only the listen addresses, the cloudhub address and the run's own
    // leader Lease are set.
    let join_port = free_port()?;
    let cloudhub_cfg = write(
        dir,
        "cloudhub.yaml",
        &format!(
            "edgeAddr: 127.0.0.1:{edge_port}\ncontrollerAddr: 127.0.0.1:{ctrl_port}\n\
             joinAddr: 127.0.0.1:{join_port}\nhealthAddr: 127.0.0.1:0\n"
        ),
    )?;
    let ctrl_cfg = crate::local::controller_config(dir, "edgecontroller", ctrl_port)?;
    verge_testkit::trust::ensure_controller_accounts(&cp.client().await?).await?;
    let kubeconfig = cp.kubeconfig().display().to_string();
    let mut pids = Vec::new();
    let mut started = Vec::new();
    for (name, argv) in [
        (
            "cloudhub",
            vec![
                "--config".to_owned(),
                cloudhub_cfg,
                "--kubeconfig".to_owned(),
                kubeconfig.clone(),
            ],
        ),
        (
            "edgecontroller",
            vec![
                "--config".to_owned(),
                ctrl_cfg,
                "--kubeconfig".to_owned(),
                kubeconfig.clone(),
            ],
        ),
    ] {
        let log = dir.join("logs").join(format!("{name}.log"));
        let _ = std::fs::remove_file(&log);
        let pid = daemon::spawn_detached(&bin_dir.join(name), &argv, &[], &log)?;
        eprintln!("  {name} pid {pid}, log {}", log.display());
        pids.push(format!("{name} {pid}"));
        std::fs::write(dir.join("pids"), pids.join("\n") + "\n")?;
        started.push((pid, log));
        if name == "cloudhub" {
            wait_for_port(edge_port, Duration::from_secs(20)).await?;
        }
    }
    let (ctrl_pid, ctrl_log) = &started[1];
    wait_log(
        *ctrl_pid,
        ctrl_log,
        &["attached to cloudhub", "caches synced"],
        Duration::from_secs(120),
    )
    .await?;
    Ok(Services {
        cloudhub: started[0].0,
        edgecontroller: *ctrl_pid,
        edge_url: format!("https://127.0.0.1:{edge_port}"),
    })
}

/// Waits until `log` contains every one of `needles`, failing when `pid` exits.
pub(super) async fn wait_log(
    pid: u32,
    log: &Path,
    needles: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if needles.iter().all(|n| text.contains(n)) {
            return Ok(());
        }
        if !daemon::is_alive(pid, None) {
            bail!(
                "pid {pid} exited ({}); log tail:\n{}",
                daemon::describe_exit(pid),
                verge_testkit::process::log_tail(log, 30)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{} never logged {needles:?} within {timeout:?}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A mutual-TLS client configuration per simulated node `0..n`, with a node certificate
/// issued directly from the Verge CA that cloudhub keeps in the cluster (what a join would
/// give each node, without 1,000 CSR objects).
pub(super) async fn node_credentials(
    client: &kube::Client,
    n: usize,
) -> anyhow::Result<Vec<std::sync::Arc<rustls::ClientConfig>>> {
    let ca = verge_testkit::trust::verge_ca(client).await?;
    (0..n)
        .map(|i| verge_testkit::trust::node_client_config(&ca, &objects::node_name(i)))
        .collect()
}
