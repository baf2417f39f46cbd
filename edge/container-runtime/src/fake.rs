//! An in-memory [`ContainerRuntime`](super::ContainerRuntime) for unit tests of the pod
//! lifecycle (no Docker): containers with labels and states, local images, scripted failures
//! and a log of the calls made (the trait's implementation is in `fake_containers.rs`). Its
//! [`StreamingRuntime`](super::StreamingRuntime) half (`fake_streaming.rs`) plays scripted
//! exec, attach and log output for unit tests of the streaming server.
//! Containers change state only through the trait's calls and the helpers ([`FakeRuntime::exit`]);
//! time stamps follow Tokio's clock (paused in tests) from a fixed wall-clock origin.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;

use super::types::{ContainerInfo, ContainerSpec, NetworkSpec, RunState, RuntimeEvent};
use super::{RuntimeError, labels};

#[path = "fake_containers.rs"]
mod containers;
#[path = "fake_streaming.rs"]
mod streaming;
pub use streaming::ExecScript;

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
    /// Whether the engine lacks image mounts (an engine older than Docker 28).
    no_image_mounts: bool,
    /// Layer directories of images (what `image_layers` returns), by image.
    image_layers: HashMap<String, Vec<std::path::PathBuf>>,
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
    /// Output of streaming execs, by command (its words joined by spaces).
    exec_scripts: HashMap<String, streaming::ExecScript>,
    /// Streaming execs started, by exec id: their exit codes.
    execs: HashMap<String, Option<i64>>,
    /// Output of attaches, by container id.
    attach_output: HashMap<String, Vec<u8>>,
    /// Networks made by `ensure_network`, by name.
    networks: HashMap<String, NetworkSpec>,
    /// Memory usage of containers, bytes, by id (what `memory_usage` returns).
    memory_usage: HashMap<String, u64>,
    /// Container names (spec names) whose resource updates fail, with the engine's message.
    fail_update: HashMap<String, String>,
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

    /// The networks made by `ensure_network`, by name.
    pub fn networks(&self) -> HashMap<String, NetworkSpec> {
        self.lock().networks.clone()
    }

    /// Makes image `image` present.
    pub fn add_image(&self, image: &str) {
        self.lock().images.insert(image.to_owned());
    }

    /// Makes the engine mount images itself (`supported`, the default, as Docker 28) or not
    /// (as older engines: creates with image mounts then fail).
    pub fn set_image_mounts(&self, supported: bool) {
        self.lock().no_image_mounts = !supported;
    }

    /// Sets the layer directories of image `image` (a name given to
    /// [`add_image`](Self::add_image)), topmost first: what `image_layers` returns for it
    /// (`None` for an image without).
    pub fn set_image_layers(&self, image: &str, layers: Vec<std::path::PathBuf>) {
        self.lock().image_layers.insert(image.to_owned(), layers);
    }

    /// Makes pulls of `image` fail with `message`, the engine's message: one that says the
    /// registry could not be reached ([`registry_unreachable`](crate::image::registry_unreachable))
    /// fails as [`RuntimeError::RegistryUnreachable`], as Docker's does.
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

    /// Sets the memory usage of container `id`, bytes (what `memory_usage` returns).
    pub fn set_memory_usage(&self, id: &str, bytes: u64) {
        self.lock().memory_usage.insert(id.to_owned(), bytes);
    }

    /// Makes resource updates of spec container `name` fail with `message`.
    pub fn fail_update(&self, name: &str, message: &str) {
        self.lock()
            .fail_update
            .insert(name.to_owned(), message.to_owned());
    }

    /// Lets resource updates of spec container `name` succeed again.
    pub fn heal_update(&self, name: &str) {
        self.lock().fail_update.remove(name);
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
    /// `pull <image>`, `update <id> shares=<s> quota=<q> memory=<m>` with `-` for unset,
    /// `layers <image>`),
    /// and forgets them.
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
