//! [`StreamsConfig`]: the `streams:` section of cloudhub's configuration — the HTTP CONNECT
//! listener the API server's egress selector dials for kubelet connections (kubectl logs,
//! exec, attach, port-forward), who may use it, and what edges are told to accept.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Where a Kubernetes pod finds its service account's CA bundle (the cluster CA).
pub const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// Streams settings (YAML `streams:`); every field optional.
///
/// Example (defaults shown; the `*File` fields default to unset):
/// ```yaml
/// enabled: true
/// addr: 0.0.0.0:10004
/// advertiseAddress: null      # $POD_IP:<port>, else the listener's address
/// clientCaFile: null          # CA of the API server's egress client certificate
/// clientNames: [kube-apiserver-egress]
/// tlsCertFile: null           # serving certificate; default: issued from the Verge CA
/// tlsKeyFile: null
/// kubeletClientCaFile: null   # default: the service account's ca.crt when present
/// kubeletClientNames: [kube-apiserver-kubelet-client]
/// peerNamespace: ""           # "" = trust.namespace; "*" = every namespace
/// passthrough: false        # true: dial CONNECTs to addresses that are no edge node
/// tunnelTimeout: 3s
/// dialTimeout: 5s
/// clusterDomain: cluster.local
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct StreamsConfig {
    /// Whether this replica serves the CONNECT listener and tunnels at all. Default true.
    pub enabled: bool,
    /// Address of the HTTP CONNECT listener (TLS, client certificates required). Default
    /// `0.0.0.0:10004` (KubeEdge's tunnel port).
    pub addr: SocketAddr,
    /// `host:port` other replicas use to reach this listener (published in this replica's
    /// peer Lease). Default: `$POD_IP` with the listener's port, else the listener's local
    /// address.
    pub advertise_address: Option<String>,
    /// PEM CA bundle of the client certificates allowed to CONNECT: the one that issued the
    /// API server's egress client certificate (`tlsConfig.clientCert` of its
    /// EgressSelectorConfiguration). Other replicas authenticate with a certificate from
    /// the Verge CA, which is always trusted. Default unset: only replicas.
    pub client_ca_file: Option<PathBuf>,
    /// Subject common names allowed among certificates of `clientCaFile`. Default
    /// `[kube-apiserver-egress]`.
    pub client_names: Vec<String>,
    /// PEM serving certificate of the listener (what the API server's egress `caBundle`
    /// verifies). Default unset: a certificate issued from the Verge CA for
    /// `trust.serverSans`.
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `tlsCertFile`, PEM.
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA bundle that issued the API server's `--kubelet-client-certificate`; edges
    /// accept kubelet API requests only from certificates it issued. Default:
    /// [`SERVICE_ACCOUNT_CA`] when that file exists (kubeadm issues both from one CA).
    pub kubelet_client_ca_file: Option<PathBuf>,
    /// Subject common names edges accept among those certificates. Default
    /// `[kube-apiserver-kubelet-client]` (kubeadm's name).
    pub kubelet_client_names: Vec<String>,
    /// Namespace of the replicas' peer Leases; `""` means `trust.namespace`, `"*"` every
    /// namespace. Default `""`.
    pub peer_namespace: String,
    /// Whether a CONNECT to an address that is no edge node's is dialled directly (the API
    /// server's `cluster` egress also carries its connections to ordinary kubelets, pods,
    /// services and webhooks). Default false: the listener reaches edge nodes only, so a
    /// client of it cannot use cloudhub to dial any `host:port` its network reaches; a
    /// cluster whose `cluster` egress goes through cloudhub and that also has ordinary
    /// kubelets, webhooks or aggregated APIs turns it on.
    pub passthrough: bool,
    /// How long an edge has to open a requested tunnel. Humantime, default `3s`.
    #[serde(with = "humantime_serde")]
    pub tunnel_timeout: Duration,
    /// How long a direct dial (passthrough) or a peer lookup may take. Humantime, default
    /// `5s`.
    #[serde(with = "humantime_serde")]
    pub dial_timeout: Duration,
    /// The cluster's DNS domain (the kubelets' `clusterDomain`): an edge's serving
    /// certificate for the edge API may name `kubernetes.default.svc.<clusterDomain>`.
    /// Default `cluster.local`.
    pub cluster_domain: String,
}

impl Default for StreamsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            addr: SocketAddr::from(([0, 0, 0, 0], 10004)),
            advertise_address: None,
            client_ca_file: None,
            client_names: vec!["kube-apiserver-egress".to_owned()],
            tls_cert_file: None,
            tls_key_file: None,
            kubelet_client_ca_file: None,
            kubelet_client_names: vec!["kube-apiserver-kubelet-client".to_owned()],
            peer_namespace: String::new(),
            passthrough: false,
            tunnel_timeout: Duration::from_secs(3),
            dial_timeout: Duration::from_secs(5),
            cluster_domain: "cluster.local".to_owned(),
        }
    }
}

impl StreamsConfig {
    /// Checks values that serde cannot; `Err((field, reason))`.
    ///
    /// # Errors
    /// A zero timeout, or only one of `tlsCertFile`/`tlsKeyFile`.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.tunnel_timeout.is_zero() || self.dial_timeout.is_zero() {
            return Err((
                "streams.tunnelTimeout",
                "tunnelTimeout and dialTimeout must be greater than zero",
            ));
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err((
                "streams.tlsCertFile",
                "tlsCertFile and tlsKeyFile go together",
            ));
        }
        Ok(())
    }

    /// The kubelet client CA file to hand to edges: `kubeletClientCaFile`, else
    /// [`SERVICE_ACCOUNT_CA`] when it exists.
    pub fn effective_kubelet_client_ca(&self) -> Option<PathBuf> {
        self.kubelet_client_ca_file.clone().or_else(|| {
            let default = PathBuf::from(SERVICE_ACCOUNT_CA);
            default.exists().then_some(default)
        })
    }
}
