//! The YAML configuration every controller reads (architecture.md §5): where the cloudhub
//! replicas are, how to authenticate to them, leader election, backoff, queue sizes and the
//! shutdown grace.
//! edgecontroller and devicecontroller read exactly this file shape; only the defaults that
//! name the controller differ ([`crate::Identity`]).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::leader::LeaderElectionConfig;
use crate::{Error, Identity, Result};

/// A controller's configuration file. Every field is optional; an unknown field is an error
/// that names it. Durations are humantime strings (`"500ms"`, `"30s"`).
///
/// ```yaml
/// cloudhub: [https://cloudhub-0:10001, https://cloudhub-1:10001]  # or one string
/// cloudhubService: verge-system/cloudhub-controllers  # discover replicas (EndpointSlices)
/// leaderElection: {leaseName: edgecontroller}
/// nodeQueue: 64
/// tracing: {otlpEndpoint: http://127.0.0.1:4317, samplingRatio: 1.0}  # default: off
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Config {
    /// The controller name sent in `ControllerHello.name`. Default: the controller's own
    /// name ([`crate::Identity::name`], e.g. `edgecontroller`).
    pub name: Option<String>,
    /// URIs of cloudhub ControllerHub endpoints, one per replica; a single string is
    /// accepted too. The controller attaches to every one (docs/protocol.md, "Several
    /// cloudhub replicas"). Default: [`DEFAULT_CLOUDHUB`] when `cloudhubService` is unset
    /// too, else none (see [`Config::endpoints`]).
    #[serde(deserialize_with = "one_or_many")]
    pub cloudhub: Vec<String>,
    /// `<namespace>/<service>` of the Service of the cloudhub replicas' ControllerHub port:
    /// its `discovery.k8s.io/v1` EndpointSlices (label `kubernetes.io/service-name`) are
    /// watched through the API server (no cluster DNS needed), and every endpoint address
    /// whose `conditions.ready` is not `false` is attached to as
    /// `https://<address>:<port>` (`cloudhubPort`), in addition to `cloudhub`; endpoints
    /// that leave are detached. Certificates are verified for `<service>.<namespace>.svc`
    /// unless `cloudhubAuth.tlsServerName` is set. Default none.
    pub cloudhub_service: Option<String>,
    /// The name of the EndpointSlice port (the Service's port name) to attach to. Default
    /// `controllerhub`.
    pub cloudhub_port: String,
    /// Timeout of one TCP/HTTP2 connect to cloudhub. Default `5s`.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Interval of HTTP/2 keepalive pings on the cloudhub connection, and how long an
    /// answer to a ping may take; a dead link is so noticed and the stream re-established.
    /// Default `20s`.
    #[serde(with = "humantime_serde")]
    pub keepalive_interval: Duration,
    /// First delay before re-attaching after the stream ended (jittered, doubling). Default
    /// `500ms`.
    #[serde(with = "humantime_serde")]
    pub reconnect_min_backoff: Duration,
    /// Largest delay between re-attach attempts. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub reconnect_max_backoff: Duration,
    /// Capacity of the queue of frames waiting to be sent to one cloudhub replica (answers
    /// and downstream messages), per attached stream; full means senders wait. `0` counts as `1`. Default `1024`.
    pub outbound_queue: usize,
    /// Capacity of each node's queue of upstream messages waiting to be applied; when full,
    /// further messages of that node are answered `error` at once. `0` counts as `1`.
    /// Default `64`.
    pub node_queue: usize,
    /// Bytes of upstream messages one node's queues may hold (each message counted with its
    /// body, path and id); beyond it the node's messages are answered `error` at once (the
    /// edge retries from its outbox), so one node's large reports cannot fill the process.
    /// `0` counts as `1`. Default 16 MiB (`16777216`).
    pub node_queue_bytes: usize,
    /// Bytes of upstream messages all nodes' queues together may hold; beyond it messages are
    /// answered `error` at once. `0` counts as `1`. Default 256 MiB (`268435456`).
    pub queue_bytes: usize,
    /// How long the binary waits for in-flight work after SIGINT/SIGTERM. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// How cloudhub is verified and how the controller authenticates to it.
    pub cloudhub_auth: HubAuthConfig,
    /// Leader election between the controller's replicas (only the leader attaches to
    /// cloudhub).
    pub leader_election: LeaderElectionConfig,
    /// Address of the plaintext health endpoint for Kubernetes probes
    /// (`verge_runtime::health`: gRPC `grpc.health.v1`, service `""` = ready while the
    /// controller runs, `liveness`; HTTP `/healthz`, `/readyz`). Default: the controller's
    /// own (`0.0.0.0:10006` edgecontroller, `0.0.0.0:10007` devicecontroller); port 0 picks
    /// a free port.
    pub health_addr: Option<std::net::SocketAddr>,
    /// OpenTelemetry trace export (`otlpEndpoint`, `samplingRatio`); off by default. See
    /// [`verge_telemetry::TracingConfig`].
    pub tracing: verge_telemetry::TracingConfig,
    /// edgecontroller only: Node label keys (`example.com/trusted`) and namespaces (entries
    /// ending in `/`, e.g. `example.com/`, with their subdomains) that an edge may not set on
    /// its Node, in addition to what Kubernetes' NodeRestriction admission refuses a kubelet
    /// (`node-role.kubernetes.io/…`, `node-restriction.kubernetes.io/…`). Labels operators
    /// select pods by for isolation belong here. Default none. devicecontroller, which
    /// registers no Nodes, ignores it.
    pub reserved_node_labels: Vec<String>,
    /// edgecontroller only: also patch the pods that the scheduler put on an edge node
    /// without their asking for edge nodes, when that node turns not Ready, so that they too
    /// tolerate its `unreachable`/`not-ready` taints without time limit (docs/offline.md).
    /// Pods that ask for edge nodes get these tolerations at creation from the
    /// MutatingAdmissionPolicy `verge-edge-offline-tolerations` and need no patch. Needs
    /// `deploy/cloud/optional/offline-toleration-patch.yaml` (`patch` on pods, bounded to
    /// tolerations by a ValidatingAdmissionPolicy). Default `false`.
    pub patch_offline_tolerations: bool,
}

/// TLS and authentication towards cloudhub's ControllerHub (YAML `cloudhubAuth:`): the
/// serving certificate is verified against the Verge CA, and every attach carries a
/// service-account token for the ControllerHub audience (checked by cloudhub with a
/// TokenReview).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct HubAuthConfig {
    /// The ConfigMap publishing the Verge CA certificate (`ca.crt`), `<namespace>/<name>`.
    /// Default `verge-system/verge-ca` (written by cloudhub).
    pub ca_config_map: String,
    /// A CA certificate file used instead of the ConfigMap. Default none.
    pub ca_file: Option<std::path::PathBuf>,
    /// A token file (e.g. a projected service-account token with the ControllerHub audience)
    /// read at every attach. Default none: a token is requested for `serviceAccount`
    /// (TokenRequest API, one hour, renewed at 80 %).
    pub token_file: Option<std::path::PathBuf>,
    /// The service account, `<namespace>/<name>`, whose token is requested. Default
    /// `verge-system/<controller>` ([`HubAuthConfig::service_account_for`]), e.g.
    /// `verge-system/edgecontroller`.
    pub service_account: Option<String>,
    /// The audience of the token. Default `verge-controllerhub`.
    pub audience: String,
    /// Server name to verify instead of a static `cloudhub` endpoint's host, or of
    /// `<service>.<namespace>.svc` for replicas found through `cloudhubService`. Default
    /// none.
    pub tls_server_name: Option<String>,
}

impl Default for HubAuthConfig {
    fn default() -> Self {
        Self {
            ca_config_map: "verge-system/verge-ca".to_owned(),
            ca_file: None,
            token_file: None,
            service_account: None,
            audience: "verge-controllerhub".to_owned(),
            tls_server_name: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: None,
            cloudhub: Vec::new(),
            cloudhub_service: None,
            cloudhub_port: DEFAULT_CLOUDHUB_PORT.to_owned(),
            connect_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(20),
            reconnect_min_backoff: Duration::from_millis(500),
            reconnect_max_backoff: Duration::from_secs(30),
            outbound_queue: 1024,
            node_queue: 64,
            node_queue_bytes: 16 << 20,
            queue_bytes: 256 << 20,
            shutdown_grace: Duration::from_secs(10),
            cloudhub_auth: HubAuthConfig::default(),
            leader_election: LeaderElectionConfig::default(),
            health_addr: None,
            tracing: verge_telemetry::TracingConfig::default(),
            reserved_node_labels: Vec::new(),
            patch_offline_tolerations: false,
        }
    }
}

/// The cloudhub endpoint used when neither `cloudhub` nor `cloudhubService` is configured.
pub const DEFAULT_CLOUDHUB: &str = "https://127.0.0.1:10001";

/// The default `cloudhubPort`: the name of cloudhub's ControllerHub port in its Services.
pub const DEFAULT_CLOUDHUB_PORT: &str = "controllerhub";

/// `cloudhub` as one string or a list of strings.
fn one_or_many<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

impl HubAuthConfig {
    /// The service account whose token is requested: `service_account`, or
    /// `verge-system/<identity.name>`.
    pub fn service_account_for(&self, identity: &Identity) -> String {
        self.service_account
            .clone()
            .unwrap_or_else(|| format!("{DEFAULT_NAMESPACE}/{}", identity.name))
    }
}

/// The namespace of Verge's cloud components and their service accounts.
pub const DEFAULT_NAMESPACE: &str = "verge-system";

impl Config {
    /// The name sent in the hello: `name`, or the controller's own name.
    pub fn name_for<'a>(&'a self, identity: &'a Identity) -> &'a str {
        self.name.as_deref().unwrap_or(identity.name)
    }

    /// The static cloudhub endpoints: `cloudhub` without duplicates, or
    /// [`DEFAULT_CLOUDHUB`] when neither `cloudhub` nor `cloudhubService` is set.
    pub fn endpoints(&self) -> Vec<String> {
        if self.cloudhub.is_empty() && self.cloudhub_service.is_none() {
            return vec![DEFAULT_CLOUDHUB.to_owned()];
        }
        let mut out: Vec<String> = Vec::with_capacity(self.cloudhub.len());
        for e in &self.cloudhub {
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        out
    }

    /// Parses YAML `text`; `source_name` (usually the path) appears in errors.
    ///
    /// # Errors
    /// [`Error::Config`] naming the offending field.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Self> {
        Ok(verge_core::from_yaml(text, source_name)?)
    }

    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    /// [`Error::ReadConfig`] if the file cannot be read, [`Error::Config`] if it does not parse.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(Config::from_yaml("", "t").expect("ok"), Config::default());
    }

    #[test]
    fn fields_parse() {
        let c = Config::from_yaml(
            "cloudhub: https://hub:1\nnodeQueue: 3\nconnectTimeout: 2s\n",
            "t",
        )
        .expect("ok");
        assert_eq!(c.cloudhub, ["https://hub:1"]);
        assert_eq!(c.endpoints(), ["https://hub:1"]);
        assert_eq!(c.node_queue, 3);
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.health_addr, None);
        let c = Config::from_yaml("healthAddr: 127.0.0.1:0\n", "t").expect("ok");
        assert_eq!(c.health_addr, Some(([127, 0, 0, 1], 0).into()));
        assert_eq!(c.outbound_queue, Config::default().outbound_queue);
    }

    #[test]
    fn endpoint_list() {
        let c = Config::from_yaml("cloudhub: [https://a:1, https://b:1, https://a:1]\n", "t")
            .expect("ok");
        assert_eq!(c.endpoints(), ["https://a:1", "https://b:1"]);
        let c = Config::from_yaml("cloudhub: []\n", "t").expect("ok");
        assert_eq!(c.endpoints(), [DEFAULT_CLOUDHUB]);
        assert_eq!(Config::default().endpoints(), [DEFAULT_CLOUDHUB]);
        assert!(Config::from_yaml("cloudhub: {a: 1}\n", "t").is_err());
    }

    #[test]
    fn service_discovery() {
        let c = Config::from_yaml(
            "cloudhubService: verge-system/hubs\ncloudhubPort: ctl\n",
            "t",
        )
        .expect("ok");
        assert_eq!(c.cloudhub_service.as_deref(), Some("verge-system/hubs"));
        assert_eq!(c.cloudhub_port, "ctl");
        assert!(c.endpoints().is_empty(), "no default next to discovery");
        assert_eq!(Config::default().cloudhub_port, "controllerhub");
        let c =
            Config::from_yaml("cloudhub: https://a:1\ncloudhubService: n/h\n", "t").expect("ok");
        assert_eq!(c.endpoints(), ["https://a:1"]);
        let e = Config::from_yaml("cloudhubDns: h:1\n", "t").expect_err("removed field");
        assert!(e.to_string().contains("cloudhubDns"), "{e}");
    }

    #[test]
    fn leader_election_section() {
        let c = Config::from_yaml("leaderElection: {leaseName: ec-1, retryPeriod: 1s}\n", "t")
            .expect("ok");
        assert_eq!(c.leader_election.lease_name.as_deref(), Some("ec-1"));
        assert_eq!(c.leader_election.retry_period, Duration::from_secs(1));
        assert!(Config::default().leader_election.leader_elect);
        assert!(Config::from_yaml("leaderElection: {leaseNam: x}\n", "t").is_err());
    }

    #[test]
    fn names_default_to_the_controller() {
        let id = Identity {
            name: "devicecontroller",
            module: verge_core::Module::DeviceController,
            group: verge_core::Group::Device,
        };
        let c = Config::default();
        assert_eq!(c.name_for(&id), "devicecontroller");
        assert_eq!(
            c.cloudhub_auth.service_account_for(&id),
            "verge-system/devicecontroller"
        );
        let c = Config::from_yaml("name: dc-1\ncloudhubAuth: {serviceAccount: ns/sa}\n", "t")
            .expect("ok");
        assert_eq!(c.name_for(&id), "dc-1");
        assert_eq!(c.cloudhub_auth.service_account_for(&id), "ns/sa");
    }

    #[test]
    fn unknown_field_is_named() {
        let e = Config::from_yaml("cloudhb: x\n", "ec.yaml").expect_err("must fail");
        let msg = e.to_string();
        assert!(msg.contains("ec.yaml") && msg.contains("cloudhb"), "{msg}");
    }
}
