//! [`init`]: the global subscriber of a binary (logs, and OpenTelemetry export when
//! configured), and the [`TelemetryGuard`] that flushes the export at exit.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::filter::{FilterFn, filter_fn};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::{LogFormat, TelemetryError, TracingConfig};

/// The instrumentation scope of every span Verge exports.
pub(crate) const SCOPE: &str = "verge";

/// What the OpenTelemetry layer sees: the spans of target [`crate::TARGET`] (made with
/// [`crate::span!`]) and every event at `INFO` or above, which become events of the
/// innermost exported span (retries, waits, errors). Independent of `RUST_LOG`.
pub(crate) fn otel_filter() -> FilterFn {
    filter_fn(|meta| {
        if meta.is_span() {
            meta.target() == crate::TARGET
        } else {
            *meta.level() <= tracing::Level::INFO
        }
    })
}

pub(crate) fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

/// Installs the global subscriber of the binary `service`: log lines in `format` filtered by
/// `RUST_LOG` (`tracing_subscriber::EnvFilter` syntax, default `info`), and, when
/// `tracing.otlpEndpoint` is set, a `tracing-opentelemetry` layer that exports the pipeline
/// spans ([`crate::span!`], whatever `RUST_LOG` says) over OTLP/gRPC (batched; resource attributes `service.name` =
/// `service` and `service.version` = the Verge version; a parent-based ratio sampler). With
/// no endpoint no OpenTelemetry layer exists. Must run inside a Tokio runtime when exporting
/// (the tonic client connects lazily on it).
///
/// Keep the returned guard until the process ends and call
/// [`TelemetryGuard::shutdown`] before the runtime stops (dropping it does the same).
///
/// # Errors
/// [`TelemetryError::Exporter`] for an endpoint the exporter refuses,
/// [`TelemetryError::AlreadyInstalled`] when a global subscriber exists already.
pub fn init(
    service: &'static str,
    format: LogFormat,
    tracing: &TracingConfig,
) -> Result<TelemetryGuard, TelemetryError> {
    let provider = match &tracing.otlp_endpoint {
        Some(endpoint) => Some(otlp_provider(service, endpoint, tracing)?),
        None => None,
    };
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(SCOPE))
            .with_tracked_inactivity(false)
            .with_filter(otel_filter())
    });
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_target(true).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_span_events(FmtSpan::NONE)
            .boxed(),
    };
    Registry::default()
        .with(fmt.with_filter(filter("info")))
        .with(otel)
        .try_init()
        .map_err(TelemetryError::AlreadyInstalled)?;
    tracing::info!(
        service,
        version = env!("CARGO_PKG_VERSION"),
        otlp_endpoint = tracing.otlp_endpoint.as_deref(),
        sampling_ratio = tracing.sampling_ratio.get(),
        "telemetry initialised"
    );
    Ok(TelemetryGuard { provider })
}

/// The OTLP/gRPC span pipeline of `service`.
pub(crate) fn otlp_provider(
    service: &'static str,
    endpoint: &str,
    tracing: &TracingConfig,
) -> Result<SdkTracerProvider, TelemetryError> {
    let error = |source| TelemetryError::Exporter {
        endpoint: endpoint.to_owned(),
        source,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_channel(export_channel(endpoint).map_err(error)?)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(error)?;
    Ok(provider_builder(service, tracing)
        .with_batch_exporter(exporter)
        .build())
}

/// How long one export may take before its batch is dropped (the OTLP default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connect to the collector may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// With an export in flight, the HTTP/2 ping sent after this long without a frame from the
/// collector, and how long its answer may take before the connection is dropped.
const KEEPALIVE: Duration = Duration::from_secs(4);

/// The lazily connected gRPC channel to the collector at `endpoint` (`http://` only: no TLS
/// is built in). An edge's link may drop without a reset: a connection that stops
/// answering while an export is in flight is dropped after [`KEEPALIVE`] twice, so the next
/// export connects afresh instead of queueing behind TCP's retransmission back-off (which
/// after a 30 s outage can hold a healed connection silent for another 20 s and more).
fn export_channel(
    endpoint: &str,
) -> Result<tonic::transport::Channel, opentelemetry_otlp::ExporterBuildError> {
    let invalid = |reason: String| {
        opentelemetry_otlp::ExporterBuildError::InvalidConfiguration(format!(
            "tracing.otlpEndpoint {endpoint:?}: {reason}"
        ))
    };
    let endpoint = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| invalid(e.to_string()))?;
    if endpoint.uri().scheme_str() != Some("http") {
        return Err(invalid("the scheme must be http".to_owned()));
    }
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(EXPORT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .keep_alive_while_idle(false)
        .connect_lazy())
}

/// A provider builder with Verge's resource and sampler (no processor yet).
pub(crate) fn provider_builder(
    service: &'static str,
    tracing: &TracingConfig,
) -> opentelemetry_sdk::trace::TracerProviderBuilder {
    let resource = Resource::builder()
        .with_service_name(service)
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let ratio = Sampler::TraceIdRatioBased(tracing.sampling_ratio.get());
    SdkTracerProvider::builder()
        .with_resource(resource)
        .with_sampler(Sampler::ParentBased(Box::new(ratio)))
}

/// Keeps the span exporter of [`init`] alive; shutting it down (explicitly or on drop)
/// exports the spans still batched. Holds nothing when export is off.
#[derive(Debug)]
#[must_use = "dropping the guard stops the span export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Whether spans are exported.
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the batched spans and stops the exporter (blocks for at most the exporter's
    /// timeout, 10 s by default). Call it while the Tokio runtime still runs.
    ///
    /// # Errors
    /// [`TelemetryError::Shutdown`] when the flush or shutdown failed (the spans are lost).
    pub fn shutdown(mut self) -> Result<(), TelemetryError> {
        match self.provider.take() {
            Some(provider) => provider.shutdown().map_err(TelemetryError::Shutdown),
            None => Ok(()),
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("telemetry: cannot flush the span exporter: {error}");
        }
    }
}
