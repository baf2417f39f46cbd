//! `cargo xtask bench tracing`: what tracing costs a pod start. The same N pods, one at a
//! time, from create to `phase: Running` seen by an API watch (as `bench pod-startup`
//! measures them), on a fresh Verge with tracing off (the baseline, measured in the same
//! run) and on a fresh Verge exporting every span (sampling 1.0) over OTLP to the kit's
//! Jaeger; the modes alternate in rounds so a drift of the machine hits both alike. Prints
//! and records p50/p90/p99/max of each and the ratios, and how many spans Jaeger holds for
//! the traced pods.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use verge_testkit::jaeger::{Jaeger, TraceQuery};

use crate::local;

/// Arguments of `cargo xtask bench tracing`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods per mode and round, one at a time.
    #[arg(long, default_value_t = 10)]
    pub pods: usize,
    /// Rounds; each runs both modes (off first in odd rounds, on first in even ones).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const NAMESPACE: &str = "verge-bench-tracing";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (n, rounds) = (args.pods.max(1), args.rounds.max(1));
    let env = super::env::TracedEnv::up("bench-tracing", !args.debug).await?;
    let run_dir = env.run_dir.clone();
    let result = measure(&env, n, rounds, !args.debug).await;
    env.down(&[&run_dir]).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(
    env: &super::env::TracedEnv,
    n: usize,
    rounds: usize,
    release: bool,
) -> anyhow::Result<()> {
    let (cp, jaeger) = (&env.cp, &env.jaeger);
    let (run_dir, bin_dir) = (env.run_dir.as_path(), env.bin_dir.as_path());
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let endpoint = jaeger.otlp_grpc_endpoint();
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let mut traced = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for tracing in order {
            let mode = if tracing { "on" } else { "off" };
            let node = format!("verge-bench-tracing-{mode}-{round}");
            eprintln!(
                "bench: round {}/{rounds}, tracing {mode}: {n} pods on {node}",
                round + 1
            );
            let dir = run_dir.join(&node);
            let otlp = tracing.then_some(endpoint.as_str());
            let verge = local::start(&dir, bin_dir, cp, &node, otlp).await?;
            verge.wait_ready(cp, Duration::from_secs(60)).await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let times = one_at_a_time(&pods, &node, n).await;
            local::stop_processes(&dir);
            local::remove_containers(&dir);
            let (names, times) = times?;
            if tracing {
                on.extend(times);
                traced.extend(names);
            } else {
                off.extend(times);
            }
        }
    }
    off.sort();
    on.sort();
    let spans = spans_of(jaeger, &traced).await?;

    let (a, b) = (super::Summary::of(&off), super::Summary::of(&on));
    let ratio = |x: Duration, y: Duration| format!("{:.2}×", y.as_secs_f64() / x.as_secs_f64());
    let p99 = match (a.p99, b.p99) {
        (Some(x), Some(y)) => ratio(x, y),
        _ => "–".to_owned(),
    };
    let table = format!(
        "| tracing | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n\
         | off (baseline) | {} |\n| on, sampling 1.0, OTLP to Jaeger | {} |\n\
         | ratio on / off | | {} | {} | {p99} | {} |\n",
        super::record::duration_cells(&a),
        super::record::duration_cells(&b),
        ratio(a.p50, b.p50),
        ratio(a.p90, b.p90),
        ratio(a.max, b.max),
    );
    let per_pod = spans as f64 / traced.len().max(1) as f64;
    let spans_line = format!(
        "Jaeger holds {spans} spans for the {} traced pods ({per_pod:.1} per pod start).",
        traced.len()
    );
    println!("tracing overhead on pod start-up\n{table}\n{spans_line}");
    let body = format!(
        "{n} pods one at a time per mode and round, {rounds} rounds alternating the order, each \
         mode on a freshly started Verge (cloudhub, edgecontroller, devicecontroller, edgecore; \
         {} build) with its own edge node; timed from the create call to `phase: Running` seen \
         by an API watch. Baseline: tracing off (no OpenTelemetry layer installed). On: every \
         binary exports every span (`samplingRatio: 1.0`) over OTLP/gRPC to the kit's Jaeger \
         all-in-one on the same machine.\n\n{table}\n{spans_line}\n",
        if release { "release" } else { "debug" }
    );
    super::record::write(
        "tracing",
        "tracing: pod start-up with tracing off vs on (sampling 1.0)",
        &body,
    )?;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(pods.into_client())
        .delete(NAMESPACE, &DeleteParams::default())
        .await;
    Ok(())
}

/// Creates `n` pods on `node` one after another, each waited for until Running, then
/// deletes them; returns their names and create → Running times.
async fn one_at_a_time(
    pods: &Api<Pod>,
    node: &str,
    n: usize,
) -> anyhow::Result<(Vec<String>, Vec<Duration>)> {
    let started =
        super::pod_startup::one_at_a_time(pods, node, node, n, super::pod_startup::Shape::One)
            .await?;
    for pod in &started {
        let _ = pods.delete(&pod.name, &DeleteParams::default()).await;
    }
    Ok(started.into_iter().map(|p| (p.name, p.took)).unzip())
}

/// Spans Jaeger holds in the traces of the pods `names` (found by their `k8s.pod.name` tag).
async fn spans_of(jaeger: &Jaeger, names: &[String]) -> anyhow::Result<usize> {
    // The exporters batch: give the last spans a moment to arrive.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut spans = 0;
    for name in names {
        let query = TraceQuery::service("edgecontroller")
            .tag("k8s.pod.name", name)
            .lookback(Duration::from_secs(3600));
        let traces = jaeger
            .find_traces(&query)
            .await
            .with_context(|| format!("querying Jaeger for pod {name}"))?;
        spans += traces.iter().map(|t| t.spans.len()).sum::<usize>();
    }
    Ok(spans)
}
