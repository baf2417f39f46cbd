//! The runtime's own data types: what [`ContainerRuntime`](super::ContainerRuntime) takes and
//! returns, independent of the engine's API (the role CRI's messages play for the kubelet).

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Which containers [`list`](super::ContainerRuntime::list) returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Whose containers.
    pub scope: Scope,
    /// Only those of this pod (label `io.kubernetes.pod.uid=<uid>`).
    pub pod_uid: Option<String>,
    /// Only those carrying the label `io.kubernetes.pod.uid` (any pod).
    pub pods_only: bool,
    /// Only those that do not run: created, exited or dead (garbage collection).
    pub dead_only: bool,
}

/// Whose containers a [`ListFilter`] selects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    /// The containers this runtime created for its node (label `io.verge.managed=<node>`), so
    /// several edgecores sharing one engine never see each other's containers.
    #[default]
    Node,
    /// Every container of the engine (e.g. to know which images are in use).
    Engine,
}

impl ListFilter {
    /// Every container of this node, running or not.
    pub fn node() -> Self {
        Self::default()
    }

    /// Every container (running or not) of pod `uid` on this node.
    pub fn pod(uid: &str) -> Self {
        Self {
            pod_uid: Some(uid.to_owned()),
            ..Self::default()
        }
    }

    /// Every container of the engine, whoever made it.
    pub fn engine() -> Self {
        Self {
            scope: Scope::Engine,
            ..Self::default()
        }
    }
}

/// One container as listed (kubelet: CRI `Container`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerSummary {
    /// The engine's id.
    pub id: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
    /// The engine's word for its state (`created`, `running`, `exited`, ...); compared by the
    /// PLEG, not interpreted.
    pub state: String,
    /// Creation time, Unix seconds.
    pub created: i64,
    /// The local image id (`sha256:...`) it was created from.
    pub image_id: Option<String>,
    /// Its IPv4 address while it runs on a network of its own (the first network by name),
    /// as listed; `None` when stopped or sharing another container's namespace.
    pub ip: Option<String>,
}

/// The run state of a container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Created, never started (or being started).
    Created,
    /// Running (or paused/restarting).
    Running,
    /// Exited (or dead).
    Exited,
}

/// One container as inspected (kubelet: CRI `ContainerStatus`). `L` is the form of its
/// labels: the engine's map as inspected, or parsed (edged's `Instance` holds
/// `ContainerLabels`).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerInfo<L = HashMap<String, String>> {
    /// The engine's id.
    pub id: String,
    /// Its labels.
    pub labels: L,
    /// Its state.
    pub state: RunState,
    /// Exit code (meaningful when exited).
    pub exit_code: i32,
    /// Whether the kernel OOM killer ended it.
    pub oom_killed: bool,
    /// The engine's error message (e.g. the executable was not found).
    pub error: Option<String>,
    /// When it (last) started.
    pub started_at: Option<Time>,
    /// When it exited.
    pub finished_at: Option<Time>,
    /// The image as given at creation.
    pub image: String,
    /// The local image id (`sha256:...`).
    pub image_id: String,
    /// Its IP on its network (the default bridge or the pod network), if any.
    pub ip: Option<String>,
    /// Its CPU and memory settings as the engine holds them now (kubelet: CRI
    /// `ContainerStatus.resources`, read back for `status.containerStatuses[].resources`).
    pub resources: LinuxResources,
}

impl<L> ContainerInfo<L> {
    /// The same container with its labels turned into another form by `parse`; `None` when
    /// `parse` rejects them.
    pub fn map_labels<M>(self, parse: impl FnOnce(&L) -> Option<M>) -> Option<ContainerInfo<M>> {
        let labels = parse(&self.labels)?;
        Some(ContainerInfo {
            id: self.id,
            labels,
            state: self.state,
            exit_code: self.exit_code,
            oom_killed: self.oom_killed,
            error: self.error,
            started_at: self.started_at,
            finished_at: self.finished_at,
            image: self.image,
            image_id: self.image_id,
            ip: self.ip,
            resources: self.resources,
        })
    }

    /// How long it ran, if it started and exited.
    pub fn ran_for(&self) -> Option<std::time::Duration> {
        let (s, f) = (self.started_at.as_ref()?, self.finished_at.as_ref()?);
        let d = f.0.duration_since(s.0);
        std::time::Duration::try_from(d).ok()
    }
}

/// The network namespace of a new container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetworkMode {
    /// Its own namespace on the default bridge.
    #[default]
    Bridge,
    /// The node's namespace (`hostNetwork`).
    Host,
    /// The namespace of container `id` (the pod's sandbox).
    Container(String),
    /// Its own namespace on the user-defined network of that name (the node's pod network,
    /// [`NetworkSpec`]).
    Network(String),
}

/// A user-defined bridge network: the node's pod network on its Node's `spec.podCIDR`
/// (made by [`ContainerRuntime::ensure_network`](crate::ContainerRuntime::ensure_network)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSpec {
    /// The network's name.
    pub name: String,
    /// The Linux bridge device of the network (at most 15 bytes).
    pub bridge: String,
    /// The subnet in CIDR form, e.g. `10.244.3.0/24`.
    pub subnet: String,
    /// The gateway address on the bridge, e.g. `10.244.3.1`.
    pub gateway: String,
    /// Whether traffic from the subnet that leaves the node through another interface is
    /// masqueraded to the node's address.
    pub masquerade: bool,
}

/// What [`ContainerRuntime::ensure_network`](crate::ContainerRuntime::ensure_network) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkEnsured {
    /// The network existed as specified.
    Existing,
    /// The network did not exist and was created.
    Created,
    /// A network of that name with other settings was removed and created again.
    Replaced,
}

/// The IPC namespace of a new container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum IpcMode {
    /// The engine's default.
    #[default]
    Default,
    /// Its own, shareable with other containers (the sandbox).
    Shareable,
    /// The namespace of container `id` (the pod's sandbox).
    Container(String),
}

/// A host port published for a container port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBinding {
    /// The host address (`None`: all).
    pub host_ip: Option<String>,
    /// The host port.
    pub host_port: String,
}

/// Everything needed to create a container (kubelet: CRI `ContainerConfig` plus the sandbox
/// config). `None` fields keep the image's or the engine's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The image reference.
    pub image: String,
    /// Replaces the image's entrypoint.
    pub entrypoint: Option<Vec<String>>,
    /// Replaces the image's command.
    pub cmd: Option<Vec<String>>,
    /// `KEY=VALUE` entries.
    pub env: Option<Vec<String>>,
    /// Working directory.
    pub working_dir: Option<String>,
    /// `uid[:gid]`.
    pub user: Option<String>,
    /// Allocate a TTY.
    pub tty: Option<bool>,
    /// Keep stdin open.
    pub open_stdin: Option<bool>,
    /// Close stdin after the first attach ends.
    pub stdin_once: Option<bool>,
    /// Hostname (sandbox).
    pub hostname: Option<String>,
    /// Labels; the runtime adds `io.verge.managed=<node>`.
    pub labels: HashMap<String, String>,
    /// Exposed ports, `<port>/<proto>`.
    pub exposed_ports: Vec<String>,
    /// Port bindings by `<port>/<proto>`.
    pub port_bindings: HashMap<String, Vec<PortBinding>>,
    /// Volume binds, `host:container[:ro]`.
    pub binds: Vec<String>,
    /// Images mounted read-only into the container (Kubernetes image volumes), when the
    /// engine mounts them itself ([`ContainerRuntime::supports_image_mounts`](crate::ContainerRuntime::supports_image_mounts)).
    pub image_mounts: Vec<ImageMount>,
    /// Network namespace.
    pub network: NetworkMode,
    /// A fixed IPv4 address on [`NetworkMode::Network`] (dotted quad), handed out by edged
    /// rather than by the engine's IPAM so that it outlives the container (Docker:
    /// `NetworkingConfig.EndpointsConfig.<network>.IPAMConfig.IPv4Address`, reserved when the
    /// container starts; refused on other network modes). `None`: the engine picks one.
    pub ipv4_address: Option<String>,
    /// IPC namespace.
    pub ipc: IpcMode,
    /// Privileged mode.
    pub privileged: Option<bool>,
    /// Read-only root filesystem.
    pub readonly_rootfs: Option<bool>,
    /// Capabilities to add.
    pub cap_add: Option<Vec<String>>,
    /// Capabilities to drop.
    pub cap_drop: Option<Vec<String>>,
    /// Supplementary groups.
    pub group_add: Option<Vec<String>>,
    /// Docker security options (`no-new-privileges`).
    pub security_opt: Option<Vec<String>>,
    /// Namespaced sysctls (the sandbox's), dot form.
    pub sysctls: Option<HashMap<String, String>>,
    /// CPU shares, CFS quota and memory limit (kubelet: CRI `LinuxContainerResources`).
    pub resources: LinuxResources,
    /// The OOM killer's score adjustment of its processes, -1000..=1000 (kubelet:
    /// `GetContainerOOMScoreAdjust`); `None` keeps the engine's default (0).
    pub oom_score_adj: Option<i64>,
}

/// An image's filesystem mounted read-only into a container by the engine (kubelet: CRI
/// `Mount.image` with `image_sub_path`, the `image` volume source; Docker: a mount of type
/// `image`, API 1.48+). Always read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMount {
    /// The local image: its id (`sha256:...`), or a reference.
    pub image: String,
    /// Where it appears in the container (absolute).
    pub target: String,
    /// A directory of the image to mount instead of its root (relative, without `..`).
    pub sub_path: Option<String>,
}

/// The CPU and memory settings of a container's cgroup, as the kubelet hands them to the
/// runtime (CRI `LinuxContainerResources`) when it creates a container and when it resizes
/// one in place ([`ContainerRuntime::update_resources`](crate::ContainerRuntime::update_resources)).
/// `None` leaves a setting to the engine at creation and unchanged by an update.
///
/// The memory limit comes without swap: the swap limit is set to the same value (the
/// kubelet's `NoSwap` behaviour).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinuxResources {
    /// Relative CPU weight, cgroup v1 `cpu.shares` (2..=262144; cgroup v2 `cpu.weight` is
    /// derived from it by the runtime).
    pub cpu_shares: Option<i64>,
    /// CFS period, microseconds (`cpu.cfs_period_us`; the second field of `cpu.max`).
    pub cpu_period: Option<i64>,
    /// CFS quota per period, microseconds (`cpu.cfs_quota_us`; the first field of
    /// `cpu.max`), at least 1000; `None`: no CPU limit.
    pub cpu_quota: Option<i64>,
    /// Memory limit, bytes (`memory.limit_in_bytes` / `memory.max`); `None`: no limit.
    pub memory: Option<i64>,
}

/// A local image as inspected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// Its id (`sha256:...`).
    pub id: String,
    /// `repo@digest` references.
    pub repo_digests: Vec<String>,
    /// The user the image runs as (`Config.User`: `""`, `"1000"`, `"1000:50"`, `"nobody"`).
    pub user: String,
}

/// A local image as listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageSummary {
    /// Its id (`sha256:...`).
    pub id: String,
    /// `repo:tag` references (`<none>:<none>` for dangling ones).
    pub repo_tags: Vec<String>,
    /// Size in bytes.
    pub size: i64,
}

/// Registry credentials of a pull (from `imagePullSecrets`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryAuth {
    /// User name.
    pub username: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// The registry, as the secret names it.
    pub server_address: Option<String>,
    /// An identity token instead of a password.
    pub identity_token: Option<String>,
}

/// What a command run in a container ([`exec`](super::ContainerRuntime::exec)) ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Its exit code (`None` if the engine did not report one).
    pub exit_code: Option<i64>,
    /// Its stdout and stderr, interleaved, cut at the requested size.
    pub output: Vec<u8>,
}

/// A container lifecycle event from the engine (what the PLEG listens to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEvent {
    /// Container `id` started.
    Start(String),
    /// Container `id` exited.
    Die(String),
    /// Container `id` hit its memory limit.
    Oom(String),
    /// Container `id` was removed.
    Destroy(String),
}
