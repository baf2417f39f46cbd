//! Unit tests of the pod lifecycle against [`FakeRuntime`] (no Docker), under Tokio's paused
//! clock: image pull failures, crash loops, init container failures per restart policy,
//! deletion during a start, and adoption of containers after an edgecore restart.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verge_core::Envelope;
use verge_core::{ResourceKey, ResourceType};

use super::state::{ContainerPhase, PodState};
use super::{Worker, WorkerMsg, spawn};
use crate::Context;
use crate::config::EdgedSettings;
use crate::events::Recorder;
use crate::objects::StoreObjects;
use crate::probe::ProbeManager;
use crate::status::StatusManager;
use crate::volumes::VolumeManager;
use verge_container_runtime::fake::FakeRuntime;
use verge_container_runtime::labels;
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;
use verge_metamanager::QueryRegistry;

const NODE: &str = "node-a";
const PAUSE: &str = "pause:3";
pub(super) const IMAGE: &str = "registry.example/app:1";
const SEC: Duration = Duration::from_secs(1);

/// The allocatable of the harness's node.
pub(super) const ALLOCATABLE: crate::admission::Allocatable = crate::admission::Allocatable {
    cpu_millis: 4000,
    memory_bytes: 8 << 30,
    ephemeral_storage_bytes: 100 << 30,
    pods: 110,
};

/// The memory of the harness's node, bytes (all of it allocatable).
pub(super) const MEMORY_CAPACITY: i64 = 8 << 30;

/// A context over a fake runtime, and the upstream messages (events) it sends.
pub(super) struct Harness {
    pub(super) rt: FakeRuntime,
    pub(super) ctx: Arc<Context<FakeRuntime>>,
    /// Where new sandboxes go (the edged network task's output).
    pub(super) network: tokio::sync::watch::Sender<crate::network::NetworkState>,
    upstream: mpsc::Receiver<Envelope>,
    /// The status manager of `ctx` for a test to run ([`harness_reporting`]); otherwise
    /// dropped, statuses being read from the worker's `last_status`.
    pub(super) status_manager: Option<StatusManager>,
    _dir: tempfile::TempDir,
}

pub(super) fn harness() -> Harness {
    harness_with_memory_mount(crate::volumes::mount_for_tests)
}

/// [`harness`] whose status manager is kept for the test to run (its reports then come
/// [`upstream`](Harness::upstream)).
pub(super) fn harness_reporting() -> Harness {
    build_harness(crate::volumes::mount_for_tests, true)
}

/// [`harness`] whose secret and projected volumes get their tmpfs from `mount`.
pub(super) fn harness_with_memory_mount(mount: crate::volumes::MountMemory) -> Harness {
    build_harness(mount, false)
}

fn build_harness(mount: crate::volumes::MountMemory, reporting: bool) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("store.redb")).expect("store");
    let (hub, upstream) = EdgeHubHandle::detached(100_000);
    // Nothing answers cloud queries here: they fail at once instead of after the default
    // timeout (service lists, asked at every container start, then are empty).
    let objects = Arc::new(
        StoreObjects::new(store.clone(), hub.clone(), QueryRegistry::new())
            .with_timeout(Duration::ZERO),
    );
    let mut config = EdgedSettings::new(NODE, dir.path());
    config.edged.pod_sandbox_image = PAUSE.into();
    let config = Arc::new(config);
    let rt = FakeRuntime::new(NODE);
    rt.add_image(PAUSE);
    // Sandboxes go to Docker's default bridge unless a test sets the pod network.
    let (network, network_rx) =
        tokio::sync::watch::channel(crate::network::NetworkState::DefaultBridge);
    // Statuses are read from the worker (`last_status`); the manager is not run unless the
    // test is `reporting` (dropped, it takes nothing: reports are dropped at once).
    let (status, status_manager) = StatusManager::new(hub.clone());
    let ctx = Arc::new(Context {
        volumes: VolumeManager::new(config.pods_dir(), Arc::clone(&objects))
            .with_memory_mount(mount),
        runtime: rt.clone(),
        objects,
        probes: ProbeManager::new(rt.clone()),
        status,
        events: Recorder::new(hub, NODE),
        store,
        node_ip: None,
        network: network_rx,
        pod_ips: std::sync::Mutex::default(),
        admitted: crate::admission::Admitted::new(ALLOCATABLE),
        memory_capacity: MEMORY_CAPACITY,
        config,
    });
    Harness {
        rt,
        ctx,
        network,
        upstream,
        status_manager: reporting.then_some(status_manager),
        _dir: dir,
    }
}

impl Harness {
    pub(super) fn worker(&self, pod: &Pod) -> Worker<FakeRuntime> {
        Worker::new(Arc::clone(&self.ctx), key(pod), Arc::new(pod.clone()))
    }

    /// The harness after an edgecore restart: the same runtime, store and pod directories,
    /// and a new registry of admitted pods counting them at the allocations checkpointed on
    /// disk, with `restored` registered as admitted before (as the dispatcher does at
    /// start-up). Every worker of the harness must have been dropped.
    pub(super) fn restarted(self, restored: &[&Pod]) -> Self {
        let Self {
            rt,
            ctx,
            network,
            upstream,
            status_manager,
            _dir,
        } = self;
        let Ok(ctx) = Arc::try_unwrap(ctx) else {
            panic!("a worker of the harness still runs");
        };
        let saved = crate::resize::Checkpoint::load_all(&ctx.config.pods_dir());
        let admitted = crate::admission::Admitted::with_allocations(ALLOCATABLE, saved);
        admitted.restore(restored.iter().copied());
        let ctx = Arc::new(Context { admitted, ..ctx });
        Self {
            rt,
            ctx,
            network,
            upstream,
            status_manager,
            _dir,
        }
    }

    /// Every upstream message sent since the last call (events and, when the status manager
    /// runs, pod statuses and deletions).
    pub(super) fn upstream(&mut self) -> Vec<Envelope> {
        std::iter::from_fn(|| self.upstream.try_recv().ok()).collect()
    }

    /// `(reason, message)` of every event sent since the last call.
    pub(super) fn events(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(m) = self.upstream.try_recv() {
            if let Ok(e) = serde_json::from_slice::<Event>(&m.body) {
                out.push((e.reason.unwrap_or_default(), e.message.unwrap_or_default()));
            }
        }
        out
    }
}

fn key(pod: &Pod) -> ResourceKey {
    ResourceKey::new(
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        ResourceType::Pod,
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

pub(super) fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("pod")
}

pub(super) fn app_pod(policy: &str) -> Pod {
    pod(json!({"restartPolicy": policy, "containers": [{"name": "app", "image": IMAGE}]}))
}

/// Makes `pod` active on the node for a minute already (`status.startTime` 60 s ago), as
/// the `activeDeadlineSeconds` tests need.
pub(super) fn started_a_minute_ago(pod: &mut Pod) {
    let started = verge_edge_store::clock::now() - k8s_openapi::jiff::SignedDuration::from_secs(60);
    pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
        start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            started,
        )),
        ..Default::default()
    });
}

/// Syncs until the worker no longer asks to run again at once (sandbox creation asks so).
pub(super) async fn settle(w: &mut Worker<FakeRuntime>) -> Option<Instant> {
    for _ in 0..10 {
        let wake = w.sync().await.expect("sync");
        if wake.is_none_or(|t| t > Instant::now()) {
            return wake;
        }
    }
    panic!("the pod never settles")
}

pub(super) fn status(w: &Worker<FakeRuntime>, name: &str) -> ContainerStatus {
    let s = w.last_status.as_ref().expect("status reported");
    s.init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
        .expect("container status")
}

pub(super) fn waiting_reason(w: &Worker<FakeRuntime>, name: &str) -> Option<String> {
    status(w, name).state?.waiting?.reason
}

fn phase(w: &Worker<FakeRuntime>) -> String {
    let s = w.last_status.as_ref().expect("status reported");
    s.phase.clone().unwrap_or_default()
}

fn has(events: &[(String, String)], reason: &str, message: &str) -> bool {
    events
        .iter()
        .any(|(r, m)| r == reason && m.starts_with(message))
}

/// Issue 31: secrets are never on disk. When the tmpfs of a secret volume cannot be
/// mounted, the pod does not start: the kubelet's `FailedMount` event, the containers
/// waiting in `ContainerCreating`, nothing written into the volume's directory.
#[tokio::test(start_paused = true)]
async fn a_secret_volume_without_its_tmpfs_keeps_the_pod_from_starting() {
    let mut h = harness_with_memory_mount(|_, _| Err(std::io::Error::from_raw_os_error(1)));
    let p = pod(json!({
        "restartPolicy": "Always",
        "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}],
        "containers": [{"name": "app", "image": IMAGE,
            "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]}],
    }));
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    assert_eq!(phase(&w), "Pending");
    assert_eq!(
        waiting_reason(&w, "app").as_deref(),
        Some("ContainerCreating")
    );
    assert!(h.rt.instances("app").is_empty(), "no container started");
    let events = h.events();
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "FailedMount" && m.contains("creds") && m.contains("tmpfs")),
        "{events:?}"
    );
    let dir = h.ctx.config.pods_dir().join("u-1/volumes/creds");
    let written = std::fs::read_dir(&dir).map_or(0, Iterator::count);
    assert_eq!(written, 0, "nothing written to disk in {}", dir.display());
}

#[tokio::test(start_paused = true)]
async fn image_pull_failure_shows_err_image_pull_then_image_pull_back_off() {
    let mut h = harness();
    h.rt.fail_pull(IMAGE, "manifest unknown");
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    let t0 = Instant::now();
    let wake = settle(&mut w).await;
    assert_eq!(wake, Some(t0 + SEC), "ErrImagePull is shown for a second");
    assert_eq!(waiting_reason(&w, "app").as_deref(), Some("ErrImagePull"));
    let msg = status(&w, "app").state.and_then(|s| s.waiting?.message);
    let expected = format!("failed to pull image \"{IMAGE}\": manifest unknown");
    assert_eq!(msg.as_deref(), Some(expected.as_str()));
    assert_eq!(phase(&w), "Pending");
    let events = h.events();
    assert!(has(
        &events,
        "Pulling",
        &format!("Pulling image \"{IMAGE}\"")
    ));
    let failed = format!("Failed to pull image \"{IMAGE}\": manifest unknown");
    assert!(has(&events, "Failed", &failed), "{events:?}");
    assert!(has(&events, "Failed", "Error: ErrImagePull"), "{events:?}");

    tokio::time::advance(SEC).await;
    let wake = w.sync().await.expect("sync");
    assert_eq!(
        wake,
        Some(t0 + 10 * SEC),
        "the next pull waits for the back-off"
    );
    assert_eq!(
        waiting_reason(&w, "app").as_deref(),
        Some("ImagePullBackOff")
    );
    let events = h.events();
    let backoff = format!("Back-off pulling image \"{IMAGE}\"");
    assert!(has(&events, "BackOff", &backoff), "{events:?}");
    assert!(
        has(&events, "Failed", "Error: ImagePullBackOff"),
        "{events:?}"
    );

    tokio::time::advance(9 * SEC).await;
    w.sync().await.expect("sync");
    assert_eq!(waiting_reason(&w, "app").as_deref(), Some("ErrImagePull"));
    let pulls =
        h.rt.take_calls()
            .iter()
            .filter(|c| c.starts_with("pull "))
            .count();
    assert_eq!(pulls, 2, "one pull per attempt");
    assert!(h.rt.instances("app").is_empty());

    h.rt.heal_pull(IMAGE);
    tokio::time::advance(10 * SEC).await;
    w.sync().await.expect("sync");
    let app = h.rt.instances("app");
    assert_eq!(app.len(), 1, "started once the image could be pulled");
    assert!(status(&w, "app").state.and_then(|s| s.running).is_some());
    let events = h.events();
    assert!(
        has(&events, "Pulled", "Successfully pulled image"),
        "{events:?}"
    );
    assert!(
        has(&events, "Started", "Started container app"),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn crash_loop_backs_off_with_growing_delay_and_resets_after_a_long_run() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    h.rt.exit_on_start("app", 1);
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    settle(&mut w).await;
    // The first restart after the first exit is immediate.
    w.sync().await.expect("sync");
    assert_eq!(h.rt.instances("app").len(), 2);
    let mut delays = Vec::new();
    for _ in 0..4 {
        let now = Instant::now();
        let wake = w.sync().await.expect("sync").expect("a back-off wake-up");
        delays.push((wake - now).as_secs());
        assert_eq!(
            waiting_reason(&w, "app").as_deref(),
            Some("CrashLoopBackOff")
        );
        let last = status(&w, "app").last_state.and_then(|s| s.terminated);
        assert_eq!(last.map(|t| t.exit_code), Some(1));
        tokio::time::advance(wake - now).await;
        w.sync().await.expect("sync");
    }
    assert_eq!(delays, [10, 20, 40, 80]);
    let status_now = status(&w, "app");
    assert_eq!(status_now.restart_count, 5);
    let events = h.events();
    let backoff = "Back-off restarting failed container app in pod web_default(u-1)";
    assert!(has(&events, "BackOff", backoff), "{events:?}");
    let message = status_now.state.and_then(|s| s.waiting?.message);
    assert_eq!(message, None, "running again after the last back-off");
    // Only the newest dead instance is kept (for lastState).
    assert!(h.rt.instances("app").len() <= 2);

    // An instance that ran for 10 minutes restarts at once, and the back-off starts over.
    h.rt.run_on_start("app");
    let now = Instant::now();
    let wake = w.sync().await.expect("sync").expect("back-off");
    tokio::time::advance(wake - now).await;
    w.sync().await.expect("sync");
    let running = h.rt.instances("app").pop().expect("instance");
    assert_eq!(
        running.info.state,
        verge_container_runtime::RunState::Running
    );
    tokio::time::advance(Duration::from_secs(600)).await;
    h.rt.exit(&running.info.id, 1);
    let before = h.rt.instances("app").len();
    let wake = w.sync().await.expect("sync");
    assert!(
        wake.is_none_or(|t| t > Instant::now() + 60 * SEC),
        "no back-off: {wake:?}"
    );
    assert!(h.rt.instances("app").len() >= before, "restarted at once");
    let newest = h.rt.instances("app").pop().expect("instance");
    assert_ne!(newest.info.id, running.info.id);
    assert_eq!(
        newest.info.state,
        verge_container_runtime::RunState::Running
    );
    h.rt.exit(&newest.info.id, 1);
    let now = Instant::now();
    let wake = w.sync().await.expect("sync").expect("back-off");
    assert_eq!(wake - now, 10 * SEC, "the back-off started over");
}

fn init_pod(policy: &str) -> Pod {
    pod(json!({
        "restartPolicy": policy,
        "initContainers": [{"name": "init", "image": IMAGE}],
        "containers": [{"name": "app", "image": IMAGE}],
    }))
}

#[tokio::test(start_paused = true)]
async fn init_container_failure_fails_the_pod_under_restart_policy_never() {
    let h = harness();
    h.rt.add_image(IMAGE);
    h.rt.exit_on_start("init", 1);
    let mut w = h.worker(&init_pod("Never"));
    settle(&mut w).await;
    assert_eq!(w.state, PodState::Initializing);
    settle(&mut w).await;
    assert_eq!(w.state, PodState::Completed { succeeded: false });
    assert_eq!(phase(&w), "Failed");
    assert!(
        h.rt.instances("app").is_empty(),
        "app containers never start"
    );
    assert_eq!(h.rt.instances("init").len(), 1, "never restarted");
    let sandbox = h.rt.instances(labels::SANDBOX_NAME).pop().expect("sandbox");
    assert!(
        h.rt.take_calls()
            .contains(&format!("stop {} 0s", sandbox.info.id))
    );
    let init = status(&w, "init")
        .state
        .and_then(|s| s.terminated)
        .expect("terminated");
    assert_eq!((init.exit_code, init.reason.as_deref()), (1, Some("Error")));
    // A completed pod is left alone.
    assert_eq!(w.sync().await.expect("sync"), None);
    assert_eq!(h.rt.instances("init").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn init_container_failure_is_retried_under_restart_policies_on_failure_and_always() {
    for policy in ["OnFailure", "Always"] {
        let h = harness();
        h.rt.add_image(IMAGE);
        h.rt.exit_on_start("init", 1);
        let mut w = h.worker(&init_pod(policy));
        settle(&mut w).await;
        w.sync().await.expect("sync");
        assert_eq!(
            h.rt.instances("init").len(),
            2,
            "{policy}: restarted at once"
        );
        let wake = w.sync().await.expect("sync");
        assert!(wake.is_some(), "{policy}: backing off");
        assert_eq!(w.state, PodState::Initializing, "{policy}");
        assert_eq!(
            waiting_reason(&w, "init").as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            waiting_reason(&w, "app").as_deref(),
            Some("PodInitializing")
        );
        assert_eq!(phase(&w), "Pending");
        // The init container succeeds next time: the app containers start.
        h.rt.exit_on_start("init", 0);
        tokio::time::advance(10 * SEC).await;
        settle(&mut w).await;
        settle(&mut w).await;
        assert_eq!(w.state, PodState::Running, "{policy}");
        assert_eq!(h.rt.instances("app").len(), 1, "{policy}");
        let init = status(&w, "init")
            .state
            .and_then(|s| s.terminated)
            .expect("done");
        assert_eq!(
            (init.exit_code, init.reason.as_deref()),
            (0, Some("Completed"))
        );
    }
}

#[tokio::test(start_paused = true)]
async fn deletion_during_a_start_takes_effect_at_the_next_sync() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let gate = h.rt.hold_start("app");
    let p = app_pod("Always");
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let tracker = TaskTracker::new();
    let handle = spawn(
        Arc::clone(&h.ctx),
        key(&p),
        p.clone(),
        verge_core::TraceContext::default(),
        false,
        &tracker,
        CancellationToken::new(),
        done_tx,
    );
    gate.reached.notified().await;
    handle.send(WorkerMsg::Deleted);
    gate.release.notify_one();
    let done = tokio::time::timeout(Duration::from_secs(60), done_rx.recv()).await;
    assert_eq!(done.expect("worker ends").as_deref(), Some("u-1"));
    assert!(h.rt.containers().is_empty(), "every container removed");
    let events = h.events();
    assert!(
        has(&events, "Started", "Started container app"),
        "{events:?}"
    );
    assert!(
        has(&events, "Killing", "Stopping container app"),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn edgecore_restart_adopts_containers_by_label() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = app_pod("Always");
    let mut first = h.worker(&p);
    settle(&mut first).await;
    settle(&mut first).await;
    let app = h.rt.instances("app").pop().expect("app");
    drop(first);
    h.rt.take_calls();

    // A new worker (edgecore restarted) adopts the running containers: nothing is created.
    let mut second = h.worker(&p);
    settle(&mut second).await;
    let calls = h.rt.take_calls();
    assert!(calls.iter().all(|c| !c.starts_with("create")), "{calls:?}");
    assert_eq!(second.state, PodState::Running);
    let s = status(&second, "app");
    assert_eq!(s.container_id, Some(format!("docker://{}", app.info.id)));
    assert!(matches!(
        second.tracks["app"].phase(),
        ContainerPhase::Running { probed: true, .. }
    ));
    drop(second);

    // A container that exited while edgecore was down restarts at once (fresh back-off),
    // counting on from its label.
    h.rt.exit(&app.info.id, 2);
    let mut third = h.worker(&p);
    settle(&mut third).await;
    let newest = h.rt.instances("app").pop().expect("app");
    assert_ne!(newest.info.id, app.info.id);
    assert_eq!(newest.info.labels[labels::RESTART_COUNT], "1");
    settle(&mut third).await;
    let s = status(&third, "app");
    assert_eq!(s.restart_count, 1);
    let last = s.last_state.and_then(|l| l.terminated).expect("last state");
    assert_eq!(last.exit_code, 2);
}

#[tokio::test(start_paused = true)]
async fn liveness_failure_kills_and_restarts_the_container() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    settle(&mut w).await;
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    w.apply(WorkerMsg::Probe(crate::probe::ProbeUpdate {
        pod_uid: "u-1".into(),
        container: "app".into(),
        container_id: app.info.id.clone(),
        kind: crate::probe::ProbeKind::Liveness,
        success: false,
        message: "HTTP probe failed with statuscode: 500".into(),
    }));
    settle(&mut w).await;
    let calls = h.rt.take_calls();
    assert!(
        calls.contains(&format!("stop {} 30s", app.info.id)),
        "{calls:?}"
    );
    let events = h.events();
    let killing = "Container app failed liveness probe, will be restarted";
    assert!(has(&events, "Killing", killing), "{events:?}");
    settle(&mut w).await;
    let s = status(&w, "app");
    assert_eq!(s.restart_count, 1);
    assert!(s.state.and_then(|s| s.running).is_some());
    let last = s.last_state.and_then(|l| l.terminated).expect("last state");
    assert_eq!(last.exit_code, 137);
}

#[tokio::test(start_paused = true)]
async fn start_failure_is_retried_after_the_back_off() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    h.rt.fail_start("app", "exec: \"nope\": executable file not found");
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    let t0 = Instant::now();
    assert_eq!(settle(&mut w).await, Some(t0 + 10 * SEC));
    assert_eq!(
        waiting_reason(&w, "app").as_deref(),
        Some("RunContainerError")
    );
    assert!(
        h.rt.instances("app").is_empty(),
        "the failed container is removed"
    );
    let events = h.events();
    assert!(
        has(&events, "Created", "Created container app"),
        "{events:?}"
    );
    let failed = "Error: docker: start c0002 failed: exec: \"nope\"";
    assert!(has(&events, "Failed", failed), "{events:?}");
    // Nothing happens before the back-off ends; then the start succeeds.
    assert_eq!(w.sync().await.expect("sync"), Some(t0 + 10 * SEC));
    h.rt.take_calls();
    h.rt.heal_start("app");
    tokio::time::advance(10 * SEC).await;
    w.sync().await.expect("sync");
    assert!(h.rt.take_calls().iter().any(|c| c.starts_with("create")));
    let sandbox = h.rt.instances(labels::SANDBOX_NAME).pop().expect("sandbox");
    let app = h.rt.instances("app").pop().expect("app");
    // App containers join the sandbox's namespaces; every container is the node's.
    let join = verge_container_runtime::types::NetworkMode::Container(sandbox.info.id.clone());
    assert_eq!(app.spec.network, join);
    assert_eq!(
        sandbox.spec.network,
        verge_container_runtime::types::NetworkMode::Bridge
    );
    assert_eq!(app.info.labels[labels::MANAGED], NODE);
    assert_eq!(app.info.labels[labels::POD_UID], "u-1");
    assert_eq!(app.name, "k8s_app_web_default_u-1_0");
}

#[tokio::test(start_paused = true)]
async fn a_failed_post_start_hook_kills_the_container_and_the_restart_policy_applies() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    h.rt.exec_exits("false", 1);
    let p = pod(
        json!({"restartPolicy": "Always", "containers": [{"name": "app", "image": IMAGE,
        "lifecycle": {"postStart": {"exec": {"command": ["false"]}}}}]}),
    );
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    let calls = h.rt.take_calls();
    let exec = calls
        .iter()
        .position(|c| c == &format!("exec {} false", app.info.id));
    let stop = calls
        .iter()
        .position(|c| c.starts_with(&format!("stop {}", app.info.id)));
    assert!(exec.is_some() && exec < stop, "hook, then kill: {calls:?}");
    let events = h.events();
    assert!(
        has(&events, "FailedPostStartHook", "PostStartHook failed"),
        "{events:?}"
    );
    assert!(has(&events, "Killing", "FailedPostStartHook"), "{events:?}");
    let killed =
        h.rt.instances("app")
            .into_iter()
            .find(|c| c.info.id == app.info.id);
    assert!(
        killed.is_some_and(|c| c.info.state != super::observe::RunState::Running),
        "the container no longer runs"
    );
}

#[tokio::test(start_paused = true)]
async fn the_pre_stop_hook_runs_before_the_stop_within_the_grace_period() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(
        json!({"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "app", "image": IMAGE,
        "lifecycle": {"preStop": {"exec": {"command": ["drain", "now"]}}}}]}),
    );
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let app = h.rt.instances("app").pop().expect("app");
    h.rt.take_calls();
    w.apply(WorkerMsg::Deleted);
    w.sync().await.expect("sync");
    let calls = h.rt.take_calls();
    let exec = calls
        .iter()
        .position(|c| c == &format!("exec {} drain now", app.info.id));
    let stop = calls
        .iter()
        .position(|c| c.starts_with(&format!("stop {}", app.info.id)));
    assert!(
        exec.is_some() && exec < stop,
        "preStop, then stop: {calls:?}"
    );
    assert!(h.events().iter().all(|(r, _)| r != "FailedPreStopHook"));
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_starts_before_the_next_init_container_restarts_always_and_stops_with_the_pod() {
    use super::observe::RunState;
    let h = harness();
    h.rt.add_image(IMAGE);
    h.rt.exit_on_start("setup", 0);
    let p = pod(json!({"restartPolicy": "Never",
        "initContainers": [{"name": "side", "image": IMAGE, "restartPolicy": "Always"},
                           {"name": "setup", "image": IMAGE}],
        "containers": [{"name": "app", "image": IMAGE}]}));
    let mut w = h.worker(&p);
    for _ in 0..4 {
        settle(&mut w).await;
    }
    let running = |name: &str| {
        h.rt.instances(name)
            .iter()
            .any(|c| c.info.state == RunState::Running)
    };
    assert!(running("side") && running("app"), "{:?}", h.rt.containers());
    assert_eq!(h.rt.instances("setup").len(), 1, "setup ran once");
    let s = w.last_status.clone().expect("status");
    let condition = |t: &str| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
    };
    assert_eq!(condition("Initialized").as_deref(), Some("True"));
    assert!(
        status(&w, "setup").ready,
        "a completed init container is ready"
    );
    assert!(status(&w, "side").ready && status(&w, "side").started == Some(true));

    // The sidecar exits: restarted although the pod's policy is Never.
    let side = h.rt.instances("side").pop().expect("side");
    h.rt.exit(&side.info.id, 1);
    for _ in 0..3 {
        settle(&mut w).await;
    }
    assert!(running("side"), "the sidecar is restarted");
    assert_eq!(h.rt.instances("side").len(), 2);

    // The app container completes: the sidecar is stopped, the pod succeeded.
    let app = h.rt.instances("app").pop().expect("app");
    h.rt.exit(&app.info.id, 0);
    for _ in 0..3 {
        settle(&mut w).await;
    }
    assert!(!running("side"), "the sidecar is stopped with the pod");
    assert_eq!(phase(&w), "Succeeded");
}

#[tokio::test(start_paused = true)]
async fn conditions_name_the_incomplete_and_unready_containers() {
    let h = harness();
    h.rt.add_image(IMAGE);
    // The init container keeps running: the pod is neither initialized nor ready.
    let p = pod(json!({"restartPolicy": "Always",
        "initContainers": [{"name": "setup", "image": IMAGE}],
        "containers": [{"name": "app", "image": IMAGE}]}));
    let mut w = h.worker(&p);
    settle(&mut w).await;
    let s = w.last_status.clone().expect("status");
    let message = |t: &str| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .and_then(|c| c.message.clone())
    };
    assert_eq!(
        message("Initialized").as_deref(),
        Some("containers with incomplete status: [setup]")
    );
    assert_eq!(
        message("ContainersReady").as_deref(),
        Some("containers with unready status: [app]")
    );
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_added_to_a_running_pod_runs_once() {
    use super::observe::RunState;
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    settle(&mut w).await;
    settle(&mut w).await;
    w.pod = Arc::new(with_debugger(&p));
    settle(&mut w).await;
    let debugger = h.rt.instances("debugger").pop().expect("started");
    assert_eq!(debugger.info.state, RunState::Running);
    let s = w.last_status.clone().expect("status");
    let statuses = s.ephemeral_container_statuses.expect("ephemeral statuses");
    assert_eq!(statuses[0].name, "debugger");
    assert!(
        statuses[0]
            .state
            .as_ref()
            .is_some_and(|s| s.running.is_some())
    );

    h.rt.exit(&debugger.info.id, 0);
    settle(&mut w).await;
    settle(&mut w).await;
    assert_eq!(h.rt.instances("debugger").len(), 1, "never restarted");
    assert_eq!(phase(&w), "Running", "the pod goes on");
}

#[tokio::test(start_paused = true)]
async fn a_pod_with_an_unsafe_sysctl_is_rejected_without_running_anything() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(
        json!({"restartPolicy": "Always", "containers": [{"name": "app", "image": IMAGE}],
        "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "10000000"}]}}),
    );
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert!(h.rt.containers().is_empty(), "nothing created");
    let s = w.last_status.clone().expect("status");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("SysctlForbidden"));
    let message = "forbidden sysctl: \"kernel.msgmax\" not allowlisted";
    // kubelet (`rejectPod`): the status prefixes the message, the event carries it bare.
    let rejected = format!("Pod was rejected: {message}");
    assert_eq!(s.message.as_deref(), Some(rejected.as_str()));
    assert!(has(&h.events(), "SysctlForbidden", message));
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_waits_for_the_pod_network_and_then_gets_an_address_of_it() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    h.network
        .send_replace(crate::network::NetworkState::Unknown);
    // Two containers: a pod with a sandbox.
    let p = pod(json!({"containers": [{"name": "app", "image": IMAGE},
        {"name": "side", "image": IMAGE}]}));
    let mut w = h.worker(&p);
    settle(&mut w).await;
    assert!(h.rt.instances(labels::SANDBOX_NAME).is_empty());
    let events = h.events();
    let waiting = "network is not ready: the Node object has not arrived";
    assert!(has(&events, "NetworkNotReady", waiting), "{events:?}");
    // The Node arrives with its pod CIDR: the next look makes the sandbox on the network,
    // at an address edged handed out.
    let net = pod_network(&h).await;
    tokio::time::advance(3 * SEC).await;
    settle(&mut w).await;
    let sandbox = h.rt.instances(labels::SANDBOX_NAME).pop().expect("sandbox");
    assert_eq!(
        sandbox.spec.network,
        verge_container_runtime::types::NetworkMode::Network(net.name().to_owned())
    );
    let ip: std::net::Ipv4Addr = sandbox.info.ip.clone().expect("ip").parse().expect("ipv4");
    assert!(net.contains(ip), "{ip}");
    assert_eq!(sandbox.spec.ipv4_address, Some(ip.to_string()));
    assert_eq!(
        sandbox.spec.labels.get(labels::POD_IP),
        Some(&ip.to_string())
    );
    let status = w.last_status.clone().expect("status");
    assert_eq!(status.pod_ip, Some(ip.to_string()));
    let app = h.rt.instances("app").pop().expect("app");
    let joined = verge_container_runtime::types::NetworkMode::Container(sandbox.info.id);
    assert_eq!(app.spec.network, joined);
}

/// `pod` with the ephemeral container `debugger` (`kubectl debug`) targeting `app`.
pub(super) fn with_debugger(pod: &Pod) -> Pod {
    let mut updated = pod.clone();
    if let Some(spec) = updated.spec.as_mut() {
        spec.ephemeral_containers = Some(vec![
            serde_json::from_value(json!({
            "name": "debugger", "image": IMAGE, "targetContainerName": "app"}))
            .expect("ephemeral container"),
        ]);
    }
    updated
}

/// Makes the node's pod network on `10.244.9.0/24` and tells the harness's workers.
pub(super) async fn pod_network(h: &Harness) -> verge_edge_net::PodNetwork {
    let net = verge_edge_net::PodNetwork::new(NODE, "10.244.9.0/24").expect("cidr");
    net.ensure(&h.rt).await.expect("network");
    h.network
        .send_replace(crate::network::NetworkState::Ready(net.clone()));
    net
}

/// A container without probes is reported ready in the same status that first says the pod
/// runs (the kubelet's `UpdatePodStatus` for a container without a probe worker): a client
/// that waits for `Running` finds `Ready` and `ContainersReady` true.
#[tokio::test(start_paused = true)]
async fn a_container_without_probes_is_ready_as_soon_as_it_runs() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = pod(json!({"containers": [{"name": "app", "image": IMAGE}]}));
    let mut w = h.worker(&p);
    for _ in 0..10 {
        w.sync().await.expect("sync");
        let Some(s) = w.last_status.clone() else {
            continue;
        };
        if s.phase.as_deref() != Some("Running") {
            continue;
        }
        let ready = |t: &str| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == t && c.status == "True")
        };
        assert!(status(&w, "app").ready, "{s:?}");
        assert!(ready("Ready") && ready("ContainersReady"), "{s:?}");
        return;
    }
    panic!("the pod never ran");
}

#[tokio::test(start_paused = true)]
async fn a_held_pod_starts_nothing_until_released() {
    let h = harness();
    h.rt.add_image(IMAGE);
    let p = app_pod("Always");
    let mut w = h.worker(&p);
    w.held = true;
    settle(&mut w).await;
    assert!(h.rt.containers().is_empty(), "nothing created while held");
    assert_eq!(w.state, PodState::Pending);
    let condition = |w: &Worker<FakeRuntime>| {
        w.last_status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == crate::hold::CONDITION))
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
    };
    assert_eq!(
        condition(&w),
        Some(("True".to_owned(), crate::hold::REASON.to_owned()))
    );
    let mut released = p.clone();
    released.metadata.annotations = Some(std::collections::BTreeMap::from([(
        crate::hold::HOLD_ANNOTATION.to_owned(),
        "false".to_owned(),
    )]));
    w.apply(WorkerMsg::Update(
        Arc::new(released),
        verge_core::TraceContext::default(),
    ));
    settle(&mut w).await;
    settle(&mut w).await;
    assert_eq!(w.state, PodState::Running);
    assert!(!h.rt.instances("app").is_empty(), "started once released");
    assert_eq!(
        condition(&w),
        Some(("False".to_owned(), crate::hold::RELEASED.to_owned()))
    );
}
