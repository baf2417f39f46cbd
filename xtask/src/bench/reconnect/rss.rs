//! Peak resident memory of the cloud processes while the phases run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Services;
use crate::local::status_kib;

/// Peak VmRSS samples (KiB) of cloudhub and edgecontroller, every 100 ms.
pub(super) struct RssSampler {
    pub(super) peaks: Arc<[AtomicU64; 2]>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    pub(super) fn start(services: &Services) -> Self {
        let peaks = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let pids = [services.cloudhub, services.edgecontroller];
        let task = tokio::spawn({
            let peaks = peaks.clone();
            async move {
                loop {
                    for (peak, pid) in peaks.iter().zip(pids) {
                        if let Some(kib) = status_kib(pid, "VmRSS") {
                            peak.fetch_max(kib, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Self { peaks, task }
    }

    /// The peaks since the last call (cloudhub, edgecontroller), resetting them.
    pub(super) fn take(&self) -> (u64, u64) {
        (
            self.peaks[0].swap(0, Ordering::Relaxed),
            self.peaks[1].swap(0, Ordering::Relaxed),
        )
    }

    pub(super) fn stop(self) {
        self.task.abort();
    }
}
