//! The harness of the edged Docker tests: one edged over a MetaStore, driven like
//! metamanager drives it (pods stored, then a `StoreEvent`), its upstream captured from a
//! detached `EdgeHubHandle` and logged, so statuses, events and deletions can be awaited in
//! any order. Each harness has its own node name, so edged only sees its own containers;
//! tests still take [`SERIAL`] to keep the load of this machine bounded.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{ContainerStatus, Event, PodStatus};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use verge_core::{Operation, ResourceKey, ResourceType};
use verge_edgecore::edged::EdgedSettings;
use verge_edgecore::edged::objects::StoreObjects;
use verge_edgecore::metamanager::{Applied, QueryRegistry, StoreEvent};
use verge_edgecore::{EdgeHubHandle, Edged, MetaStore};
use verge_proto::{Message, MessageExt as _};
use verge_testkit::docker::{TEST_IMAGE, ensure_docker, ensure_test_image};

/// Longest wait for one expected report.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// One test at a time (an async mutex: not poisoned by a failed test).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Removes a test's containers even when it fails.
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in docker_ids(&self.0) {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

/// Every container (running or not) of pod `uid`.
pub fn docker_ids(uid: &str) -> Vec<String> {
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

/// Runs the docker CLI; trimmed stdout, or an error with stderr.
pub fn docker(args: &[&str]) -> Result<String> {
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
pub struct Harness {
    _dir: tempfile::TempDir,
    pub config: Arc<EdgedSettings>,
    store: MetaStore,
    events: broadcast::Sender<StoreEvent>,
    up: mpsc::Receiver<verge_core::Envelope>,
    /// Every upstream message received so far, in order.
    pub log: Vec<Message>,
    stop: CancellationToken,
    task: Option<JoinHandle<verge_edgecore::edged::Result<()>>>,
}

/// How long edged's queries wait in the harness, which has no cloud to answer them.
const QUERY_TIMEOUT: Duration = Duration::from_millis(200);

impl Harness {
    /// Checks Docker and the test image, then starts edged.
    pub fn new() -> Result<Self> {
        verge_telemetry::init_for_tests();
        ensure_docker()?;
        ensure_test_image()?;
        let dir = tempfile::tempdir()?;
        let store = MetaStore::open(&dir.path().join("edgecore.redb"))?;
        let node = format!(
            "edge-test-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mut config = EdgedSettings::new(node, dir.path());
        let edged = &mut config.edged;
        edged.pod_sandbox_image = TEST_IMAGE.into();
        edged.pod_sandbox_command = vec!["sleep".into(), "2147483647".into()];
        edged.pleg_relist_period = Duration::from_secs(1);
        edged.crash_loop_back_off.initial_delay = Duration::from_secs(2);
        edged.crash_loop_back_off.max_container_restart_period = Duration::from_secs(8);
        // The Node object, as edgecontroller sends it; without a pod CIDR the sandboxes go to
        // Docker's default bridge (edged::network), so harnesses running side by side need
        // no networks of their own.
        let node_key = ResourceKey::cluster(ResourceType::Node, &config.node_name);
        let node_object = serde_json::json!({ "metadata": { "name": config.node_name } });
        store.upsert_if_newer(&node_key, "", "1", &serde_json::to_vec(&node_object)?)?;
        let (events, _) = broadcast::channel(64);
        let (_, up) = mpsc::channel(1);
        let mut h = Self {
            _dir: dir,
            config: Arc::new(config),
            store,
            events,
            up,
            log: Vec::new(),
            stop: CancellationToken::new(),
            task: None,
        };
        h.start();
        Ok(h)
    }

    /// Starts (again) an edged over the same store and configuration.
    pub fn start(&mut self) {
        let (hub, up) = EdgeHubHandle::detached(1024);
        // No cloud answers this harness's queries (e.g. the service list before every
        // container start): they time out at once instead of after 30 s.
        let objects = StoreObjects::new(self.store.clone(), hub.clone(), QueryRegistry::new())
            .with_timeout(QUERY_TIMEOUT);
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

    /// Stops edged (containers keep running).
    pub async fn restart(&mut self) -> Result<()> {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            t.await??;
        }
        Ok(())
    }

    /// Stores `pod` with resourceVersion `rv` and announces it.
    pub fn put(&self, pod: &Value, rv: &str) -> Result<ResourceKey> {
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
            trace: Default::default(),
        });
        Ok(key)
    }

    /// Removes pod `key` from the store (a cloud delete) and announces it.
    pub fn delete(&self, key: &ResourceKey, uid: &str) -> Result<()> {
        self.store.delete(key, uid)?;
        let _ = self.events.send(StoreEvent {
            key: key.clone(),
            uid: uid.into(),
            applied: Applied::Deleted,
            trace: Default::default(),
        });
        Ok(())
    }

    /// The first message from index `from` of the log on that `ok` holds, receiving more
    /// (until [`DEADLINE`]) as needed; returns its index.
    pub async fn wait(
        &mut self,
        from: usize,
        what: &str,
        ok: impl Fn(&Message) -> bool,
    ) -> Result<usize> {
        let end = tokio::time::Instant::now() + DEADLINE;
        let mut i = from;
        loop {
            while i < self.log.len() {
                if ok(&self.log[i]) {
                    return Ok(i);
                }
                i += 1;
            }
            let msg = tokio::time::timeout_at(end, self.up.recv())
                .await
                .with_context(|| format!("timed out waiting for {what}"))?
                .context("upstream closed")?;
            self.log.push(Message::from(msg));
        }
    }

    /// Waits for a status of `name` reported after every status already seen by this call
    /// path (each call starts after the log's end) satisfying `ok`; returns it.
    pub async fn status(
        &mut self,
        name: &str,
        ok: impl Fn(&PodStatus) -> bool,
    ) -> Result<PodStatus> {
        let resource = format!("default/podstatus/{name}");
        let from = self.log.len();
        let i = self
            .wait(from, &format!("a matching status of {name}"), |m| {
                m.resource() == resource
                    && serde_json::from_slice::<PodStatus>(&m.content).is_ok_and(|s| ok(&s))
            })
            .await
            .with_context(|| format!("last status: {:#?}", self.last_status(name)))?;
        Ok(serde_json::from_slice(&self.log[i].content)?)
    }

    /// The last status of `name` in the log.
    pub fn last_status(&self, name: &str) -> Option<PodStatus> {
        let resource = format!("default/podstatus/{name}");
        let m = self.log.iter().rev().find(|m| m.resource() == resource)?;
        serde_json::from_slice(&m.content).ok()
    }

    /// Waits for an event about pod `name` with `reason` whose message contains `text`
    /// (searching the whole log first); returns it.
    pub async fn event(&mut self, name: &str, reason: &str, text: &str) -> Result<Event> {
        let what = format!("event {reason} {text:?} of {name}");
        let i = self
            .wait(0, &what, |m| {
                as_event(m).is_some_and(|e| {
                    e.involved_object.name.as_deref() == Some(name)
                        && e.reason.as_deref() == Some(reason)
                        && e.message.as_deref().is_some_and(|t| t.contains(text))
                })
            })
            .await
            .with_context(|| format!("events: {:#?}", self.events(name)))?;
        as_event(&self.log[i]).context("event")
    }

    /// (reason, message) of every event about `name` in the log.
    pub fn events(&self, name: &str) -> Vec<(String, String)> {
        self.log
            .iter()
            .filter_map(as_event)
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    /// Waits for the deletion report of `name` (header uid `uid`).
    pub async fn deleted(&mut self, name: &str, uid: &str) -> Result<()> {
        let resource = format!("default/pod/{name}");
        self.wait(0, &format!("the deletion of {name}"), |m| {
            m.operation().is_ok_and(|o| o == Operation::Delete)
                && m.resource() == resource
                && m.header.as_ref().is_some_and(|h| h.uid == uid)
        })
        .await
        .map(|_| ())
    }
}

/// The event in `m`, if it is an `insert <ns>/event/<name>`.
fn as_event(m: &Message) -> Option<Event> {
    let is_event = m.operation().is_ok_and(|o| o == Operation::Insert)
        && m.resource().split('/').nth(1) == Some("event");
    is_event
        .then(|| serde_json::from_slice(&m.content).ok())
        .flatten()
}

/// A v1.Pod in namespace `default`.
pub fn pod(name: &str, uid: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": spec})
}

/// A unique pod uid for `test`.
pub fn uid(test: &str) -> String {
    format!("{test}-{}", uuid::Uuid::new_v4().simple())
}

/// The status of container `name`.
pub fn container<'a>(s: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    s.container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

/// Whether container `name` is running.
pub fn running(s: &PodStatus, name: &str) -> bool {
    container(s, name).is_some_and(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
}

/// The Docker id of container `name` (without `docker://`).
pub fn docker_id(s: &PodStatus, name: &str) -> Result<String> {
    let id = container(s, name)
        .and_then(|c| c.container_id.clone())
        .with_context(|| format!("no id of {name}"))?;
    Ok(id.trim_start_matches("docker://").to_owned())
}
