//! The `metrics` section of `docs/benchmarks.md`.

use std::time::Duration;

use super::super::Summary;
use super::super::record::{self, Target};
use super::{Args, ENDPOINTS, Round};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// An agent's CPU seconds per minute when metrics-server scrapes it every 15 s: its idle
/// rate over the minute and four scrapes.
fn per_minute(block: &super::Block) -> f64 {
    block.idle_cpu_per_s * 60.0 + 4.0 * block.cpu_per_scrape
}

/// Writes the section and prints it.
pub fn report(args: &Args, rounds: &[Round]) -> anyhow::Result<()> {
    let mut rows = String::from(
        "| pods | endpoint | node | p50 | p99 | max | agent CPU per scrape | agent idle CPU | answer |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let mut ratios = Vec::new();
    for round in rounds {
        for (endpoint, (edge, kubelet)) in ENDPOINTS.iter().zip(&round.blocks) {
            for (who, block) in [("edge (edgecore)", edge), ("kubelet", kubelet)] {
                let s = Summary::of(&block.latencies);
                rows.push_str(&format!(
                    "| {} | `/{endpoint}` | {who} | {:.2} ms | {} | {:.2} ms | {:.2} ms | {:.2} ms/s | {:.1} KiB |\n",
                    round.pods,
                    ms(s.p50),
                    s.p99
                        .map_or_else(|| "–".to_owned(), |d| format!("{:.2} ms", ms(d))),
                    ms(s.max),
                    block.cpu_per_scrape * 1000.0,
                    block.idle_cpu_per_s * 1000.0,
                    block.bytes as f64 / 1024.0,
                ));
            }
            let (e, k) = (
                Summary::of(&edge.latencies),
                Summary::of(&kubelet.latencies),
            );
            ratios.push((
                round.pods,
                *endpoint,
                e.p50.as_secs_f64() / k.p50.as_secs_f64(),
            ));
        }
    }
    let mut memory =
        String::from("| pods | edgecore RSS before | after the scrapes |\n|---|---|---|\n");
    for round in rounds {
        memory.push_str(&format!(
            "| {} | {:.1} MiB | {:.1} MiB |\n",
            round.pods,
            mib(round.edgecore_kib.0),
            mib(round.edgecore_kib.1)
        ));
    }
    let largest = rounds.last();
    let targets: Vec<Target> = largest
        .map(|round| {
            let (edge, kubelet) = &round.blocks[0];
            let ratio = Summary::of(&edge.latencies).p50.as_secs_f64()
                / Summary::of(&kubelet.latencies).p50.as_secs_f64();
            vec![
                Target {
                    goal: format!(
                        "`/metrics/resource` of {} pods through cloudhub ≤ 2× the kubelet's p50",
                        round.pods
                    ),
                    figure: format!("{ratio:.2}×"),
                    anchor: format!(
                        "kubelet p50 {:.2} ms (same run)",
                        ms(Summary::of(&kubelet.latencies).p50)
                    ),
                    met: ratio <= 2.0,
                },
                Target {
                    goal: format!(
                        "edgecore CPU per minute with {} pods scraped every 15 s (idle + 4 scrapes) ≤ the kubelet's",
                        round.pods
                    ),
                    figure: format!("{:.0} ms", per_minute(edge) * 1000.0),
                    anchor: format!("kubelet {:.0} ms (same run)", per_minute(kubelet) * 1000.0),
                    met: per_minute(edge) <= per_minute(kubelet),
                },
                Target {
                    goal: format!(
                        "edgecore CPU per `/metrics/resource` scrape of {} pods ≤ the kubelet's",
                        round.pods
                    ),
                    figure: format!("{:.2} ms", edge.cpu_per_scrape * 1000.0),
                    anchor: format!(
                        "kubelet {:.2} ms (same run)",
                        kubelet.cpu_per_scrape * 1000.0
                    ),
                    met: edge.cpu_per_scrape <= kubelet.cpu_per_scrape,
                },
            ]
        })
        .unwrap_or_default();
    let ratio_text: Vec<String> = ratios
        .iter()
        .map(|(pods, endpoint, r)| format!("{pods} pods `/{endpoint}` {r:.2}×"))
        .collect();
    let body = format!(
        "One local edge node ({} build) and the kit's kubelet node (kubelet and containerd \
         of the pinned release) on one control plane, all on this machine, so no link \
         latency is in the figures; each node runs the same pods (busybox `sleep`). Each \
         scrape is what metrics-server does: a GET on one kept-alive HTTPS connection opened by \
         a `CONNECT` to the kit's streams front (a cloudhub of the same build) with \
         metrics-server's client certificate, to the node's `Hostname` address: for the edge \
         node on to the cloudhub holding its session and over the session to edgecore, for \
         the kubelet dialled directly. {} scrapes per node, endpoint and pod count, one at a \
         time, after 5 of warm-up. Agent CPU per scrape: the agent's CPU \
         time (`/proc/<pid>/stat`, 10 ms ticks) over the scrapes less its idle rate over \
         10 s just before, divided by the scrapes; the kubelet's cAdvisor also works between \
         scrapes (its housekeeping), which the idle rate takes out and the idle column shows \
         (the agent's whole CPU over those 10 s, per second: for edgecore everything else it \
         does too, for the kubelet also its pod and node work). edgecore reads each \
         container's cgroup at each scrape and does nothing for metrics between scrapes. Edge-to-kubelet \
         p50 ratios: {}.\n\n{}\n{rows}\n{memory}",
        if args.debug { "debug" } else { "release" },
        args.scrapes,
        ratio_text.join(", "),
        record::targets_table(&targets),
    );
    println!("{body}");
    record::write(
        "metrics",
        "metrics: the kubelet's resource endpoints on an edge node",
        &body,
    )
}
