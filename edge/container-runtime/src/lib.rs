//! The container runtime of the edge node: the [`ContainerRuntime`] trait edged's pod
//! workers, probes, garbage collector and PLEG use (the role CRI plays for the kubelet), the
//! [`StreamingRuntime`] trait beside it for the kubelet streaming server (`kubectl logs`,
//! `exec`, `attach`, `port-forward`, `cp`), and their one production implementation over
//! Docker ([`DockerRuntime`], what dockershim / cri-dockerd did). Every Docker call of
//! edgecore goes through these two traits, so another engine is one more implementation of
//! them. Every container edged creates carries the labels of [`labels`], so pods are found
//! again by label after a restart of edgecore.
//!
//! This crate sits beside the edge store at the bottom of the edge crates: it imports no
//! other edge crate, and both `verge-edged` and `verge-streaming` build on it.
//!
//! # Layout
//! - [`types`]: the runtime's data types (filters, summaries, specs with binds and image
//!   mounts, images, events).
//! - [`error`]: what a call fails with, [`RuntimeError`].
//! - [`streaming`]: [`StreamingRuntime`] and its types (exec and attach streams, log options).
//! - [`docker`]: [`DockerRuntime`], which speaks to Docker (bollard), with
//!   `docker_streaming` (its [`StreamingRuntime`] half), `docker_logfile` (reading Docker's
//!   `json-file` container logs), `docker_resources` (in-place resource updates and memory
//!   usage) and `docker_convert` (Docker's API types to and from [`types`]); no other crate
//!   of Verge uses bollard.
//! - [`labels`]: the labels and names tying containers to pods.
//! - [`image`]: image pull policy, pulls with `imagePullSecrets` credentials, [`ImageError`];
//!   under `Always`, the local image when the registry cannot be reached (an edge node's link
//!   is down).
//! - `fake` (feature `testing`): an in-memory runtime for unit tests of the pod lifecycle and
//!   of the streaming server (scripted exec, attach and log output).

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod docker;
mod docker_convert;
mod docker_files;
mod docker_logfile;
mod docker_resources;
mod docker_streaming;
pub mod error;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod image;
pub mod labels;
pub mod streaming;
pub mod types;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use futures::stream::BoxStream;

pub use docker::DockerRuntime;
pub use error::RuntimeError;
pub use image::ImageError;
pub use streaming::{
    AttachedProcess, ExecSession, InputWriter, LogOptions, LogStream, OutputChunk, OutputStream,
    Stdio, StreamingRuntime, TerminalSize,
};
pub use types::{
    ContainerInfo, ContainerSpec, ContainerSummary, ExecOutput, ImageInfo, ImageMount,
    ImageSummary, LinuxResources, ListFilter, NetworkEnsured, NetworkSpec, RegistryAuth, RunState,
    RuntimeEvent, Scope,
};

/// `Result` with [`RuntimeError`].
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// How long edged and the streaming server wait before trying an unreachable container
/// runtime again (e.g. edgecore started before dockerd).
pub const CONNECT_RETRY: Duration = Duration::from_secs(5);

/// Calls `connect` until it gives a runtime, waiting [`CONNECT_RETRY`] after each failure,
/// which is logged as `<what> not reachable; retrying` with the error. `None` when
/// `cancelled` completes during a wait (an attempt under way is finished first).
pub async fn connect_retrying<R, F, Fut>(
    what: &str,
    cancelled: impl Future<Output = ()>,
    mut connect: F,
) -> Option<R>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R>>,
{
    tokio::pin!(cancelled);
    loop {
        match connect().await {
            Ok(runtime) => return Some(runtime),
            Err(error) => {
                tracing::warn!(error = %verge_runtime::ErrorChain(&error), "{what} not reachable; retrying");
            }
        }
        tokio::select! {
            () = &mut cancelled => return None,
            () = tokio::time::sleep(CONNECT_RETRY) => {}
        }
    }
}

/// A container engine as edged uses it, scoped to one node; cheap to clone.
///
/// Every container it creates carries the label [`labels::MANAGED`] with the node's name;
/// [`Scope::Node`] lists and [`events`](Self::events) see only those.
pub trait ContainerRuntime: Clone + Send + Sync + 'static {
    /// `docker://<engine version>`, as the kubelet reports
    /// `nodeInfo.containerRuntimeVersion`.
    fn version(&self) -> impl Future<Output = Result<String>> + Send;

    /// The containers `filter` selects, running or not.
    fn list(
        &self,
        filter: &ListFilter,
    ) -> impl Future<Output = Result<Vec<ContainerSummary>>> + Send;

    /// Inspects container `id`; `None` if it does not exist.
    fn inspect(&self, id: &str) -> impl Future<Output = Result<Option<ContainerInfo>>> + Send;

    /// Creates container `name` from `spec` (adding the label [`labels::MANAGED`]); returns
    /// its id. [`RuntimeError::Conflict`] if the name is taken.
    fn create(
        &self,
        name: &str,
        spec: ContainerSpec,
    ) -> impl Future<Output = Result<String>> + Send;

    /// Starts container `id` (e.g. fails when the command does not exist in the image).
    fn start(&self, id: &str) -> impl Future<Output = Result<()>> + Send;

    /// Stops container `id`: SIGTERM (or the image's stop signal), then SIGKILL after `grace`
    /// (whole seconds, rounded up; kubelet `terminationGracePeriodSeconds`). A container that
    /// is already stopped or gone is fine.
    fn stop(&self, id: &str, grace: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Removes container `id` (or name) with its anonymous volumes; `force` kills it first
    /// if it runs. [`RuntimeError::NotFound`] if it does not exist,
    /// [`RuntimeError::Conflict`] if its removal is already in progress (or, without `force`,
    /// it runs).
    fn remove(&self, id: &str, force: bool) -> impl Future<Output = Result<()>> + Send;

    /// Changes the CPU and memory settings of container `id` in place, running or not
    /// (kubelet: CRI `UpdateContainerResources`, the in-place pod resize; Docker
    /// `ContainerUpdate`). Only the settings `resources` gives change; the swap limit follows
    /// the memory limit ([`LinuxResources`]).
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] if the container does not exist;
    /// [`RuntimeError::Engine`] when the engine or the kernel refuses the values (e.g. a
    /// memory limit below what the container uses).
    fn update_resources(
        &self,
        id: &str,
        resources: &LinuxResources,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The memory container `id` uses now, bytes (what the kubelet compares a lowered memory
    /// limit with: cgroup v2 `memory.current`, v1 `memory.usage_in_bytes`; Docker stats
    /// `memory_stats.usage`). `None` when the engine does not say (e.g. it is not running).
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] if the container does not exist; [`RuntimeError::Engine`]
    /// if the engine does not answer.
    fn memory_usage(&self, id: &str) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// Lifecycle events of this node's containers (`start`, `die`, `oom`, `destroy`). Ends
    /// (or yields errors) when the engine goes away; the caller subscribes again.
    fn events(&self) -> BoxStream<'static, Result<RuntimeEvent>>;

    /// Runs `cmd` in running container `id` and waits for it; keeps at most `max_output`
    /// bytes of its output (exec probes).
    fn exec(
        &self,
        id: &str,
        cmd: &[String],
        max_output: usize,
    ) -> impl Future<Output = Result<ExecOutput>> + Send;

    /// The last `lines` lines of container `id`'s output, stdout and stderr interleaved as
    /// written (the termination message's log fallback).
    fn log_tail(&self, id: &str, lines: usize) -> impl Future<Output = Result<Vec<u8>>> + Send;

    /// Inspects local image `image` (a reference or an id); `None` if it is not present.
    fn image_status(&self, image: &str) -> impl Future<Output = Result<Option<ImageInfo>>> + Send;

    /// Pulls `image` (`repo[:tag]` — tag `latest` when none — or `repo@digest`) with `auth`.
    ///
    /// # Errors
    /// [`RuntimeError::RegistryUnreachable`] when the engine could not reach the registry
    /// (see [`image::registry_unreachable`]); [`RuntimeError::NotFound`] for an image the
    /// registry does not have; [`RuntimeError::Engine`] for any other failure, including
    /// every other answer of the registry (e.g. an authentication error).
    fn pull_image(
        &self,
        image: &str,
        auth: Option<RegistryAuth>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Whether the engine mounts images into containers itself
    /// ([`ContainerSpec::image_mounts`]; Docker: API 1.48, Docker 28, and later). When it does
    /// not, a [`ContainerSpec`] must not have image mounts: edged then mounts the image's
    /// [`image_layers`](Self::image_layers) itself and binds them.
    ///
    /// # Errors
    /// [`RuntimeError::Engine`] if the engine does not answer.
    fn supports_image_mounts(&self) -> impl Future<Output = Result<bool>> + Send;

    /// The directories of local image `image`'s filesystem layers on the host, topmost
    /// first (Docker's `overlay2` storage driver: `GraphDriver.Data.UpperDir` then the
    /// entries of `LowerDir`), for an engine that does not mount images itself. `None` when
    /// the storage driver does not expose them (another driver, or the containerd image
    /// store).
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] if the image is not present; [`RuntimeError::Engine`] if the
    /// engine does not answer.
    fn image_layers(
        &self,
        image: &str,
    ) -> impl Future<Output = Result<Option<Vec<PathBuf>>>> + Send;

    /// Every local image.
    fn list_images(&self) -> impl Future<Output = Result<Vec<ImageSummary>>> + Send;

    /// Removes image reference `reference` (a tag, or an id), never forcibly (an image in
    /// use stays).
    fn remove_image(&self, reference: &str) -> impl Future<Output = Result<()>> + Send;

    /// The directory holding the engine's images (Docker's root directory), if it says.
    fn image_fs_root(&self) -> impl Future<Output = Result<Option<PathBuf>>> + Send;

    /// Makes sure the network `spec.name` exists with `spec`'s subnet, gateway, bridge and
    /// masquerading, labelled with this node ([`labels::MANAGED`]). A network of that name
    /// with other settings is removed and created again ([`NetworkEnsured::Replaced`]).
    ///
    /// # Errors
    /// [`RuntimeError::Conflict`] when such a network must be replaced but containers are
    /// still attached to it; [`RuntimeError::Engine`] when the engine refuses the network
    /// (e.g. its subnet overlaps another network's).
    fn ensure_network(
        &self,
        spec: &NetworkSpec,
    ) -> impl Future<Output = Result<NetworkEnsured>> + Send;

    /// The bytes of the regular file at absolute `path` in local image `image` (at most
    /// `limit` bytes), read through a container created from the image and never started,
    /// removed afterwards (Docker: `GET /containers/{id}/archive`). An upgrade takes
    /// edgecore's binary from its image this way.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the image or the file is missing;
    /// [`RuntimeError::Engine`] when the engine fails, the path is no regular file or the file
    /// is larger than `limit`. The default: the runtime cannot read images' files.
    fn read_image_file(
        &self,
        image: &str,
        path: &str,
        limit: u64,
    ) -> impl Future<Output = Result<Vec<u8>>> + Send {
        let _ = (path, limit);
        let image = image.to_owned();
        async move {
            Err(RuntimeError::Engine {
                op: format!("read a file of image {image}"),
                source: "this runtime cannot read files of images".into(),
            })
        }
    }

    /// Removes container `id` forcibly (the pod worker's removal): a container that is gone
    /// or already being removed is fine.
    fn remove_if_present(&self, id: &str) -> impl Future<Output = Result<()>> + Send {
        async move {
            match self.remove(id, true).await {
                Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
                other => other,
            }
        }
    }
}
