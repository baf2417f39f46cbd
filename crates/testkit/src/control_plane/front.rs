//! The streams front: kube-apiserver's egress proxy in the kit. Tests run many clouds
//! (cloudhub processes) beside each other against one API server, which dials one egress
//! address; so that address is a cloudhub of the kit's own, without sessions, whose
//! CONNECTs go to the replica holding the edge's session (peer Leases in every namespace)
//! or, for the kubelet node, straight to its address — exactly what a replica without the
//! session does in a real deployment. Started detached from the workspace's `cloudhub`
//! binary (restarted when that binary changes), stopped with the control plane.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::ControlPlane;
use super::certs::Pki;
use crate::daemon;

/// `<state>/egress-selector.yaml`: the `cluster` egress through the front at
/// `127.0.0.1:<port>` (HTTP CONNECT over mutual TLS). Returns its path.
pub(super) fn write_egress_config(dir: &Path, pki: &Pki, port: u16) -> anyhow::Result<PathBuf> {
    let path = dir.join("egress-selector.yaml");
    let text = format!(
        "apiVersion: apiserver.k8s.io/v1beta1\n\
         kind: EgressSelectorConfiguration\n\
         egressSelections:\n\
         - name: cluster\n\
         \x20 connection:\n\
         \x20   proxyProtocol: HTTPConnect\n\
         \x20   transport:\n\
         \x20     tcp:\n\
         \x20       url: https://127.0.0.1:{port}\n\
         \x20       tlsConfig:\n\
         \x20         caBundle: {}\n\
         \x20         clientCert: {}\n\
         \x20         clientKey: {}\n",
        pki.ca_cert.display(),
        pki.egress_client_cert.display(),
        pki.egress_client_key.display(),
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// What runs: `<state>/streams-front/state.json`.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Running {
    pid: u32,
    binary: PathBuf,
    modified: SystemTime,
}

/// Starts the front unless it runs from the current `cloudhub` binary (in `bin_dir`, else
/// the workspace's); a missing binary (nothing built yet) only skips it, with a message.
///
/// # Errors
/// The front does not start or does not listen within 20 s (its log tail included).
pub(super) async fn ensure(cp: &ControlPlane, bin_dir: Option<&Path>) -> anyhow::Result<()> {
    let binary = match bin_dir {
        Some(dir) => Some(dir.join("cloudhub")).filter(|b| b.is_file()),
        None => crate::process::workspace_bin("cloudhub").ok(),
    };
    let Some(binary) = binary else {
        eprintln!(
            "verge-testkit: no cloudhub binary yet; kubectl logs/exec wait for the streams front"
        );
        return Ok(());
    };
    let modified = std::fs::metadata(&binary)?.modified()?;
    let dir = cp.state_dir.join("streams-front");
    let running: Option<Running> = crate::run_state::load(&dir);
    if let Some(r) = &running {
        if r.binary == binary && r.modified == modified && daemon::is_alive(r.pid, Some("cloudhub"))
        {
            return Ok(());
        }
        daemon::stop_all(&[r.pid], Duration::from_secs(5));
    }
    std::fs::create_dir_all(&dir)?;
    // Its Verge CA and peer Lease live in `verge-system`.
    crate::trust::ensure_controller_accounts(&cp.client().await?).await?;
    let pki = Pki::paths(&cp.state_dir);
    let port = cp.streams_front_port;
    let config = dir.join("cloudhub.yaml");
    std::fs::write(
        &config,
        format!(
            "edgeAddr: 127.0.0.1:0\ncontrollerAddr: 127.0.0.1:0\njoinAddr: 127.0.0.1:0\n\
             healthAddr: 127.0.0.1:0\nreplicaName: streams-front\n\
             trust: {{serverSans: [localhost, 127.0.0.1]}}\n\
             streams:\n  addr: 127.0.0.1:{port}\n  tlsCertFile: {}\n  tlsKeyFile: {}\n\
             \x20 clientCaFile: {}\n  kubeletClientCaFile: {}\n  peerNamespace: \"*\"\n\
             \x20 clientNames: [{}, {}]\n  passthrough: true\n",
            pki.streams_front_cert.display(),
            pki.streams_front_key.display(),
            pki.ca_cert.display(),
            pki.ca_cert.display(),
            super::certs::EGRESS_CLIENT,
            crate::metrics_server::CLIENT_NAME,
        ),
    )?;
    let log = cp.state_dir.join("logs").join("streams-front.log");
    let args = [
        "--config".to_owned(),
        config.display().to_string(),
        "--kubeconfig".to_owned(),
        cp.kubeconfig().display().to_string(),
    ];
    let pid = daemon::spawn_detached(&binary, &args, &[("RUST_LOG", "info")], &log)?;
    crate::run_state::save(
        &dir,
        &Running {
            pid,
            binary,
            modified,
        },
        false,
    )?;
    crate::wait::wait_for_port(port, Duration::from_secs(20))
        .await
        .with_context(|| {
            format!(
                "the streams front (cloudhub, pid {pid}) does not listen on {port}; log tail:\n{}",
                crate::process::log_tail(&log, 20)
            )
        })
}

/// Stops the front of the control plane in `state_dir`, if it runs.
pub(super) fn stop(state_dir: &Path) {
    if let Some(r) = crate::run_state::load::<Running>(&state_dir.join("streams-front"))
        && daemon::is_alive(r.pid, Some("cloudhub"))
    {
        daemon::stop_all(&[r.pid], Duration::from_secs(5));
    }
}
