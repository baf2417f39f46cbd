//! [`SpanCapture`]: spans recorded in memory, for tests that check what is traced
//! (feature `testing`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::TracingConfig;

/// Records the spans of the current thread in memory as [`crate::init`] would export them
/// (same resource, sampler and filter: [`crate::span!`] spans only), until dropped. Use it on a
/// current-thread runtime (`#[tokio::test]`'s default): tasks on other threads are not seen.
#[must_use = "spans are recorded only while the capture lives"]
pub struct SpanCapture {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _default: DefaultGuard,
}

impl SpanCapture {
    /// Starts recording the spans of service `service` on this thread.
    pub fn start(service: &'static str) -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = crate::init::provider_builder(service, &TracingConfig::default())
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(crate::init::SCOPE))
            .with_filter(crate::init::otel_filter());
        // `tracing`'s own `set_default`: the extension trait's would also install the `log`
        // bridge globally, which a binary's `init` must be the one to do.
        let default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        Self {
            exporter,
            provider,
            _default: default,
        }
    }

    /// The spans ended so far, in the order they ended.
    pub fn spans(&self) -> Vec<SpanData> {
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().unwrap_or_default()
    }

    /// The ended span named `name`.
    ///
    /// # Panics
    /// When no or several ended spans have that name (a test helper).
    #[allow(clippy::panic)]
    pub fn span(&self, name: &str) -> SpanData {
        let mut found: Vec<SpanData> = self
            .spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect();
        match found.len() {
            1 => found.remove(0),
            n => panic!("{n} spans named {name} in {:?}", self.names()),
        }
    }

    /// The names of the ended spans.
    pub fn names(&self) -> Vec<String> {
        self.spans()
            .into_iter()
            .map(|s| s.name.into_owned())
            .collect()
    }
}
