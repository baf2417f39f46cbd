//! edged's Prometheus series: `verge_edgecore_pod_start_duration_seconds` (histogram, label
//! `stage`: `image`, `sandbox`, `container`, `total`), counted into one process-wide instance
//! ([`global`]) that edgecore registers on its `/metrics` (docs/observability.md "Metrics").
//! Tests make their own [`Metrics`].
//!
//! Probe attempts are counted apart ([`Metrics::probe_attempt`]) as the kubelet's
//! `prober_probe_total` (labels `probe_type`, `result`, `container`, `namespace`, `pod`,
//! `pod_uid`), which the streaming server serves on `/metrics/probes` as the kubelet does.
//! A probe's series are removed when its worker stops (the kubelet deletes them too).
//!
//! Pod start stages, like the kubelet's `kubelet_pod_start_duration_seconds` split up:
//! `image` is making the image present (pull per policy), `sandbox` creating and starting the
//! pod sandbox (its image included), `container` creating and starting one container, and
//! `total` from the pod worker's start (edged saw the new pod) until the pod's status first
//! says `Running`. A pod edgecore adopts already `Running` (after a restart) is not counted.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
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

/// Labels of `prober_probe_total` (the kubelet's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: &'static str,
    /// `successful` or `failed` (the kubelet's `unknown` is never counted here).
    pub result: &'static str,
    /// The container's name.
    pub container: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's uid.
    pub pod_uid: String,
}

/// edgecore's series (cheap to clone: shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    pod_start: Family<StageLabels, Histogram>,
    probes: Family<ProbeLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            pod_start: Family::new_with_constructor(|| {
                Histogram::new(verge_runtime::metrics::latency_buckets())
            }),
            probes: Family::default(),
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

    /// Registers `prober_probe_total` into `registry` (the kubelet's `/metrics/probes`).
    pub fn register_probes(&self, registry: &mut Registry) {
        registry.register(
            "prober_probe",
            "[ALPHA] Attempts of each container's liveness, readiness and startup probes, by result",
            self.probes.clone(),
        );
    }

    /// Counts one attempt of the probe `labels` names (its `result` is set here).
    pub fn probe_attempt(&self, labels: &ProbeLabels, success: bool) {
        let labels = ProbeLabels {
            result: if success { "successful" } else { "failed" },
            ..labels.clone()
        };
        self.probes.get_or_create(&labels).inc();
    }

    /// Removes the series of the probe `labels` names (every result).
    pub fn forget_probe(&self, labels: &ProbeLabels) {
        for result in ["successful", "failed"] {
            self.probes.remove(&ProbeLabels {
                result,
                ..labels.clone()
            });
        }
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

    #[test]
    fn probe_attempts_count_by_result_and_are_forgotten() {
        let metrics = Metrics::default();
        let labels = ProbeLabels {
            probe_type: "Liveness",
            result: "",
            container: "app".into(),
            namespace: "ns".into(),
            pod: "p".into(),
            pod_uid: "u1".into(),
        };
        metrics.probe_attempt(&labels, true);
        metrics.probe_attempt(&labels, true);
        metrics.probe_attempt(&labels, false);
        let mut registry = Registry::default();
        metrics.register_probes(&mut registry);
        let text = verge_runtime::metrics::encode(&registry).expect("encodes");
        assert!(text.contains("# TYPE prober_probe counter"), "{text}");
        assert!(text.contains("prober_probe_total{probe_type=\"Liveness\",result=\"successful\",container=\"app\",namespace=\"ns\",pod=\"p\",pod_uid=\"u1\"} 2"), "{text}");
        assert!(text.contains("result=\"failed\""), "{text}");
        metrics.forget_probe(&labels);
        let text = verge_runtime::metrics::encode(&registry).expect("encodes");
        assert!(!text.contains("pod_uid"), "{text}");
    }
}
