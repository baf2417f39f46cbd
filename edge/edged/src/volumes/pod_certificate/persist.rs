//! `<pods_dir>/<pod uid>/podcertificates.json`: the issued credentials of a pod's
//! `podCertificate` sources, for restarts offline (mode 0600, written through a temporary
//! file renamed into place; the pod directory is private to edgecore's user). A missing or
//! unreadable file means nothing is issued yet.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::warn;
use verge_pki::PrivateKeyPem;

use super::{Issued, PodCertificates, State};

/// One issued source (no `Debug`: it holds a private key).
#[derive(serde::Serialize, serde::Deserialize)]
struct Persisted {
    volume: String,
    index: usize,
    key: String,
    chain: String,
    /// Seconds since the epoch (jitter included).
    begin_refresh_at: u64,
    /// Seconds since the epoch.
    not_after: u64,
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Writes `bytes` to `path` at once, mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    verge_edge_store::private_dir::write_file(path, bytes)
}

impl PodCertificates {
    fn file(&self, uid: &str) -> PathBuf {
        self.pods_dir.join(uid).join("podcertificates.json")
    }

    /// Loads the pod's issued credentials into memory (once, when none of its sources is
    /// known).
    pub(super) fn load(&self, uid: &str) {
        if uid.is_empty() || self.lock().keys().any(|(u, _, _)| u == uid) {
            return;
        }
        let Ok(bytes) = std::fs::read(self.file(uid)) else {
            return;
        };
        let Ok(list) = serde_json::from_slice::<Vec<Persisted>>(&bytes) else {
            warn!(pod_uid = uid, "unreadable podcertificates.json ignored");
            return;
        };
        let mut states = self.lock();
        for p in list {
            let issued = Issued {
                key: PrivateKeyPem::new(p.key),
                chain: p.chain.into_bytes(),
                begin_refresh_at: UNIX_EPOCH + Duration::from_secs(p.begin_refresh_at),
                not_after: UNIX_EPOCH + Duration::from_secs(p.not_after),
            };
            states.insert((uid.to_owned(), p.volume, p.index), State::Fresh(issued));
        }
    }

    /// Writes the pod's issued credentials to its file (best effort: a failure is logged;
    /// the credentials stay usable in memory).
    pub(super) fn persist(&self, uid: &str) {
        let list: Vec<Persisted> = self
            .lock()
            .iter()
            .filter(|((u, _, _), _)| u == uid)
            .filter_map(|((_, volume, index), state)| match state {
                State::Fresh(i) | State::WaitRefresh(i, _) => Some(Persisted {
                    volume: volume.clone(),
                    index: *index,
                    key: i.key.expose().to_owned(),
                    chain: String::from_utf8_lossy(&i.chain).into_owned(),
                    begin_refresh_at: epoch_secs(i.begin_refresh_at),
                    not_after: epoch_secs(i.not_after),
                }),
                State::Wait(_) | State::Terminal(_) => None,
            })
            .collect();
        let path = self.file(uid);
        let bytes = serde_json::to_vec(&list).unwrap_or_default();
        if let Err(e) = write_private(&path, &bytes) {
            warn!(error = %e, path = %path.display(), "cannot persist pod certificates");
        }
    }
}
