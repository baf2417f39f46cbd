//! A real Jaeger for tests and the quickstart: the Jaeger v1 all-in-one (collector with the
//! OTLP receivers, in-memory storage, query service) of one pinned release
//! ([`JAEGER_VERSION`]), built from its Go module and started as a detached background
//! process that outlives the caller, like the [control plane](crate::control_plane).
//!
//! [`JaegerConfig::ensure_built`] builds `jaeger-all-in-one` once into
//! `~/.cache/verge/jaeger/v<version>/bin/` (a cold build prints progress every 10 s);
//! [`JaegerConfig::up`] starts it, or reuses the healthy one already running, and waits until
//! it is ready; [`JaegerConfig::down`] stops it. [`shared`] is the call for a test: build,
//! then up. The returned [`Jaeger`] handle queries traces over Jaeger's HTTP query API
//! (`/api/traces`, the API its UI uses) into typed [`Trace`]s and [`Span`]s.
//!
//! # UI
//!
//! Jaeger's Go module carries only a placeholder page for the UI (the React UI is a separate
//! JavaScript build that release images embed), so the source-built binary serves that
//! placeholder at [`Jaeger::ui_url`]; the HTTP query API behind it, which tests use, is
//! complete.
//!
//! # Layout
//!
//! * this module — [`JaegerConfig`], [`Ports`], [`shared`];
//! * `build` — building the binary from the Go module (`assets/jaeger/build.sh`);
//! * `launch` — starting it detached, the readiness wait, `state.json`, up/status/down;
//! * `query` — [`Jaeger`], the handle and its query client;
//! * `model` — [`Trace`], [`Span`] and the wire format of `/api/traces`.
//!
//! # State directory (`~/.cache/verge/run/jaeger`, or `$VERGE_JAEGER_STATE_DIR`)
//!
//! ```text
//! <state>/lock          flock serializing up/down across processes
//! <state>/state.json    version, binary, pid, ports of the running Jaeger
//! <state>/jaeger.log    its stdout and stderr
//! ```

mod build;
mod launch;
mod model;
mod query;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use build::build_script;
pub use model::{Span, Trace, normalize_trace_id};
pub use query::{Jaeger, TraceQuery};

use crate::paths;

/// The pinned Jaeger release: the newest on the Go module proxy whose module still has the
/// v1 all-in-one (`cmd/all-in-one`) with the OTLP receivers.
pub const JAEGER_VERSION: &str = "1.76.0";

/// The binary's file name in [`JaegerConfig::bin_dir`].
pub const BINARY: &str = "jaeger-all-in-one";

/// Loopback ports of a Jaeger: Jaeger's and OpenTelemetry's well-known defaults, bound on
/// `127.0.0.1` only. Nothing else in Verge's tests uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ports {
    /// OTLP over gRPC (`--collector.otlp.grpc.host-port`); OpenTelemetry's default 4317.
    pub otlp_grpc: u16,
    /// OTLP over HTTP (`/v1/traces`, `--collector.otlp.http.host-port`); default 4318.
    pub otlp_http: u16,
    /// Query service HTTP: the UI and `/api/*` (`--query.http-server.host-port`); 16686.
    pub query_http: u16,
    /// Query service gRPC (`--query.grpc-server.host-port`); 16685.
    pub query_grpc: u16,
    /// Collector's Jaeger-protocol gRPC receiver (`--collector.grpc-server.host-port`); 14250.
    pub collector_grpc: u16,
    /// Collector's Jaeger-protocol HTTP receiver and sampling endpoint
    /// (`--collector.http-server.host-port`); 14268.
    pub collector_http: u16,
    /// Admin: health check at `/` and Prometheus metrics (`--admin.http.host-port`); 14269.
    pub admin: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Self {
            otlp_grpc: 4317,
            otlp_http: 4318,
            query_http: 16686,
            query_grpc: 16685,
            collector_grpc: 14250,
            collector_http: 14268,
            admin: 14269,
        }
    }
}

/// Where and how to build and run a Jaeger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaegerConfig {
    /// Jaeger release without the `v`, e.g. `"1.76.0"`.
    pub version: String,
    /// Build cache: `bin/jaeger-all-in-one` and the `complete` stamp (reading
    /// `v<version>`). Default `$VERGE_JAEGER_CACHE_DIR`, else
    /// `~/.cache/verge/jaeger/v<version>`.
    pub cache_dir: PathBuf,
    /// State directory (layout in the [module docs](self)). Default
    /// `$VERGE_JAEGER_STATE_DIR`, else `~/.cache/verge/run/jaeger`.
    pub state_dir: PathBuf,
    /// The ports it binds on `127.0.0.1`. Default [`Ports::default`].
    pub ports: Ports,
    /// In-memory storage bound (`--memory.max-traces`): the oldest traces are dropped past
    /// it. Default 100 000.
    pub max_traces: u32,
    /// How long [`JaegerConfig::up`] waits for the health check and the query API.
    /// Default 60 s.
    pub ready_timeout: Duration,
}

impl Default for JaegerConfig {
    fn default() -> Self {
        Self::from_env()
    }
}

impl JaegerConfig {
    /// The configuration for [`JAEGER_VERSION`] with directories from
    /// `$VERGE_JAEGER_CACHE_DIR` and `$VERGE_JAEGER_STATE_DIR` (unset or empty: the defaults
    /// documented on the fields).
    pub fn from_env() -> Self {
        let env_dir = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let version = JAEGER_VERSION.to_owned();
        Self {
            cache_dir: env_dir("VERGE_JAEGER_CACHE_DIR").unwrap_or_else(|| {
                paths::verge_home()
                    .join("jaeger")
                    .join(format!("v{version}"))
            }),
            state_dir: env_dir("VERGE_JAEGER_STATE_DIR")
                .unwrap_or_else(|| paths::run_dir().join("jaeger")),
            version,
            ports: Ports::default(),
            max_traces: 100_000,
            ready_timeout: Duration::from_secs(60),
        }
    }

    /// `<cache-dir>/bin`.
    pub fn bin_dir(&self) -> PathBuf {
        self.cache_dir.join("bin")
    }

    /// `<cache-dir>/bin/jaeger-all-in-one`.
    pub fn binary(&self) -> PathBuf {
        self.bin_dir().join(BINARY)
    }

    /// `<state-dir>/jaeger.log`: the running Jaeger's output.
    pub fn log_path(&self) -> PathBuf {
        self.state_dir.join("jaeger.log")
    }
}

/// The Jaeger shared by all test binaries of a run (and by `cargo xtask quickstart`):
/// builds it if the cache lacks it (a few minutes on a cold machine, once), then
/// [`JaegerConfig::up`] with [`JaegerConfig::from_env`], which reuses a healthy running
/// Jaeger. It is left running when the caller exits; `cargo xtask jaeger down` (or the end
/// of `cargo xtask test`) stops it.
///
/// # Errors
/// The build fails, or Jaeger is not ready within [`JaegerConfig::ready_timeout`] (the error
/// holds the tail of its log).
pub async fn shared() -> anyhow::Result<Jaeger> {
    JaegerConfig::from_env().up().await
}
