//! `cargo xtask bench streams`: `kubectl logs` of an edge pod through the whole streams path
//! (kube-apiserver → egress selector → the kit's streams front → cloudhub → the node's
//! session → edgecore → Docker), against `docker logs` of the same container on the same
//! machine in the same run (the baseline: what the container runtime alone delivers).
//! Throughput of a large log (default 100 MiB) and the latency of a one-line request.

use std::io::Read as _;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::local;

/// Arguments of `cargo xtask bench streams`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Size of the container's log, MiB.
    #[arg(long, default_value_t = 100)]
    pub mib: u64,
    /// Repetitions of each measurement.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const NAMESPACE: &str = "verge-bench-streams";
const NODE: &str = "verge-bench-streams";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The streams front forwards every byte: the same build as the cloudhub measured.
    super::env::with_one_node("bench-streams", NODE, !args.debug, true, async |cp, _| {
        measure(cp, &args).await
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}

async fn measure(cp: &verge_testkit::ControlPlane, args: &Args) -> anyhow::Result<()> {
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let bytes = args.mib * 1024 * 1024;
    // 100-byte lines (99 characters and a newline), then the container exits.
    let script = format!(
        "yes 012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678 | head -c {bytes}"
    );
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "talker", "namespace": NAMESPACE},
        "spec": {"nodeName": NODE, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                                 "imagePullPolicy": "Never", "command": ["sh", "-c", script]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eprintln!("bench: waiting for the pod to write {} MiB", args.mib);
    let deadline = Instant::now() + Duration::from_secs(600);
    let id = loop {
        let pod = pods.get("talker").await?;
        let status = pod.status.unwrap_or_default();
        if status.phase.as_deref() == Some("Succeeded") {
            let id = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .find_map(|c| c.container_id)
                .context("no container id")?;
            break id.trim_start_matches("docker://").to_owned();
        }
        if Instant::now() > deadline {
            bail!("the pod did not finish writing its log in 10 min");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let kubectl = |extra: &[&str]| {
        let mut c = cp.kubectl_command();
        c.args(["-n", NAMESPACE, "logs", "talker"]).args(extra);
        c
    };
    let docker = |extra: &[&str]| {
        let mut c = Command::new("docker");
        c.args(["logs"]).args(extra).arg(&id);
        c
    };
    // Two sinks: `> /dev/null` measures the path alone; a pipe to this process measures it
    // with a reader, as `kubectl logs POD | grep …` (kubectl writes each line with its own
    // `write`, so the reader's wake-ups cost a share of the 2 cores).
    let (mut through, mut raw) = (Vec::new(), Vec::new());
    let (mut through_piped, mut raw_piped) = (Vec::new(), Vec::new());
    for run in 0..args.runs.max(1) {
        eprintln!("bench: run {}/{}", run + 1, args.runs.max(1));
        raw.push(to_null(docker(&[]))?);
        through.push(to_null(kubectl(&[]))?);
        raw_piped.push(read_all(docker(&[]), bytes)?);
        through_piped.push(read_all(kubectl(&[]), bytes)?);
    }
    let (mut one_line, mut one_line_raw) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        one_line_raw.push(read_all(docker(&["--tail", "1"]), 100)?);
        one_line.push(read_all(kubectl(&["--tail=1"]), 100)?);
    }
    let mbps = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    let best = |v: &[Duration]| v.iter().copied().min().unwrap_or_default();
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut rows = String::new();
    for (sink, through, raw) in [
        ("`> /dev/null`", &mut through, &mut raw),
        ("a pipe", &mut through_piped, &mut raw_piped),
    ] {
        let (t_best, r_best) = (best(through), best(raw));
        let (t_med, r_med) = (median(through), median(raw));
        rows.push_str(&format!(
            "| `docker logs` (baseline), into {sink} | {:.0} MB/s ({:.2} s) | {:.0} MB/s |\n\
             | `kubectl logs` through cloudhub, into {sink} | {:.0} MB/s ({:.2} s) | {:.0} MB/s |\n\
             | ratio | {:.2}× the baseline's time | {:.2}× |\n",
            mbps(r_best),
            r_best.as_secs_f64(),
            mbps(r_med),
            mbps(t_best),
            t_best.as_secs_f64(),
            mbps(t_med),
            t_best.as_secs_f64() / r_best.as_secs_f64(),
            t_med.as_secs_f64() / r_med.as_secs_f64(),
        ));
    }
    let (l_med, lr_med) = (median(&mut one_line), median(&mut one_line_raw));
    let table = format!(
        "| path | {mib} MiB, best | median |\n|---|---|---|\n{rows}\n\
         | path | `--tail=1`, median of 10 |\n|---|---|\n\
         | `docker logs` (baseline) | {} ms |\n\
         | `kubectl logs` through cloudhub | {} ms |\n\
         | ratio | {:.2}× |\n",
        lr_med.as_millis(),
        l_med.as_millis(),
        l_med.as_secs_f64() / lr_med.as_secs_f64(),
        mib = args.mib,
    );
    println!("kubectl logs through cloudhub\n{table}");
    let body = format!(
        "One pod on a local edge node ({} build of cloudhub, the streams front, edgecontroller and edgecore) \
         wrote {} MiB of 100-byte lines and exited. `kubectl logs` reads them through \
         kube-apiserver, its egress selector, the kit's streams front (a cloudhub without \
         sessions, which forwards to the one holding the node's session), that cloudhub, the \
         node's gRPC session and edgecore (TLS end to end), which reads the container's \
         `json-file` log as the kubelet reads CRI log files. Baseline: `docker logs` of the \
         same container (Docker's log API). Two sinks: `> /dev/null` measures the path alone; \
         a pipe read by the bench (its byte count checked) adds a reader, as `kubectl logs | grep` \
         does. kubectl writes each line with its own `write(2)`, so with 100-byte lines the \
         reader's wake-ups take a large share of this 2-core machine. {} runs of each, \
         alternating.\n\n{table}",
        if args.debug { "debug" } else { "release" },
        args.mib,
        args.runs.max(1),
    );
    super::record::write("streams", "streams: kubectl logs through cloudhub", &body)?;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(pods.into_client())
        .delete(NAMESPACE, &DeleteParams::default())
        .await;
    Ok(())
}

/// Runs `command` with its stdout on `/dev/null` and returns the time it took.
///
/// # Errors
/// It fails (its stderr is in the error).
fn to_null(mut command: Command) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let output = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let took = start.elapsed();
    if !output.status.success() {
        bail!(
            "{command:?}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(took)
}

/// Runs `command`, reads its stdout to the end, checks at least `expected` bytes came, and
/// returns the time taken.
fn read_all(mut command: Command, expected: u64) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().context("piped")?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = stdout.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let status = child.wait()?;
    let took = start.elapsed();
    if !status.success() || total < expected {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        bail!("{command:?}: {total} of {expected} bytes, {status}: {err}");
    }
    Ok(took)
}
