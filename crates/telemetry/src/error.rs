//! [`TelemetryError`]: why telemetry could not be set up.

/// Why [`crate::init`] (or a [`crate::SamplingRatio`]) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `tracing.samplingRatio` is not a probability.
    #[error("samplingRatio {0} is not a ratio in 0.0..=1.0")]
    SamplingRatio(f64),
    /// The OTLP exporter could not be built (e.g. the endpoint is not a URI).
    #[error("cannot build the OTLP exporter for {endpoint}")]
    Exporter {
        /// `tracing.otlpEndpoint`.
        endpoint: String,
        /// The exporter's error.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// A global subscriber was already installed in this process.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled(#[source] tracing_subscriber::util::TryInitError),
    /// Flushing or shutting down the span exporter failed (on [`crate::TelemetryGuard::shutdown`]).
    #[error("cannot flush the span exporter")]
    Shutdown(#[source] opentelemetry_sdk::error::OTelSdkError),
}
