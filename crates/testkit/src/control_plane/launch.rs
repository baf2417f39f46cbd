//! Starting the components of a control plane and waiting until it serves.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ServiceAccount;

use super::state::{self, Component, Ports, State, write_env_file, write_kubeconfig};
use super::{CLUSTER_CIDR, ControlPlane, ControlPlaneConfig, SERVICE_CIDR, certs};
use crate::daemon;

impl ControlPlaneConfig {
    /// Fresh start (lock held, state dir empty).
    pub(super) async fn start(&self) -> anyhow::Result<ControlPlane> {
        let started = Instant::now();
        let dir = &self.state_dir;
        for sub in ["logs", "pids", "etcd", "certs"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let pki = certs::Pki::generate(dir, self.advertise_address)?;
        let admin_token = certs::random_token()?;
        certs::write_token_file(&dir.join("tokens.csv"), &admin_token)?;
        let ports = Ports::pick()?;
        let server = format!("https://127.0.0.1:{}", ports.apiserver);
        write_kubeconfig(&self.kubeconfig_path(), &server, &pki.ca_cert, &admin_token)?;

        let mut state = State {
            version: self.version.clone(),
            server,
            admin_token,
            bin_dir: self.bin_dir(),
            ports,
            components: Vec::new(),
            advertise_address: Some(self.advertise_address),
            layout: state::LAYOUT,
        };
        let result = self.spawn_all(&pki, &mut state).await;
        let result = match result {
            Ok(()) => {
                let cp = ControlPlane::from_state(self, state.clone());
                self.wait_ready(&cp).await.map(|()| cp)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(cp) => {
                write_env_file(&self.env_path(), &cp)?;
                tracing::info!(elapsed = ?started.elapsed(), server = %cp.server, "control plane ready");
                Ok(cp)
            }
            Err(error) => {
                let pids: Vec<u32> = state.components.iter().rev().map(|c| c.pid).collect();
                daemon::stop_all(&pids, Duration::from_secs(5));
                Err(error.context(format!(
                    "starting the control plane (state and logs kept in {})",
                    dir.display()
                )))
            }
        }
    }

    /// Starts etcd, waits for its port, then the other three components.
    pub(super) async fn spawn_all(
        &self,
        pki: &certs::Pki,
        state: &mut State,
    ) -> anyhow::Result<()> {
        let dir = &self.state_dir;
        let p = state.ports.clone();
        let path = |p: &Path| p.display().to_string();
        let kubeconfig = path(&self.kubeconfig_path());
        let etcd_client = format!("http://127.0.0.1:{}", p.etcd);
        let etcd_peer = format!("http://127.0.0.1:{}", p.etcd_peer);
        let etcd = vec![
            "--name=verge".to_owned(),
            format!("--data-dir={}", path(&dir.join("etcd"))),
            format!("--listen-client-urls={etcd_client}"),
            format!("--advertise-client-urls={etcd_client}"),
            format!("--listen-peer-urls={etcd_peer}"),
            format!("--initial-advertise-peer-urls={etcd_peer}"),
            format!("--initial-cluster=verge={etcd_peer}"),
            "--unsafe-no-fsync=true".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        self.spawn(state, "etcd", &etcd)?;
        let etcd_pid = state.components[0].pid;
        wait_port(
            p.etcd,
            Duration::from_secs(20),
            etcd_pid,
            &dir.join("logs/etcd.log"),
        )
        .await?;

        let apiserver = vec![
            format!("--etcd-servers={etcd_client}"),
            // All addresses: loopback for host-side clients, the advertise address for pods.
            "--bind-address=0.0.0.0".to_owned(),
            format!("--advertise-address={}", self.advertise_address),
            format!("--secure-port={}", p.apiserver),
            format!("--tls-cert-file={}", path(&pki.apiserver_cert)),
            format!("--tls-private-key-file={}", path(&pki.apiserver_key)),
            format!("--client-ca-file={}", path(&pki.ca_cert)),
            format!("--token-auth-file={}", path(&dir.join("tokens.csv"))),
            // Bootstrap tokens authenticate (as kubeadm's API servers): cloudhub checks a
            // join's token with a TokenReview instead of reading its kube-system Secret.
            "--enable-bootstrap-token-auth=true".to_owned(),
            "--authorization-mode=Node,RBAC".to_owned(),
            // NodeRestriction bounds what a node identity may write (its own Node, Lease and
            // pods' status; no taints, only allowed labels): edgecontroller acts as each edge
            // node (constrained impersonation), so this admission bounds it too. The other
            // plugins are the API server's defaults.
            "--enable-admission-plugins=NodeRestriction".to_owned(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            // The key set of the discovery document at the `kubernetes` Service's name, which
            // every pod reaches (an edge pod through its node's edge API), rather than at the
            // API server's own address, which edge pods cannot dial across their link
            // (docs/install.md).
            "--service-account-jwks-uri=https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
                .to_owned(),
            format!("--service-account-key-file={}", path(&pki.sa_pub)),
            format!("--service-account-signing-key-file={}", path(&pki.sa_key)),
            format!("--cert-dir={}", path(&dir.join("certs"))),
            "--allow-privileged=true".to_owned(),
            // `kubectl logs`/`exec` on the kit's kubelet node.
            format!(
                "--kubelet-client-certificate={}",
                path(&pki.kubelet_client_cert)
            ),
            format!("--kubelet-client-key={}", path(&pki.kubelet_client_key)),
            // Kubelet connections (logs, exec, ...) go through the streams front, a cloudhub
            // (egress selector `cluster`, HTTP CONNECT): edge nodes through their sessions,
            // the kubelet node directly. Node names need not resolve here; the front maps
            // them. Serving certificates are verified against the cluster CA, which signs
            // `kubernetes.io/kubelet-serving` CSRs (edges) and the kubelet node's.
            format!(
                "--egress-selector-config-file={}",
                path(&super::front::write_egress_config(
                    dir,
                    pki,
                    p.streams_front
                )?)
            ),
            format!("--kubelet-certificate-authority={}", path(&pki.ca_cert)),
            // The aggregation layer (as kubeadm sets it up): requests proxied to aggregated
            // API servers such as metrics-server carry the user in X-Remote-* headers,
            // vouched for by the front-proxy client certificate.
            format!(
                "--requestheader-client-ca-file={}",
                path(&pki.front_proxy_ca_cert)
            ),
            format!(
                "--requestheader-allowed-names={}",
                certs::FRONT_PROXY_CLIENT
            ),
            "--requestheader-username-headers=X-Remote-User".to_owned(),
            "--requestheader-group-headers=X-Remote-Group".to_owned(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
            format!(
                "--proxy-client-cert-file={}",
                path(&pki.front_proxy_client_cert)
            ),
            format!(
                "--proxy-client-key-file={}",
                path(&pki.front_proxy_client_key)
            ),
            // The `kubernetes` Service's endpoint is the advertise address (the default
            // `lease` endpoint reconciler), which pods reach.
        ];
        self.spawn(state, "kube-apiserver", &apiserver)?;

        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let controller_manager = vec![
            format!("--kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", p.controller_manager),
            format!("--cert-dir={}", path(&dir.join("certs"))),
            std::iter::once("--controllers=*".to_owned())
                .chain(self.disabled_controllers.iter().map(|c| format!("-{c}")))
                .collect::<Vec<_>>()
                .join(","),
            "--leader-elect=false".to_owned(),
            "--use-service-account-credentials=false".to_owned(),
            format!("--service-account-private-key-file={}", path(&pki.sa_key)),
            format!("--root-ca-file={}", path(&pki.ca_cert)),
            format!("--cluster-signing-cert-file={}", path(&pki.ca_cert)),
            format!("--cluster-signing-key-file={}", path(&pki.ca_key)),
            format!(
                "--node-monitor-grace-period={}",
                ms(self.node_monitor_grace_period)
            ),
            format!("--node-monitor-period={}", ms(self.node_monitor_period)),
            // Every Node gets a /24 (by default) of the cluster CIDR as its spec.podCIDR (the
            // kubelet node's CNI range); the service range is excluded from the allocations.
            "--allocate-node-cidrs=true".to_owned(),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            format!("--node-cidr-mask-size={}", self.node_cidr_mask_size),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        ];
        self.spawn(state, "kube-controller-manager", &controller_manager)?;

        let scheduler = vec![
            format!("--kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", p.scheduler),
            "--leader-elect=false".to_owned(),
        ];
        self.spawn(state, "kube-scheduler", &scheduler)?;
        state.save(dir)
    }

    /// Spawns one component detached and records its pid.
    pub(super) fn spawn(
        &self,
        state: &mut State,
        name: &str,
        args: &[String],
    ) -> anyhow::Result<()> {
        let log = self.state_dir.join("logs").join(format!("{name}.log"));
        let pid = daemon::spawn_detached(&self.bin_dir().join(name), args, &[], &log)?;
        std::fs::write(
            self.state_dir.join("pids").join(format!("{name}.pid")),
            format!("{pid}\n"),
        )?;
        state.components.push(Component {
            name: name.to_owned(),
            pid,
        });
        Ok(())
    }

    /// Waits for `/readyz` and the `default` service account, failing fast when a
    /// component exits.
    pub(super) async fn wait_ready(&self, cp: &ControlPlane) -> anyhow::Result<()> {
        let client = cp.client().await?;
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), "default");
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            for c in &cp.components {
                if !daemon::is_alive(c.pid, Some(&c.name)) {
                    bail!(
                        "{} exited during start-up ({}); log tail:\n{}",
                        c.name,
                        daemon::describe_exit(c.pid),
                        crate::process::log_tail(&cp.log_path(&c.name), 30)
                    );
                }
            }
            let probe = async {
                readyz(&client).await?;
                accounts
                    .get_opt("default")
                    .await?
                    .context("service account default/default not created yet")?;
                anyhow::Ok(())
            };
            let last_error = match tokio::time::timeout(Duration::from_secs(5), probe).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "probe timed out".to_owned(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "control plane not ready after {:?} ({last_error}); kube-apiserver log tail:\n{}",
                    self.ready_timeout,
                    crate::process::log_tail(&cp.log_path("kube-apiserver"), 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// GET `/readyz`; ok when the body is `ok`.
pub(super) async fn readyz(client: &kube::Client) -> anyhow::Result<()> {
    let request = http::Request::get("/readyz").body(Vec::new())?;
    let body = client.request_text(request).await.context("GET /readyz")?;
    if body.trim() != "ok" {
        bail!("/readyz: {body}");
    }
    Ok(())
}

/// Waits until 127.0.0.1:`port` accepts TCP connections, failing when `pid()` exits.
pub(super) async fn wait_port(
    port: u16,
    timeout: Duration,
    pid: u32,
    log: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if !daemon::is_alive(pid, None) {
            bail!(
                "etcd exited during start-up ({}); log tail:\n{}",
                daemon::describe_exit(pid),
                crate::process::log_tail(log, 30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "port {port} not open after {timeout:?}; log tail:\n{}",
                crate::process::log_tail(log, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
