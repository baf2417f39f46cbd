//! Current probe results per container and their broadcast (kubelet: `prober/results`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::{ProbeKind, ProbeUpdate};

/// Probe state of one container.
#[derive(Debug)]
pub(super) struct Entry {
    pub cancel: CancellationToken,
    pub container_id: String,
    pub has_startup: bool,
    pub has_readiness: bool,
    /// Current result per [`ProbeKind::index`]; `None` = unknown (kubelet: `results.Unknown`).
    pub results: [Option<bool>; 3],
}

impl Entry {
    pub fn started(&self) -> bool {
        !self.has_startup || self.results[ProbeKind::Startup.index()] == Some(true)
    }
}

pub(super) type Key = (String, String);

/// What the workers share with the manager.
#[derive(Debug)]
pub(super) struct Shared {
    pub entries: Mutex<HashMap<Key, Entry>>,
    pub updates: broadcast::Sender<ProbeUpdate>,
    /// Every failed attempt (before thresholds), and every success with a warning.
    pub failures: broadcast::Sender<ProbeUpdate>,
    /// Woken when a startup probe succeeds: readiness probes waiting for it run at once.
    pub startup_succeeded: Notify,
}

impl Shared {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn started(&self, key: &Key) -> bool {
        self.lock().get(key).is_some_and(Entry::started)
    }

    /// Returns once `key`'s container has started (its startup probe succeeded, or it has
    /// none).
    pub async fn wait_started(&self, key: &Key) {
        loop {
            let notified = self.startup_succeeded.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.started(key) {
                return;
            }
            notified.await;
        }
    }

    /// Publishes a failed attempt, or a successful one with a warning, of the entry owned by
    /// `cancel` (kubelet: the `Unhealthy` event of every failed probe, the `ProbeWarning`
    /// event of every warning).
    pub fn attempted(
        &self,
        key: &Key,
        kind: ProbeKind,
        success: bool,
        message: &str,
        cancel: &CancellationToken,
    ) {
        let entries = self.lock();
        let Some(entry) = entries.get(key).filter(|_| !cancel.is_cancelled()) else {
            return;
        };
        let _ = self.failures.send(ProbeUpdate {
            pod_uid: key.0.clone(),
            container: key.1.clone(),
            container_id: entry.container_id.clone(),
            kind,
            success,
            message: message.to_owned(),
        });
    }

    /// Records a result (after thresholds) of the entry owned by `cancel`; publishes it if it
    /// changed. Does nothing if the entry was removed or replaced meanwhile.
    pub fn set(
        &self,
        key: &Key,
        kind: ProbeKind,
        success: bool,
        message: String,
        cancel: &CancellationToken,
    ) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            return;
        };
        if cancel.is_cancelled() {
            return;
        }
        let slot = &mut entry.results[kind.index()];
        if *slot == Some(success) {
            return;
        }
        *slot = Some(success);
        if kind == ProbeKind::Startup && success {
            self.startup_succeeded.notify_waiters();
        }
        tracing::info!(pod_uid = %key.0, container = %key.1, probe = %kind, success, %message, "probe result changed");
        // No subscriber is not an error: results stay queryable.
        let _ = self.updates.send(ProbeUpdate {
            pod_uid: key.0.clone(),
            container: key.1.clone(),
            container_id: entry.container_id.clone(),
            kind,
            success,
            message,
        });
    }
}
