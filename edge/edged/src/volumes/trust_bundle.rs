//! `clusterTrustBundle` projected volume sources (the kubelet's clustertrustbundle manager,
//! `GetTrustAnchorsByName` / `GetTrustAnchorsBySigner`, and the projected plugin's
//! `collectData`).
//!
//! A source names one bundle (`name`), or a signer and a label selector (`signerName`,
//! `labelSelector`: a missing selector matches nothing, an empty one every bundle of the
//! signer). Its file holds the trust anchors of the selected bundles normalized as the
//! kubelet does ([`normalize`]). Nothing selected: an empty file when `optional`, else the
//! mount fails with the kubelet's reason.
//!
//! Refresh: the kubelet sets a projected volume up again at each periodic pod sync
//! (`syncFrequency`, 1 minute by default), reading bundles from its informer. edged has no
//! informer of bundles (nothing sends them down): each source's anchors are cached per pod
//! and read again once [`RESYNC`] has passed ([`TrustBundleCache::next_due`] tells the pod
//! worker when, through
//! [`VolumeManager::next_refresh`](super::VolumeManager::next_refresh)). A read that fails
//! for want of the cloud keeps the cached anchors (below that, the objects source keeps the
//! cloud's last answer for restarts offline).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::ClusterTrustBundleProjection;
use rand::SeedableRng as _;
use rand::seq::SliceRandom as _;
use tracing::warn;
use verge_runtime::ErrorChain;

use super::payload::Failure;
use super::selector;
use crate::objects::PodObjects;

/// How long a source's anchors are used before they are read again: the kubelet's default
/// `syncFrequency`, after which it sets its projected volumes up again.
pub(super) const RESYNC: Duration = Duration::from_secs(60);

/// The kubelet's reason when a signer and selector select nothing.
const MATCHED_ZERO: &str =
    "combination of signerName and labelSelector matched zero ClusterTrustBundles";

/// (pod uid, volume name, index of the source in the volume).
type Key = (String, String, usize);

/// The anchors of each source, with when they were read. Its `Debug` shows the count only.
#[derive(Default)]
pub(super) struct TrustBundleCache {
    entries: Mutex<HashMap<Key, (Vec<u8>, SystemTime)>>,
}

impl std::fmt::Debug for TrustBundleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustBundleCache")
            .field("sources", &self.lock().len())
            .finish()
    }
}

impl TrustBundleCache {
    /// The anchors of `source`, the `index`-th source of `volume` of the pod `uid`: the cached
    /// ones while younger than [`RESYNC`] at `now`, else read anew from `objects` (a failure
    /// of the objects source keeps cached ones, logged).
    ///
    /// # Errors
    /// As [`anchors`], when nothing is cached or the answer is definite (not found,
    /// matched nothing, invalid selector).
    pub(super) async fn get<O: PodObjects>(
        &self,
        objects: &O,
        uid: &str,
        volume: &str,
        index: usize,
        source: &ClusterTrustBundleProjection,
        now: SystemTime,
    ) -> Result<Vec<u8>, Failure> {
        let key = (uid.to_owned(), volume.to_owned(), index);
        let cached = self.lock().get(&key).cloned();
        if let Some((anchors, read)) = &cached
            && now < *read + RESYNC
        {
            return Ok(anchors.clone());
        }
        match anchors(objects, source).await {
            Ok(fresh) => {
                self.lock().insert(key, (fresh.clone(), now));
                Ok(fresh)
            }
            Err(Failure::Other(e)) if cached.is_some() => {
                warn!(volume, error = %ErrorChain(&e), "cluster trust bundles not read; keeping the last ones");
                Ok(cached.map(|(anchors, _)| anchors).unwrap_or_default())
            }
            Err(e) => {
                self.lock().remove(&key);
                Err(e)
            }
        }
    }

    /// When a cached source of the pod `uid` is next due to be read again.
    pub(super) fn next_due(&self, uid: &str) -> Option<SystemTime> {
        self.lock()
            .iter()
            .filter(|((u, _, _), _)| u == uid)
            .map(|(_, (_, read))| *read + RESYNC)
            .min()
    }

    /// Forgets every source of the pod `uid`.
    pub(super) fn forget(&self, uid: &str) {
        self.lock().retain(|(u, _, _), _| u != uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Vec<u8>, SystemTime)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The normalized anchors `source` selects, read from `objects` now.
///
/// # Errors
/// [`Failure::Reason`] with the kubelet's reason: neither `name` nor `signerName`; the named
/// bundle does not exist, or the signer and selector select none, and the source is not
/// `optional`; an invalid selector. [`Failure::Other`] when `objects` fails.
pub(super) async fn anchors<O: PodObjects>(
    objects: &O,
    source: &ClusterTrustBundleProjection,
) -> Result<Vec<u8>, Failure> {
    let optional = source.optional.unwrap_or(false);
    let none = |reason: String| {
        if optional {
            Ok(Vec::new())
        } else {
            Err(Failure::Reason(reason))
        }
    };
    let bundles: Vec<ClusterTrustBundle> = if let Some(name) = &source.name {
        match objects.cluster_trust_bundle(name).await? {
            Some(bundle) => vec![bundle],
            None => {
                return none(format!(
                    "while getting ClusterTrustBundle: clustertrustbundle.certificates.k8s.io \
                     {name:?} not found"
                ));
            }
        }
    } else if let Some(signer) = &source.signer_name {
        // A missing selector matches nothing (nothing to read).
        let Some(selector) = &source.label_selector else {
            return none(MATCHED_ZERO.into());
        };
        let mut selected = Vec::new();
        for bundle in objects.cluster_trust_bundles_of(signer).await? {
            let labels = bundle.metadata.labels.clone().unwrap_or_default();
            let matches = selector::matches(selector, &labels)
                .map_err(|e| Failure::Reason(format!("while parsing label selector: {e}")))?;
            if matches {
                selected.push(bundle);
            }
        }
        if selected.is_empty() {
            return none(MATCHED_ZERO.into());
        }
        selected
    } else {
        return Err(Failure::Reason(
            "ClusterTrustBundle projection requires either name or signerName to be set".into(),
        ));
    };
    Ok(normalize(
        bundles.iter().map(|b| b.spec.trust_bundle.as_str()),
    ))
}

/// The kubelet's `normalizeTrustAnchors`: the DER bytes of every PEM block of `bundles`,
/// deduplicated, sorted, then shuffled with a seed drawn once per edgecore process (the
/// kubelet's "stable ordering that changes each time Kubelet restarts"), each written as a
/// `CERTIFICATE` block with LF line endings (headers and text between blocks dropped).
pub(super) fn normalize<'a>(bundles: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let unique: BTreeSet<Vec<u8>> = bundles.into_iter().flat_map(pem_blocks).collect();
    let mut ders: Vec<Vec<u8>> = unique.into_iter().collect();
    ders.shuffle(&mut rand::rngs::StdRng::seed_from_u64(process_seed()));
    ders.iter()
        .flat_map(|der| verge_pki::pem_io::cert_to_pem(der).into_bytes())
        .collect()
}

/// The contents of the PEM blocks of `text` that are certificates, keys, CSRs or CRLs, in
/// order; reading stops at the first malformed block (logged).
pub(super) fn pem_blocks(text: &str) -> Vec<Vec<u8>> {
    let mut reader = text.as_bytes();
    let mut out = Vec::new();
    loop {
        match rustls::pki_types::pem::from_buf(&mut reader) {
            Ok(Some((_, der))) => out.push(der),
            Ok(None) => return out,
            Err(e) => {
                warn!(error = %e, "malformed PEM block; the blocks after it are ignored");
                return out;
            }
        }
    }
}

/// The shuffle seed of this process.
fn process_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(rand::random)
}

#[cfg(test)]
mod tests;
