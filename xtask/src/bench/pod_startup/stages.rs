//! Where a pod's start-up time goes: the same pods one at a time, and at once, on a second,
//! traced Verge (every span exported to the kit's Jaeger at sampling 1.0), each pod's trace
//! cut at the pipeline's own spans into consecutive stages from the create call to `phase:
//! Running` seen by the watch. The stages add up to the pod's total; tracing costs a few per
//! cent (`cargo xtask bench tracing`), so the untraced run gives the headline figures and
//! this one the shares.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use verge_testkit::jaeger::{Jaeger, Span, Trace, TraceQuery};

use super::Started;

/// The stages, in order: each ends at the boundary of the same index + 1 in [`marks`].
pub(super) const STAGES: [&str; 12] = [
    "API create → edgecontroller watch event",
    "watch event → cloudhub (edgecontroller send)",
    "cloudhub → edge commit (gRPC, redb)",
    "edge commit → sandbox created and started (if the pod has one)",
    "sandbox → next sync (observe, ContainerCreating report)",
    "sync (or sandbox) → app image check (observe, volumes)",
    "image check (app container)",
    "container create",
    "container start",
    "observe and report on the edge",
    "edge → API status patch (cloudhub, edgecontroller)",
    "API patch → Running seen by a watch",
];

/// One pod's stage durations, in [`STAGES`] order, and its total.
#[derive(Debug, Clone)]
pub(super) struct Stages {
    pub(super) stages: [Duration; STAGES.len()],
    pub(super) total: Duration,
}

/// Microseconds since the Unix epoch of `t`.
fn epoch_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn end_us(span: &Span) -> u64 {
    span.start_time_us + span.duration_us
}

/// The boundaries of one pod's stages (µs since the epoch), from its trace.
fn marks(trace: &Trace, container: &str, pod: &Started) -> Option<[u64; STAGES.len() + 1]> {
    let first = |name: &'static str| trace.spans_named(name).next();
    let of_container = |name: &'static str| {
        trace
            .spans_named(name)
            .find(move |s| s.tag_str("k8s.container.name") == Some(container))
    };
    let patched = trace
        .spans_named("kube.patch_pod_status")
        .find(|s| s.tag_str("k8s.pod.phase") == Some("Running"))?;
    let image = of_container("edged.image.ensure")?;
    let commit = end_us(first("metamanager.apply")?);
    // The sync that started the app container: the last one begun before its image check.
    let sync = trace
        .spans_named("edged.sync")
        .filter(|s| s.start_time_us <= image.start_time_us)
        .max_by_key(|s| s.start_time_us)?;
    Some([
        epoch_us(pod.created_at),
        first("controller.watch_event")?.start_time_us,
        first("cloudhub.deliver")?.start_time_us,
        commit,
        // A pod without a sandbox: the stage is empty, the worker's start falls in the next.
        first("edged.sandbox.create").map_or(commit, end_us),
        sync.start_time_us,
        image.start_time_us,
        end_us(image),
        end_us(of_container("edged.container.create")?),
        end_us(of_container("edged.container.start")?),
        end_us(sync),
        end_us(patched),
        epoch_us(pod.created_at + pod.took),
    ])
}

/// The stages of `pod` from `trace`, `None` when the trace lacks one of the spans or is not
/// this pod's (its watch event came before the create call: a pod of the same name made
/// earlier).
fn stages_of(trace: &Trace, container: &str, pod: &Started) -> Option<Stages> {
    let mut marks = marks(trace, container, pod)?;
    if marks[1] < marks[0] {
        return None;
    }
    // A boundary before the previous one makes its stage zero: the sync that starts the
    // containers may be the one that created the sandbox (no "next sync"), and spans
    // recorded within one microsecond tie.
    for i in 1..marks.len() {
        marks[i] = marks[i].max(marks[i - 1]);
    }
    let mut stages = [Duration::ZERO; STAGES.len()];
    for (i, stage) in stages.iter_mut().enumerate() {
        *stage = Duration::from_micros(marks[i + 1] - marks[i]);
    }
    Some(Stages {
        stages,
        total: pod.took,
    })
}

/// How long the exporters' last batches may take to reach Jaeger.
const EXPORT_WAIT: Duration = Duration::from_secs(30);

/// The stages of those of `pods` (app container `container`) whose complete trace Jaeger
/// holds within [`EXPORT_WAIT`], and the names of the others.
///
/// # Errors
/// Jaeger does not answer.
pub(super) async fn from_jaeger(
    jaeger: &Jaeger,
    container: &str,
    pods: &[Started],
) -> anyhow::Result<(Vec<Stages>, Vec<String>)> {
    let deadline = tokio::time::Instant::now() + EXPORT_WAIT;
    let (mut found, mut missing) = (Vec::with_capacity(pods.len()), Vec::new());
    for pod in pods {
        let query = TraceQuery::service("edgecore")
            .operation("edged.sync")
            .tag("k8s.pod.name", &pod.name)
            .lookback(Duration::from_secs(3600));
        let stages = loop {
            if let Some(stages) = complete(jaeger, &query, container, pod).await? {
                break Some(stages);
            }
            if tokio::time::Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        match stages {
            Some(s) => found.push(s),
            None => missing.push(pod.name.clone()),
        }
    }
    Ok((found, missing))
}

/// The stages of `pod` from the first complete trace `query` finds.
async fn complete(
    jaeger: &Jaeger,
    query: &TraceQuery,
    container: &str,
    pod: &Started,
) -> anyhow::Result<Option<Stages>> {
    for t in jaeger
        .find_traces(query)
        .await
        .with_context(|| format!("querying Jaeger for pod {}", pod.name))?
    {
        if let Some(trace) = jaeger.trace(&t.trace_id).await?
            && let Some(stages) = stages_of(&trace, container, pod)
        {
            return Ok(Some(stages));
        }
    }
    Ok(None)
}

/// The stage table: p50 and p99 (p90 with fewer than 20 pods) of each stage and of the
/// total, and each stage's share of the sum of the stage medians; then how many pods had a
/// complete trace, naming the `missing` ones.
pub(super) fn table(pods: &[Stages], missing: &[String]) -> String {
    let n = pods.len();
    let (tail, tail_name) = if n >= super::super::MIN_SAMPLES_FOR_P99 {
        (99, "p99")
    } else {
        (90, "p90")
    };
    let quantiles = |mut v: Vec<Duration>| {
        v.sort();
        (
            super::super::percentile(&v, 50),
            super::super::percentile(&v, tail),
        )
    };
    let medians: Vec<(Duration, Duration)> = (0..STAGES.len())
        .map(|i| quantiles(pods.iter().map(|p| p.stages[i]).collect()))
        .collect();
    let sum: f64 = medians.iter().map(|(p50, _)| p50.as_secs_f64()).sum();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let mut out =
        format!("| stage | p50 | {tail_name} | share of the p50 sum |\n|---|---|---|---|\n");
    for (name, (p50, tail)) in STAGES.iter().zip(&medians) {
        let share = if sum > 0.0 {
            p50.as_secs_f64() / sum * 100.0
        } else {
            0.0
        };
        out.push_str(&format!(
            "| {name} | {} | {} | {share:.0} % |\n",
            ms(*p50),
            ms(*tail)
        ));
    }
    let (p50, tail) = quantiles(pods.iter().map(|p| p.total).collect());
    out.push_str(&format!(
        "| **create → Running (n = {n})** | **{}** | **{}** | |\n",
        ms(p50),
        ms(tail)
    ));
    out.push_str(&format!(
        "\n{n} of {} pods had a complete trace in Jaeger{}.\n",
        n + missing.len(),
        if missing.is_empty() {
            String::new()
        } else {
            format!(" (not: {})", missing.join(", "))
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn span(name: &str, start: u64, duration: u64, tags: &[(&str, &str)]) -> Span {
        Span {
            trace_id: "t".into(),
            span_id: format!("{name}-{start}"),
            parent_span_id: None,
            operation_name: name.into(),
            service_name: "s".into(),
            start_time_us: start,
            duration_us: duration,
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn stages_add_up_to_the_total() {
        let created = UNIX_EPOCH + Duration::from_micros(1_000);
        let pod = Started {
            name: "p".into(),
            created_at: created,
            took: Duration::from_micros(1_000),
        };
        let main = [("k8s.container.name", "main")];
        let trace = Trace {
            trace_id: "t".into(),
            spans: vec![
                span("controller.watch_event", 1_010, 500, &[]),
                span("cloudhub.deliver", 1_020, 10, &[]),
                span("metamanager.apply", 1_030, 20, &[]),
                span("edged.sync", 1_052, 305, &[]),
                span("edged.sandbox.create", 1_055, 300, &[]),
                span(
                    "edged.image.ensure",
                    1_060,
                    10,
                    &[("k8s.container.name", "POD")],
                ),
                span("edged.sync", 1_358, 462, &[]),
                span("edged.image.ensure", 1_360, 5, &main),
                span("edged.container.create", 1_370, 30, &main),
                span("edged.container.start", 1_400, 400, &main),
                span(
                    "kube.patch_pod_status",
                    1_850,
                    10,
                    &[("k8s.pod.phase", "Pending")],
                ),
                span(
                    "kube.patch_pod_status",
                    1_900,
                    50,
                    &[("k8s.pod.phase", "Running")],
                ),
            ],
        };
        let stages = stages_of(&trace, "main", &pod).expect("complete");
        let us: Vec<u128> = stages.stages.iter().map(Duration::as_micros).collect();
        assert_eq!(us, [10, 10, 30, 305, 3, 2, 5, 35, 400, 20, 130, 50]);
        assert_eq!(us.iter().sum::<u128>(), stages.total.as_micros());
        let missing = Trace {
            trace_id: "t".into(),
            spans: trace.spans[..10].to_vec(),
        };
        assert!(
            stages_of(&missing, "main", &pod).is_none(),
            "no Running patch"
        );
        let table = table(&[stages], &["q".to_owned()]);
        assert!(
            table.contains("| container start | 0.4 ms | 0.4 ms | 40 % |"),
            "{table}"
        );
        assert!(
            table.contains("1 of 2 pods had a complete trace in Jaeger (not: q)."),
            "{table}"
        );
    }
}
