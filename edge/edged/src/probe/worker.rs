//! One probe's loop (kubelet: `prober/worker.go`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use tokio::time::{MissedTickBehavior, interval, sleep, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{Key, ProbeHandler, ProbeKind, ProbeOutcome, ProbeTarget, Shared};

/// A probe's timing with the Kubernetes defaults applied (`k8s.io/api` defaults: period 10s,
/// timeout 1s, successThreshold 1, failureThreshold 3; values below 1 are raised to 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(probe: &Probe, kind: ProbeKind) -> Self {
        let secs = |v: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(u64::try_from(v.unwrap_or(default).max(min)).unwrap_or(0))
        };
        let count =
            |v: Option<i32>, default: i32| u32::try_from(v.unwrap_or(default).max(1)).unwrap_or(1);
        let mut success_threshold = count(probe.success_threshold, 1);
        if kind != ProbeKind::Readiness && success_threshold != 1 {
            // The API server rejects this; be lenient like the kubelet would be after defaulting.
            warn!(probe = %kind, success_threshold, "successThreshold must be 1 for liveness and startup probes; using 1");
            success_threshold = 1;
        }
        Self {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: timeout_of(probe),
            success_threshold,
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// A probe's `timeoutSeconds`: 1s by default and at least 1s.
pub(super) fn timeout_of(probe: &Probe) -> Duration {
    Duration::from_secs(u64::try_from(probe.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1))
}

/// The state of one probe task.
pub(super) struct Worker<H> {
    pub handler: Arc<H>,
    pub shared: Arc<Shared>,
    pub key: Key,
    pub target: Arc<ProbeTarget>,
    pub container: Arc<Container>,
    pub timing: Timing,
    pub kind: ProbeKind,
    pub cancel: CancellationToken,
}

impl<H: ProbeHandler> Worker<H> {
    /// Waits `initialDelaySeconds`, then probes every `periodSeconds` until cancelled, the
    /// startup probe has succeeded, or a liveness/startup failure has been published (the
    /// kubelet's "on hold until the container is restarted").
    pub async fn run(self) {
        let cancel = self.cancel.clone();
        tokio::select! {
            biased;
            () = cancel.cancelled() => {}
            () = self.probe_loop() => {}
        }
        crate::metrics::global().forget_probe(&self.probe_labels());
        debug!(pod_uid = %self.key.0, container = %self.key.1, probe = %self.kind, "probe worker stopped");
    }

    async fn probe_loop(&self) {
        sleep(self.timing.initial_delay).await;
        let mut ticker = interval(self.timing.period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The last raw result and how many times in a row it came (kubelet: lastResult, resultRun).
        let mut last: Option<bool> = None;
        let mut run = 0u32;
        loop {
            if self.kind == ProbeKind::Readiness && !self.shared.started(&self.key) {
                // kubelet: a readiness probe runs as soon as the startup probe succeeded (the
                // prober manager's manual trigger), not a period later.
                tokio::select! {
                    _ = ticker.tick() => {}
                    () = self.shared.wait_started(&self.key) => ticker.reset(),
                }
            } else {
                ticker.tick().await;
            }
            if self.kind != ProbeKind::Startup && !self.shared.started(&self.key) {
                continue; // kubelet: liveness and readiness wait for the startup probe
            }
            let outcome = self.attempt().await;
            crate::metrics::global().probe_attempt(&self.probe_labels(), outcome.success);
            if last == Some(outcome.success) {
                run = run.saturating_add(1);
            } else {
                (last, run) = (Some(outcome.success), 1);
            }
            let threshold = if outcome.success {
                self.timing.success_threshold
            } else {
                self.timing.failure_threshold
            };
            debug!(pod_uid = %self.key.0, container = %self.key.1, probe = %self.kind,
                success = outcome.success, run, threshold, message = %outcome.message, "probe attempt");
            if !outcome.success || !outcome.message.is_empty() {
                // A failure, or a success with a warning: each attempt is an event.
                self.shared.attempted(
                    &self.key,
                    self.kind,
                    outcome.success,
                    &outcome.message,
                    &self.cancel,
                );
            }
            if run < threshold {
                continue;
            }
            let success = outcome.success;
            self.shared
                .set(&self.key, self.kind, success, outcome.message, &self.cancel);
            match (self.kind, success) {
                (ProbeKind::Startup, true) => return,
                (ProbeKind::Liveness | ProbeKind::Startup, false) => return,
                _ => {}
            }
        }
    }

    /// The labels of this probe's `prober_probe_total` series.
    fn probe_labels(&self) -> crate::metrics::ProbeLabels {
        crate::metrics::ProbeLabels {
            probe_type: self.kind.as_str(),
            result: "",
            container: self.target.container.clone(),
            namespace: self.target.namespace.clone(),
            pod: self.target.pod.clone(),
            pod_uid: self.target.pod_uid.clone(),
        }
    }

    /// One attempt, bounded by `timeoutSeconds` (a timeout is a failure).
    async fn attempt(&self) -> ProbeOutcome {
        let probe = self.kind.probe_of(&self.container);
        let Some(probe) = probe else {
            return ProbeOutcome::failure("probe vanished from the container spec");
        };
        let attempt = self
            .handler
            .run(self.kind, &self.target, &self.container, probe);
        match timeout(self.timing.timeout, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => {
                ProbeOutcome::failure(format!("probe timed out after {:?}", self.timing.timeout))
            }
        }
    }
}
