//! Cloudhub's configuration: one YAML file (`--config`), every field optional.
//!
//! Follows KubeEdge's `cloudcore.yaml` `modules.cloudHub` section in spirit (listen addresses,
//! keepalive interval, per-node queue size), with Verge's strict parsing: unknown fields are
//! errors that name the field (see [`verge_core::from_yaml`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::streams::StreamsConfig;
use crate::trust::TrustConfig;
use crate::{Error, Result};

pub use verge_telemetry::{LogFormat, TracingConfig};

/// The default port of cloudhub's health endpoint ([`Config::health_addr`]); edgecontroller
/// and devicecontroller default to the next two.
pub const DEFAULT_HEALTH_PORT: u16 = 10005;

/// The configuration of one cloudhub replica.
///
/// Example (every field shown with its default):
/// ```yaml
/// edgeAddr: 0.0.0.0:10000
/// controllerAddr: 0.0.0.0:10001
/// joinAddr: 0.0.0.0:10002
/// healthAddr: 0.0.0.0:10005
/// replicaName: ""
/// keepaliveInterval: 15s
/// maxFrameBytes: 4194304
/// sessionQueueLen: 1024
/// maxInflight: 256
/// ackTimeout: 10s
/// maxRetries: 5
/// controllerQueueLen: 4096
/// upstreamWait: 10s
/// maxSessions: 10000
/// maxInventoryEntries: 100000
/// nodeMessageRate: 200
/// nodeMessageBurst: 1000
/// shutdownGrace: 10s
/// logFormat: text
/// tracing:
///   otlpEndpoint: null
///   samplingRatio: 1.0
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Config {
    /// Address of the `EdgeHub` gRPC server that edge nodes connect to.
    /// Default `0.0.0.0:10000` (KubeEdge cloudhub's websocket port).
    pub edge_addr: SocketAddr,
    /// Address of the `ControllerHub` gRPC server that controllers attach to.
    /// Default `0.0.0.0:10001`.
    pub controller_addr: SocketAddr,
    /// Address of the `Join` gRPC server where new nodes trade a bootstrap token and a CSR
    /// for their client certificate (TLS, no client certificate). Default `0.0.0.0:10002`
    /// (KubeEdge cloudcore's certificate port).
    pub join_addr: SocketAddr,
    /// Address of the plaintext health endpoint for Kubernetes probes
    /// (`verge_runtime::health`: gRPC `grpc.health.v1`, service `""` = ready once the CA is
    /// loaded and the three listeners are bound, `liveness`; HTTP `/healthz`, `/readyz`).
    /// Default `0.0.0.0:10005`; port 0 picks a free port.
    pub health_addr: SocketAddr,
    /// The name this replica announces in `NodeSession.cloudhub`, so controllers send to the
    /// replica holding a node. Default `""`: the `HOSTNAME` environment variable (the pod
    /// name in Kubernetes), else `"cloudhub"`.
    pub replica_name: String,
    /// The interval at which edges send keepalives (sent to them in `Welcome`); a session
    /// without any frame for three intervals is closed. Humantime format, default `15s`
    /// (KubeEdge edgehub's heartbeat period): an idle node's keepalive and its answer are
    /// most of its traffic.
    #[serde(with = "humantime_serde")]
    pub keepalive_interval: Duration,
    /// The largest gRPC frame accepted or sent on either server, in bytes. Default 4 MiB
    /// (4194304).
    pub max_frame_bytes: usize,
    /// Capacity of each node's downstream queue, in messages waiting to be sent (a newer
    /// version of an object replaces its waiting one and needs no room). A message that does
    /// not fit is refused with `DeliveryError` "queue full: node &lt;node&gt; has &lt;n&gt; messages
    /// waiting". Default 1024 (KubeEdge's `nodeLimit`-style per-node bound).
    pub session_queue_len: usize,
    /// Most object messages per node sent and not yet acknowledged by the edge; further
    /// ones wait in the queue. Default 256.
    pub max_inflight: usize,
    /// How long cloudhub waits for the edge's answer (`ack`, `error`, `response`) to an
    /// object message before resending it with the same id. Humantime format, default `10s`.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
    /// How often an unacknowledged object message is resent; after the last attempt times
    /// out it is dropped and its controller gets `DeliveryError` "not acknowledged after
    /// <1 + max_retries> attempts". Default 5.
    pub max_retries: u32,
    /// Capacity of each controller's two queues, in frames: upstream messages (when every
    /// controller of a group is full, the edge session waits up to `upstreamWait` for room)
    /// and control frames (session events, delivery errors; a controller that lets this one
    /// overflow is detached and must reattach). Default 4096.
    pub controller_queue_len: usize,
    /// Bytes of upstream messages one controller's message queue holds at most (each counted
    /// by its size); past it, sessions wait as for a full queue (`upstreamWait`). With
    /// `controllerQueueLen` alone, 4,096 reports of 4 MiB could wait in one queue. Default
    /// 64 MiB (67108864); at least `nodeUpstreamBytes`.
    pub controller_queue_bytes: usize,
    /// Bytes of one node's upstream messages waiting in controller queues at once; past it,
    /// its session reads nothing more from the edge until they are taken (back-pressure on
    /// that node only), so one node holds at most this share of a controller's queue.
    /// Default 8 MiB (8388608); at least `maxFrameBytes`, so any message fits.
    pub node_upstream_bytes: usize,
    /// How long an edge session waits for room in a full controller message queue before it
    /// answers the edge's message with `error` (the edge keeps it and sends it again). The
    /// session reads nothing more from its edge meanwhile (back-pressure). Humantime format,
    /// default `10s`.
    #[serde(with = "humantime_serde")]
    pub upstream_wait: Duration,
    /// Most node sessions this replica holds; a further node is refused with
    /// `RESOURCE_EXHAUSTED` (it retries, possibly reaching another replica). Default 10000.
    pub max_sessions: usize,
    /// Most entries in a hello's inventory (objects an edge holds); a larger one is refused
    /// with `RESOURCE_EXHAUSTED`. Default 100000.
    pub max_inventory_entries: usize,
    /// Sustained rate of new upstream messages (reports and queries; keepalives and answers
    /// to cloudhub's messages are not counted) per node session, per second; beyond it (and
    /// the burst) a message is answered `error` "rate limited" and the edge sends it again
    /// later from its outbox. Default 200.
    pub node_message_rate: u32,
    /// Messages a node may send at once above `nodeMessageRate`. Default 1000.
    pub node_message_burst: u32,
    /// Sustained rate of the edge's answers (`ack`, `error`, `response` to cloudhub's and the
    /// controllers' messages) per node session, per second; beyond it (and the burst) an
    /// answer still clears what it answers from the session's in-flight set but is not
    /// forwarded to controllers (the controller sends again if it needed it). Default 1000.
    pub node_answer_rate: u32,
    /// Answers a node may send at once above `nodeAnswerRate` (a resync acknowledges many
    /// objects at once). Default 10000.
    pub node_answer_burst: u32,
    /// How long the binary waits for streams to end after SIGINT/SIGTERM. Humantime format,
    /// default `10s`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Log line format, `text` or `json`. Default `text`.
    pub log_format: LogFormat,
    /// OpenTelemetry trace export (`otlpEndpoint`, `samplingRatio`); off by default. See
    /// [`TracingConfig`].
    pub tracing: TracingConfig,
    /// Identities: the CA Secret, the serving certificate's names and lifetimes, node
    /// certificate lifetime, the controllers allowed, handshake limits. See [`TrustConfig`].
    pub trust: TrustConfig,
    /// kubectl logs/exec/attach/port-forward: the CONNECT listener for the API server's
    /// egress selector and the node tunnels. See [`StreamsConfig`].
    pub streams: StreamsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            edge_addr: SocketAddr::from(([0, 0, 0, 0], 10000)),
            controller_addr: SocketAddr::from(([0, 0, 0, 0], 10001)),
            join_addr: SocketAddr::from(([0, 0, 0, 0], 10002)),
            health_addr: SocketAddr::from(([0, 0, 0, 0], DEFAULT_HEALTH_PORT)),
            replica_name: String::new(),
            keepalive_interval: Duration::from_secs(15),
            max_frame_bytes: 4 * 1024 * 1024,
            session_queue_len: 1024,
            max_inflight: 256,
            ack_timeout: Duration::from_secs(10),
            max_retries: 5,
            controller_queue_len: 4096,
            controller_queue_bytes: 64 * 1024 * 1024,
            node_upstream_bytes: 8 * 1024 * 1024,
            upstream_wait: Duration::from_secs(10),
            max_sessions: 10_000,
            max_inventory_entries: 100_000,
            node_message_rate: 200,
            node_message_burst: 1000,
            node_answer_rate: 1000,
            node_answer_burst: 10_000,
            shutdown_grace: Duration::from_secs(10),
            trust: TrustConfig::default(),
            streams: StreamsConfig::default(),
            log_format: LogFormat::Text,
            tracing: TracingConfig::default(),
        }
    }
}

impl Config {
    /// Parses YAML `text`; `source_name` (usually the path) appears in errors.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] naming the offending field, or [`Error::InvalidConfig`].
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Self> {
        let config: Self = verge_core::from_yaml(text, source_name)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    /// [`Error::ConfigRead`] if the file cannot be read, else as [`Config::from_yaml`].
    pub fn load(path: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, path)
    }

    /// Checks value ranges.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason| Err(Error::InvalidConfig { field, reason });
        if self.keepalive_interval.is_zero() {
            return bad("keepaliveInterval", "must be greater than zero");
        }
        if self.max_frame_bytes < 1024 {
            return bad("maxFrameBytes", "must be at least 1024");
        }
        if self.session_queue_len == 0 {
            return bad("sessionQueueLen", "must be at least 1");
        }
        if self.max_inflight == 0 {
            return bad("maxInflight", "must be at least 1");
        }
        if self.ack_timeout.is_zero() {
            return bad("ackTimeout", "must be greater than zero");
        }
        if self.controller_queue_len == 0 {
            return bad("controllerQueueLen", "must be at least 1");
        }
        if self.node_upstream_bytes < self.max_frame_bytes {
            return bad("nodeUpstreamBytes", "must be at least maxFrameBytes");
        }
        if self.controller_queue_bytes < self.node_upstream_bytes {
            return bad("controllerQueueBytes", "must be at least nodeUpstreamBytes");
        }
        if self.node_upstream_bytes > u32::MAX as usize
            || self.controller_queue_bytes > u32::MAX as usize
        {
            return bad("controllerQueueBytes", "byte budgets must be at most 4 GiB");
        }
        if self.upstream_wait.is_zero() {
            return bad("upstreamWait", "must be greater than zero");
        }
        if self.max_sessions == 0 {
            return bad("maxSessions", "must allow at least one session");
        }
        if self.node_message_rate == 0 || self.node_message_burst == 0 {
            return bad("nodeMessageRate", "rate and burst must be at least 1");
        }
        if self.node_answer_rate == 0 || self.node_answer_burst == 0 {
            return bad("nodeAnswerRate", "rate and burst must be at least 1");
        }
        if let Err((field, reason)) = self.trust.validate() {
            return bad(field, reason);
        }
        if let Err((field, reason)) = self.streams.validate() {
            return bad(field, reason);
        }
        Ok(())
    }

    /// The replica name to announce: `replicaName`, else `$HOSTNAME`, else `"cloudhub"`.
    pub fn effective_replica_name(&self) -> String {
        if !self.replica_name.is_empty() {
            return self.replica_name.clone();
        }
        std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "cloudhub".to_owned())
    }

    /// How long a stream may stay silent before cloudhub closes it: three keepalive
    /// intervals (also the time allowed for the first frame).
    pub fn idle_timeout(&self) -> Duration {
        self.keepalive_interval.saturating_mul(3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_default() {
        assert_eq!(
            Config::from_yaml("", "c.yaml").expect("ok"),
            Config::default()
        );
    }

    #[test]
    fn fields_parse() {
        let c = Config::from_yaml(
            "keepaliveInterval: 200ms\nlogFormat: json\nackTimeout: 300ms\n\
             trust: {serverSans: [hub.example], tokenCaDiscovery: true}\nhealthAddr: 127.0.0.1:0\n",
            "c.yaml",
        )
        .expect("ok");
        assert!(c.trust.token_ca_discovery);
        assert!(
            !Config::default().trust.token_ca_discovery,
            "off by default"
        );
        assert_eq!(c.keepalive_interval, Duration::from_millis(200));
        assert_eq!(c.trust.server_sans, ["hub.example"]);
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.idle_timeout(), Duration::from_millis(600));
        assert_eq!(c.ack_timeout, Duration::from_millis(300));
        assert_eq!((c.max_inflight, c.max_retries), (256, 5));
        assert_eq!(c.health_addr, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(Config::default().health_addr.port(), DEFAULT_HEALTH_PORT);
    }

    #[test]
    fn zero_queue_is_rejected() {
        let e = Config::from_yaml("sessionQueueLen: 0\n", "c.yaml").expect_err("invalid");
        assert!(e.to_string().contains("sessionQueueLen"), "{e}");
    }
}
