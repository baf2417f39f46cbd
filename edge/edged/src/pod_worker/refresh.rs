//! Preparing a pod's volumes and re-writing them (kubelet: the volume manager's remounts):
//! when a configmap/secret they use changes, when the pod's labels or annotations change
//! (downwardAPI), and when a service-account token of a projected volume (every pod's
//! `kube-api-access-*`) is due, at 80% of its lifetime, when the cluster trust anchors of a
//! projected volume are a minute old, and when a pod certificate reaches its `beginRefreshAt`
//! ([`VolumeManager::next_refresh`](crate::volumes::VolumeManager::next_refresh)): the
//! worker wakes at that instant and calls
//! [`VolumeManager::refresh`](crate::volumes::VolumeManager::refresh), as the
//! kubelet's periodic pod sync does.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::warn;

use super::state::{Waiting, WaitingReason};
use super::sync::Wake;
use super::{Worker, spec_of};
use crate::events::EventType;
use verge_container_runtime::ContainerRuntime;
use verge_runtime::ErrorChain;

/// Delay before asking again for a token that could not be renewed (the old one is kept
/// until it expires).
pub(super) const TOKEN_RETRY: Duration = Duration::from_secs(60);

/// What the pod's tokens need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokenRefresh {
    /// The pod has no token.
    Never,
    /// A token is due now: refresh the volumes.
    Due,
    /// The next token is due at this instant: wake then.
    At(Instant),
}

/// Turns the wall-clock due time `next` into what to do, with `wall` and `now` the current
/// wall-clock time and instant.
pub(super) fn token_refresh(
    next: Option<SystemTime>,
    wall: SystemTime,
    now: Instant,
) -> TokenRefresh {
    match next.map(|due| due.duration_since(wall)) {
        None => TokenRefresh::Never,
        Some(Ok(left)) if !left.is_zero() => TokenRefresh::At(now + left),
        Some(_) => TokenRefresh::Due,
    }
}

impl<R: ContainerRuntime> Worker<R> {
    /// Prepares (or refreshes) the volumes; false (and a retry) while they cannot be.
    pub(super) async fn ensure_volumes(&mut self, wake: &mut Wake) -> bool {
        if self.volumes.is_some() {
            self.refresh_volumes |= self.tokens_due(wake);
            if std::mem::take(&mut self.refresh_volumes) {
                match self.ctx.volumes.refresh(&self.pod).await {
                    Ok(()) => {
                        self.token_retry = None;
                        if self.tokens_due(wake) {
                            let retry = Instant::now() + super::refresh::TOKEN_RETRY;
                            self.token_retry = Some(retry);
                            wake.at(retry);
                        }
                    }
                    Err(e) => {
                        warn!(error = %ErrorChain(&e), "volume refresh failed");
                        self.refresh_volumes = true;
                        wake.at(Instant::now() + super::RESYNC);
                    }
                }
            }
            return true;
        }
        let (prepared, fresh) = match self.prepared.take() {
            Some(early) => (early, false),
            None => (self.ctx.volumes.prepare(&self.pod).await, true),
        };
        match prepared {
            Ok(v) => {
                self.volumes = Some(v);
                // Volumes set up early keep a refresh asked for since (a label change).
                self.refresh_volumes &= !fresh;
                self.tokens_due(wake);
                true
            }
            Err(e) => {
                warn!(error = %ErrorChain(&e), "volumes not ready");
                self.pod_event(EventType::Warning, "FailedMount", e.to_string());
                let waiting = Waiting {
                    reason: WaitingReason::ContainerCreating,
                    message: e.to_string(),
                };
                let pod = Arc::clone(&self.pod);
                let spec = spec_of(&pod);
                for c in spec
                    .init_containers
                    .iter()
                    .flatten()
                    .chain(&spec.containers)
                {
                    self.track(&c.name).set_waiting(waiting.clone());
                }
                wake.at(Instant::now() + super::RETRY);
                false
            }
        }
    }

    /// Whether a service-account token of the pod is due; else wakes when the next one is.
    /// A token still due right after a refresh (the cloud did not answer; the old one is
    /// kept) is retried after [`TOKEN_RETRY`](super::refresh::TOKEN_RETRY).
    fn tokens_due(&mut self, wake: &mut Wake) -> bool {
        let now = Instant::now();
        if let Some(t) = self.token_retry.filter(|t| now < *t) {
            wake.at(t);
            return false;
        }
        let next = self.ctx.volumes.next_refresh(&self.uid);
        match token_refresh(next, SystemTime::now(), now) {
            TokenRefresh::Never => false,
            TokenRefresh::Due => true,
            TokenRefresh::At(t) => {
                wake.at(t);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::objects::fake::FakeObjects;
    use crate::volumes::VolumeManager;

    #[test]
    fn due_times_map_to_wake_ups() {
        let (wall, now) = (UNIX_EPOCH + Duration::from_secs(1000), Instant::now());
        assert_eq!(token_refresh(None, wall, now), TokenRefresh::Never);
        let later = wall + Duration::from_secs(5);
        assert_eq!(
            token_refresh(Some(later), wall, now),
            TokenRefresh::At(now + Duration::from_secs(5))
        );
        assert_eq!(token_refresh(Some(wall), wall, now), TokenRefresh::Due);
        let past = wall - Duration::from_secs(1);
        assert_eq!(token_refresh(Some(past), wall, now), TokenRefresh::Due);
    }

    /// The worker's loop in small: wake when the token is due, refresh, schedule again; the
    /// token is renewed every 80% of its one-hour lifetime.
    #[tokio::test(start_paused = true)]
    async fn tokens_are_renewed_at_80_percent_of_their_lifetime() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = Arc::new(FakeObjects::default());
        let start = 1_000_000;
        *objects.now_s.lock().expect("lock") = start;
        let m = VolumeManager::new(dir.path().join("pods"), Arc::clone(&objects))
            .with_memory_mount(crate::volumes::mount_for_tests);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "kube-api-access-x",
                "projected": {"sources": [{"serviceAccountToken":
                    {"path": "token", "expirationSeconds": 3600}}]}}]}}))
        .expect("pod");
        let t0 = UNIX_EPOCH + Duration::from_secs(u64::try_from(start).expect("start"));
        let i0 = Instant::now();
        let wall = |i: Instant| t0 + (i - i0);
        m.refresh_at(&pod, t0).await.expect("prepare");
        let mut renewed_at = Vec::new();
        while renewed_at.len() < 3 {
            let now = Instant::now();
            match token_refresh(m.next_refresh("u-1"), wall(now), now) {
                TokenRefresh::Never => panic!("the pod has a token"),
                TokenRefresh::At(t) => tokio::time::sleep_until(t).await,
                TokenRefresh::Due => {
                    let at = wall(now);
                    let elapsed = (now - i0).as_secs();
                    *objects.now_s.lock().expect("lock") =
                        start + i64::try_from(elapsed).expect("s");
                    m.refresh_at(&pod, at).await.expect("refresh");
                    renewed_at.push((now - i0).as_secs());
                }
            }
        }
        assert_eq!(renewed_at, [2880, 5760, 8640]);
        assert_eq!(*objects.tokens_issued.lock().expect("lock"), 4);
        let token = dir.path().join("pods/u-1/volumes/kube-api-access-x/token");
        assert_eq!(std::fs::read_to_string(token).expect("token"), "token-4");
    }
}
