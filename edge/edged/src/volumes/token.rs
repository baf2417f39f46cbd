//! Service-account tokens of projected volumes, cached per pod and refreshed like the
//! kubelet's token manager (`requiresRefresh`): after 80% of the token's lifetime, or once
//! it is 24 hours old, whichever comes first (without the kubelet's random jitter). A
//! failed refresh keeps the old token until it expires.
//!
//! Offline autonomy (architecture.md §3.4): every token is also written to
//! `<pods_dir>/<pod uid>/tokens.json` (mode 0600, next to the pod's volumes), and read back
//! when the in-memory cache is empty, so a pod restarted by a new edgecore process while the
//! cloud is unreachable gets its still-valid token instead of failing to start.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::Pod;
use tracing::warn;

use crate::Result;
use crate::objects::PodObjects;

/// The kubelet's `maxTTL`: tokens older than this are refreshed.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// (pod uid, audience, expirationSeconds).
type Key = (String, String, i64);

/// A cached token: the token, when it is due for refresh, when it expires.
type Cached = (String, SystemTime, SystemTime);

/// Tokens by pod, audience and requested lifetime, in memory and in each pod's directory.
/// Its `Debug` shows how many tokens it holds, never a token.
pub(super) struct TokenCache {
    tokens: Mutex<HashMap<Key, Cached>>,
    pods_dir: PathBuf,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("tokens", &self.lock().len())
            .field("pods_dir", &self.pods_dir)
            .finish()
    }
}

/// One persisted token (`tokens.json` holds a list of these; no `Debug`: it holds a token).
#[derive(serde::Serialize, serde::Deserialize)]
struct Persisted {
    audience: String,
    expiration_seconds: i64,
    token: String,
    /// Seconds since the epoch.
    due: u64,
    /// Seconds since the epoch.
    expires: u64,
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// When `tr` (requested with `requested` seconds, answered at `now`) must be refreshed, and
/// when it expires: `exp - ttl/5`, or `iat + 24h` if earlier, with `exp` from
/// `status.expirationTimestamp` (else `now + ttl`), `ttl` from `spec.expirationSeconds`
/// and `iat = exp - ttl`.
pub(super) fn refresh_at(
    tr: &TokenRequest,
    requested: i64,
    now: SystemTime,
) -> (SystemTime, SystemTime) {
    let ttl = tr
        .spec
        .as_ref()
        .and_then(|s| s.expiration_seconds)
        .unwrap_or(requested)
        .max(0)
        .unsigned_abs();
    let ttl = Duration::from_secs(ttl);
    let exp = tr
        .status
        .as_ref()
        .and_then(|s| s.expiration_timestamp.as_ref())
        .and_then(|t| u64::try_from(t.0.as_second()).ok())
        .map_or(now + ttl, |s| UNIX_EPOCH + Duration::from_secs(s));
    let iat = exp.checked_sub(ttl).unwrap_or(UNIX_EPOCH);
    let early = exp.checked_sub(ttl / 5).unwrap_or(UNIX_EPOCH);
    (early.min(iat + MAX_TTL), exp)
}

impl TokenCache {
    /// A cache persisting under `pods_dir` (`<data_dir>/pods`).
    pub(super) fn new(pods_dir: PathBuf) -> Self {
        Self {
            tokens: Mutex::default(),
            pods_dir,
        }
    }

    fn file(&self, uid: &str) -> PathBuf {
        self.pods_dir.join(uid).join("tokens.json")
    }

    /// Loads the pod's persisted tokens into memory (once, when none are cached for it).
    fn load(&self, uid: &str) {
        if self.lock().keys().any(|(u, _, _)| u == uid) {
            return;
        }
        let Ok(bytes) = std::fs::read(self.file(uid)) else {
            return;
        };
        let Ok(list) = serde_json::from_slice::<Vec<Persisted>>(&bytes) else {
            warn!(pod_uid = uid, "unreadable tokens.json ignored");
            return;
        };
        let mut tokens = self.lock();
        for p in list {
            tokens.insert(
                (uid.to_owned(), p.audience, p.expiration_seconds),
                (
                    p.token,
                    UNIX_EPOCH + Duration::from_secs(p.due),
                    UNIX_EPOCH + Duration::from_secs(p.expires),
                ),
            );
        }
    }

    /// Writes the pod's cached tokens to its `tokens.json` (best effort: a failure is logged;
    /// the tokens stay usable in memory).
    fn persist(&self, uid: &str) {
        let list: Vec<Persisted> = self
            .lock()
            .iter()
            .filter(|((u, _, _), _)| u == uid)
            .map(|((_, audience, secs), (token, due, exp))| Persisted {
                audience: audience.clone(),
                expiration_seconds: *secs,
                token: token.clone(),
                due: epoch_secs(*due),
                expires: epoch_secs(*exp),
            })
            .collect();
        let path = self.file(uid);
        let bytes = serde_json::to_vec(&list).unwrap_or_default();
        let write = || verge_edge_store::private_dir::write_file(&path, &bytes);
        if let Err(e) = write() {
            warn!(error = %e, path = %path.display(), "cannot persist service account tokens");
        }
    }

    /// The token for `pod`, `audience` (empty: the API server's default) and
    /// `expiration_seconds`: the cached one unless due at `now`, else a new one from
    /// `objects`.
    ///
    /// # Errors
    /// Errors of [`PodObjects::service_account_token`].
    pub(super) async fn get<O: PodObjects>(
        &self,
        objects: &O,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
        now: SystemTime,
    ) -> Result<String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.load(&uid);
        let key = (uid.clone(), audience.to_owned(), expiration_seconds);
        let cached = self.lock().get(&key).cloned();
        if let Some((token, due, _)) = &cached
            && now < *due
        {
            return Ok(token.clone());
        }
        let audiences = if audience.is_empty() {
            Vec::new()
        } else {
            vec![audience.to_owned()]
        };
        let tr = match objects
            .service_account_token(pod, audiences, expiration_seconds)
            .await
        {
            Ok(tr) => tr,
            // As the kubelet: a failed refresh keeps a token that has not expired yet.
            Err(e) => match cached {
                Some((token, _, exp)) if now < exp => {
                    warn!(error = %e, "service account token refresh failed; keeping the old one");
                    return Ok(token);
                }
                _ => return Err(e),
            },
        };
        let (due, exp) = refresh_at(&tr, expiration_seconds, now);
        let token = tr.status.and_then(|s| s.token).unwrap_or_default();
        self.lock().insert(key, (token.clone(), due, exp));
        self.persist(&uid);
        Ok(token)
    }

    /// The earliest time a cached token of the pod `uid` is due for refresh.
    pub(super) fn next_due(&self, uid: &str) -> Option<SystemTime> {
        self.lock()
            .iter()
            .filter(|((u, _, _), _)| u == uid)
            .map(|(_, (_, due, _))| *due)
            .min()
    }

    /// Forgets every token of the pod `uid`.
    pub(super) fn forget(&self, uid: &str) {
        self.lock().retain(|(u, _, _), _| u != uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cached>> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
