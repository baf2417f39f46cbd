//! edged against the real Docker engine: pods run as an infra container plus app containers
//! sharing its network namespace, crash-loop back-off, init containers with an emptyDir,
//! deletion, `ErrImageNeverPull`, and recovery from the store after a restart.
//!
//! Edged is driven directly: pods go into a MetaStore and a `StoreEvent` announces them (as
//! metamanager does); upstream messages are captured from a detached `EdgeHubHandle`.
//! Tests run one at a time (edged removes containers of pods it does not know).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::PodStatus;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use verge_core::{Operation, ResourceKey, ResourceType};
use verge_edgecore::edged::objects::StoreObjects;
use verge_edgecore::metamanager::{Applied, QueryRegistry, StoreEvent};
use verge_edgecore::{Config, EdgeHubHandle, Edged, MetaStore};
use verge_proto::{Message, MessageExt as _};
use verge_testkit::docker::{TEST_IMAGE, ensure_docker, ensure_test_image};

const DEADLINE: Duration = Duration::from_secs(60);

/// One test at a time (an async mutex: not poisoned by a failed test).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Removes a test's containers even when it fails.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in docker_ids(&self.0) {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

fn docker_ids(uid: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.kubernetes.pod.uid={uid}"),
        ])
        .output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

fn docker(args: &[&str]) -> Result<String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .context("docker cli")?;
    if !out.status.success() {
        bail!("docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// One edged over a store, with its upstream captured.
struct Harness {
    _dir: tempfile::TempDir,
    config: Arc<Config>,
    store: MetaStore,
    events: broadcast::Sender<StoreEvent>,
    up: mpsc::Receiver<Message>,
    stop: CancellationToken,
    task: Option<JoinHandle<verge_edgecore::Result<()>>>,
}

impl Harness {
    fn new() -> Result<Self> {
        ensure_docker()?;
        ensure_test_image()?;
        let dir = tempfile::tempdir()?;
        let store = MetaStore::open(&dir.path().join("edgecore.redb"))?;
        let config = Config {
            node_name: "edge-test".into(),
            data_dir: dir.path().to_owned(),
            pod_infra_image: TEST_IMAGE.into(),
            pod_infra_command: vec!["sleep".into(), "2147483647".into()],
            pleg_relist_period: Duration::from_secs(1),
            crash_loop_backoff_initial: Duration::from_secs(2),
            crash_loop_backoff_max: Duration::from_secs(8),
            ..Config::default()
        };
        let (events, _) = broadcast::channel(64);
        let (_, up) = mpsc::channel(1);
        let mut h = Self {
            _dir: dir,
            config: Arc::new(config),
            store,
            events,
            up,
            stop: CancellationToken::new(),
            task: None,
        };
        h.start();
        Ok(h)
    }

    fn start(&mut self) {
        let (hub, up) = EdgeHubHandle::detached(1024);
        let objects = StoreObjects::new(self.store.clone(), hub.clone(), QueryRegistry::new());
        let edged = Edged::new(
            Arc::clone(&self.config),
            self.store.clone(),
            hub,
            objects,
            self.events.subscribe(),
        );
        self.stop = CancellationToken::new();
        self.up = up;
        self.task = Some(tokio::spawn(edged.run(self.stop.clone())));
    }

    async fn restart(&mut self) -> Result<()> {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            t.await??;
        }
        Ok(())
    }

    fn put(&self, pod: &Value, rv: &str) -> Result<ResourceKey> {
        let (ns, name) = (
            pod["metadata"]["namespace"].as_str(),
            pod["metadata"]["name"].as_str(),
        );
        let key = ResourceKey::new(
            ns.unwrap_or("default"),
            ResourceType::Pod,
            name.unwrap_or_default(),
        );
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        self.store
            .upsert_if_newer(&key, uid, rv, &serde_json::to_vec(pod)?)?;
        let _ = self.events.send(StoreEvent {
            key: key.clone(),
            uid: uid.into(),
            applied: Applied::Stored,
        });
        Ok(key)
    }

    fn delete(&self, key: &ResourceKey, uid: &str) -> Result<()> {
        self.store.delete(key, uid)?;
        let _ = self.events.send(StoreEvent {
            key: key.clone(),
            uid: uid.into(),
            applied: Applied::Deleted,
        });
        Ok(())
    }

    /// Waits for an upstream status of `name` satisfying `ok`; returns it.
    async fn status(&mut self, name: &str, ok: impl Fn(&PodStatus) -> bool) -> Result<PodStatus> {
        let resource = format!("default/podstatus/{name}");
        let end = tokio::time::Instant::now() + DEADLINE;
        let mut last = None;
        loop {
            let msg = tokio::time::timeout_at(end, self.up.recv())
                .await
                .with_context(|| format!("no matching status of {name}; last: {last:#?}"))?
                .context("upstream closed")?;
            if msg.resource() != resource {
                continue;
            }
            let status: PodStatus = serde_json::from_slice(&msg.content)?;
            if ok(&status) {
                return Ok(status);
            }
            last = Some(status);
        }
    }
}

fn pod(name: &str, uid: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": spec})
}

fn uid(test: &str) -> String {
    format!("{test}-{}", uuid::Uuid::new_v4().simple())
}

fn container<'a>(
    s: &'a PodStatus,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    s.container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

fn running(s: &PodStatus, name: &str) -> bool {
    container(s, name).is_some_and(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_runs_shares_network_and_is_deleted() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("net");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "web", "image": TEST_IMAGE, "imagePullPolicy": "IfNotPresent",
         "command": ["sh", "-c", "echo hello > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"]},
        {"name": "client", "image": TEST_IMAGE, "imagePullPolicy": "IfNotPresent",
         "command": ["sleep", "3600"]},
    ]});
    let key = h.put(&pod("net", &uid, spec), "1")?;
    let s = h
        .status("net", |s| running(s, "web") && running(s, "client"))
        .await?;
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert!(s.pod_ip.is_some(), "pod IP from the sandbox: {s:?}");
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    let client = container(&s, "client")
        .and_then(|c| c.container_id.clone())
        .context("id")?;
    let client = client.trim_start_matches("docker://");
    let labels = docker(&["inspect", "-f", "{{json .Config.Labels}}", client])?;
    let labels: Value = serde_json::from_str(&labels)?;
    assert_eq!(labels["io.kubernetes.pod.uid"], uid.as_str());
    assert_eq!(labels["io.kubernetes.container.name"], "client");
    assert_eq!(labels["io.kubernetes.pod.name"], "net");
    assert_eq!(docker_ids(&uid).len(), 3, "sandbox + 2 containers");
    // Shared network namespace: the client reaches the web server on localhost.
    let mut body = String::new();
    for _ in 0..20 {
        if let Ok(b) = docker(&[
            "exec",
            client,
            "wget",
            "-qO-",
            "http://127.0.0.1:8080/index.html",
        ]) {
            body = b;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(body, "hello");

    // Cloud delete: containers stopped and removed, deletion reported upstream.
    h.delete(&key, &uid)?;
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(end, h.up.recv())
            .await?
            .context("closed")?;
        if msg.operation()? == Operation::Delete {
            assert_eq!(msg.resource(), "default/pod/net");
            assert_eq!(
                msg.header.as_ref().map(|h| h.uid.as_str()),
                Some(uid.as_str())
            );
            break;
        }
    }
    assert!(docker_ids(&uid).is_empty(), "containers removed");
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_container_backs_off() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("crash");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "fail", "image": TEST_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", "exit 1"]},
    ]});
    h.put(&pod("crash", &uid, spec), "1")?;
    let t0 = Instant::now();
    let mut seen_at = Vec::new();
    let mut backoff_seen = false;
    while seen_at.len() < 4 {
        // Every reported status, in order.
        let s = h.status("crash", |_| true).await?;
        let Some(c) = container(&s, "fail") else {
            continue;
        };
        let waiting = c.state.as_ref().and_then(|st| st.waiting.as_ref());
        if waiting.and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff") {
            backoff_seen = true;
            let last = c.last_state.as_ref().and_then(|l| l.terminated.as_ref());
            assert_eq!(last.map(|t| t.exit_code), Some(1));
        }
        while c.state.as_ref().is_some_and(|st| st.waiting.is_none())
            && seen_at.len() <= usize::try_from(c.restart_count)?
        {
            seen_at.push(t0.elapsed());
        }
    }
    assert!(backoff_seen, "reason CrashLoopBackOff reported");
    // Restarts: immediate, then after 2 s, then 4 s: the gaps grow.
    let gaps: Vec<Duration> = seen_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps[2] > gaps[0] + Duration::from_secs(1),
        "growing delays: {gaps:?}"
    );
    assert!(
        gaps[2] >= Duration::from_secs(3),
        "second back-off ~4 s: {gaps:?}"
    );
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_pull_of_a_missing_image_waits() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("never");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"containers": [
        {"name": "app", "image": "verge-test/absent:v1", "imagePullPolicy": "Never"},
    ]});
    h.put(&pod("never", &uid, spec), "1")?;
    let s = h
        .status("never", |s| {
            container(s, "app")
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .is_some_and(|r| r == "ErrImageNeverPull")
        })
        .await?;
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_fills_an_empty_dir() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("init");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0,
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "fill", "image": TEST_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo from-init > /data/msg"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "containers": [{"name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "cat /data/msg && exec sleep 3600"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]});
    h.put(&pod("init", &uid, spec), "1")?;
    let s = h.status("init", |s| running(s, "main")).await?;
    let init = s
        .init_container_statuses
        .as_ref()
        .and_then(|i| i.first())
        .context("init status")?;
    let term = init
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .context("terminated")?;
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (0, Some("Completed"))
    );
    let id = container(&s, "main")
        .and_then(|c| c.container_id.clone())
        .context("id")?;
    let out = docker(&[
        "exec",
        id.trim_start_matches("docker://"),
        "cat",
        "/data/msg",
    ])?;
    assert_eq!(out, "from-init");
    assert_eq!(container(&s, "main").map(|c| c.restart_count), Some(0));
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_come_back_after_an_offline_restart() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("back");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]},
    ]});
    h.put(&pod("back", &uid, spec), "1")?;
    let before = h.status("back", |s| running(s, "app")).await?;
    h.restart().await?;
    // Containers survive edgecore stopping; then they are lost (e.g. a reboot).
    assert_eq!(docker_ids(&uid).len(), 2);
    for id in docker_ids(&uid) {
        docker(&["rm", "-f", &id])?;
    }
    h.start();
    let after = h.status("back", |s| running(s, "app")).await?;
    let id = |s: &PodStatus| container(s, "app").and_then(|c| c.container_id.clone());
    assert_ne!(id(&before), id(&after), "recreated from the store alone");
    h.restart().await
}
