//! [`SpanCapture`]: spans recorded in memory, for tests that check what is traced
//! (feature `testing`).
//!
//! One global subscriber serves every capture of a test binary, so that callsite interest is
//! computed once against one dispatcher. (A scoped dispatcher per test, as `set_default`
//! gives, races with `tracing`'s interest cache when tests run in parallel: a callsite first
//! hit while no capture lives is cached as uninteresting and a later capture misses its
//! spans.) Each span is tagged with the capture that was active on its thread when it was
//! created, or inherits its parent's tag; when it ends, the tag routes it to that capture.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use tracing::span::{Attributes, Id};
use tracing::{Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::TracingConfig;

/// Records, in memory, the spans begun on the current thread (and their descendants on any
/// thread) as [`crate::init`] would export them (same sampler and filter: [`crate::span!`]
/// spans only), until dropped. Spans begun on other threads without a traced parent are
/// not seen; use it on a current-thread runtime (`#[tokio::test]`'s default).
#[must_use = "spans are recorded only while the capture lives"]
pub struct SpanCapture {
    id: u64,
    service: &'static str,
}

impl SpanCapture {
    /// Starts recording the spans begun on this thread, for a test of service `service`
    /// (named in panic messages). Installs the test binary's global subscriber on first use,
    /// as [`crate::init_for_tests`] does.
    ///
    /// # Panics
    /// When another global subscriber was installed first, by something other than
    /// [`crate::init_for_tests`] (captures could not see any span).
    #[allow(clippy::panic)]
    pub fn start(service: &'static str) -> Self {
        if !install() {
            panic!(
                "SpanCapture needs verge_telemetry's test subscriber; another global one was set first"
            );
        }
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        sinks().insert(id, Vec::new());
        ACTIVE.with(|active| active.set(Some(id)));
        Self { id, service }
    }

    /// The spans ended so far, in the order they ended.
    pub fn spans(&self) -> Vec<SpanData> {
        sinks().get(&self.id).cloned().unwrap_or_default()
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
            n => panic!(
                "{n} spans named {name} in {}'s {:?}",
                self.service,
                self.names()
            ),
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

impl Drop for SpanCapture {
    fn drop(&mut self) {
        ACTIVE.with(|active| {
            if active.get() == Some(self.id) {
                active.set(None);
            }
        });
        sinks().remove(&self.id);
    }
}

thread_local! {
    /// The capture started on this thread, which new spans without a tagged parent join.
    static ACTIVE: Cell<Option<u64>> = const { Cell::new(None) };
    /// The tag of the span being closed on this thread, read by [`Router::on_end`] while the
    /// OpenTelemetry layer ends that span.
    static CLOSING: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Ended spans per live capture.
fn sinks() -> std::sync::MutexGuard<'static, HashMap<u64, Vec<SpanData>>> {
    static SINKS: OnceLock<Mutex<HashMap<u64, Vec<SpanData>>>> = OnceLock::new();
    SINKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Installs the global test subscriber once: log lines through the test harness's capture
/// (`RUST_LOG`, default `info,verge=debug`) and the OpenTelemetry layer feeding the
/// captures. False when another global subscriber was there first.
pub(crate) fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let provider = crate::init::provider_builder("verge-test", &TracingConfig::default())
            .with_span_processor(Router)
            .build();
        let otel = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(crate::init::SCOPE))
            .with_filter(crate::init::otel_filter());
        let logs = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(crate::init::filter("info,verge=debug"));
        // The tag layer goes inside the OpenTelemetry layer, so it sees each span's creation
        // and close first.
        tracing_subscriber::registry()
            .with(logs)
            .with(Tag)
            .with(otel)
            .try_init()
            .is_ok()
    })
}

/// The capture a span belongs to (a span extension).
#[derive(Clone, Copy)]
struct CaptureTag(u64);

/// Tags new spans with the thread's capture or their parent's, and names the closing span's
/// capture for [`Router`].
struct Tag;

impl<S> Layer<S> for Tag
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let inherited = span
            .parent()
            .and_then(|parent| parent.extensions().get::<CaptureTag>().copied());
        let tag = ACTIVE
            .with(Cell::get)
            .map(CaptureTag)
            .or(inherited.filter(|_| !attrs.is_root()));
        if let Some(tag) = tag {
            span.extensions_mut().insert(tag);
        }
    }

    fn on_close(&self, id: span::Id, ctx: LayerContext<'_, S>) {
        let tag = ctx
            .span(&id)
            .and_then(|span| span.extensions().get::<CaptureTag>().copied());
        CLOSING.with(|closing| closing.set(tag.map(|CaptureTag(id)| id)));
    }
}

/// Hands each ended span to the capture its tag names; untagged spans are dropped.
#[derive(Debug)]
struct Router;

impl SpanProcessor for Router {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if let Some(id) = CLOSING.with(Cell::get)
            && let Some(sink) = sinks().get_mut(&id)
        {
            sink.push(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}
