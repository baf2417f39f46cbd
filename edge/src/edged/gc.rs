//! Container and image garbage collection, following the kubelet (`pkg/kubelet/kuberuntime/
//! kuberuntime_gc.go` and `pkg/kubelet/images/image_gc_manager.go`).
//!
//! # Layout
//! - [`GcConfig`] (`gc/config.rs`): the policy, embedded in edgecore's configuration.
//! - `gc/containers.rs`: which dead containers to remove (pure, unit-tested).
//! - `gc/images.rs`: image records (first seen, last used), the image filesystem's usage and
//!   which images to remove.
//! - [`GarbageCollector`] (this file): lists Docker's containers and images, removes what the
//!   policy selects, every [`GcConfig::gc_period`].
//!
//! Only containers labelled `io.kubernetes.pod.uid` (edged's, see
//! [`runtime::labels`](crate::edged::runtime::labels)) are ever removed.

mod config;
mod containers;
mod images;

use std::collections::HashSet;

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptions};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use config::GcConfig;
pub use images::ImageGcReport;

use crate::edged::runtime::labels;
use containers::DeadContainer;

/// A garbage collection pass failed before it could decide anything (removal failures of single
/// containers or images are logged and skipped instead).
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A Docker API call failed.
    #[error("docker {operation} failed")]
    Docker {
        /// What was being done, e.g. `list containers`.
        operation: &'static str,
        /// Bollard's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// Measuring the image filesystem (a blocking task) panicked.
    #[error("cannot measure the image filesystem")]
    Blocking(#[source] tokio::task::JoinError),
}

fn docker_err(operation: &'static str) -> impl FnOnce(bollard::errors::Error) -> GcError {
    move |source| GcError::Docker { operation, source }
}

/// Removes dead containers and unused images on a timer (kubelet: `containerGC` +
/// `realImageGCManager`). Image records (first detected, last used) live in memory, so after a
/// restart every image is "new" again for [`GcConfig::image_minimum_gc_age`].
#[derive(Debug)]
pub struct GarbageCollector {
    docker: Docker,
    config: GcConfig,
    images: images::ImageTracker,
    node: Option<String>,
}

impl GarbageCollector {
    /// A collector with `config`'s policy. `config` should be [validated](GcConfig::validate).
    pub fn new(docker: Docker, config: GcConfig) -> Self {
        let images = images::ImageTracker::new(&config.pinned_images);
        Self {
            docker,
            config,
            images,
            node: None,
        }
    }

    /// Collect only the containers of node `node` (label `io.verge.managed=<node>`, set by
    /// edged's runtime), so several edgecores sharing one engine leave each other alone.
    #[must_use]
    pub fn only_node(mut self, node: &str) -> Self {
        self.node = Some(node.to_owned());
        self
    }

    /// Never delete `references` (tags or `sha256:` ids), in addition to
    /// [`GcConfig::pinned_images`]; edged pins its pod infra image this way.
    #[must_use]
    pub fn pin_images<S: AsRef<str>>(mut self, references: impl IntoIterator<Item = S>) -> Self {
        self.images.pin(references);
        self
    }

    /// Runs a container pass, then an image pass, every `gc_period` (the first one period after
    /// start, so the caller can publish its pods first) until `shutdown`. `live_pods` holds the
    /// uids of every pod edged still has (running or terminating); dead containers of any other
    /// pod uid are removed. Pass failures are logged and retried next period.
    ///
    /// # Errors
    /// None so far; the `Result` matches edgecore's other modules.
    pub async fn run(
        mut self,
        live_pods: watch::Receiver<HashSet<String>>,
        shutdown: CancellationToken,
    ) -> crate::Result<()> {
        let period = self.config.gc_period;
        let mut ticker = interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let live = live_pods.borrow().clone();
            let pass = async {
                if let Err(error) = self.collect_containers_once(&live).await {
                    warn!(error = %verge_runtime::ErrorChain(&error), "container garbage collection failed");
                }
                if let Err(error) = self.collect_images_once().await {
                    warn!(error = %verge_runtime::ErrorChain(&error), "image garbage collection failed");
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = pass => {}
            }
        }
        debug!("garbage collector stopped");
        Ok(())
    }

    /// One container pass: removes the dead (created, exited or dead) containers of pods not in
    /// `live_pods`, then enforces `max_per_pod_container` and `max_containers`, never touching
    /// containers younger than `minimum_gc_age`. Returns the removed container ids.
    ///
    /// # Errors
    /// [`GcError::Docker`] if the containers cannot be listed.
    pub async fn collect_containers_once(
        &self,
        live_pods: &HashSet<String>,
    ) -> Result<Vec<String>, GcError> {
        let mut label_filter = vec![labels::POD_UID.to_owned()];
        if let Some(node) = &self.node {
            label_filter.push(format!("{}={node}", labels::MANAGED));
        }
        let filters = std::collections::HashMap::from([
            ("label".to_owned(), label_filter),
            (
                "status".to_owned(),
                vec!["created".into(), "exited".into(), "dead".into()],
            ),
        ]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let listed = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(docker_err("list containers"))?;
        let dead: Vec<DeadContainer> = listed
            .into_iter()
            .filter_map(DeadContainer::from_summary)
            .collect();
        let now = chrono::Utc::now().timestamp();
        let evict = containers::select_evictions(dead, live_pods, &self.config, now);
        let mut removed = Vec::with_capacity(evict.len());
        for c in evict {
            let options = RemoveContainerOptions {
                v: true,
                force: false,
                link: false,
            };
            match self.docker.remove_container(&c.id, Some(options)).await {
                Ok(()) => {
                    info!(container_id = %c.id, pod_uid = %c.pod_uid, container = %c.name, "removed dead container");
                    removed.push(c.id);
                }
                Err(error) => warn!(container_id = %c.id, %error, "cannot remove dead container"),
            }
        }
        Ok(removed)
    }

    /// One image pass: records which images exist and are in use, and if the image filesystem
    /// is at least `image_gc_high_threshold_percent` full, deletes unused, unpinned images old
    /// enough, least recently used first, until it is at most `image_gc_low_threshold_percent`
    /// full. Of an image with several tags only the unpinned tags are removed.
    ///
    /// # Errors
    /// [`GcError::Docker`] if images, containers or `docker info` cannot be read;
    /// [`GcError::Blocking`] if measuring the filesystem fails.
    pub async fn collect_images_once(&mut self) -> Result<ImageGcReport, GcError> {
        images::collect(&self.docker, &self.config, &mut self.images).await
    }
}
