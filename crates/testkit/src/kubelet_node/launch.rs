//! Starting the node: prerequisites, containerd, kubelet, kube-proxy, and the waits until
//! the Node is `Ready` and Services are programmed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Node;

use super::files::{self, NodeFiles, NodePorts};
use super::state::{Component, State};
use super::{KubeletNode, KubeletNodeConfig, claim, images, iptables};
use crate::{ControlPlane, ControlPlaneConfig, daemon};

/// `verge-testkit: kubelet node: <message>` on stderr (long steps show progress).
fn progress(message: &str) {
    eprintln!("verge-testkit: kubelet node: {message}");
}

impl KubeletNodeConfig {
    /// Starts a fresh kubelet node attached to `cp` and waits until it is usable.
    ///
    /// [`KubeletNodeConfig::ensure_built`] (builds when caches are missing), then, under
    /// the host lock: fails if a node of another run directory runs (removes its leftovers
    /// if it is dead), removes whatever a previous node of this run directory left (as
    /// [`KubeletNodeConfig::down`]; also the Node object and its pods in `cp`), writes
    /// certificates and configurations, starts containerd, imports the pause image, starts
    /// kubelet and kube-proxy detached, and waits (at most
    /// [`KubeletNodeConfig::ready_timeout`]) until the Node is `Ready` (which needs the
    /// `spec.podCIDR` kube-controller-manager allocates, [`KubeletNode::pod_cidr`]) and
    /// kube-proxy has programmed the `kubernetes` Service. Takes about 2 to 5 s once built.
    /// Needs root.
    ///
    /// containerd starts empty: import the images pods use after every start
    /// ([`KubeletNode::import_image`]).
    ///
    /// # Errors
    /// Installation, builds, another node running on this host (the error names its run
    /// directory), leftovers that cannot be removed, or a process exiting or the
    /// node not getting ready in time: the error holds the failing component's log tail;
    /// the processes are stopped, and the run directory is kept for inspection until the
    /// next start.
    pub async fn up(&self, cp: &ControlPlane) -> anyhow::Result<KubeletNode> {
        let cp_config = ControlPlaneConfig {
            version: cp.version().to_owned(),
            cache_dir: cp
                .bin_dir()
                .parent()
                .context("control plane bin dir has no parent")?
                .to_owned(),
            ..ControlPlaneConfig::from_env()
        };
        let config = self.clone();
        tokio::task::spawn_blocking(move || config.ensure_built(&cp_config)).await??;

        let _lock = claim::lock_host().await?;
        if let Some(other) = claim::owner().filter(|o| *o != self.run_dir) {
            let other = Self {
                run_dir: other,
                ..self.clone()
            };
            let state = State::load(&other.run_dir);
            if !super::teardown::recorded_pids(&other, state.as_ref()).is_empty() {
                bail!(
                    "another kubelet node runs on this host (run directory {}); only one can: \
                     stop it first (KubeletNodeConfig::down with that run_dir, or the tool that \
                     started it)",
                    other.run_dir.display()
                );
            }
            super::teardown::teardown(&other, None).await?;
        }
        if super::teardown::teardown(self, Some(cp)).await? {
            progress("stopped the leftovers of an earlier node");
        }
        std::fs::create_dir_all(&self.run_dir)
            .with_context(|| format!("creating {}", self.run_dir.display()))?;
        claim::claim(&self.run_dir)?;
        let started = Instant::now();
        let mut state = State {
            name: self.name.clone(),
            node_ip: cp.advertise_address(),
            admin_kubeconfig: cp.kubeconfig(),
            kube_bin_dir: cp.bin_dir().to_owned(),
            kubelet_port: 0,
            components: Vec::new(),
            pod_cidr: String::new(),
        };
        match self.start(cp, &mut state).await {
            Ok(()) => {
                progress(&format!(
                    "{} Ready in {:.1?} (node IP {}, pods {})",
                    self.name,
                    started.elapsed(),
                    state.node_ip,
                    state.pod_cidr
                ));
                Ok(KubeletNode::from_state(self.clone(), cp.clone(), &state))
            }
            Err(error) => {
                if let Err(cleanup) = super::teardown::stop_keeping_logs(self, Some(cp)).await {
                    tracing::warn!(error = %format!("{cleanup:#}"), "cleaning up a failed node start");
                }
                Err(error.context(format!(
                    "starting the kubelet node (logs kept in {})",
                    self.run_dir.join("logs").display()
                )))
            }
        }
    }

    /// The start proper (lock held, run dir clean); records processes in `state`.
    async fn start(&self, cp: &ControlPlane, state: &mut State) -> anyhow::Result<()> {
        let ports = NodePorts::pick()?;
        state.kubelet_port = ports.kubelet;
        let files = files::write_all(self, cp, state.node_ip, ports)?;
        state.save(&self.run_dir)?;

        progress("starting containerd");
        let containerd = self.containerd_bin_dir().join("containerd");
        let args = vec![format!("--config={}", files.containerd_config.display())];
        self.spawn(state, "containerd", &containerd, &args)?;
        self.wait_containerd(state).await?;
        let (ctr, sock) = (
            self.containerd_bin_dir().join("ctr"),
            self.containerd_socket(),
        );
        tokio::task::spawn_blocking(move || images::import(&ctr, &sock, super::PAUSE_IMAGE))
            .await??;
        iptables::install_forward_chain()?;

        progress("starting kubelet and kube-proxy");
        let kubelet = cp.bin_dir().join("kubelet");
        self.spawn(
            state,
            "kubelet",
            &kubelet,
            &kubelet_args(self, &files, state),
        )?;
        let proxy = cp.bin_dir().join("kube-proxy");
        let args = vec![format!("--config={}", files.proxy_config.display())];
        self.spawn(state, "kube-proxy", &proxy, &args)?;

        state.pod_cidr = self.wait_ready(cp, state).await?;
        state.save(&self.run_dir)
    }

    /// Spawns one component detached (PATH starting with containerd's bin dir, so its shim
    /// is found before Debian's) and records it.
    fn spawn(
        &self,
        state: &mut State,
        name: &str,
        program: &Path,
        args: &[String],
    ) -> anyhow::Result<()> {
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            self.containerd_bin_dir().display()
        );
        let pid = daemon::spawn_detached(program, args, &[("PATH", &path)], &self.log_path(name))?;
        std::fs::write(
            self.run_dir.join("pids").join(format!("{name}.pid")),
            format!("{pid}\n"),
        )?;
        state.components.push(Component {
            name: name.to_owned(),
            pid,
        });
        state.save(&self.run_dir)
    }

    /// The first recorded component that is no longer alive, as an error with its log tail.
    fn check_alive(&self, state: &State) -> anyhow::Result<()> {
        for c in &state.components {
            if !daemon::is_alive(c.pid, Some(&c.name)) {
                bail!(
                    "{} exited during start-up ({}); log tail:\n{}",
                    c.name,
                    daemon::describe_exit(c.pid),
                    crate::process::log_tail(&self.log_path(&c.name), 30)
                );
            }
        }
        Ok(())
    }

    /// Waits until `ctr version` answers on containerd's socket (at most 30 s).
    async fn wait_containerd(&self, state: &State) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.check_alive(state)?;
            let ok = Command::new(self.containerd_bin_dir().join("ctr"))
                .arg("-a")
                .arg(self.containerd_socket())
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "containerd not answering after 30 s; log tail:\n{}",
                    crate::process::log_tail(&self.log_path("containerd"), 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the Node is `Ready` with a `spec.podCIDR` (kubelet passes it to
    /// containerd, which renders the CNI network from its template; the network, and so the
    /// Node, is not ready before) and kube-proxy programmed the `kubernetes` Service.
    /// Returns the pod CIDR.
    async fn wait_ready(&self, cp: &ControlPlane, state: &State) -> anyhow::Result<String> {
        let client = cp.client().await?;
        let nodes: kube::Api<Node> = kube::Api::all(client);
        let deadline = Instant::now() + self.ready_timeout;
        let mut last = String::from("Node not registered yet");
        loop {
            self.check_alive(state)?;
            let node =
                tokio::time::timeout(Duration::from_secs(5), nodes.get_opt(&self.name)).await;
            match node {
                Ok(Ok(Some(node))) => {
                    let pod_cidr = node
                        .spec
                        .as_ref()
                        .and_then(|s| s.pod_cidr.clone())
                        .filter(|c| !c.is_empty());
                    match (pod_cidr, crate::wait::ready_status(&node).as_deref()) {
                        (None, _) => last = NO_POD_CIDR.to_owned(),
                        (Some(cidr), Some("True")) if kubernetes_service_programmed() => {
                            return Ok(cidr);
                        }
                        (Some(_), Some("True")) => {
                            last = "kube-proxy has not programmed the kubernetes Service yet".into()
                        }
                        (Some(_), _) => {
                            last = format!("Node not Ready: {}", not_ready_message(&node))
                        }
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => last = format!("{e:#}"),
                Err(_) => last = "GET node timed out".into(),
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {} not ready after {:?} ({last}); kubelet log tail:\n{}\nkube-proxy log tail:\n{}",
                    self.name,
                    self.ready_timeout,
                    crate::process::log_tail(&self.log_path("kubelet"), 30),
                    crate::process::log_tail(&self.log_path("kube-proxy"), 10)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Why a registered Node is not usable yet when it has no `spec.podCIDR`.
const NO_POD_CIDR: &str = "Node has no spec.podCIDR yet (kube-controller-manager's \
     node-ipam-controller allocates it, with --allocate-node-cidrs: a control plane started by \
     an older test kit lacks it and must be restarted, e.g. cargo xtask control-plane down)";

/// kubelet's command line.
fn kubelet_args(config: &KubeletNodeConfig, files: &NodeFiles, state: &State) -> Vec<String> {
    let p = |p: &PathBuf| p.display().to_string();
    vec![
        format!("--config={}", p(&files.kubelet_config)),
        format!("--kubeconfig={}", p(&files.kubelet_kubeconfig)),
        format!("--root-dir={}", p(&files.kubelet_root)),
        format!("--cert-dir={}", p(&files.kubelet_cert_dir)),
        format!("--hostname-override={}", config.name),
        format!("--node-ip={}", state.node_ip),
        "--v=1".to_owned(),
    ]
}

/// The message of the Node's `Ready` condition, for error messages.
fn not_ready_message(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "no Ready condition yet".to_owned())
}

/// Whether `nat KUBE-SERVICES` holds the rule of `default/kubernetes:https`.
fn kubernetes_service_programmed() -> bool {
    Command::new("iptables")
        .args(["-t", "nat", "-S", "KUBE-SERVICES"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("default/kubernetes:https"))
}
