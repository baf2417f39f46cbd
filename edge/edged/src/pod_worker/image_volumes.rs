//! Image volumes in the pod worker (kubelet: `getImageVolumes`, `toKubeContainerImageVolumes`
//! and `makeMounts`; the volumes themselves are [`crate::volumes`]'s).
//!
//! When a container that mounts an image volume is about to start, every image volume of the
//! pod has its image made available by the volume's `pullPolicy` (its default as a
//! container's: `Always` for `latest` or no tag), with the pod's `imagePullSecrets`, once per
//! sync ([`Worker::image_volume_pulls`]), with the pull's events recorded on the pod
//! (`Pulling`, `Pulled`, `Failed`, `ErrImageNeverPull`, `ImagePullFailedUsingLocal`), as the
//! kubelet's image manager records them for an image volume. A container mounting a volume
//! whose image is not available does not start: it waits with the image's reason
//! (`ErrImagePull`, then `ImagePullBackOff` under the start back-off; `ErrImageNeverPull`).
//! Otherwise each of its image volumes reaches it as the engine allows
//! ([`ImageVolumeSource`]), and the container carries the label
//! [`IMAGE_VOLUMES`](verge_container_runtime::labels::IMAGE_VOLUMES) with their image ids,
//! so that image garbage collection keeps them while it exists.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::Instrument as _;

use super::Worker;
use super::start::{StartError, pull_event};
use super::state::WaitingReason;
use crate::volumes::{ImageVolumeSource, VolumeError};
use verge_container_runtime::ContainerRuntime;
use verge_container_runtime::image::{PullPolicy, credentials_for, ensure_image, node_credentials};

/// Why an image volume's image is not available in this sync: what the containers mounting
/// it show (kubelet: the pull's `ErrImagePull` or `ErrImageNeverPull` and its message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ImageVolumeFailure {
    /// `ErrImagePull` or `ErrImageNeverPull`.
    pub reason: WaitingReason,
    /// The image error's message.
    pub message: String,
}

/// The images of the pod's image volumes as one sync made them available, by volume name:
/// the local image id (`sha256:...`), or why not.
pub(super) type ImageVolumePulls = HashMap<String, Result<String, ImageVolumeFailure>>;

/// Whether container `c` of `pod` mounts an image volume.
pub(super) fn mounts_image_volume(pod: &Pod, c: &Container) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let images: Vec<&str> = volumes
        .into_iter()
        .flatten()
        .filter(|v| v.image.is_some())
        .map(|v| v.name.as_str())
        .collect();
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| images.contains(&m.name.as_str()))
}

/// The image volumes of container `c` as it mounts them: how each reaches it, and the image
/// ids (for the label).
#[derive(Debug, Default)]
pub(super) struct ContainerImages {
    /// By volume name.
    pub sources: HashMap<String, ImageVolumeSource>,
    /// The local image ids, each once.
    pub ids: BTreeSet<String>,
}

impl<R: ContainerRuntime> Worker<R> {
    /// The images of the pod's image volumes for this sync: pulled by each volume's policy on
    /// the first call of a sync, then the same answer (the kubelet pulls them once per
    /// `SyncPod` that starts containers).
    pub(super) async fn image_volume_pulls(&mut self) -> Arc<ImageVolumePulls> {
        if let Some(pulls) = &self.image_volume_pulls {
            return Arc::clone(pulls);
        }
        let pod = Arc::clone(&self.pod);
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        let mut secrets = None;
        let mut pulls = ImageVolumePulls::new();
        for volume in volumes.into_iter().flatten() {
            let Some(source) = &volume.image else {
                continue;
            };
            let reference = source.reference.clone().unwrap_or_default();
            let policy = PullPolicy::of(&reference, source.pull_policy.as_deref());
            let creds = if policy == PullPolicy::Never {
                None
            } else {
                if secrets.is_none() {
                    secrets = Some(self.pull_secrets().await);
                }
                credentials_for(&reference, secrets.as_deref().unwrap_or_default())
                    .or_else(|| node_credentials(&self.ctx.config.data_dir, &reference))
            };
            let pulled = self.pull_image_volume(&volume.name, &reference, policy, creds);
            pulls.insert(volume.name.clone(), pulled.await);
        }
        let pulls = Arc::new(pulls);
        self.image_volume_pulls = Some(Arc::clone(&pulls));
        pulls
    }

    /// Makes image `reference` of volume `volume` available by `policy`, recording the
    /// pull's events on the pod; its local image id.
    async fn pull_image_volume(
        &self,
        volume: &str,
        reference: &str,
        policy: PullPolicy,
        creds: Option<verge_container_runtime::RegistryAuth>,
    ) -> Result<String, ImageVolumeFailure> {
        let failed = |reason, message| ImageVolumeFailure { reason, message };
        if reference.is_empty() {
            let message = format!("image volume {volume:?} has no image reference");
            return Err(failed(WaitingReason::ErrImagePull, message));
        }
        let runtime = &self.ctx.runtime;
        let pulling = || {
            let msg = format!("Pulling image \"{reference}\"");
            self.pod_event(crate::events::EventType::Normal, "Pulling", msg);
        };
        let pulled = ensure_image(runtime, reference, policy, creds, pulling)
            .instrument(verge_telemetry::propagation::in_trace(|| {
                verge_telemetry::span!(
                    "edged.image.ensure",
                    k8s.volume.name = %volume,
                    container.image.name = %reference,
                )
            }))
            .await;
        let (type_, reason, msg) = pull_event(&pulled, reference);
        self.pod_event(type_, reason, msg);
        if let Err(e) = pulled {
            return Err(failed(WaitingReason::of_image(&e), e.to_string()));
        }
        match runtime.image_status(reference).await {
            Ok(Some(image)) => Ok(image.id),
            Ok(None) => {
                let message = format!("image \"{reference}\" is not present after its pull");
                Err(failed(WaitingReason::ErrImagePull, message))
            }
            Err(e) => Err(failed(WaitingReason::ErrImagePull, e.engine().to_string())),
        }
    }

    /// How each image volume container `c` mounts reaches it, given this sync's `pulls`: an
    /// image mount when the engine mounts images, else the image's layers mounted by edged
    /// ([`crate::volumes::VolumeManager::mount_image`]).
    ///
    /// # Errors
    /// [`StartError::ImageVolume`] when a volume's image is not available (the kubelet's
    /// `ErrImagePull` or `ErrImageNeverPull`); [`StartError::Mounts`] with
    /// [`VolumeError::ImageMount`] (`CreateContainerError`) when it cannot be mounted.
    pub(super) async fn container_images(
        &self,
        c: &Container,
        pulls: &ImageVolumePulls,
    ) -> Result<ContainerImages, StartError> {
        let mut out = ContainerImages::default();
        let mut engine_mounts = None;
        for mount in c.volume_mounts.iter().flatten() {
            let Some(pulled) = pulls.get(&mount.name) else {
                continue;
            };
            let id = pulled.clone().map_err(StartError::ImageVolume)?;
            let mount_failed = |reason: String| {
                StartError::Mounts(VolumeError::ImageMount {
                    volume: mount.name.clone(),
                    container: c.name.clone(),
                    reason,
                })
            };
            let runtime = &self.ctx.runtime;
            let engine = match engine_mounts {
                Some(engine) => engine,
                None => {
                    let asked = runtime.supports_image_mounts().await;
                    let engine = asked.map_err(|e| mount_failed(e.engine().to_string()))?;
                    *engine_mounts.insert(engine)
                }
            };
            let source = if engine {
                ImageVolumeSource::Engine {
                    image_id: id.clone(),
                }
            } else {
                let layers = runtime
                    .image_layers(&id)
                    .await
                    .map_err(|e| mount_failed(e.engine().to_string()))?
                    .ok_or_else(|| {
                        mount_failed(
                            "the container runtime neither mounts images (Docker 28, API 1.48) \
                             nor shows the image's layers (storage driver overlay2)"
                                .to_owned(),
                        )
                    })?;
                let path = self.ctx.volumes.mount_image(&self.pod, &id, layers).await;
                ImageVolumeSource::Host(
                    path.map_err(|e| mount_failed(verge_runtime::ErrorChain(&e).to_string()))?,
                )
            };
            out.sources.insert(mount.name.clone(), source);
            out.ids.insert(id);
        }
        Ok(out)
    }
}
