//! [`VolumeError`]: what setting up, refreshing, mounting and removing volumes can fail with.
//! The messages of mount failures are the kubelet's (they become `FailedMount` events and
//! `CreateContainerConfigError` waiting messages).

use std::path::PathBuf;

/// A volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A volume cannot be set up (kubelet event `FailedMount`); `reason` is the kubelet's,
    /// e.g. `configmap "cfg" not found` or `hostPath type check failed: /p is not a
    /// directory`.
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {reason}")]
    SetUp {
        /// The pod's volume name.
        volume: String,
        /// What is wrong, as the kubelet says it.
        reason: String,
    },
    /// A file operation under the pods directory (or a hostPath) failed.
    #[error("volume I/O failed on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// File system work on the blocking pool panicked or was cancelled.
    #[error("blocking task failed")]
    Blocking(#[source] tokio::task::JoinError),
    /// A volumeMount names a volume the pod does not have (kubelet
    /// `CreateContainerConfigError`).
    #[error("cannot find volume \"{volume}\" to mount into container \"{container}\"")]
    UnknownVolume {
        /// The mount's volume name.
        volume: String,
        /// The container.
        container: String,
    },
    /// A volumeMount has both `subPath` and `subPathExpr`.
    #[error(
        "volumeMount \"{volume}\" of container \"{container}\": subPathExpr and subPath are \
         mutually exclusive"
    )]
    SubPathAndExpr {
        /// The mount's volume name.
        volume: String,
        /// The container.
        container: String,
    },
    /// A `subPath` (or expanded `subPathExpr`) cannot be used safely: it leads out of its
    /// volume through a symlink, or it cannot be opened or pinned (kubelet: `failed to prepare
    /// subPath for volumeMount`; the container waits with `CreateContainerConfigError`).
    /// Nothing outside the volume was created or changed.
    #[error(
        "failed to prepare subPath {sub_path:?} for volumeMount {volume:?} of container \
         {container:?}"
    )]
    PrepareSubPath {
        /// The mount's volume name.
        volume: String,
        /// The container.
        container: String,
        /// The subPath (after `subPathExpr` expansion).
        sub_path: String,
        /// Why.
        #[source]
        source: SubPathError,
    },
    /// An image volume cannot be mounted into a container: its `subPath` is missing or not a
    /// directory of the image, or the image's filesystem cannot be mounted (the CRI error
    /// `ImageVolumeMountFailed` the kubelet shows; the container waits with
    /// `CreateContainerError`).
    #[error("ImageVolumeMountFailed: volume {volume:?} of container {container:?}: {reason}")]
    ImageMount {
        /// The mount's volume name.
        volume: String,
        /// The container.
        container: String,
        /// What failed.
        reason: String,
    },
    /// A `subPath` that is absolute or contains `..` (kubelet validation).
    #[error("subPath {0:?} must be a relative path without '..'")]
    SubPath(String),
    /// A `subPathExpr` references variables that are undefined or empty (the kubelet fails
    /// the container then).
    #[error("missing value for {}", .0.join(", "))]
    SubPathExprMissing(Vec<String>),
    /// The source of configmaps, secrets and tokens failed (e.g. a cloud query timed out).
    #[error(transparent)]
    Objects(Box<crate::Error>),
}

impl From<crate::Error> for VolumeError {
    fn from(e: crate::Error) -> Self {
        Self::Objects(Box::new(e))
    }
}

/// Why a subPath cannot be used (see [`VolumeError::PrepareSubPath`]). Paths are relative to
/// the volume root, as the walk reached them.
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    /// A symlink whose target is absolute or climbs above the volume root (kubelet: the
    /// subPath is not within the volume path). Symlinks that stay inside the volume are
    /// followed.
    #[error("{0:?} is a symlink leading out of the volume; refused")]
    Escapes(PathBuf),
    /// More than 40 symlinks on the way (Linux `ELOOP`).
    #[error("{0:?}: too many levels of symbolic links; refused")]
    Loop(PathBuf),
    /// A component that must be a directory is a file (or another non-directory).
    #[error("{0:?} is not a directory")]
    NotADirectory(PathBuf),
    /// A file system call failed on the way (`openat`, `mkdirat`, `fstat`, `readlinkat`).
    #[error("cannot open {path:?} in the volume")]
    Io {
        /// Where in the volume.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The opened target cannot be pinned: creating its mount point or bind-mounting
    /// `/proc/self/fd/<fd>` there failed (`EPERM` when edgecore is not root: subPath
    /// mounts need root, as the kubelet's do).
    #[error("cannot bind-mount the subPath onto {target}")]
    Bind {
        /// The mount point under `<pod dir>/volume-subpaths/`.
        target: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}
