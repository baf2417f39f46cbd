//! [`TrustConfig`]: the `trust:` section of cloudhub's configuration: where the Verge CA
//! lives, which names the serving certificate carries, certificate lifetimes, and who may
//! attach as a controller.

use std::time::Duration;

use serde::Deserialize;

/// Identity and TLS settings (YAML `trust:`); every field optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct TrustConfig {
    /// Namespace of the CA Secret and ConfigMap. Default `verge-system`.
    pub namespace: String,
    /// Name of the CA Secret (type `kubernetes.io/tls`, keys `tls.crt` and `tls.key`; created
    /// by the first cloudhub that finds none, or supplied by the operator) and of the
    /// ConfigMap publishing the CA certificate (key `ca.crt`, read by controllers).
    /// Default `verge-ca`.
    pub ca_name: String,
    /// Subject alternative names of the serving certificate (DNS names or IP addresses) that
    /// edges and controllers connect to; `$POD_IP` is added when set (other replicas dial
    /// it). Default `localhost`, `127.0.0.1`, `cloudhub`,
    /// `cloudhub.verge-system.svc`, `cloudhub-controllers.verge-system.svc`.
    pub server_sans: Vec<String>,
    /// Lifetime of the serving certificate; a new one is issued at 80 % of it, used by new
    /// handshakes while established sessions keep theirs. Default `720h` (30 days).
    #[serde(with = "humantime_serde")]
    pub server_cert_validity: Duration,
    /// Lifetime of node client certificates (kube-controller-manager's
    /// `--cluster-signing-duration` default: one year). Nodes renew at 80 % of it.
    /// Default `8760h`.
    #[serde(with = "humantime_serde")]
    pub node_cert_validity: Duration,
    /// Lifetime of a CA created by cloudhub. Default `87600h` (ten years, as kubeadm's CA).
    #[serde(with = "humantime_serde")]
    pub ca_validity: Duration,
    /// The audience controllers' service-account tokens must carry (TokenRequest
    /// `audiences`). Default `verge-controllerhub`.
    pub controller_audience: String,
    /// Users (`system:serviceaccount:<namespace>:<name>`) allowed to attach to
    /// ControllerHub. Default the `edgecontroller`, `devicecontroller` and `fleetcontroller`
    /// service accounts of `verge-system`.
    pub controller_users: Vec<String>,
    /// Most TLS handshakes in progress per listener (connections not yet authenticated);
    /// further connections wait in the accept queue. Default 256.
    pub max_handshakes: usize,
    /// A TLS handshake not finished within this time is dropped. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Token CA discovery: `Join.GetCa` hands the Verge CA certificate, with an HMAC keyed by
    /// the bootstrap token's secret, to an edge that joins without a CA pin (kubeadm's
    /// token discovery without `--discovery-token-ca-cert-hash`). Keying the HMAC needs the
    /// token's secret, so cloudhub then reads `kube-system/bootstrap-token-<id>`, which
    /// needs the optional Role of `deploy/cloud/optional/token-ca-discovery.yaml` (get Secrets
    /// in `kube-system`). Default `false`: `GetCa` reads nothing and answers
    /// `FAILED_PRECONDITION`; edges pin the CA (`edgeHub.caCertHash` or `edgecore join
    /// --ca-cert-hash`, as kubeadm recommends), and the JoinNode token check is a TokenReview.
    pub token_ca_discovery: bool,
}

impl Default for TrustConfig {
    fn default() -> Self {
        Self {
            namespace: "verge-system".to_owned(),
            ca_name: "verge-ca".to_owned(),
            server_sans: [
                "localhost",
                "127.0.0.1",
                "cloudhub",
                "cloudhub.verge-system.svc",
                "cloudhub-controllers.verge-system.svc",
            ]
            .map(str::to_owned)
            .to_vec(),
            server_cert_validity: Duration::from_secs(30 * 24 * 3600),
            node_cert_validity: Duration::from_secs(365 * 24 * 3600),
            ca_validity: Duration::from_secs(10 * 365 * 24 * 3600),
            controller_audience: "verge-controllerhub".to_owned(),
            controller_users: ["edgecontroller", "devicecontroller", "fleetcontroller"]
                .map(|name| format!("system:serviceaccount:verge-system:{name}"))
                .to_vec(),
            max_handshakes: 256,
            handshake_timeout: Duration::from_secs(10),
            token_ca_discovery: false,
        }
    }
}

impl TrustConfig {
    /// Checks values that serde cannot.
    ///
    /// # Errors
    /// The first bad field (its YAML path) and what is wrong with it.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.namespace.is_empty() || self.ca_name.is_empty() {
            return Err(("trust.caName", "namespace and name must not be empty"));
        }
        if self.server_sans.is_empty() {
            return Err(("trust.serverSans", "must name at least one DNS name or IP"));
        }
        for (field, d) in [
            ("trust.serverCertValidity", self.server_cert_validity),
            ("trust.nodeCertValidity", self.node_cert_validity),
            ("trust.caValidity", self.ca_validity),
            ("trust.handshakeTimeout", self.handshake_timeout),
        ] {
            if d < Duration::from_secs(1) {
                return Err((field, "must be at least 1s"));
            }
        }
        if self.max_handshakes == 0 {
            return Err(("trust.maxHandshakes", "must allow at least one handshake"));
        }
        Ok(())
    }
}
