//! A container's volumeMounts as Docker binds and image mounts (the kubelet's `makeMounts`),
//! with `subPath` and `subPathExpr` opened safely ([`safe_open`](super::safe_open)) and
//! pinned ([`subpath`](super::subpath)); image volumes as [`image`](super::image) says.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::Container;
use verge_container_runtime::ImageMount;

use super::image::ImageVolumeSource;
use super::safe_open::{self, Opened};
use super::{PodVolumes, Result, VolumeError, subpath};
use crate::env::expand_with;
use verge_runtime::ErrorChain;

/// What a container mounts: Docker binds and, on an engine that mounts images itself, image
/// mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerMounts {
    /// Bind specs `host:container[:ro]`.
    pub binds: Vec<String>,
    /// Image volumes the engine mounts (always read-only).
    pub image_mounts: Vec<ImageMount>,
}

/// Checks a `subPath`: relative, without `..` (kubelet validation); returns it as a path.
fn sub_path(sub: &str) -> Result<PathBuf> {
    let rel = Path::new(sub);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(VolumeError::SubPath(sub.to_owned()));
    }
    Ok(rel.to_owned())
}

/// The subPath of a `subPathExpr` (kubelet `ExpandContainerVolumeMounts`): `$(VAR)` is
/// replaced from the container's `env` (`KEY=VALUE`; later wins), `$$` is a `$`.
///
/// # Errors
/// `missing value for A, B` when a referenced variable is undefined or empty (the kubelet
/// fails the container then, rather than keeping `$(A)` as env values do).
pub(super) fn expand_sub_path(expr: &str, env: &[String]) -> Result<String> {
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

/// Where one bind comes from.
enum Source {
    /// The volume (or hostPath) itself.
    Volume(PathBuf),
    /// A subPath, opened, to be pinned at the mount point.
    SubPath {
        opened: Opened,
        point: PathBuf,
        volume: String,
        sub: String,
    },
}

impl PodVolumes {
    /// The binds of [`PodVolumes::mounts_for`] for a container without image volumes.
    #[cfg(test)]
    pub async fn binds_for(&self, container: &Container, env: &[String]) -> Result<Vec<String>> {
        let mounts = self.mounts_for(container, env, &HashMap::new()).await?;
        Ok(mounts.binds)
    }

    /// Docker bind specs `host:container[:ro]` and image mounts for `container`'s
    /// volumeMounts: `:ro` when
    /// the mount is `readOnly` or the volume is a configMap/secret/downwardAPI/projected one
    /// (the kubelet mounts those read-only). A `subPath` is opened inside its volume without
    /// following symlinks out of it, created as a directory (with the volume's mode) if
    /// missing, and pinned by a bind mount at
    /// `<pod dir>/volume-subpaths/<volume>/<container>/<index>`, which is the bind's source
    /// (the kubelet's safe subPath, CVE-2017-1002101: a symlink is followed only while it
    /// stays inside the volume; an absolute one or one climbing above the volume root is
    /// refused). A `subPathExpr` is expanded with the container's
    /// resolved `env` (`KEY=VALUE`, as [`resolve_env`](crate::env::resolve_env)
    /// returns it) and then is a `subPath`. Every subPath is checked before any is pinned.
    ///
    /// # Errors
    /// [`VolumeError::UnknownVolume`] for a mount of an unknown volume (kubelet: `cannot
    /// find volume "v" to mount into container "c"`), [`VolumeError::SubPathAndExpr`] for
    /// both `subPath` and `subPathExpr`, [`VolumeError::SubPathExprMissing`] for a
    /// `subPathExpr` referencing a missing or empty variable (`missing value for X`),
    /// [`VolumeError::SubPath`] for a subPath that is absolute or has `..`,
    /// [`VolumeError::PrepareSubPath`] for one that leads out of the volume through a
    /// symlink or cannot be opened or pinned; [`VolumeError::Blocking`] if the work panicked.
    /// All of them are the kubelet's `CreateContainerConfigError`.
    ///
    /// Image volumes: `images` says how each one's pulled image reaches the container
    /// ([`ImageVolumeSource`]). One the engine mounts becomes an image mount (its `subPath`
    /// checked to be relative without `..`); one edged mounted becomes a read-only bind of
    /// its mount, a `subPath` opened in it like any other but never created, and it must be
    /// a directory. [`VolumeError::ImageMount`] (the kubelet's `CreateContainerError`) for a
    /// `subPath` missing from the image or not a directory, or an image volume missing from
    /// `images`.
    pub async fn mounts_for(
        &self,
        container: &Container,
        env: &[String],
        images: &HashMap<String, ImageVolumeSource>,
    ) -> Result<ContainerMounts> {
        let (this, container, env) = (self.clone(), container.clone(), env.to_vec());
        let images = images.clone();
        tokio::task::spawn_blocking(move || this.mounts_blocking(&container, &env, &images))
            .await
            .map_err(VolumeError::Blocking)?
    }

    fn mounts_blocking(
        &self,
        container: &Container,
        env: &[String],
        images: &HashMap<String, ImageVolumeSource>,
    ) -> Result<ContainerMounts> {
        let image_failed = |volume: &str, reason: String| VolumeError::ImageMount {
            volume: volume.to_owned(),
            container: container.name.clone(),
            reason,
        };
        let refused = |volume: &str, sub: &str| {
            let (volume, sub_path) = (volume.to_owned(), sub.to_owned());
            let container = container.name.clone();
            move |source| VolumeError::PrepareSubPath {
                volume,
                container,
                sub_path,
                source,
            }
        };
        let mut planned = Vec::new();
        let mut image_mounts = Vec::new();
        for (index, mount) in container.volume_mounts.iter().flatten().enumerate() {
            let known = self.volumes.get(&mount.name);
            if known.is_none() && !self.images.contains(&mount.name) {
                return Err(VolumeError::UnknownVolume {
                    volume: mount.name.clone(),
                    container: container.name.clone(),
                });
            }
            let sub = mount.sub_path.as_deref().filter(|s| !s.is_empty());
            let expr = mount.sub_path_expr.as_deref().filter(|e| !e.is_empty());
            let sub = match (sub, expr) {
                (Some(_), Some(_)) => {
                    return Err(VolumeError::SubPathAndExpr {
                        volume: mount.name.clone(),
                        container: container.name.clone(),
                    });
                }
                (None, Some(expr)) => Some(expand_sub_path(expr, env)?),
                (sub, None) => sub.map(str::to_owned),
            };
            let Some((volume_path, always_ro)) = known else {
                // An image volume.
                if let Some(sub) = &sub {
                    sub_path(sub)?;
                }
                let source = images.get(&mount.name).ok_or_else(|| {
                    image_failed(&mount.name, "its image is not available".to_owned())
                })?;
                let path = match source {
                    ImageVolumeSource::Engine { image_id } => {
                        image_mounts.push(ImageMount {
                            image: image_id.clone(),
                            target: mount.mount_path.clone(),
                            sub_path: sub,
                        });
                        continue;
                    }
                    ImageVolumeSource::Host(path) => path,
                };
                let source = match sub {
                    None => Source::Volume(path.clone()),
                    Some(sub) => {
                        let opened =
                            safe_open::open_in(path, Path::new(&sub), false).map_err(|e| {
                                let e = ErrorChain(&e);
                                let why = format!("failed to ensure image subpath {sub:?}: {e}");
                                image_failed(&mount.name, why)
                            })?;
                        if !opened.is_dir {
                            let why =
                                format!("only directory subpath is supported, subpath: {sub:?}");
                            return Err(image_failed(&mount.name, why));
                        }
                        let point = subpath::mount_point(
                            &self.pod_dir,
                            &mount.name,
                            &container.name,
                            index,
                        );
                        Source::SubPath {
                            opened,
                            point,
                            volume: mount.name.clone(),
                            sub,
                        }
                    }
                };
                planned.push((source, &mount.mount_path, true));
                continue;
            };
            let source = match sub {
                None => Source::Volume(volume_path.clone()),
                Some(sub) => {
                    let rel = sub_path(&sub)?;
                    let opened = safe_open::open_in(volume_path, &rel, true)
                        .map_err(refused(&mount.name, &sub))?;
                    let point =
                        subpath::mount_point(&self.pod_dir, &mount.name, &container.name, index);
                    Source::SubPath {
                        opened,
                        point,
                        volume: mount.name.clone(),
                        sub,
                    }
                }
            };
            let ro = *always_ro || mount.read_only.unwrap_or(false);
            planned.push((source, &mount.mount_path, ro));
        }
        let mut binds = Vec::with_capacity(planned.len());
        for (source, mount_path, ro) in planned {
            let host = match source {
                Source::Volume(path) => path,
                Source::SubPath {
                    opened,
                    point,
                    volume,
                    sub,
                } => {
                    subpath::pin(&opened, &point).map_err(refused(&volume, &sub))?;
                    point
                }
            };
            let suffix = if ro { ":ro" } else { "" };
            binds.push(format!("{}:{mount_path}{suffix}", host.display()));
        }
        Ok(ContainerMounts {
            binds,
            image_mounts,
        })
    }
}
