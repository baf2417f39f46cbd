//! `cargo xtask bench devices`: N devices with P properties each, every property reported
//! every second by the Rust virtual mapper on one edge node, through edgecore's devicetwin,
//! the outbox, cloudhub and devicecontroller into the DeviceStatus objects.
//!
//! Measured over `--seconds` of steady state, with a watch on the DeviceStatus objects:
//! the lag from a value's report (the mapper's `reported.metadata.timestamp`, same host
//! clock) to the DeviceStatus showing it (p50/p90/p99/max), the DeviceStatus writes per
//! second (one upstream `devicestatus` message through cloudhub each) and the reported
//! values per second that reached the cloud. Baseline in the same run: the same number of
//! DeviceStatus server-side applies made directly by the bench, one at a time (the floor of
//! any report-to-status path on this API server).

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use verge_testkit::ControlPlaneConfig;

use super::{Summary, record};
use crate::local;

/// Arguments of `cargo xtask bench devices`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Devices on the edge node.
    #[arg(long, default_value_t = 50)]
    pub devices: usize,
    /// Properties per device, each reported every second.
    #[arg(long, default_value_t = 2)]
    pub properties: usize,
    /// Seconds of steady state measured.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const NODE: &str = "verge-bench-dev";
const NAMESPACE: &str = "verge-bench-devices";
const PROTOCOL: &str = "virtual";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    local::ensure_host().await?;
    let run_dir = verge_testkit::paths::run_dir().join("bench-devices");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        ..ControlPlaneConfig::from_env()
    };
    let cp = crate::control_plane::up(&config).await?;
    let bin_dir = local::build_bins(!args.debug)?;
    let verge = local::start(&run_dir, &bin_dir, &cp, NODE, None).await?;
    let result = async {
        verge.wait_ready(&cp, Duration::from_secs(60)).await?;
        local::start_mapper(&run_dir, &bin_dir, PROTOCOL)?;
        measure(&cp, &args).await
    }
    .await;
    local::stop_processes(&run_dir);
    crate::control_plane::down(&config).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: verge_device_api::GROUP.to_owned(),
        version: verge_device_api::VERSION.to_owned(),
        api_version: verge_device_api::API_VERSION.to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

async fn measure(cp: &verge_testkit::ControlPlane, args: &Args) -> anyhow::Result<()> {
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let (n, p) = (args.devices.max(1), args.properties.max(1));
    let models: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &resource("DeviceModel", "devicemodels"),
    );
    let devices: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &resource("Device", "devices"));
    let statuses_resource = resource("DeviceStatus", "devicestatuses");
    let statuses: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &statuses_resource);
    let apply = PatchParams::apply("verge-bench").force();
    let properties: Vec<String> = (0..p).map(|i| format!("p{i}")).collect();
    let model = json!({
        "apiVersion": verge_device_api::API_VERSION, "kind": "DeviceModel",
        "metadata": {"name": "bench-model", "namespace": NAMESPACE},
        "spec": {"protocol": PROTOCOL, "properties": properties.iter().map(|name| json!({
            "name": name, "type": "INT", "accessMode": "ReadOnly", "minimum": "0", "maximum": "1000"
        })).collect::<Vec<_>>()}
    });
    models
        .patch("bench-model", &apply, &Patch::Apply(&model))
        .await?;
    eprintln!("bench devices: creating {n} devices with {p} properties each (reported every 1 s)");
    for i in 0..n {
        let name = format!("dev-{i}");
        let device = json!({
            "apiVersion": verge_device_api::API_VERSION, "kind": "Device",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "deviceModelRef": {"name": "bench-model"},
                "nodeName": NODE,
                "protocol": {"protocolName": PROTOCOL},
                "properties": properties.iter().map(|name| json!({
                    "name": name, "collectCycle": 1000, "reportCycle": 1000, "reportToCloud": true,
                    "visitors": {"protocolName": PROTOCOL, "configData": {"dataType": "int", "min": 0, "max": 1000, "step": 50}}
                })).collect::<Vec<_>>()
            }
        });
        devices.patch(&name, &apply, &Patch::Apply(&device)).await?;
    }
    let warm = Instant::now();
    loop {
        let have = statuses.list(&Default::default()).await?.items.len();
        if have >= n {
            break;
        }
        anyhow::ensure!(
            warm.elapsed() < Duration::from_secs(120),
            "only {have} of {n} DeviceStatus objects after 120 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "bench devices: all {n} DeviceStatus objects exist after {:.1?}; measuring {} s",
        warm.elapsed(),
        args.seconds
    );
    let (lags, writes, values) = watch_lags(&statuses, Duration::from_secs(args.seconds)).await?;
    let seconds = args.seconds as f64;
    let baseline = direct_writes(&statuses, n.min(200)).await?;
    let mut lags = lags;
    lags.sort();
    let lag = Summary::of(&lags);
    let base = Summary::of(&baseline);
    let ratio = lag.p50.as_secs_f64() / base.p50.as_secs_f64().max(1e-9);
    let body = format!(
        "{n} devices × {p} properties, each reported every 1 s by the Rust virtual mapper, on one \
         edge node; {seconds:.0} s of steady state.\n\n\
         | path | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n\
         | report → DeviceStatus (mapper timestamp → watch event) | {} |\n\
         | baseline: one DeviceStatus apply by the bench, sequential | {} |\n\n\
         Lag p50 is {ratio:.1}× the API write. DeviceStatus writes (upstream `devicestatus` \
         messages through cloudhub): {:.1}/s; reported values reaching the cloud: {:.1}/s \
         (offered: {} values/s).\n",
        record::duration_cells(&lag),
        record::duration_cells(&base),
        writes as f64 / seconds,
        values as f64 / seconds,
        n * p,
    );
    println!("{body}");
    record::write("devices", "Device twins: report to DeviceStatus", &body)
}

/// Watches the DeviceStatus objects for `span`: the lag of every newly seen reported value,
/// the number of object writes and of new values.
async fn watch_lags(
    statuses: &Api<DynamicObject>,
    span: Duration,
) -> anyhow::Result<(Vec<Duration>, usize, usize)> {
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    let mut lags = Vec::new();
    let (mut writes, mut values) = (0, 0);
    let stream = watcher(statuses.clone(), watcher::Config::default());
    let mut stream = std::pin::pin!(stream);
    let started = Instant::now();
    let mut initialised = false;
    while started.elapsed() < span {
        let event =
            tokio::time::timeout(span.saturating_sub(started.elapsed()), stream.next()).await;
        let Ok(Some(event)) = event else { break };
        let object = match event.context("DeviceStatus watch")? {
            watcher::Event::Apply(o) => o,
            watcher::Event::InitApply(o) => {
                note(&o, &mut seen);
                continue;
            }
            watcher::Event::InitDone => {
                initialised = true;
                continue;
            }
            _ => continue,
        };
        if !initialised {
            continue;
        }
        writes += 1;
        let now_ms = chrono::Utc::now().timestamp_millis();
        for (_, stamp) in note(&object, &mut seen) {
            values += 1;
            if let Ok(ms) = stamp.parse::<i64>() {
                lags.push(Duration::from_millis(
                    u64::try_from(now_ms - ms).unwrap_or(0),
                ));
            }
        }
    }
    Ok((lags, writes, values))
}

/// Records the reported timestamps of `object`'s twins; returns those not seen before.
fn note(
    object: &DynamicObject,
    seen: &mut HashMap<(String, String), String>,
) -> Vec<(String, String)> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let twins = object.data["status"]["twins"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut new = Vec::new();
    for twin in twins {
        let property = twin["propertyName"].as_str().unwrap_or_default().to_owned();
        let stamp = match &twin["reported"]["metadata"]["timestamp"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let key = (name.clone(), property.clone());
        if seen.get(&key) != Some(&stamp) {
            seen.insert(key, stamp.clone());
            new.push((property, stamp));
        }
    }
    new
}

/// `count` server-side applies of a DeviceStatus made by the bench itself, one at a time.
async fn direct_writes(
    statuses: &Api<DynamicObject>,
    count: usize,
) -> anyhow::Result<Vec<Duration>> {
    let apply = PatchParams::apply("verge-bench-baseline").force();
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let body = json!({
            "apiVersion": verge_device_api::API_VERSION, "kind": "DeviceStatus",
            "metadata": {"name": "bench-baseline", "namespace": NAMESPACE},
            "status": {"twins": [{"propertyName": "p0", "reported": {"value": i.to_string(),
                "metadata": {"timestamp": chrono::Utc::now().timestamp_millis().to_string()}}}]}
        });
        let started = Instant::now();
        statuses
            .patch("bench-baseline", &apply, &Patch::Apply(&body))
            .await?;
        out.push(started.elapsed());
    }
    out.sort();
    Ok(out)
}
