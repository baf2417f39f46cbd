//! The files of configMap, secret, downwardAPI and projected volumes (the kubelet's
//! `configmap.MakePayload`, `secret.MakePayload`, `downwardapi.CollectData` and the
//! projected plugin's `collectData`). Modes default to the volume's `defaultMode`, 0644;
//! a service-account token, cluster trust bundle or pod certificate is 0600 when the pod has
//! an fsGroup. Item paths are checked (`check_path`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use futures::future::Either;
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume, VolumeProjection};

use super::atomic::{File, Payload};
use super::ownership::FsGroup;
use super::pod_certificate::PodCertificates;
use super::token::TokenCache;
use super::trust_bundle::TrustBundleCache;
use crate::Error;
use crate::env::{container_resource, pod_field};
use crate::objects::PodObjects;

/// The kubelet's default file mode of these volumes.
const DEFAULT_MODE: i32 = 0o644;
/// The default lifetime of a projected service-account token.
const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// Why a payload cannot be built.
pub(super) enum Failure {
    /// A kubelet mount failure message, e.g. `configmap "x" not found`.
    Reason(String),
    /// The objects source failed (e.g. a cloud query timed out).
    Other(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::Other(e)
    }
}

/// Checks an item path of a configMap, secret, downwardAPI or projected volume like the
/// kubelet's atomic writer: not empty, relative, no `..` component, and not starting with
/// `..` (names the writer reserves for `..data` and its `..<timestamp>` directories).
/// Files are never written through a symlink either ([`super::atomic`]).
///
/// # Errors
/// The mount failure reason, e.g. `invalid item path "../x": must not contain '..'`.
fn check_path(path: &str) -> Result<(), Failure> {
    let what = if path.is_empty() {
        "must not be empty"
    } else if path.starts_with('/') {
        "must be a relative path"
    } else if path.split('/').any(|c| c == "..") {
        "must not contain '..'"
    } else if path.starts_with("..") {
        "must not start with '..'"
    } else {
        return Ok(());
    };
    Err(Failure::Reason(format!(
        "invalid item path {path:?}: {what}"
    )))
}

fn mode(m: i32) -> u32 {
    u32::try_from(m).unwrap_or(0o644) & 0o7777
}

/// `MakePayload`: every key (no `items`) or the listed keys at their paths; a missing
/// listed key is skipped when `optional`, else `<what> references non-existent <key kind>:`.
fn project(
    out: &mut Payload,
    items: Option<&[KeyToPath]>,
    data: BTreeMap<String, Vec<u8>>,
    default_mode: i32,
    optional: bool,
    missing: &str,
) -> Result<(), Failure> {
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(
                    k,
                    File {
                        data: v,
                        mode: mode(default_mode),
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(Failure::Reason(format!("{missing}: {}", item.key)));
                };
                let m = mode(item.mode.unwrap_or(default_mode));
                out.insert(
                    item.path.clone(),
                    File {
                        data: v.clone(),
                        mode: m,
                    },
                );
            }
        }
    }
    Ok(())
}

async fn config_map<O: PodObjects>(
    objects: &O,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, Failure> {
    let Some(cm) = objects.config_map(ns, name).await? else {
        if optional {
            return Ok(BTreeMap::new());
        }
        return Err(Failure::Reason(format!("configmap \"{name}\" not found")));
    };
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.unwrap_or_default() {
        data.entry(k).or_insert(v.0);
    }
    Ok(data)
}

/// How many configMap and secret sources of one projected volume are read at once: each one
/// missing from the MetaStore is a cloud query, and a volume may project hundreds.
const FETCH_CONCURRENCY: usize = 16;

/// The data of every configMap and secret source of a projected volume, in source order
/// (other sources have no entry), read [`FETCH_CONCURRENCY`] at a time.
///
/// # Errors
/// The first failure in source order, as reading them one by one would give it.
async fn fetch_sources<O: PodObjects>(
    objects: &O,
    ns: &str,
    sources: &[VolumeProjection],
) -> Result<Vec<BTreeMap<String, Vec<u8>>>, Failure> {
    // Collected first: a stream holding the borrowing closure would not be `Send` for every
    // lifetime, which the pod worker's spawned future must be.
    let mut reads = Vec::new();
    for source in sources {
        if let Some(s) = &source.config_map {
            let optional = s.optional.unwrap_or(false);
            reads.push(Either::Left(config_map(objects, ns, &s.name, optional)));
        } else if let Some(s) = &source.secret {
            let optional = s.optional.unwrap_or(false);
            reads.push(Either::Right(secret(objects, ns, &s.name, optional)));
        }
    }
    stream::iter(reads)
        .buffered(FETCH_CONCURRENCY)
        .try_collect()
        .await
}

async fn secret<O: PodObjects>(
    objects: &O,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, Failure> {
    let Some(s) = objects.secret(ns, name).await? else {
        if optional {
            return Ok(BTreeMap::new());
        }
        return Err(Failure::Reason(format!("secret \"{name}\" not found")));
    };
    // `stringData` is write-only: the API server merges it into `data`.
    Ok(s.data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

/// `CollectData`: each item's fieldRef (pod metadata) or resourceFieldRef value.
fn downward(
    out: &mut Payload,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
) -> Result<(), Failure> {
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            pod_field(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            container_resource(pod, r.container_name.as_deref().unwrap_or_default(), r)
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                let m = mode(item.mode.unwrap_or(default_mode));
                out.insert(
                    item.path.clone(),
                    File {
                        data: v.into_bytes(),
                        mode: m,
                    },
                );
            }
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(Failure::Reason(errors.remove(0))),
        _ => Err(Failure::Reason(format!("[{}]", errors.join(", ")))),
    }
}

/// What projected sources keep per pod besides objects: service-account tokens, cluster
/// trust anchors and pod certificates, each refreshed on its own schedule.
#[derive(Debug)]
pub(super) struct Caches {
    tokens: TokenCache,
    bundles: TrustBundleCache,
    certs: PodCertificates,
}

impl Caches {
    /// Caches persisting under `pods_dir` (`<data_dir>/pods`).
    pub(super) fn new(pods_dir: PathBuf) -> Self {
        Self {
            tokens: TokenCache::new(pods_dir.clone()),
            bundles: TrustBundleCache::default(),
            certs: PodCertificates::new(pods_dir),
        }
    }

    /// When something of the pod `uid` is next due: the earliest of its tokens' refresh
    /// times, its trust anchors' next read and its certificates' `beginRefreshAt`.
    pub(super) fn next_due(&self, uid: &str) -> Option<SystemTime> {
        let tokens = self.tokens.next_due(uid);
        let bundles = self.bundles.next_due(uid);
        let certs = self.certs.next_due(uid);
        tokens.into_iter().chain(bundles).chain(certs).min()
    }

    /// Forgets everything of the pod `uid`.
    pub(super) fn forget(&self, uid: &str) {
        self.tokens.forget(uid);
        self.bundles.forget(uid);
        self.certs.forget(uid);
    }
}

/// The mode of a projected file holding a credential (a service-account token, trust
/// anchors): the volume's `defaultMode`, but 0600 (0640 once group-owned) with an fsGroup,
/// as the kubelet's projected plugin writes them.
fn credential_mode(pod: &Pod, default_mode: i32) -> u32 {
    if FsGroup::of(pod).is_some() {
        0o600
    } else {
        mode(default_mode)
    }
}

/// The files of a configMap, secret, downwardAPI or projected `volume` of `pod`, with
/// projected service-account tokens, cluster trust anchors and pod certificates from
/// `caches` (each read anew when due at `now`).
pub(super) async fn build<O: PodObjects>(
    objects: &O,
    caches: &Caches,
    pod: &Pod,
    volume: &Volume,
    now: SystemTime,
) -> Result<Payload, Failure> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = Payload::new();
    if let Some(src) = &volume.config_map {
        let optional = src.optional.unwrap_or(false);
        let data = config_map(objects, ns, &src.name, optional).await?;
        let dm = src.default_mode.unwrap_or(DEFAULT_MODE);
        let missing = "configmap references non-existent config key";
        project(&mut out, src.items.as_deref(), data, dm, optional, missing)?;
    } else if let Some(src) = &volume.secret {
        let optional = src.optional.unwrap_or(false);
        let name = src.secret_name.as_deref().unwrap_or_default();
        let data = secret(objects, ns, name, optional).await?;
        let dm = src.default_mode.unwrap_or(DEFAULT_MODE);
        let missing = "secret references non-existent secret key";
        project(&mut out, src.items.as_deref(), data, dm, optional, missing)?;
    } else if let Some(src) = &volume.downward_api {
        let dm = src.default_mode.unwrap_or(DEFAULT_MODE);
        downward(&mut out, pod, src.items.as_deref().unwrap_or_default(), dm)?;
    } else if let Some(src) = &volume.projected {
        let dm = src.default_mode.unwrap_or(DEFAULT_MODE);
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let sources = src.sources.as_deref().unwrap_or_default();
        let mut fetched = fetch_sources(objects, ns, sources).await?.into_iter();
        for (index, source) in sources.iter().enumerate() {
            if let Some(s) = &source.config_map {
                let optional = s.optional.unwrap_or(false);
                let data = fetched.next().unwrap_or_default();
                let missing = "configmap references non-existent config key";
                project(&mut out, s.items.as_deref(), data, dm, optional, missing)?;
            } else if let Some(s) = &source.secret {
                let optional = s.optional.unwrap_or(false);
                let data = fetched.next().unwrap_or_default();
                let missing = "secret references non-existent secret key";
                project(&mut out, s.items.as_deref(), data, dm, optional, missing)?;
            } else if let Some(s) = &source.downward_api {
                downward(&mut out, pod, s.items.as_deref().unwrap_or_default(), dm)?;
            } else if let Some(t) = &source.service_account_token {
                let seconds = t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS);
                let audience = t.audience.as_deref().unwrap_or_default();
                let token = caches
                    .tokens
                    .get(objects, pod, audience, seconds, now)
                    .await?;
                out.insert(
                    t.path.clone(),
                    File {
                        data: token.into_bytes(),
                        mode: credential_mode(pod, dm),
                    },
                );
            } else if let Some(b) = &source.cluster_trust_bundle {
                let anchors = caches
                    .bundles
                    .get(objects, uid, &volume.name, index, b, now)
                    .await?;
                out.insert(
                    b.path.clone(),
                    File {
                        data: anchors,
                        mode: credential_mode(pod, dm),
                    },
                );
            } else if let Some(c) = &source.pod_certificate {
                let issued = caches
                    .certs
                    .get(objects, pod, &volume.name, index, c, now)
                    .await?;
                let key = issued.key.expose().as_bytes();
                let m = credential_mode(pod, dm);
                let file = |data: Vec<u8>| File { data, mode: m };
                let paths = [
                    (&c.credential_bundle_path, [key, &issued.chain].concat()),
                    (&c.key_path, key.to_vec()),
                    (&c.certificate_chain_path, issued.chain.clone()),
                ];
                for (path, data) in paths {
                    if let Some(path) = path.as_deref().filter(|p| !p.is_empty()) {
                        out.insert(path.to_owned(), file(data));
                    }
                }
            } else {
                let reason = "unsupported projected volume source (edged supports configMap, \
                              secret, downwardAPI, serviceAccountToken, clusterTrustBundle, \
                              podCertificate)";
                return Err(Failure::Reason(reason.into()));
            }
        }
    }
    out.keys().try_for_each(|p| check_path(p))?;
    Ok(out)
}
