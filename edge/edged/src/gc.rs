//! Container and image garbage collection, following the kubelet (`pkg/kubelet/kuberuntime/
//! kuberuntime_gc.go` and `pkg/kubelet/images/image_gc_manager.go`).
//!
//! # Layout
//! - [`GcConfig`] (`gc/config.rs`): the policy, embedded in edgecore's configuration.
//! - `gc/containers.rs`: which dead containers to remove (pure, unit-tested).
//! - `gc/images.rs`: image records (first seen, last used), the image filesystem's usage and
//!   which images to remove.
//! - [`GarbageCollector`] (this file): lists the runtime's containers and images, removes what
//!   the policy selects, every [`GcConfig::gc_period`].
//!
//! Only containers labelled `io.kubernetes.pod.uid` (edged's, see
//! [`runtime::labels`](verge_container_runtime::labels)) are ever removed.

mod config;
mod containers;
mod images;

use std::collections::HashSet;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use config::GcConfig;
pub use images::ImageGcReport;

use containers::DeadContainer;
use verge_container_runtime::{ContainerRuntime, ListFilter, RuntimeError, Scope};

/// A garbage collection pass failed before it could decide anything (removal failures of single
/// containers or images are logged and skipped instead).
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A container runtime call failed.
    #[error("container runtime: {operation} failed")]
    Runtime {
        /// What was being done, e.g. `list containers`.
        operation: &'static str,
        /// The runtime's error.
        #[source]
        source: RuntimeError,
    },
    /// Measuring the image filesystem (a blocking task) panicked.
    #[error("cannot measure the image filesystem")]
    Blocking(#[source] tokio::task::JoinError),
}

fn runtime_err(operation: &'static str) -> impl FnOnce(RuntimeError) -> GcError {
    move |source| GcError::Runtime { operation, source }
}

/// Removes dead containers and unused images on a timer (kubelet: `containerGC` +
/// `realImageGCManager`). Image records (first detected, last used) live in memory, so after a
/// restart every image is "new" again for [`GcConfig::image_minimum_gc_age`].
#[derive(Debug)]
pub struct GarbageCollector<R> {
    runtime: R,
    config: GcConfig,
    images: images::ImageTracker,
    scope: Scope,
}

impl<R: ContainerRuntime> GarbageCollector<R> {
    /// A collector over `runtime` with `config`'s policy, looking at the containers of every
    /// pod on the engine (see [`only_node`](Self::only_node)). `config` should be
    /// [validated](GcConfig::validate).
    pub fn new(runtime: R, config: GcConfig) -> Self {
        let images = images::ImageTracker::new(&config.pinned_images);
        Self {
            runtime,
            config,
            images,
            scope: Scope::Engine,
        }
    }

    /// Collect only the containers of the runtime's node (label `io.verge.managed=<node>`,
    /// [`Scope::Node`]), so several edgecores sharing one engine leave each other alone.
    #[must_use]
    pub fn only_node(mut self) -> Self {
        self.scope = Scope::Node;
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
    /// [`GcError::Runtime`] if the containers cannot be listed.
    pub async fn collect_containers_once(
        &self,
        live_pods: &HashSet<String>,
    ) -> Result<Vec<String>, GcError> {
        let filter = ListFilter {
            scope: self.scope,
            pods_only: true,
            dead_only: true,
            ..ListFilter::default()
        };
        let listed = self
            .runtime
            .list(&filter)
            .await
            .map_err(runtime_err("list containers"))?;
        let dead: Vec<DeadContainer> = listed
            .into_iter()
            .filter_map(DeadContainer::from_summary)
            .collect();
        let now = chrono::Utc::now().timestamp();
        let evict = containers::select_evictions(dead, live_pods, &self.config, now);
        let mut removed = Vec::with_capacity(evict.len());
        for c in evict {
            match self.runtime.remove(&c.id, false).await {
                Ok(()) => {
                    info!(container_id = %c.id, pod_uid = %c.pod_uid, container = %c.name, "removed dead container");
                    removed.push(c.id);
                }
                Err(error) => {
                    warn!(container_id = %c.id, error = %verge_runtime::ErrorChain(&error), "cannot remove dead container")
                }
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
    /// [`GcError::Runtime`] if images, containers or the image filesystem root cannot be read;
    /// [`GcError::Blocking`] if measuring the filesystem fails.
    pub async fn collect_images_once(&mut self) -> Result<ImageGcReport, GcError> {
        images::collect(&self.runtime, &self.config, &mut self.images).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use verge_container_runtime::ContainerSpec;
    use verge_container_runtime::fake::FakeRuntime;
    use verge_container_runtime::labels;

    fn spec(pod_uid: Option<&str>) -> ContainerSpec {
        let mut l = HashMap::from([(labels::CONTAINER_NAME.to_owned(), "app".to_owned())]);
        if let Some(uid) = pod_uid {
            l.insert(labels::POD_UID.to_owned(), uid.to_owned());
        }
        ContainerSpec {
            image: "img".into(),
            labels: l,
            ..ContainerSpec::default()
        }
    }

    /// The collector works through the runtime alone: dead containers of gone pods go,
    /// running ones, unlabelled ones and (with `only_node`) other nodes' ones stay.
    #[tokio::test]
    async fn removes_dead_containers_of_gone_pods_through_the_runtime() {
        let rt = FakeRuntime::new("node-a");
        rt.add_image("img");
        let other = rt.for_node("node-b");
        let create = |rt: &FakeRuntime, name: &str, uid: Option<&str>| {
            let (rt, name, spec) = (rt.clone(), name.to_owned(), spec(uid));
            async move { rt.create(&name, spec).await.expect("create") }
        };
        let gone = create(&rt, "gone", Some("gone")).await;
        let running = create(&rt, "running", Some("gone")).await;
        rt.start(&running).await.expect("start");
        let live = create(&rt, "live", Some("live")).await;
        let plain = create(&rt, "plain", None).await;
        let foreign = create(&other, "foreign", Some("gone")).await;
        let config = GcConfig {
            minimum_gc_age: Duration::ZERO,
            ..GcConfig::default()
        };
        let pods = HashSet::from(["live".to_owned()]);
        let gc = GarbageCollector::new(rt.clone(), config.clone()).only_node();
        let removed = gc.collect_containers_once(&pods).await.expect("gc");
        assert_eq!(removed, [gone]);
        let left: Vec<String> = rt.containers().into_iter().map(|c| c.info.id).collect();
        assert_eq!(left, [running, live, plain, foreign.clone()]);
        // Without `only_node`, every pod container of the engine is considered.
        let gc = GarbageCollector::new(rt.clone(), config);
        let removed = gc.collect_containers_once(&pods).await.expect("gc");
        assert_eq!(removed, [foreign]);
    }
}
