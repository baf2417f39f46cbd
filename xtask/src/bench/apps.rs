//! `cargo xtask bench apps`: commands from the Python example controller
//! (`examples/python-controller`, bench mode) through cloudhub and edgecore to an edge app on
//! the local MQTT broker, and the app's replies back: round-trip latency (p50/p90/p99) one
//! at a time, and messages per second with `--window` commands in flight.
//!
//! Baseline in the same run: the same app answering a client of the same broker directly
//! (MQTT publish → the app's reply), one at a time: the part of the round trip that no
//! cloud path can avoid.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;
use verge_testkit::ControlPlaneConfig;
use verge_testkit::edge_app::EchoApp;
use verge_testkit::example_clients::Example;

use super::{Summary, record};
use crate::local;

/// Arguments of `cargo xtask bench apps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Commands sent one at a time (latency).
    #[arg(long, default_value_t = 300)]
    pub count: usize,
    /// Commands sent with `--window` in flight (throughput).
    #[arg(long, default_value_t = 2000)]
    pub burst: usize,
    /// Commands in flight for the throughput run.
    #[arg(long, default_value_t = 32)]
    pub window: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const NODE: &str = "verge-bench-apps";
const NAMESPACE: &str = "verge-bench-apps";
const GROUP: &str = "bench.example.com";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    local::ensure_host().await?;
    let python = tokio::task::spawn_blocking(|| Example::Python.ensure_built()).await??;
    let run_dir = verge_testkit::paths::run_dir().join("bench-apps");
    let config = ControlPlaneConfig {
        state_dir: run_dir.join("control-plane"),
        ..ControlPlaneConfig::from_env()
    };
    let cp = crate::control_plane::up(&config).await?;
    let bin_dir = local::build_bins(!args.debug)?;
    let verge = local::start(&run_dir, &bin_dir, &cp, NODE, None).await?;
    let result = async {
        verge.wait_ready(&cp, Duration::from_secs(60)).await?;
        measure(&cp, &verge, &python, &args).await
    }
    .await;
    local::stop_processes(&run_dir);
    crate::control_plane::down(&config).await?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The MQTT options of a client of the local deployment's broker.
fn mqtt_options(verge: &local::LocalVerge, client_id: &str) -> anyhow::Result<MqttOptions> {
    let port: u16 = verge
        .mqtt_url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("broker address {}", verge.mqtt_url))?;
    let password = std::fs::read_to_string(verge.dir.join("mqtt/client-password"))?;
    let mut options = MqttOptions::new(client_id, "127.0.0.1", port);
    options.set_credentials(
        verge_testkit::mosquitto::MOSQUITTO_USER,
        password.trim_end(),
    );
    options.set_max_packet_size(1 << 20, 1 << 20);
    Ok(options)
}

/// The edge app ([`EchoApp`]): answers every command of [`GROUP`] and every baseline
/// request on `bench/direct/<n>` on `<topic>/reply`.
async fn start_app(verge: &local::LocalVerge) -> anyhow::Result<EchoApp> {
    EchoApp::start(
        mqtt_options(verge, "bench-app")?,
        &[
            format!("verge/apps/{GROUP}/+/+/+"),
            "bench/direct/+".to_owned(),
        ],
    )
    .await
}

/// `count` request/reply round trips through the broker alone, one at a time.
async fn direct_round_trips(
    verge: &local::LocalVerge,
    count: usize,
) -> anyhow::Result<Vec<Duration>> {
    let (client, mut eventloop) = AsyncClient::new(mqtt_options(verge, "bench-direct")?, 64);
    eventloop.network_options.set_tcp_nodelay(true);
    client
        .subscribe("bench/direct/+/reply", QoS::AtLeastOnce)
        .await?;
    let (tx, mut replies) = tokio::sync::mpsc::unbounded_channel();
    let poller = tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            if let Event::Incoming(Packet::SubAck(_)) = event {
                let _ = tx.send(String::new());
            }
            if let Event::Incoming(Packet::Publish(p)) = event {
                let _ = tx.send(p.topic);
            }
        }
    });
    // The subscription is in place before the first request.
    tokio::time::timeout(Duration::from_secs(10), replies.recv())
        .await
        .context("no SUBACK from the broker")?;
    let mut rtts = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        client
            .publish(
                format!("bench/direct/{i}"),
                QoS::AtLeastOnce,
                false,
                json!({"id": i.to_string()}).to_string(),
            )
            .await?;
        let want = format!("bench/direct/{i}/reply");
        loop {
            let topic = tokio::time::timeout(Duration::from_secs(10), replies.recv())
                .await
                .context("no direct reply within 10 s")?
                .context("broker connection ended")?;
            if topic == want {
                break;
            }
        }
        rtts.push(started.elapsed());
    }
    poller.abort();
    rtts.sort();
    Ok(rtts)
}

/// What the Python controller measured in one bench run.
struct PythonRun {
    rtts: Vec<Duration>,
    seconds: f64,
}

/// Runs the Python controller in bench mode: `count` commands, `window` in flight.
async fn python_run(
    python: &[std::path::PathBuf],
    base_args: &[String],
    run: &str,
    count: usize,
    window: usize,
) -> anyhow::Result<PythonRun> {
    // `[python, controller.py]`: bench.py sits beside controller.py.
    let [program, controller] = python else {
        bail!("expected the Python controller's command to be [python, controller.py]");
    };
    let mut child = tokio::process::Command::new(program)
        .arg(controller.with_file_name("bench.py"))
        .args(base_args)
        .args([
            // Ids are unique per run: the edge publishes a repeated id only once.
            "--command-id".to_owned(),
            format!("{run}-{}", std::process::id()),
            "--bench-count".to_owned(),
            count.to_string(),
            "--bench-window".to_owned(),
            window.to_string(),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut result = None;
    let deadline = Duration::from_secs(600);
    while let Some(line) = tokio::time::timeout(deadline, lines.next_line()).await?? {
        let value: Value = serde_json::from_str(&line).with_context(|| line.clone())?;
        if value["event"] == "bench" {
            let rtts: Vec<Duration> = value["rttMs"]
                .as_array()
                .context("rttMs")?
                .iter()
                .filter_map(Value::as_f64)
                .map(|ms| Duration::from_secs_f64(ms / 1000.0))
                .collect();
            let seconds = value["seconds"].as_f64().context("seconds")?;
            result = Some(PythonRun { rtts, seconds });
        }
    }
    let status = child.wait().await?;
    if !status.success() {
        bail!("the Python controller exited {status}");
    }
    let mut run = result.context("the Python controller printed no bench result")?;
    run.rtts.sort();
    Ok(run)
}

async fn measure(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    python: &[std::path::PathBuf],
    args: &Args,
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let token =
        verge_testkit::trust::third_party_controller(&client, NAMESPACE, "bench", &[GROUP]).await?;
    let ca = verge_testkit::trust::verge_ca(&client).await?;
    let access = verge_testkit::example_clients::Access::write(ca.cert_pem(), &token)?;
    let controller_port = std::fs::read_to_string(verge.dir.join("cloudhub.yaml"))?
        .lines()
        .find_map(|l| {
            l.strip_prefix("controllerAddr: 127.0.0.1:")
                .map(str::to_owned)
        })
        .context("controllerAddr in cloudhub.yaml")?;
    let mut base_args = access.args(&format!("https://127.0.0.1:{controller_port}"), GROUP, NODE);
    base_args.extend(["--content".to_owned(), "{}".to_owned()]);
    let _app = start_app(verge).await?;
    eprintln!("bench apps: warm-up, 20 commands");
    python_run(python, &base_args, "warm", 20, 1).await?;
    eprintln!("bench apps: {} commands one at a time", args.count);
    let sequential = python_run(python, &base_args, "one", args.count, 1).await?;
    eprintln!(
        "bench apps: {} commands, {} in flight",
        args.burst, args.window
    );
    let burst = python_run(python, &base_args, "window", args.burst, args.window).await?;
    eprintln!(
        "bench apps: baseline, {} direct MQTT round trips",
        args.count
    );
    let direct = direct_round_trips(verge, args.count).await?;

    let seq = Summary::of(&sequential.rtts);
    let windowed = Summary::of(&burst.rtts);
    let base = Summary::of(&direct);
    let ratio = seq.p50.as_secs_f64() / base.p50.as_secs_f64().max(1e-9);
    let rate = |run: &PythonRun| run.rtts.len() as f64 / run.seconds.max(1e-9);
    let body = format!(
        "The Python example controller (`examples/python-controller`, bench mode, grpcio) sends \
         commands of a third-party group through cloudhub and edgecore (committed to the apps \
         inbox, published on the node's mosquitto) to an edge app (rumqttc), whose replies go \
         back through the edge's outbox and cloudhub; a command's round trip ends when its \
         reply reaches the controller, which acks every reply.\n\n\
         | path | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n\
         | controller → edge app → controller, one at a time | {} |\n\
         | the same, {} in flight | {} |\n\
         | baseline: MQTT client → the same app → client, one at a time | {} |\n\n\
         One at a time: {:.0} round trips/s, p50 {ratio:.1}× the broker-only round trip. \
         With {} in flight: {:.0} round trips/s ({} commands in {:.1} s).\n",
        record::duration_cells(&seq),
        args.window,
        record::duration_cells(&windowed),
        record::duration_cells(&base),
        rate(&sequential),
        args.window,
        rate(&burst),
        burst.rtts.len(),
        burst.seconds,
    );
    println!("{body}");
    record::write(
        "apps",
        "Third-party messages: Python controller to edge app and back",
        &body,
    )
}
