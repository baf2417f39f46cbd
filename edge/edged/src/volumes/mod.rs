//! Pod volumes on the node's filesystem (the kubelet's volume manager and its in-tree
//! plugins emptyDir, hostPath, configMap, secret, downwardAPI and projected), and image
//! volumes (`image`).
//!
//! Every volume except hostPath lives in `<pods_dir>/<pod uid>/volumes/<volume name>`; the
//! pods directory and every pod directory are private (mode 0700, owned by edgecore's user:
//! `private_dir`), so no other user of the host reaches a volume's files whatever
//! their modes. configMap, secret, downwardAPI and projected volumes are written like the
//! kubelet's `AtomicWriter` (`atomic`): files in a timestamped `..<ts>` directory, published
//! by renaming a `..data` symlink, with per-file symlinks `key -> ..data/key`, so a container
//! sees an update all at once; their item paths must be relative without `..` (`payload`).
//! An emptyDir with `medium: Memory`, and every secret and projected volume (they hold
//! secrets and service-account tokens; the kubelet backs them by memory too), is a tmpfs
//! (`mounts`), unmounted before the pod directory is removed. A pod `securityContext.fsGroup`
//! makes every volume but hostPath owned by that group (`ownership`).
//! [`PodVolumes::mounts_for`] turns a container's volumeMounts into Docker binds (`binds`),
//! opening a `subPath` or `subPathExpr` without following symlinks out of its volume
//! (`safe_open`) and pinning it with a bind mount (`subpath`), as the kubelet does since
//! CVE-2017-1002101. An image volume has nothing on disk until a container mounts it: the
//! pod worker pulls its image, then it becomes an image mount of the engine or a read-only
//! bind of the image's layers mounted by edged (`image`, [`ImageVolumeSource`]).
//!
//! Layout: `atomic` (the atomic writer), `binds` (volumeMounts to binds and image mounts),
//! `error`, `host` (emptyDir, hostPath), `image` (image volumes), `mounts` (tmpfs,
//! unmounting), `ownership` (fsGroup), `payload`
//! (the files of object volumes and the per-pod caches of projected sources),
//! `pod_certificate` (pod certificates), `safe_open` (the subPath walk), `selector` (label
//! selectors), `subpath` (pins), `token` (service-account tokens), `trust_bundle` (cluster
//! trust anchors).

mod atomic;
mod binds;
mod error;
mod host;
mod image;
mod mounts;
mod ownership;
mod payload;
mod pod_certificate;
mod safe_open;
mod selector;
mod subpath;
mod token;
mod trust_bundle;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Pod, Volume};
use tracing::{info, warn};

use super::objects::PodObjects;
pub use binds::ContainerMounts;
pub use error::{SubPathError, VolumeError};
pub use image::ImageVolumeSource;

/// `Result` with [`VolumeError`].
pub type Result<T, E = VolumeError> = std::result::Result<T, E>;
use ownership::FsGroup;
use payload::Caches;
use verge_runtime::ErrorChain;

/// Prepares, refreshes and removes the volumes of pods; see the module docs.
#[derive(Debug)]
pub struct VolumeManager<O: PodObjects> {
    pods_dir: PathBuf,
    objects: Arc<O>,
    caches: Caches,
    mount_memory: MountMemory,
}

/// The tmpfs mount of tests: `mount(2)` when they run as root; without that privilege the
/// files stay on disk (only tests ever do this).
#[cfg(test)]
pub(crate) fn mount_for_tests(dir: &std::path::Path, option: Option<&str>) -> std::io::Result<()> {
    if rustix::process::geteuid().is_root() {
        mounts::mount_tmpfs(dir, option)
    } else {
        Ok(())
    }
}

/// How the tmpfs of a secret or projected volume is mounted on its directory: `mount(2)`
/// (`mounts::mount_tmpfs`) in production; tests swap in a failing one, or one that leaves
/// the files on disk when they run without the privilege to mount.
pub type MountMemory = fn(&std::path::Path, Option<&str>) -> std::io::Result<()>;

/// Where each volume of one pod is on the host; answers containers' mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVolumes {
    /// Volume name -> (host path, always read-only: configMap/secret/downwardAPI/projected).
    volumes: HashMap<String, (PathBuf, bool)>,
    /// The names of the image volumes (nothing on disk until mounted: [`image`]).
    images: HashSet<String>,
    /// `<pods_dir>/<uid>`: subPaths are pinned under it.
    pod_dir: PathBuf,
}

/// How a volume is materialised.
enum Kind {
    /// A directory under the pod dir (emptyDir).
    Dir,
    /// A path on the host (hostPath).
    Host(PathBuf),
    /// Files written atomically from objects (configMap, downwardAPI); `memory`: on a tmpfs
    /// (secret, projected).
    Files { memory: bool },
    /// An OCI image's filesystem (image), mounted when a container starts.
    Image,
}

fn kind(volume: &Volume) -> Result<Kind> {
    if let Some(h) = &volume.host_path {
        return Ok(Kind::Host(PathBuf::from(&h.path)));
    }
    if volume.empty_dir.is_some() {
        return Ok(Kind::Dir);
    }
    if volume.secret.is_some() || volume.projected.is_some() {
        return Ok(Kind::Files { memory: true });
    }
    if volume.config_map.is_some() || volume.downward_api.is_some() {
        return Ok(Kind::Files { memory: false });
    }
    if volume.image.is_some() {
        return Ok(Kind::Image);
    }
    Err(VolumeError::SetUp {
        volume: volume.name.clone(),
        reason: "unsupported volume type (edged supports emptyDir, hostPath, configMap, secret, \
                 downwardAPI, projected, image)"
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
            caches: Caches::new(pods_dir.clone()),
            pods_dir,
            objects,
            mount_memory: mounts::mount_tmpfs,
        }
    }

    /// Mounts the tmpfs of secret and projected volumes with `mount` instead of `mount(2)`
    /// (tests).
    #[must_use]
    pub fn with_memory_mount(mut self, mount: MountMemory) -> Self {
        self.mount_memory = mount;
        self
    }

    /// `<pods_dir>/<uid>`.
    fn pod_dir(&self, pod: &Pod) -> PathBuf {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.pods_dir.join(uid)
    }

    /// `<pods_dir>/<uid>/volumes/<name>`.
    fn volume_dir(&self, pod: &Pod, name: &str) -> PathBuf {
        self.pod_dir(pod).join("volumes").join(name)
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
    /// an object change, for token expiry, or to read cluster trust bundles again); a
    /// volume's files change only if their content changed, its service-account token was
    /// due (80% of its lifetime passed) or its trust anchors changed (read again once a
    /// minute).
    ///
    /// # Errors
    /// As [`VolumeManager::prepare`].
    pub async fn refresh(&self, pod: &Pod) -> Result<()> {
        self.refresh_at(pod, SystemTime::now()).await
    }

    /// When the pod's projected volumes are next due to be re-written: a service-account
    /// token at 80% of its lifetime, cluster trust anchors a minute after they were read
    /// (the kubelet's `syncFrequency`), a pod certificate at its `beginRefreshAt` (in the
    /// past while its refresh waits for the signer). Call [`VolumeManager::refresh`] then,
    /// as the kubelet's periodic pod sync does. `None` when the pod has none of them.
    pub fn next_refresh(&self, pod_uid: &str) -> Option<SystemTime> {
        self.caches.next_due(pod_uid)
    }

    /// [`VolumeManager::refresh`] at a given time (tests drive the token clock with it).
    pub(crate) async fn refresh_at(&self, pod: &Pod, now: SystemTime) -> Result<()> {
        self.write_all(pod, now, false).await.map(|_| ())
    }

    async fn write_all(&self, pod: &Pod, now: SystemTime, setup: bool) -> Result<PodVolumes> {
        let fs_group = FsGroup::of(pod);
        let pod_dir = self.pod_dir(pod);
        if setup {
            let dirs = [self.pods_dir.clone(), pod_dir.clone()];
            tokio::task::spawn_blocking(move || {
                dirs.iter().try_for_each(|d| {
                    verge_edge_store::private_dir::ensure(d).map_err(|source| VolumeError::Io {
                        path: d.clone(),
                        source,
                    })
                })
            })
            .await
            .map_err(VolumeError::Blocking)??;
        }
        let mut out = HashMap::new();
        let mut images = HashSet::new();
        for volume in volumes(pod) {
            let dir = self.volume_dir(pod, &volume.name);
            let (path, read_only) = match kind(volume)? {
                Kind::Image => {
                    images.insert(volume.name.clone());
                    continue;
                }
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
                Kind::Files { memory } => {
                    if setup && memory {
                        mounts::memory_volume(&volume.name, &dir, self.mount_memory).await?;
                    }
                    let mut files = payload::build(&*self.objects, &self.caches, pod, volume, now)
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
        Ok(PodVolumes {
            volumes: out,
            images,
            pod_dir,
        })
    }

    /// Mounts local image `image_id` (layer directories `layers`, topmost first, as
    /// [`image_layers`](verge_container_runtime::ContainerRuntime::image_layers) gives them)
    /// read-only for pod `pod` at `<pods_dir>/<uid>/volume-images/<id>`, unless it is
    /// mounted there already, for an engine that does not mount images itself (see [`ImageVolumeSource`]);
    /// returns the mount's path, a container's bind source. Unmounted with the pod's directory
    /// ([`VolumeManager::cleanup`]).
    ///
    /// # Errors
    /// [`VolumeError::Io`] when the mount fails (`EPERM` when edgecore is not root), or the
    /// layers cannot be given to overlayfs; [`VolumeError::Blocking`] if the work panicked.
    pub async fn mount_image(
        &self,
        pod: &Pod,
        image_id: &str,
        layers: Vec<PathBuf>,
    ) -> Result<PathBuf> {
        let target = image::mount_point(&self.pod_dir(pod), image_id);
        let path = target.clone();
        tokio::task::spawn_blocking(move || {
            image::mount_layers(&target, &layers).map_err(|source| VolumeError::Io {
                path: target.clone(),
                source,
            })
        })
        .await
        .map_err(VolumeError::Blocking)??;
        Ok(path)
    }

    /// Unmounts every mount under `<pods_dir>/<uid>` (the tmpfs of memory-backed volumes, the
    /// pinned subPaths, the images of image volumes), removes the pins one by one without recursing (`subpath`), checks
    /// that nothing is mounted under the directory any more, then removes it (all volumes of
    /// the pod; hostPaths are untouched) and forgets the pod's tokens, trust anchors and
    /// certificates. Absent is fine.
    ///
    /// # Errors
    /// [`VolumeError::Io`] if a mount cannot be unmounted, a pin removed, or the directory
    /// removed (nothing is removed recursively while anything is still mounted under it);
    /// [`VolumeError::Blocking`] if unmounting panicked.
    pub async fn cleanup(&self, pod_uid: &str) -> Result<()> {
        self.caches.forget(pod_uid);
        if pod_uid.is_empty() {
            return Ok(());
        }
        let dir = self.pods_dir.join(pod_uid);
        let pod_dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            mounts::unmount_under(&pod_dir)
                .map_err(|(path, source)| VolumeError::Io { path, source })?;
            subpath::remove_pins(&pod_dir)?;
            match mounts::first_mount_under(&pod_dir) {
                Some(path) => Err(VolumeError::Io {
                    path,
                    source: std::io::Error::other("still mounted after unmounting"),
                }),
                None => Ok(()),
            }
        })
        .await
        .map_err(VolumeError::Blocking)??;
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

impl PodVolumes {
    /// The host path of volume `name`, if the pod has it (image volumes have none).
    pub fn host_path(&self, name: &str) -> Option<&Path> {
        self.volumes.get(name).map(|(p, _)| p.as_path())
    }

    /// Whether volume `name` is an image volume.
    pub fn is_image(&self, name: &str) -> bool {
        self.images.contains(name)
    }
}

#[cfg(test)]
mod tests;
