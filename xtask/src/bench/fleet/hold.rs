//! One step's hold: every Node must stay Ready while probe pods go out, and what each
//! watched process spends meanwhile (CPU seconds, resident memory) and the API server writes.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio::sync::mpsc;

use super::cloud::Cloud;
use super::edge::{Event, Shared};
use super::report::{Costs, Step};
use super::tracker::{Tracker, ready_count};
use super::writes::{api_writes, per_node_minute};
use super::{Args, PROBE_EVERY, READY_SAMPLE, node_name};
use crate::bench::scale::proc::{cpu_seconds, pids_named};
use crate::local;

/// The processes whose CPU and memory the report gives: (label, pids).
pub(super) fn watched(cloud: &Cloud) -> Vec<(String, Vec<u32>)> {
    let mut out: Vec<(String, Vec<u32>)> = cloud
        .replicas
        .iter()
        .map(|r| (format!("cloudhub {}", r.name), vec![r.pid]))
        .collect();
    out.push(("edgecontroller (leader)".to_owned(), vec![cloud.leader()]));
    for name in [
        "kube-apiserver",
        "etcd",
        "kube-controller",
        "kube-scheduler",
    ] {
        out.push((
            name.replace("kube-controller", "kube-controller-manager"),
            pids_named(name),
        ));
    }
    out.push(("hollow edges (xtask)".to_owned(), vec![std::process::id()]));
    out
}

/// CPU seconds and resident KiB of each watched group now.
pub(super) fn sample(watched: &[(String, Vec<u32>)]) -> Vec<(f64, u64)> {
    watched
        .iter()
        .map(|(_, pids)| {
            let cpu = pids.iter().filter_map(|&p| cpu_seconds(p)).sum();
            let rss = pids
                .iter()
                .filter_map(|&p| local::status_kib(p, "VmRSS"))
                .sum();
            (cpu, rss)
        })
        .collect()
}

/// One hold: every Node must stay Ready for [`Args::hold`] while probe pods go out.
#[allow(clippy::too_many_arguments)]
pub(super) async fn hold(
    args: &Args,
    client: &kube::Client,
    nodes: &Api<Node>,
    pods: &Api<Pod>,
    shared: &Shared,
    events: &mut mpsc::UnboundedReceiver<Event>,
    tracker: &mut Tracker,
    watched: &[(String, Vec<u32>)],
    size: usize,
) -> anyhow::Result<Step> {
    let span = Duration::from_secs(args.hold);
    let (start, writes_before) = (sample(watched), api_writes(client).await?);
    let errors_before = shared.errors.load(Ordering::Relaxed);
    let began = Instant::now();
    let mut min_ready = size;
    let mut created: Vec<(String, Instant)> = Vec::new();
    let mut next_sample = began;
    let mut probe = 0usize;
    while began.elapsed() < span {
        if Instant::now() >= next_sample {
            min_ready = min_ready.min(ready_count(nodes).await?);
            next_sample += READY_SAMPLE;
        }
        let name = format!("probe-{size}-{probe}");
        // Spread over the fleet: a stride coprime with any size that is not a multiple of 7.
        let node = node_name((probe * 7919) % size);
        let pod: Pod = serde_json::from_value(crate::bench::scale::probe_pod(&name, &node))?;
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &pod).await?;
        created.push((name, t0));
        probe += 1;
        let until = tokio::time::Instant::now() + PROBE_EVERY;
        while let Ok(Some(event)) = tokio::time::timeout_at(until, events.recv()).await {
            tracker.take(event);
        }
    }
    let elapsed = began.elapsed();
    let (end, writes_after) = (sample(watched), api_writes(client).await?);
    min_ready = min_ready.min(ready_count(nodes).await?);
    // The last probes may still be on their way.
    let _ = tracker
        .wait(
            events,
            |t| created.iter().all(|(n, _)| t.probes.contains_key(n)),
            Duration::from_secs(30),
        )
        .await;
    let mut latencies: Vec<Duration> = created
        .iter()
        .filter_map(|(n, t0)| Some(tracker.probes.get(n)?.saturating_duration_since(*t0)))
        .collect();
    latencies.sort();
    let lost = created.len() - latencies.len();
    let _ = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let costs = Costs {
        size,
        cpu_per_node_hour: start
            .iter()
            .zip(&end)
            .map(|((a, _), (b, _))| (b - a) / elapsed.as_secs_f64() * 3600.0 / size as f64)
            .collect(),
        rss_kib: end.iter().map(|(_, rss)| *rss).collect(),
        writes: per_node_minute(&writes_before, &writes_after, size, elapsed),
    };
    Ok(Step {
        size,
        connected_in: Duration::ZERO,
        min_ready,
        probes: latencies.len(),
        probes_lost: lost,
        probe_p50: crate::bench::percentile(&latencies, 50),
        probe_p99: crate::bench::percentile(&latencies, 99),
        errors: shared.errors.load(Ordering::Relaxed) - errors_before,
        costs,
    })
}
