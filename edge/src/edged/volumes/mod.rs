//! Pod volumes on the node's filesystem (the kubelet's volume manager and its in-tree
//! plugins emptyDir, hostPath, configMap, secret, downwardAPI and projected).
//!
//! Every volume except hostPath lives in `<pods_dir>/<pod uid>/volumes/<volume name>`.
//! configMap, secret, downwardAPI and projected volumes are written like the kubelet's
//! `AtomicWriter` (`atomic`): files in a timestamped `..<ts>` directory, published by
//! renaming a `..data` symlink, with per-file symlinks `key -> ..data/key`, so a container
//! sees an update all at once. An emptyDir with `medium: Memory` is a tmpfs (`mounts`),
//! unmounted before the pod directory is removed. A pod `securityContext.fsGroup` makes
//! every volume but hostPath owned by that group (`ownership`).
//! [`PodVolumes::binds_for`] turns a container's volumeMounts (`subPath`, `subPathExpr`)
//! into Docker binds.

mod atomic;
mod error;
mod host;
mod mounts;
mod ownership;
mod payload;
mod token;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Container, Pod, Volume};
use tracing::{info, warn};

use super::env::expand_with;
use super::objects::PodObjects;
pub use error::VolumeError;

/// `Result` with [`VolumeError`].
pub type Result<T, E = VolumeError> = std::result::Result<T, E>;
use ownership::FsGroup;
use token::TokenCache;
use verge_runtime::ErrorChain;

/// Prepares, refreshes and removes the volumes of pods; see the module docs.
#[derive(Debug)]
pub struct VolumeManager<O: PodObjects> {
    pods_dir: PathBuf,
    objects: Arc<O>,
    tokens: TokenCache,
}

/// Where each volume of one pod is on the host; answers containers' mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVolumes {
    /// Volume name -> (host path, always read-only: configMap/secret/downwardAPI/projected).
    volumes: HashMap<String, (PathBuf, bool)>,
}

/// How a volume is materialised.
enum Kind {
    /// A directory under the pod dir (emptyDir).
    Dir,
    /// A path on the host (hostPath).
    Host(PathBuf),
    /// Files written atomically from objects (configMap, secret, downwardAPI, projected).
    Files,
}

fn kind(volume: &Volume) -> Result<Kind> {
    if let Some(h) = &volume.host_path {
        return Ok(Kind::Host(PathBuf::from(&h.path)));
    }
    if volume.empty_dir.is_some() {
        return Ok(Kind::Dir);
    }
    if volume.config_map.is_some()
        || volume.secret.is_some()
        || volume.downward_api.is_some()
        || volume.projected.is_some()
    {
        return Ok(Kind::Files);
    }
    Err(VolumeError::SetUp {
        volume: volume.name.clone(),
        reason: "unsupported volume type (edged supports emptyDir, hostPath, configMap, secret, \
                 downwardAPI, projected)"
            .into(),
    })
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

impl<O: PodObjects> VolumeManager<O> {
    /// Volumes under `pods_dir` (`<data_dir>/pods`), objects read from `objects`.
    pub fn new(pods_dir: PathBuf, objects: Arc<O>) -> Self {
        Self {
            tokens: TokenCache::new(pods_dir.clone()),
            pods_dir,
            objects,
        }
    }

    /// `<pods_dir>/<uid>/volumes/<name>`.
    fn volume_dir(&self, pod: &Pod, name: &str) -> PathBuf {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.pods_dir.join(uid).join("volumes").join(name)
    }

    /// Materialises every volume of the pod under `<pods_dir>/<uid>/volumes/<name>`
    /// (hostPath: checks or creates the host path per its `type`).
    ///
    /// # Errors
    /// [`VolumeError::SetUp`] with the kubelet's reason (`configmap "x" not found`, `hostPath type
    /// check failed: /p is not a directory`, an unsupported volume type, ...);
    /// [`VolumeError::Io`] for a file system failure; errors of the objects source.
    pub async fn prepare(&self, pod: &Pod) -> Result<PodVolumes> {
        self.write_all(pod, SystemTime::now(), true).await
    }

    /// Re-writes configMap/secret/downwardAPI/projected files from the current objects (on
    /// an object change or for token expiry); a volume's files change only if their content
    /// changed or its service-account token was due (80% of its lifetime passed).
    ///
    /// # Errors
    /// As [`VolumeManager::prepare`].
    pub async fn refresh(&self, pod: &Pod) -> Result<()> {
        self.refresh_at(pod, SystemTime::now()).await
    }

    /// When the pod's projected service-account tokens are next due (80% of a token's
    /// lifetime): call [`VolumeManager::refresh`] then, as the kubelet's periodic pod sync
    /// does. `None` when the pod has no token.
    pub fn next_refresh(&self, pod_uid: &str) -> Option<SystemTime> {
        self.tokens.next_due(pod_uid)
    }

    /// [`VolumeManager::refresh`] at a given time (tests drive the token clock with it).
    pub(crate) async fn refresh_at(&self, pod: &Pod, now: SystemTime) -> Result<()> {
        self.write_all(pod, now, false).await.map(|_| ())
    }

    async fn write_all(&self, pod: &Pod, now: SystemTime, setup: bool) -> Result<PodVolumes> {
        let fs_group = FsGroup::of(pod);
        let mut out = HashMap::new();
        for volume in volumes(pod) {
            let dir = self.volume_dir(pod, &volume.name);
            let (path, read_only) = match kind(volume)? {
                Kind::Host(path) => {
                    if setup {
                        host::check_host_path(volume, &path).await?;
                    }
                    (path, false)
                }
                Kind::Dir => {
                    if setup {
                        host::empty_dir(volume, &dir, fs_group).await?;
                    }
                    (dir, false)
                }
                Kind::Files => {
                    let mut files = payload::build(&*self.objects, &self.tokens, pod, volume, now)
                        .await
                        .map_err(|reason| match reason {
                            payload::Failure::Reason(reason) => VolumeError::SetUp {
                                volume: volume.name.clone(),
                                reason,
                            },
                            payload::Failure::Other(e) => e.into(),
                        })?;
                    // fsGroup: the modes set the user bits, the group reads (kubelet).
                    if fs_group.is_some() {
                        for f in files.values_mut() {
                            f.mode = ownership::file_mode(f.mode, true);
                        }
                    }
                    atomic::write(dir.clone(), files, fs_group.map(|g| g.gid)).await?;
                    (dir, true)
                }
            };
            out.insert(volume.name.clone(), (path, read_only));
        }
        Ok(PodVolumes { volumes: out })
    }

    /// Unmounts every mount under `<pods_dir>/<uid>` (the tmpfs of `medium: Memory`
    /// emptyDirs), then removes the directory (all volumes of the pod; hostPaths are
    /// untouched) and forgets the pod's tokens. Absent is fine.
    ///
    /// # Errors
    /// [`VolumeError::Io`] if a mount cannot be unmounted (then nothing is removed) or the
    /// directory cannot be removed; [`VolumeError::Blocking`] if unmounting panicked.
    pub async fn cleanup(&self, pod_uid: &str) -> Result<()> {
        self.tokens.forget(pod_uid);
        if pod_uid.is_empty() {
            return Ok(());
        }
        let dir = self.pods_dir.join(pod_uid);
        let pod_dir = dir.clone();
        tokio::task::spawn_blocking(move || mounts::unmount_under(&pod_dir))
            .await
            .map_err(VolumeError::Blocking)?
            .map_err(|(path, source)| VolumeError::Io { path, source })?;
        match tokio::fs::remove_dir_all(&dir).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(VolumeError::Io {
                path: dir,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Removes (with [`Self::cleanup`]) every pod directory under `pods_dir` whose uid is not
    /// in `live` (kubelet: `cleanupOrphanedPodDirs`); returns how many were removed. A pod
    /// deleted while edgecore was down leaves no container for the PLEG to report, so
    /// nothing else would remove its volumes or unmount its memory emptyDirs. Failures are
    /// logged and the directory is left for the next sweep.
    pub async fn cleanup_orphaned_dirs(&self, live: &HashSet<String>) -> usize {
        let Ok(mut entries) = tokio::fs::read_dir(&self.pods_dir).await else {
            return 0;
        };
        let mut removed = 0;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let Some(uid) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if live.contains(&uid) || !entry.file_type().await.is_ok_and(|t| t.is_dir()) {
                continue;
            }
            match self.cleanup(&uid).await {
                Ok(()) => {
                    info!(%uid, "removed the directory of a pod that no longer exists");
                    removed += 1;
                }
                Err(e) => {
                    warn!(%uid, error = %ErrorChain(&e), "cannot remove orphaned pod directory")
                }
            }
        }
        removed
    }
}

/// Checks a `subPath`: relative, without `..` (kubelet validation).
fn sub_path(volume: &Path, sub: &str) -> Result<PathBuf> {
    let rel = Path::new(sub);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(VolumeError::SubPath(sub.to_owned()));
    }
    Ok(volume.join(rel))
}

/// The subPath of a `subPathExpr` (kubelet `ExpandContainerVolumeMounts`): `$(VAR)` is
/// replaced from the container's `env` (`KEY=VALUE`; later wins), `$$` is a `$`.
///
/// # Errors
/// `missing value for A, B` when a referenced variable is undefined or empty (the kubelet
/// fails the container then, rather than keeping `$(A)` as env values do).
fn expand_sub_path(expr: &str, env: &[String]) -> Result<String> {
    let vars: HashMap<&str, &str> = env.iter().filter_map(|kv| kv.split_once('=')).collect();
    let mut missing = BTreeSet::new();
    let path = expand_with(expr, |name| match vars.get(name) {
        Some(v) if !v.is_empty() => (*v).to_owned(),
        _ => {
            missing.insert(name.to_owned());
            String::new()
        }
    });
    if missing.is_empty() {
        Ok(path)
    } else {
        Err(VolumeError::SubPathExprMissing(
            missing.into_iter().collect(),
        ))
    }
}

impl PodVolumes {
    /// The host path of volume `name`, if the pod has it.
    pub fn host_path(&self, name: &str) -> Option<&Path> {
        self.volumes.get(name).map(|(p, _)| p.as_path())
    }

    /// Docker bind specs `host:container[:ro]` for `container`'s volumeMounts: `:ro` when
    /// the mount is `readOnly` or the volume is a configMap/secret/downwardAPI/projected one
    /// (the kubelet mounts those read-only). A `subPath` binds that path inside the volume,
    /// created as a directory (with the volume's mode) if missing, as the kubelet does. A
    /// `subPathExpr` is expanded with the container's resolved `env` (`KEY=VALUE`, as
    /// [`resolve_env`](crate::edged::env::resolve_env) returns it) and then is a `subPath`.
    ///
    /// # Errors
    /// [`VolumeError::UnknownVolume`] for a mount of an unknown volume (kubelet: `cannot
    /// find volume "v" to mount into container "c"`), [`VolumeError::SubPathAndExpr`] for
    /// both `subPath` and `subPathExpr`, [`VolumeError::SubPathExprMissing`] for a
    /// `subPathExpr` referencing a missing or empty variable (`missing value for X`),
    /// [`VolumeError::SubPath`] for a subPath that is absolute or has `..`; [`VolumeError::Io`] if the subPath cannot be
    /// made.
    pub fn binds_for(&self, container: &Container, env: &[String]) -> Result<Vec<String>> {
        let mut binds = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let Some((volume_path, always_ro)) = self.volumes.get(&mount.name) else {
                return Err(VolumeError::UnknownVolume {
                    volume: mount.name.clone(),
                    container: container.name.clone(),
                });
            };
            let sub = mount.sub_path.as_deref().filter(|s| !s.is_empty());
            let expr = mount.sub_path_expr.as_deref().filter(|e| !e.is_empty());
            let sub = match (sub, expr) {
                (Some(_), Some(_)) => {
                    return Err(VolumeError::SubPathAndExpr {
                        volume: mount.name.clone(),
                        container: container.name.clone(),
                    });
                }
                (None, Some(expr)) => {
                    let expanded = expand_sub_path(expr, env)?;
                    Some(std::borrow::Cow::Owned(expanded))
                }
                (sub, None) => sub.map(std::borrow::Cow::Borrowed),
            };
            let mut source = volume_path.clone();
            if let Some(sub) = sub.as_deref() {
                source = sub_path(volume_path, sub)?;
                host::make_sub_path(volume_path, &source)?;
            }
            let ro = *always_ro || mount.read_only.unwrap_or(false);
            let suffix = if ro { ":ro" } else { "" };
            binds.push(format!("{}:{}{suffix}", source.display(), mount.mount_path));
        }
        Ok(binds)
    }
}

#[cfg(test)]
mod tests;
