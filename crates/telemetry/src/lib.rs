//! Telemetry set-up, in one place for every Verge binary and test.
//!
//! Libraries only emit `tracing` events and spans; binaries call [`init`] once, tests call
//! [`init_for_tests`] first (idempotent). The log filter comes from `RUST_LOG`
//! (`tracing_subscriber::EnvFilter` syntax) and defaults to `info`.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Output format of the log lines; `text` or `json` in configuration files (serde) and
/// flags (clap), shared by every binary's configuration.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Deserialize,
    serde::Serialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

/// Installs the global subscriber for a binary named `service` (used as a field of the
/// start-up event). Later calls are ignored.
pub fn init(service: &str, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter("info"))
        .with_target(true);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_span_events(FmtSpan::NONE).try_init(),
    };
    if result.is_ok() {
        tracing::info!(
            service,
            version = env!("CARGO_PKG_VERSION"),
            "telemetry initialised"
        );
    }
}

/// Installs a test subscriber that writes through the test harness's capture (shown only for
/// failing tests). Safe to call from every test.
pub fn init_for_tests() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter("info,verge=debug"))
        .with_test_writer()
        .try_init();
}
