//! Telemetry set-up, in one place for every Verge binary and test: log lines and
//! OpenTelemetry traces.
//!
//! Libraries only emit `tracing` events and spans; binaries call [`init`] once with their
//! [`TracingConfig`] (the `tracing` section of their YAML) and keep the [`TelemetryGuard`];
//! tests call [`init_for_tests`] first (idempotent). The log filter comes from `RUST_LOG`
//! (`tracing_subscriber::EnvFilter` syntax) and defaults to `info`. Exported spans are the
//! pipeline steps made with [`span!`] (target [`TARGET`]), whatever the log filter says.
//!
//! # Layout
//! - `config.rs`: [`TracingConfig`] and [`SamplingRatio`].
//! - `init.rs`: [`init`] and [`TelemetryGuard`].
//! - [`propagation`]: W3C trace context between message envelopes and spans.
//! - [`keys`]: the attribute names spans carry.
//! - `error.rs`: [`TelemetryError`].
//! - `testing` (feature `testing`): spans recorded in memory for tests.

mod config;
mod error;
mod init;
pub mod keys;
pub mod propagation;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use config::{SamplingRatio, TracingConfig};
pub use error::TelemetryError;
pub use init::{TelemetryGuard, init};

/// The `tracing` target of the spans that are exported as OpenTelemetry spans (the
/// pipeline's steps); other spans only give log lines their context.
pub const TARGET: &str = "verge::trace";

/// An `INFO` span that is exported when tracing is on (target [`TARGET`]); takes what
/// `tracing::info_span!` takes after the target: a name (`"<component>.<step>"`, e.g.
/// `"edged.sync"`) and fields (attribute keys as in [`keys`], e.g.
/// `k8s.pod.name = %name`). Callers depend on `tracing`.
#[macro_export]
macro_rules! span {
    ($($args:tt)*) => {
        ::tracing::info_span!(target: $crate::TARGET, $($args)*)
    };
}

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

/// Installs a test subscriber that writes through the test harness's capture (shown only for
/// failing tests); with feature `testing` it also feeds `testing::SpanCapture`s. Safe to
/// call from every test.
pub fn init_for_tests() {
    #[cfg(any(test, feature = "testing"))]
    let _ = testing::install();
    #[cfg(not(any(test, feature = "testing")))]
    let _ = tracing_subscriber::fmt()
        .with_env_filter(init::filter("info,verge=debug"))
        .with_test_writer()
        .try_init();
}

#[cfg(test)]
mod tests;
