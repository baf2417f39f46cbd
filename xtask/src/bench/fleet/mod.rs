//! `cargo xtask bench fleet`: what a fleet of edge nodes costs the cloud, with hollow edges
//! that speak the whole protocol ([`edge`]) against the cloud as deployed ([`cloud`]: three
//! cloudhub replicas, two edgecontrollers with leader election) on a control plane whose
//! kube-controller-manager runs every controller with upstream's node-monitor timings.
//!
//! Steps of growing fleets ([`Args::steps`]): each adds hollow edges, waits until every Node
//! is Ready, then holds for [`Args::hold`] while a pod is created on a random node every few
//! seconds (the latency of a pod reaching its node under that load) and every Node must stay
//! Ready. The largest step that held gives the per-node costs: CPU seconds per node-hour and
//! resident memory per node of each process, and API server writes per node per minute. At
//! that size the writes are measured again with the node status reported at every
//! `nodeStatusUpdateFrequency` (10 s, what the kubelet did before Leases; edgecore's shipped
//! `nodeStatusReportFrequency` is 5 minutes), then a cloudhub replica is killed (time until
//! its nodes are resynced on the others) and every replica restarted (each edge makes a full
//! TLS handshake: time until all are resynced). The report projects the per-node costs to
//! 100,000 nodes ([`report`]).
//!
//! The parts: [`tracker`] (resyncs, probe arrivals, Ready Nodes), [`mod@hold`] (a step's hold and
//! what each process spends), [`writes`] (API server writes per node per minute) and
//! [`mod@failover`] (a replica killed, every replica restarted).

mod cloud;
mod edge;
mod failover;
mod hold;
mod report;
mod tracker;
mod writes;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use verge_testkit::{ControlPlane, ControlPlaneConfig};

use self::cloud::Cloud;
use self::edge::{Event, Hollow, Phase, Shared};
use self::failover::failover;
use self::hold::{hold, sample, watched};
use self::report::{Costs, Report, Step};
use self::tracker::{Tracker, wait_all_ready};
use self::writes::measure_writes;
use crate::local;

/// Arguments of `cargo xtask bench fleet`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fleet sizes held in turn, each adding hollow edges to the running fleet; the run stops
    /// at the first that does not hold.
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000,4000")]
    pub steps: Vec<usize>,
    /// How long each size must keep every Node Ready, seconds.
    #[arg(long, default_value_t = 600)]
    pub hold: u64,
    /// How long each node-status write measurement lasts, seconds.
    #[arg(long, default_value_t = 180)]
    pub writes_window: u64,
    /// Gives up after this many seconds.
    #[arg(long, default_value_t = 3 * 3600)]
    pub timeout: u64,
}

/// The namespace of the probe pods.
const NAMESPACE: &str = "verge-bench-fleet";
/// kubelet's `nodeStatusUpdateFrequency`: how often edgecore looks at its node status.
const STATUS_TICK: Duration = Duration::from_secs(10);
/// edgecore's shipped `nodeStatusReportFrequency`.
const STATUS_REPORT: Duration = Duration::from_secs(300);
/// Longest wait for a step's new nodes to connect and turn Ready.
const READY_LIMIT: Duration = Duration::from_secs(600);
/// How often the Nodes are listed during a hold.
const READY_SAMPLE: Duration = Duration::from_secs(30);
/// A probe pod every this often during a hold.
const PROBE_EVERY: Duration = Duration::from_secs(3);

/// The name of hollow node `i`.
fn node_name(i: usize) -> String {
    format!("fleet-{i:05}")
}

/// Runs the benchmark. The hollow edges run in this process, so a debug xtask hands over to
/// the release build of itself, as `bench scale` does.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(code) = super::env::in_release("fleet")? {
        return Ok(code);
    }
    let max = args.steps.iter().copied().max().unwrap_or(0);
    if max == 0 {
        bail!("--steps needs at least one fleet size");
    }
    let fd_limit = verge_runtime::limits::raise_open_files()
        .context("raising the open-file limit")?
        .1
        .unwrap_or(u64::MAX);
    if fd_limit < max as u64 + 512 {
        bail!("open-file limit {fd_limit} is too low for {max} connections (ulimit -Hn)");
    }
    let run_dir = verge_testkit::paths::run_dir().join("bench-fleet");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        // Upstream's node monitoring, every controller on (node-ipam included, so every
        // Node needs a pod range of the cluster CIDR).
        node_monitor_grace_period: Duration::from_secs(50),
        node_monitor_period: Duration::from_secs(5),
        node_cidr_mask_size: node_cidr_mask(max)?,
        ..ControlPlaneConfig::from_env()
    };
    super::env::on_fresh_control_plane(
        "fleet",
        &config,
        &run_dir,
        Duration::from_secs(args.timeout),
        true,
        async |cp, bin_dir| measure(cp, &run_dir, bin_dir, &args).await,
    )
    .await
}

/// The largest fleet the cluster CIDR (a /16) gives a pod range each: 16,384 `/30`s.
const MAX_NODES: usize = 1 << (MAX_NODE_MASK - 16);
/// The narrowest pod range per Node: a `/30` (a gateway and one pod address).
const MAX_NODE_MASK: u8 = 30;

/// kube-controller-manager's `--node-cidr-mask-size` for a fleet of `max` Nodes: the widest
/// pod range per Node (at most the kit's `/24`) of which the `/16` cluster CIDR holds `max`,
/// so that node-ipam gives every hollow Node a `spec.podCIDR` as on a real cluster.
///
/// # Errors
/// `max` is above [`MAX_NODES`].
fn node_cidr_mask(max: usize) -> anyhow::Result<u8> {
    if max > MAX_NODES {
        bail!(
            "--steps goes to {max} nodes; the /16 cluster CIDR holds at most {MAX_NODES} Nodes (a /30 each)"
        );
    }
    let bits = u8::try_from(max.next_power_of_two().trailing_zeros())?;
    Ok((16 + bits).clamp(24, MAX_NODE_MASK))
}

async fn measure(
    cp: &ControlPlane,
    run_dir: &Path,
    bin_dir: &Path,
    args: &Args,
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let mut cloud = Cloud::start(run_dir, bin_dir, cp).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let watched = watched(&cloud);
    let idle = sample(&watched);
    let max = args.steps.iter().copied().max().unwrap_or(0);

    eprintln!("bench fleet: issuing {max} node certificates from the Verge CA");
    let ca = verge_testkit::trust::verge_ca(&client).await?;
    let credentials: Vec<rustls::ClientConfig> = (0..max)
        .map(|i| verge_testkit::trust::node_client_config(&ca, &node_name(i)).map(|c| (*c).clone()))
        .collect::<anyhow::Result<_>>()?;
    let endpoints = cloud
        .replicas
        .iter()
        .map(|r| {
            Ok(verge_proto::transport::endpoint(&r.edge_url)?
                .connect_timeout(Duration::from_secs(30))
                .tcp_nodelay(true))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        endpoints,
        bytes: Arc::default(),
        status_tick: STATUS_TICK,
        status_period_ms: AtomicU64::new(STATUS_REPORT.as_millis() as u64),
        resume_tls: std::sync::atomic::AtomicBool::new(true),
        reports: AtomicU64::new(0),
        status_reports: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        reconnects: AtomicU64::new(0),
        events: events_tx,
        first_error: crate::bench::scale::wire::FirstError::default(),
    });
    let (phase_tx, phase_rx) = watch::channel(Phase::Connected(1));
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut tracker = Tracker::default();
    let mut steps: Vec<Step> = Vec::new();
    let mut held: Option<(usize, Costs)> = None;
    let mut not_held: Option<(usize, String)> = None;
    let mut hollows: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut running = 0;
    for &size in &args.steps {
        if size <= running {
            continue;
        }
        eprintln!("bench fleet: growing to {size} hollow edges");
        let grown = Instant::now();
        crate::bench::reconnect::objects::create_all(&nodes, (running..size).map(node_object))
            .await?;
        for (i, tls) in credentials.iter().enumerate().take(size).skip(running) {
            let hollow = Hollow::new(i, node_name(i), tls, cloud.replicas.len());
            hollows.push(tokio::spawn(hollow.run(shared.clone(), phase_rx.clone())));
        }
        running = size;
        let ready_after = match grow(&nodes, &mut events, &mut tracker, size).await {
            Ok(ready) => ready,
            Err(e) => {
                eprintln!("  {size} did not come up: {e:#}");
                not_held = Some((size, format!("{e:#}")));
                break;
            }
        };
        let connected_in = grown.elapsed();
        eprintln!("  {size} connected and Ready after {connected_in:.1?} ({ready_after} Ready)");
        let step = hold(
            args,
            &client,
            &nodes,
            &pods,
            &shared,
            &mut events,
            &mut tracker,
            &watched,
            size,
        )
        .await?;
        let ok = step.min_ready == size && step.errors == 0;
        eprintln!(
            "  held {:?}: min Ready {}/{size}, pod to node p99 {:.0} ms, errors {}",
            Duration::from_secs(args.hold),
            step.min_ready,
            step.probe_p99.as_secs_f64() * 1000.0,
            step.errors
        );
        if ok {
            held = Some((size, step.costs.clone()));
        }
        steps.push(Step {
            connected_in,
            ..step
        });
        if !ok {
            not_held = Some((
                size,
                format!(
                    "{} of {size} Nodes Ready at the fewest, {} errors",
                    step.min_ready, step.errors
                ),
            ));
            break;
        }
    }
    let Some((size, _)) = held.clone() else {
        let first = shared.first_error.get();
        bail!("no fleet size held every Node Ready ({not_held:?}); first error: {first:?}");
    };
    // Only the fleet that held goes on: the nodes of the step that did not leave.
    if running > size {
        eprintln!("bench fleet: back to the {size} nodes that held");
        for hollow in hollows.drain(size..) {
            hollow.abort();
        }
        for i in size..running {
            let _ = nodes.delete(&node_name(i), &DeleteParams::default()).await;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let writes = measure_writes(args, &client, &shared, size).await?;
    let failover = failover(&mut cloud, &shared, &mut events, &mut tracker, size).await?;
    let _ = phase_tx.send(Phase::Stop);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    Report {
        steps,
        not_held,
        held,
        idle: watched.iter().map(|(l, _)| l.clone()).zip(idle).collect(),
        writes,
        failover,
        hold: Duration::from_secs(args.hold),
    }
    .record()
}

/// Waits until the `size` nodes resynced and their Nodes are Ready; returns how many are.
async fn grow(
    nodes: &Api<Node>,
    events: &mut mpsc::UnboundedReceiver<Event>,
    tracker: &mut Tracker,
    size: usize,
) -> anyhow::Result<usize> {
    tracker
        .wait(
            events,
            |t| (0..size).all(|i| t.last.contains_key(&i)),
            READY_LIMIT,
        )
        .await
        .with_context(|| format!("{size} nodes did not resync"))?;
    wait_all_ready(nodes, size, READY_LIMIT).await
}

/// Node `i` as join creates it: an edge node (the label cloudhub and edgecontroller check).
fn node_object(i: usize) -> serde_json::Value {
    json!({"metadata": {"name": node_name(i), "labels": {
        "node-role.kubernetes.io/edge": "", "verge.io/bench": "fleet"}}})
}

#[cfg(test)]
mod tests {
    use super::node_cidr_mask;

    #[test]
    fn the_pod_range_per_node_is_the_widest_that_fits_the_fleet() {
        assert_eq!(node_cidr_mask(100).expect("100"), 24);
        assert_eq!(node_cidr_mask(256).expect("256"), 24);
        assert_eq!(node_cidr_mask(257).expect("257"), 25);
        assert_eq!(node_cidr_mask(6000).expect("6000"), 29);
        assert_eq!(node_cidr_mask(8192).expect("8192"), 29);
        assert_eq!(node_cidr_mask(10_000).expect("10000"), 30);
        assert_eq!(node_cidr_mask(16_384).expect("16384"), 30);
        assert!(node_cidr_mask(16_385).is_err());
    }
}
