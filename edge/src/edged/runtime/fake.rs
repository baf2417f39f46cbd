//! An in-memory [`ContainerRuntime`] for unit tests of the pod lifecycle (no Docker): containers
//! with labels and states, local images, scripted failures and a log of the calls made.
//! Containers change state only through the trait's calls and the helpers ([`FakeRuntime::exit`]);
//! time stamps follow Tokio's clock (paused in tests) from a fixed wall-clock origin.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

use super::types::{
    ContainerInfo, ContainerSpec, ContainerSummary, ExecOutput, ImageInfo, ImageSummary,
    ListFilter, RegistryAuth, RunState, RuntimeEvent, Scope,
};
use super::{ContainerRuntime, Result, RuntimeError, labels};

/// A failure the fake was told to produce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FakeFailure(pub String);

/// A start held half-way (see [`FakeRuntime::hold_start`]): `reached` is notified when a
/// start of the container begins, which then waits for `release`.
#[derive(Debug, Clone, Default)]
pub struct StartGate {
    /// Notified when the start begins.
    pub reached: Arc<Notify>,
    /// Notify it to let the start finish.
    pub release: Arc<Notify>,
}

/// One fake container.
#[derive(Debug, Clone)]
pub struct FakeContainer {
    /// Its name.
    pub name: String,
    /// Its spec.
    pub spec: ContainerSpec,
    /// Its state and times.
    pub info: ContainerInfo,
    /// Creation order (stands in for the creation time).
    pub created: i64,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    containers: HashMap<String, FakeContainer>,
    images: HashSet<String>,
    /// Images whose pull fails, with the engine's message.
    fail_pull: HashMap<String, String>,
    /// Container names (spec names, label `io.kubernetes.container.name`) whose start fails.
    fail_start: HashMap<String, String>,
    /// Exit code a container exits with right after its start, by spec name.
    exit_on_start: HashMap<String, i32>,
    /// Starts held half-way, by spec name.
    gates: HashMap<String, StartGate>,
    /// Exit codes of `exec`, by command (its words joined by spaces); 0 when absent.
    exec_exit: HashMap<String, i64>,
    /// Output of containers, by id.
    logs: HashMap<String, Vec<u8>>,
    calls: Vec<String>,
}

/// See the module docs. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct FakeRuntime {
    node: String,
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<RuntimeEvent>,
    origin: Instant,
}

/// The fake's wall clock origin (2100-01-01T00:00:00Z). Exits are stamped after the real
/// wall clock, so the worker sees them as just happened (no time passed since the exit).
const WALL_ORIGIN_S: i64 = 4_102_444_800;

impl FakeRuntime {
    /// An empty engine for node `node`.
    pub fn new(node: &str) -> Self {
        Self {
            node: node.to_owned(),
            state: Arc::default(),
            events: broadcast::channel(1024).0,
            origin: Instant::now(),
        }
    }

    /// The same engine as seen by the edgecore of node `node` (another node sharing it).
    pub fn for_node(&self, node: &str) -> Self {
        Self {
            node: node.to_owned(),
            ..self.clone()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tokio's clock as a wall-clock time.
    fn now(&self) -> Time {
        let elapsed = Instant::now() - self.origin;
        let secs = WALL_ORIGIN_S + i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX);
        let nanos = i32::try_from(elapsed.subsec_nanos()).unwrap_or(0);
        Time(Timestamp::new(secs, nanos).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    /// Makes image `image` present.
    pub fn add_image(&self, image: &str) {
        self.lock().images.insert(image.to_owned());
    }

    /// Makes pulls of `image` fail with `message`.
    pub fn fail_pull(&self, image: &str, message: &str) {
        self.lock()
            .fail_pull
            .insert(image.to_owned(), message.to_owned());
    }

    /// Lets pulls of `image` succeed again.
    pub fn heal_pull(&self, image: &str) {
        self.lock().fail_pull.remove(image);
    }

    /// Makes starts of spec container `name` fail with `message`.
    pub fn fail_start(&self, name: &str, message: &str) {
        self.lock()
            .fail_start
            .insert(name.to_owned(), message.to_owned());
    }

    /// Lets starts of spec container `name` succeed again.
    pub fn heal_start(&self, name: &str) {
        self.lock().fail_start.remove(name);
    }

    /// Makes every instance of spec container `name` exit with `code` as soon as it starts.
    pub fn exit_on_start(&self, name: &str, code: i32) {
        self.lock().exit_on_start.insert(name.to_owned(), code);
    }

    /// Makes `exec` of `command` (its words joined by spaces) exit with `code`.
    pub fn exec_exits(&self, command: &str, code: i64) {
        self.lock().exec_exit.insert(command.to_owned(), code);
    }

    /// Sets the output of container `id` (what `log_tail` returns).
    pub fn set_logs(&self, id: &str, output: &str) {
        self.lock()
            .logs
            .insert(id.to_owned(), output.as_bytes().to_vec());
    }

    /// Lets instances of spec container `name` run after their start.
    pub fn run_on_start(&self, name: &str) {
        self.lock().exit_on_start.remove(name);
    }

    /// Holds the next start of spec container `name` half-way until the returned gate is
    /// released (a start in progress, e.g. to delete the pod meanwhile).
    pub fn hold_start(&self, name: &str) -> StartGate {
        let gate = StartGate::default();
        self.lock().gates.insert(name.to_owned(), gate.clone());
        gate
    }

    /// Ends running container `id` with exit code `code` now.
    pub fn exit(&self, id: &str, code: i32) {
        let now = self.now();
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.info.state = RunState::Exited;
            c.info.exit_code = code;
            c.info.finished_at = Some(now);
        }
        let _ = self.events.send(RuntimeEvent::Die(id.to_owned()));
    }

    /// Every container, oldest first.
    pub fn containers(&self) -> Vec<FakeContainer> {
        let mut all: Vec<FakeContainer> = self.lock().containers.values().cloned().collect();
        all.sort_by_key(|c| c.created);
        all
    }

    /// The containers of spec container `name` (label `io.kubernetes.container.name`),
    /// oldest first.
    pub fn instances(&self, name: &str) -> Vec<FakeContainer> {
        self.containers()
            .into_iter()
            .filter(|c| {
                c.info
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .map(String::as_str)
                    == Some(name)
            })
            .collect()
    }

    /// The calls made so far (`create <name>`, `start <id>`, `stop <id>`, `remove <id>`,
    /// `pull <image>`), and forgets them.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().calls)
    }

    fn failure(op: String, message: &str) -> RuntimeError {
        RuntimeError::Engine {
            op,
            source: Box::new(FakeFailure(message.to_owned())),
        }
    }

    fn not_found(op: String) -> RuntimeError {
        RuntimeError::NotFound {
            op,
            source: Box::new(FakeFailure("No such container".to_owned())),
        }
    }
}

impl ContainerRuntime for FakeRuntime {
    async fn version(&self) -> Result<String> {
        Ok("docker://fake".to_owned())
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<ContainerSummary>> {
        let state = self.lock();
        let mut out: Vec<(i64, ContainerSummary)> = Vec::new();
        for c in state.containers.values() {
            let l = &c.info.labels;
            let node_ok =
                filter.scope == Scope::Engine || l.get(labels::MANAGED) == Some(&self.node);
            let pod_ok = match &filter.pod_uid {
                Some(uid) => l.get(labels::POD_UID) == Some(uid),
                None => !filter.pods_only || l.contains_key(labels::POD_UID),
            };
            let dead_ok = !filter.dead_only || c.info.state != RunState::Running;
            if node_ok && pod_ok && dead_ok {
                let word = match c.info.state {
                    RunState::Created => "created",
                    RunState::Running => "running",
                    RunState::Exited => "exited",
                };
                out.push((
                    c.created,
                    ContainerSummary {
                        id: c.info.id.clone(),
                        labels: l.clone(),
                        state: word.to_owned(),
                        created: c.created,
                        image_id: Some(c.info.image_id.clone()),
                    },
                ));
            }
        }
        out.sort_by_key(|(created, _)| *created);
        Ok(out.into_iter().map(|(_, s)| s).collect())
    }

    async fn inspect(&self, id: &str) -> Result<Option<ContainerInfo>> {
        Ok(self.lock().containers.get(id).map(|c| c.info.clone()))
    }

    async fn create(&self, name: &str, mut spec: ContainerSpec) -> Result<String> {
        spec.labels
            .insert(labels::MANAGED.to_owned(), self.node.clone());
        let mut state = self.lock();
        state.calls.push(format!("create {name}"));
        if state.containers.values().any(|c| c.name == name) {
            return Err(RuntimeError::Conflict {
                op: format!("create {name}"),
                source: Box::new(FakeFailure("name in use".to_owned())),
            });
        }
        if !state.images.contains(&spec.image) {
            return Err(Self::failure(format!("create {name}"), "No such image"));
        }
        state.next_id += 1;
        let id = format!("c{:04}", state.next_id);
        let created = i64::try_from(state.next_id).unwrap_or(i64::MAX);
        let info = ContainerInfo {
            id: id.clone(),
            labels: spec.labels.clone(),
            state: RunState::Created,
            exit_code: 0,
            oom_killed: false,
            error: None,
            started_at: None,
            finished_at: None,
            image: spec.image.clone(),
            image_id: format!("sha256:{}", spec.image),
            ip: None,
        };
        state.containers.insert(
            id.clone(),
            FakeContainer {
                name: name.to_owned(),
                spec,
                info,
                created,
            },
        );
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<()> {
        let name = self
            .lock()
            .containers
            .get(id)
            .and_then(|c| c.info.labels.get(labels::CONTAINER_NAME).cloned());
        let gate = name.and_then(|n| self.lock().gates.remove(&n));
        if let Some(gate) = gate {
            gate.reached.notify_one();
            gate.release.notified().await;
        }
        let now = self.now();
        let exited = {
            let mut state = self.lock();
            state.calls.push(format!("start {id}"));
            let Some(c) = state.containers.get(id) else {
                return Err(Self::not_found(format!("start {id}")));
            };
            let name = c
                .info
                .labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or_default();
            let sandbox = name == labels::SANDBOX_NAME;
            if let Some(message) = state.fail_start.get(&name).cloned() {
                return Err(Self::failure(format!("start {id}"), &message));
            }
            let exit = state.exit_on_start.get(&name).copied();
            let Some(c) = state.containers.get_mut(id) else {
                return Err(Self::not_found(format!("start {id}")));
            };
            c.info.state = RunState::Running;
            c.info.started_at = Some(now.clone());
            c.info.finished_at = None;
            if sandbox {
                c.info.ip = Some("10.88.0.2".to_owned());
            }
            if let Some(code) = exit {
                c.info.state = RunState::Exited;
                c.info.exit_code = code;
                c.info.finished_at = Some(now);
            }
            exit.is_some()
        };
        let _ = self.events.send(RuntimeEvent::Start(id.to_owned()));
        if exited {
            let _ = self.events.send(RuntimeEvent::Die(id.to_owned()));
        }
        Ok(())
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        let running = {
            let mut state = self.lock();
            state.calls.push(format!("stop {id} {}s", grace.as_secs()));
            state
                .containers
                .get(id)
                .is_some_and(|c| c.info.state == RunState::Running)
        };
        if running {
            self.exit(id, 137);
        }
        Ok(())
    }

    async fn remove(&self, id: &str, force: bool) -> Result<()> {
        let mut state = self.lock();
        state.calls.push(format!("remove {id}"));
        let key = state
            .containers
            .iter()
            .find(|(cid, c)| cid.as_str() == id || c.name == id)
            .map(|(cid, c)| (cid.clone(), c.info.state));
        match key {
            None => Err(Self::not_found(format!("remove {id}"))),
            Some((_, RunState::Running)) if !force => Err(RuntimeError::Conflict {
                op: format!("remove {id}"),
                source: Box::new(FakeFailure("container is running".to_owned())),
            }),
            Some((cid, _)) => {
                state.containers.remove(&cid);
                drop(state);
                let _ = self.events.send(RuntimeEvent::Destroy(cid));
                Ok(())
            }
        }
    }

    fn events(&self) -> BoxStream<'static, Result<RuntimeEvent>> {
        BroadcastStream::new(self.events.subscribe())
            .filter_map(|e| async move { e.ok().map(Ok) })
            .boxed()
    }

    async fn exec(&self, id: &str, cmd: &[String], _max_output: usize) -> Result<ExecOutput> {
        let mut state = self.lock();
        let command = cmd.join(" ");
        state.calls.push(format!("exec {id} {command}"));
        let code = state.exec_exit.get(&command).copied().unwrap_or(0);
        match state.containers.get(id) {
            Some(c) if c.info.state == RunState::Running => Ok(ExecOutput {
                exit_code: Some(code),
                output: Vec::new(),
            }),
            _ => Err(Self::not_found("create exec".to_owned())),
        }
    }

    async fn log_tail(&self, id: &str, lines: usize) -> Result<Vec<u8>> {
        let state = self.lock();
        if !state.containers.contains_key(id) {
            return Err(Self::not_found(format!("logs {id}")));
        }
        let text =
            String::from_utf8_lossy(state.logs.get(id).map_or(&[][..], Vec::as_slice)).into_owned();
        let all: Vec<&str> = text.split_inclusive('\n').collect();
        Ok(all[all.len().saturating_sub(lines)..].concat().into_bytes())
    }

    async fn image_status(&self, image: &str) -> Result<Option<ImageInfo>> {
        let present = self
            .lock()
            .images
            .contains(image.trim_start_matches("sha256:"));
        Ok(present.then(|| ImageInfo {
            id: format!("sha256:{}", image.trim_start_matches("sha256:")),
            repo_digests: Vec::new(),
            user: String::new(),
        }))
    }

    async fn pull_image(&self, image: &str, _auth: Option<RegistryAuth>) -> Result<()> {
        let mut state = self.lock();
        state.calls.push(format!("pull {image}"));
        if let Some(message) = state.fail_pull.get(image).cloned() {
            return Err(Self::failure(format!("pull {image}"), &message));
        }
        state.images.insert(image.to_owned());
        Ok(())
    }

    async fn list_images(&self) -> Result<Vec<ImageSummary>> {
        Ok(self
            .lock()
            .images
            .iter()
            .map(|i| ImageSummary {
                id: format!("sha256:{i}"),
                repo_tags: vec![i.clone()],
                size: 0,
            })
            .collect())
    }

    async fn remove_image(&self, reference: &str) -> Result<()> {
        self.lock().images.remove(reference);
        Ok(())
    }

    async fn image_fs_root(&self) -> Result<Option<PathBuf>> {
        Ok(None)
    }
}
