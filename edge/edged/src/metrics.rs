//! edged's Prometheus series: `verge_edgecore_pod_start_duration_seconds` (histogram, label
//! `stage`: `image`, `sandbox`, `container`, `total`), counted into one process-wide instance
//! ([`global`]) that edgecore registers on its `/metrics` (docs/observability.md "Metrics").
//! Tests make their own [`Metrics`].
//!
//! Pod start stages, like the kubelet's `kubelet_pod_start_duration_seconds` split up:
//! `image` is making the image present (pull per policy), `sandbox` creating and starting the
//! pod sandbox (its image included), `container` creating and starting one container, and
//! `total` from the pod worker's start (edged saw the new pod) until the pod's status first
//! says `Running`. A pod edgecore adopts already `Running` (after a restart) is not counted.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A stage of a pod start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Making the image present.
    Image,
    /// Creating and starting the sandbox.
    Sandbox,
    /// Creating and starting one container.
    Container,
    /// From the worker's start until the pod is Running.
    Total,
}

impl Stage {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Sandbox => "sandbox",
            Self::Container => "container",
            Self::Total => "total",
        }
    }
}

/// Labels of `verge_edgecore_pod_start_duration_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StageLabels {
    /// `image`, `sandbox`, `container` or `total`.
    pub stage: &'static str,
}

/// edgecore's series (cheap to clone: shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    pod_start: Family<StageLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            pod_start: Family::new_with_constructor(|| {
                Histogram::new(verge_runtime::metrics::latency_buckets())
            }),
        }
    }
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's series.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

impl Metrics {
    /// Registers these series into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "verge_edgecore_pod_start_duration_seconds",
            "Pod start latency by stage: image, sandbox, container (each attempt), total (worker start until Running).",
            self.pod_start.clone(),
        );
    }

    /// Records that `stage` of a pod start took `elapsed`.
    pub fn pod_start(&self, stage: Stage, elapsed: Duration) {
        self.pod_start
            .get_or_create(&StageLabels {
                stage: stage.as_str(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_start_stages_encode_with_conventional_names() {
        let metrics = Metrics::default();
        metrics.pod_start(Stage::Image, Duration::from_millis(30));
        metrics.pod_start(Stage::Total, Duration::from_secs(2));
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let text = verge_runtime::metrics::encode(&registry).expect("encodes");
        for line in [
            "verge_edgecore_pod_start_duration_seconds_bucket{le=\"0.04\",stage=\"image\"} 1\n",
            "verge_edgecore_pod_start_duration_seconds_count{stage=\"total\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }
}
