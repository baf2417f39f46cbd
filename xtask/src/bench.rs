//! `cargo xtask bench <name>`: benchmarks that print figures and ratios against a baseline
//! measured in the same run (never pass/fail timings).
//!
//! Layout: [`pod_startup`] (pods from create to Running through the API, against raw
//! `docker run`; edgecore's resident memory), [`reconnect`] (N simulated edge nodes
//! resyncing by inventory against cloudhub and edgecontroller), [`scale`] (10,000 hollow edge
//! nodes on one cloudhub), [`fleet`] (growing fleets of hollow edges speaking the whole
//! protocol against the cloud as deployed: per-node costs, fail-over, the 100k projection),
//! [`devices`] (device twins
//! from the mapper to the DeviceStatus), [`deploy`] (the cloud side as pods on a kubelet
//! node: image sizes, apply → Available → a pod on a joined edge, leader fail-over),
//! [`tracing_overhead`] (pod start-up with tracing off vs on), [`streams`] (`kubectl logs`
//! through cloudhub against `docker logs`), [`apps`] (a third party's commands from the
//! Python example controller to an edge app and back), [`net`] (Services on the edge node
//! and through cloudhub against direct paths, programming and memory), [`edge_api`] (the edge
//! API's lists and watches on and off line against the API server directly, its memory),
//! [`metrics`] (the kubelet's resource endpoints on an edge node against the kit's kubelet),
//! [`record`] (the result tables
//! in `docs/benchmarks.md`), [`all`] (all of them, and the overview of their targets).

mod all;
mod apps;
mod deploy;
mod devices;
mod edge_api;
mod env;
mod fleet;
mod metrics;
mod net;
mod pod_startup;
mod reconnect;
mod record;
mod scale;
mod streams;
mod tracing_overhead;

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// N pods on one edge node: create -> Running (as the API shows it) vs raw
    /// `docker run`, p50/p99 and ratio; edgecore RSS with 0 and N pods.
    PodStartup(pod_startup::Args),
    /// Growing fleets of hollow edges speaking the whole protocol (registration, Leases,
    /// node and pod status) against three cloudhub replicas and two edgecontrollers: the
    /// largest that keeps every Node Ready, per-node CPU, memory and API writes, a replica
    /// killed and all restarted, and the projection to 100,000 nodes.
    Fleet(fleet::Args),
    /// N simulated edge nodes (101 objects each) reconnect at once to cloudhub +
    /// edgecontroller: time until all are resynced, object messages per node when nothing
    /// changed (goal 0), cloudhub's peak RSS.
    Reconnect(reconnect::Args),
    /// N hollow edge nodes (10,000 by default) on one cloudhub: connect and reconnect storms,
    /// cloudhub's memory and CPU with N idle sessions, idle bytes per node, and the latency of
    /// a pod to one node under that load.
    Scale(scale::Args),
    /// N devices × P properties reported every second by the virtual mapper on one edge
    /// node: lag from report to DeviceStatus (p50/p99) against a direct DeviceStatus apply,
    /// DeviceStatus writes per second through cloudhub.
    Devices(devices::Args),
    /// The cloud side as pods on the kit's kubelet node: image sizes, `kubectl apply -k
    /// deploy/cloud` → every Deployment Available (against pause-image Deployments of the
    /// same shape) → a pod on an edge joined through the Service; edgecontroller leader
    /// fail-over.
    Deploy(deploy::Args),
    /// N pods one at a time with tracing off (the baseline) and on at sampling 1.0 (OTLP to
    /// the kit's Jaeger), alternating in rounds: p50/p99 of create -> Running and the ratio.
    Tracing(tracing_overhead::Args),
    /// `kubectl logs` of a large container log through cloudhub against `docker logs`:
    /// MB/s, and the latency of a one-line request.
    Streams(streams::Args),
    /// Commands of a third-party group from the Python example controller to an edge app
    /// and its replies back: round-trip p50/p99 one at a time and messages/s with a window
    /// in flight, against the broker-only round trip.
    Apps(apps::Args),
    /// Edge networking: an edge pod's requests to a Service on the same node against the pod
    /// IP directly, and through cloudhub to a cloud endpoint against that endpoint directly
    /// (p50/p99, MB/s); programming 1,000 Services × 10 endpoints; edgecore's memory with
    /// them.
    Net(net::Args),
    /// The edge API: a list of N pods online through the link against the API server
    /// directly and offline from the node (kept answer, store); watch event latency online
    /// and of the node's own change offline; edgecore's idle memory with it off and on, and
    /// with 10,000 objects' answers kept.
    EdgeApi(edge_api::Args),
    /// The kubelet's resource endpoints on an edge node against the kit's kubelet: scrape
    /// latency through the node proxy, agent CPU per scrape, edgecore memory (issue 34).
    Metrics(metrics::Args),
    /// Every benchmark in turn with its defaults (each as its own process), then the
    /// overview of their targets at the top of `docs/benchmarks.md`.
    All(all::Args),
}

/// Runs one benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.bench {
        Bench::PodStartup(a) => pod_startup::run(a).await,
        Bench::Reconnect(a) => reconnect::run(a).await,
        Bench::Scale(a) => scale::run(a).await,
        Bench::Fleet(a) => fleet::run(a).await,
        Bench::Devices(a) => devices::run(a).await,
        Bench::Deploy(a) => deploy::run(a).await,
        Bench::Tracing(a) => tracing_overhead::run(a).await,
        Bench::Streams(a) => streams::run(a).await,
        Bench::Apps(a) => apps::run(a).await,
        Bench::Net(a) => net::run(a).await,
        Bench::EdgeApi(a) => edge_api::run(a).await,
        Bench::Metrics(a) => metrics::run(a).await,
        Bench::All(a) => all::run(&a),
    }
}

/// The `p`-th percentile (nearest rank, 0..=100) of `sorted` (ascending); zero when empty.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Fewest samples for which a p99 is reported (below it, the "p99" would be the maximum).
pub const MIN_SAMPLES_FOR_P99: usize = 20;

/// n, p50, p90, p99 and max of a sorted sample.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median (nearest rank).
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile; `None` with fewer than [`MIN_SAMPLES_FOR_P99`] samples.
    pub p99: Option<Duration>,
    /// Largest sample.
    pub max: Duration,
}

impl Summary {
    /// The summary of `sorted` (ascending).
    pub fn of(sorted: &[Duration]) -> Self {
        Self {
            n: sorted.len(),
            p50: percentile(sorted, 50),
            p90: percentile(sorted, 90),
            p99: (sorted.len() >= MIN_SAMPLES_FOR_P99).then(|| percentile(sorted, 99)),
            max: sorted.last().copied().unwrap_or_default(),
        }
    }
}
