//! API server writes per node per minute, read from `apiserver_request_total` of the API
//! server's `/metrics`, with the shipped node-status reporting and with a report at every tick.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::edge::Shared;
use super::report::Writes;
use super::{Args, STATUS_REPORT, STATUS_TICK};

/// The counters of the API server's writes (`apiserver_request_total` of verbs that write),
/// by resource.
pub(super) async fn api_writes(client: &kube::Client) -> anyhow::Result<HashMap<String, f64>> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut out: HashMap<String, f64> = HashMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(&line[start..end])
        };
        let verb = label("verb").unwrap_or_default();
        if !matches!(verb, "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY") {
            continue;
        }
        let resource = match label("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{}/{sub}", label("resource").unwrap_or_default()),
            None => label("resource").unwrap_or_default().to_owned(),
        };
        let value: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(resource).or_default() += value;
    }
    Ok(out)
}

/// Writes per node per minute between two [`api_writes`] readings `span` apart.
pub(super) fn per_node_minute(
    before: &HashMap<String, f64>,
    after: &HashMap<String, f64>,
    size: usize,
    span: Duration,
) -> Vec<(String, f64)> {
    let minutes = span.as_secs_f64() / 60.0;
    let mut out: Vec<(String, f64)> = after
        .iter()
        .map(|(resource, v)| {
            let delta = v - before.get(resource).copied().unwrap_or(0.0);
            (resource.clone(), delta / size as f64 / minutes)
        })
        .filter(|(_, rate)| *rate > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// API writes per node per minute with the shipped status reporting, then with a report at
/// every tick (the kubelet's behaviour before Leases), each over [`Args::writes_window`].
pub(super) async fn measure_writes(
    args: &Args,
    client: &kube::Client,
    shared: &Shared,
    size: usize,
) -> anyhow::Result<Writes> {
    let window = Duration::from_secs(args.writes_window);
    let mut measured = Vec::new();
    for period in [STATUS_REPORT, STATUS_TICK] {
        eprintln!("bench fleet: API writes with the node status reported every {period:?}");
        shared
            .status_period_ms
            .store(period.as_millis() as u64, Ordering::Relaxed);
        let before = api_writes(client).await?;
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        let after = api_writes(client).await?;
        measured.push((period, per_node_minute(&before, &after, size, t0.elapsed())));
    }
    shared
        .status_period_ms
        .store(STATUS_REPORT.as_millis() as u64, Ordering::Relaxed);
    Ok(Writes { size, measured })
}
