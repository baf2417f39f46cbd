//! `cargo xtask jaeger up|down|status`: the kit's Jaeger (`verge_testkit::jaeger`, state in
//! `~/.cache/verge/run/jaeger`), shared by the tests, the quickstart and by hand; and what the
//! quickstart needs of it: the `tracing:` section of the Verge configs and the lookup of a
//! pod's creation trace.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Subcommand;
use verge_testkit::jaeger::{Jaeger, JaegerConfig, Trace, TraceQuery};
use verge_testkit::wait::wait_for;

/// Arguments of `cargo xtask jaeger`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Build (once) and start Jaeger, or reuse the running one; prints its addresses.
    Up,
    /// Stop Jaeger (its traces are in memory and go with it).
    Down,
    /// Report whether a healthy Jaeger runs (exit code 1 when not).
    Status,
}

/// Runs one jaeger action.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = JaegerConfig::from_env();
    match args.action {
        Action::Up => {
            let jaeger = up(&config).await?;
            println!("OTLP gRPC: {}", jaeger.otlp_grpc_endpoint());
            println!("OTLP HTTP: {}", jaeger.otlp_http_endpoint());
        }
        Action::Down => {
            let was_up = down(&config).await?;
            eprintln!(
                "jaeger {}",
                if was_up { "stopped" } else { "was not running" }
            );
        }
        Action::Status => match config.status().await? {
            Some(jaeger) => {
                println!(
                    "running: Jaeger v{} pid {} log {}",
                    jaeger.version(),
                    jaeger.pid(),
                    jaeger.log_path().display()
                );
                println!("UI and query API: {}", jaeger.ui_url());
                println!("OTLP gRPC: {}", jaeger.otlp_grpc_endpoint());
            }
            None => {
                println!("not running (state dir {})", config.state_dir.display());
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds Jaeger if needed (progress on stderr) and starts it or reuses the running one;
/// reports the UI address and the time to ready on stderr.
pub async fn up(config: &JaegerConfig) -> anyhow::Result<Jaeger> {
    build(config).await?;
    let started = Instant::now();
    let jaeger = config.up().await?;
    eprintln!(
        "jaeger v{} ready after {:.1?}: UI and query API {} (the UI is a placeholder page in a \
         source build; the API is complete), log {}",
        jaeger.version(),
        started.elapsed(),
        jaeger.ui_url(),
        jaeger.log_path().display()
    );
    Ok(jaeger)
}

/// Builds Jaeger into its cache unless built (a visible step: minutes when cold).
pub async fn build(config: &JaegerConfig) -> anyhow::Result<()> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || config.ensure_built()).await?
}

/// Stops Jaeger; true when one was running.
pub async fn down(config: &JaegerConfig) -> anyhow::Result<bool> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || config.down()).await?
}

/// The trace of `pod`'s creation: among the traces that have a span tagged
/// `k8s.pod.name` = `pod` (searched in every service Jaeger knows), the one that started
/// first. Polls until `timeout`, as spans arrive in batches.
///
/// # Errors
/// No such trace within `timeout`, or Jaeger does not answer.
pub async fn pod_creation_trace(
    jaeger: &Jaeger,
    pod: &str,
    timeout: Duration,
) -> anyhow::Result<Trace> {
    wait_for(
        &format!("a trace with k8s.pod.name={pod} in Jaeger"),
        timeout,
        || async move {
            let mut found: Vec<Trace> = Vec::new();
            for service in jaeger.services().await? {
                let query = TraceQuery::service(service).tag("k8s.pod.name", pod);
                found.extend(jaeger.find_traces(&query).await?);
            }
            Ok(found
                .into_iter()
                .min_by_key(|t| t.spans.first().map(|s| s.start_time_us)))
        },
    )
    .await
    .context("finding the pod's creation trace")
}

/// The `tracing:` section of a binary's YAML config that exports every span (sampling 1.0)
/// over OTLP/gRPC to `otlp_endpoint` (e.g. `http://127.0.0.1:4317`), verge-telemetry's
/// `TracingConfig`; empty without an endpoint (tracing then stays off).
pub fn tracing_yaml(otlp_endpoint: Option<&str>) -> String {
    otlp_endpoint.map_or_else(String::new, |endpoint| {
        format!("tracing:\n  otlpEndpoint: {endpoint}\n  samplingRatio: 1.0\n")
    })
}

/// Appends `section` to the config file at `path` (nothing when empty); returns `path`.
pub fn append_section(path: String, section: &str) -> anyhow::Result<String> {
    if !section.is_empty() {
        let mut text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        text.push_str(section);
        std::fs::write(&path, text).with_context(|| format!("writing {path}"))?;
    }
    Ok(path)
}
