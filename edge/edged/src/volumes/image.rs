//! Image volumes (`volumes[].image`, GA in Kubernetes 1.37): an OCI image's filesystem
//! mounted read-only into the containers that mount the volume, `subPath` selecting a
//! directory of the image. The pod worker pulls the image by the volume's `pullPolicy`
//! (`pod_worker::image_volumes`); how the filesystem then reaches a container depends on the
//! engine ([`ImageVolumeSource`]):
//!
//! - An engine that mounts images itself (Docker 28+, API 1.48:
//!   [`supports_image_mounts`](verge_container_runtime::ContainerRuntime::supports_image_mounts))
//!   gets an image mount in the container's spec: Docker's `Mount{Type: "image", Source:
//!   <image id>, ReadOnly: true, ImageOptions.Subpath}`, as containerd gets CRI's image mount.
//! - An older engine (Docker 20.10 of Debian 12) gets a read-only bind of a directory where
//!   edged mounted the image's layers ([`image_layers`](verge_container_runtime::ContainerRuntime::image_layers),
//!   Docker's `overlay2` layer directories): `<pod dir>/volume-images/<image id>`, an overlay
//!   of the layers (a read-only bind of the single layer of a one-layer image: overlayfs needs
//!   two lower layers without an upper one), once per pod and image, as containerd mounts one
//!   snapshot per sandbox and image. Like every mount under the pod directory it is unmounted
//!   before the directory is removed (`mounts::unmount_under`). A `subPath` is opened in it
//!   without following symlinks out of it and pinned like any other subPath, but never
//!   created.
//!
//! Either way, a `subPath` must be a directory of the image (the KEP's non-goal of single
//! files, as containerd's `ensureImageSubPath`); a missing one fails the container with
//! `CreateContainerError` and a message starting `ImageVolumeMountFailed` (the CRI error the
//! kubelet passes on).

use std::ffi::CString;
use std::path::{Path, PathBuf};

use rustix::mount::MountFlags;

/// How an image volume's image reaches a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageVolumeSource {
    /// The engine mounts the image (`image_id`: the local image's id, `sha256:...`).
    Engine {
        /// The local image id.
        image_id: String,
    },
    /// edged mounted the image's filesystem read-only at this host path; containers bind it.
    Host(PathBuf),
}

/// The directory of the mounted images under a pod directory.
pub(super) const IMAGES_DIR: &str = "volume-images";

/// The longest mount data the kernel takes (one page, less the terminating NUL).
const MAX_MOUNT_DATA: usize = 4095;

/// `<pod_dir>/volume-images/<id without sha256:>`.
pub(super) fn mount_point(pod_dir: &Path, image_id: &str) -> PathBuf {
    let id = image_id.trim_start_matches("sha256:");
    pod_dir.join(IMAGES_DIR).join(id)
}

/// The overlay mount data of `layers` (topmost first), read-only without an upper layer.
///
/// # Errors
/// A layer path that overlayfs cannot take in its options (with `:` or `,`), or too many
/// layers for one page of mount data.
pub(super) fn overlay_data(layers: &[PathBuf]) -> std::io::Result<String> {
    let mut dirs = Vec::with_capacity(layers.len());
    for layer in layers {
        let dir = layer.to_str().filter(|d| !d.contains([':', ',']));
        let dir = dir.ok_or_else(|| {
            std::io::Error::other(format!("layer path {} cannot be mounted", layer.display()))
        })?;
        dirs.push(dir);
    }
    let data = format!("lowerdir={}", dirs.join(":"));
    if data.len() > MAX_MOUNT_DATA {
        let n = layers.len();
        return Err(std::io::Error::other(format!(
            "{n} layers are too many for one overlay mount"
        )));
    }
    Ok(data)
}

/// Mounts the image whose layer directories are `layers` (topmost first) read-only at
/// `target` (created), unless `target` is a mount point already (mounted by an earlier
/// container start, or before an edgecore restart). Blocking.
///
/// # Errors
/// No layers; the failure of creating `target` or of `mount(2)` (`EPERM` when not root).
pub(super) fn mount_layers(target: &Path, layers: &[PathBuf]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(target)?;
    let canonical = std::fs::canonicalize(target)?;
    if super::mounts::is_mount_point(&canonical) {
        return Ok(());
    }
    match layers {
        [] => Err(std::io::Error::other("the image has no layers")),
        [only] => {
            rustix::mount::mount_bind(only.as_path(), &canonical)?;
            let read_only = MountFlags::BIND | MountFlags::RDONLY;
            if let Err(e) = rustix::mount::mount_remount(&canonical, read_only, "") {
                let _ = rustix::mount::unmount(&canonical, rustix::mount::UnmountFlags::DETACH);
                return Err(e.into());
            }
            Ok(())
        }
        layers => {
            let data = CString::new(overlay_data(layers)?).map_err(std::io::Error::other)?;
            let flags = MountFlags::RDONLY | MountFlags::NODEV | MountFlags::NOSUID;
            rustix::mount::mount("overlay", &canonical, "overlay", flags, data.as_c_str())?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_data_lists_the_layers_topmost_first() {
        let layers: Vec<PathBuf> = ["/d/3/diff", "/d/2/diff"].map(Into::into).to_vec();
        assert_eq!(
            overlay_data(&layers).expect("data"),
            "lowerdir=/d/3/diff:/d/2/diff"
        );
        assert!(overlay_data(&[PathBuf::from("/a:b"), PathBuf::from("/c")]).is_err());
        let many: Vec<PathBuf> = (0..100)
            .map(|i| PathBuf::from(format!("/var/lib/docker/overlay2/{i:064}/diff")))
            .collect();
        assert!(overlay_data(&many).is_err(), "more than a page of options");
        assert_eq!(
            mount_point(Path::new("/p/u"), "sha256:abc"),
            Path::new("/p/u/volume-images/abc")
        );
    }

    /// As root: two layers as a read-only overlay, the upper one hiding the lower one's
    /// file; one layer as a read-only bind; a second mount is skipped.
    #[test]
    fn layers_are_mounted_read_only() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
        std::fs::create_dir_all(upper.join("etc")).expect("upper");
        std::fs::create_dir_all(&lower).expect("lower");
        std::fs::write(upper.join("etc/os-release"), "new").expect("write");
        std::fs::write(lower.join("data.json"), "kitten.jpg").expect("write");
        std::fs::create_dir_all(lower.join("etc")).expect("lower etc");
        std::fs::write(lower.join("etc/os-release"), "old").expect("write");
        let target = dir.path().join("pod/volume-images/abc");
        mount_layers(&target, &[upper.clone(), lower.clone()]).expect("overlay");
        mount_layers(&target, &[upper.clone(), lower.clone()]).expect("mounted already");
        let read = |p: &str| std::fs::read_to_string(target.join(p)).expect("read");
        assert_eq!(read("etc/os-release"), "new");
        assert_eq!(read("data.json"), "kitten.jpg");
        assert!(std::fs::write(target.join("x"), "x").is_err(), "read-only");
        let single = dir.path().join("pod/volume-images/one");
        mount_layers(&single, std::slice::from_ref(&lower)).expect("bind");
        assert_eq!(
            std::fs::read_to_string(single.join("data.json")).expect("read"),
            "kitten.jpg"
        );
        assert!(std::fs::write(single.join("x"), "x").is_err(), "read-only");
        super::super::mounts::unmount_under(&dir.path().join("pod")).expect("unmount");
        assert!(super::super::mounts::first_mount_under(dir.path()).is_none());
        assert!(lower.join("data.json").exists(), "the layers stay");
    }
}
