//! Stopping a node and removing everything it put on the host: its pods (through the API
//! while the kubelet runs, so the kubelet tears sandboxes and networking down itself), the
//! processes, what a crash leaves (pod processes, shims, mounts, veths), the CNI bridge,
//! cgroups, iptables chains, the Node object and the run directory.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::host::{
    kill_pod_processes, kill_shims, remove_cni_results, remove_container_log_links,
    remove_kubepods_cgroups,
};
use super::state::State;
use super::{CNI_BRIDGE, COMPONENTS, KubeletNodeConfig, files, iptables};
use crate::{ControlPlane, daemon};

/// Every API call of the teardown gives up after this long (the control plane may be gone).
const API_TIMEOUT: Duration = Duration::from_secs(5);

/// Stops the node of `config.run_dir` and removes all it left, including the run directory
/// (host lock held). The Node and its pods are removed from the control plane recorded in
/// `state.json` and from `cp` (the one a start attaches to). Returns whether a node process
/// was running.
pub(super) async fn teardown(
    config: &KubeletNodeConfig,
    cp: Option<&ControlPlane>,
) -> anyhow::Result<bool> {
    run(config, cp, true).await
}

/// [`teardown`], keeping `<run>/logs` (after a failed start).
pub(super) async fn stop_keeping_logs(
    config: &KubeletNodeConfig,
    cp: Option<&ControlPlane>,
) -> anyhow::Result<bool> {
    run(config, cp, false).await
}

async fn run(
    config: &KubeletNodeConfig,
    cp: Option<&ControlPlane>,
    wipe_logs: bool,
) -> anyhow::Result<bool> {
    let state = State::load(&config.run_dir);
    let pids = recorded_pids(config, state.as_ref());
    let name = state
        .as_ref()
        .map_or_else(|| config.name.clone(), |s| s.name.clone());
    let kubelet_alive = pids.iter().any(|(n, _)| n == "kubelet");
    let mut kubeconfigs: Vec<&Path> = state.iter().map(|s| s.admin_kubeconfig.as_path()).collect();
    let cp_kubeconfig = cp.map(ControlPlane::kubeconfig);
    if let Some(k) = cp_kubeconfig
        .as_deref()
        .filter(|k| !kubeconfigs.contains(k))
    {
        kubeconfigs.push(k);
    }
    let mut clients = Vec::new();
    for (i, kubeconfig) in kubeconfigs.into_iter().enumerate() {
        let Some(client) = api_client(kubeconfig).await else {
            continue;
        };
        // Only the recorded control plane's Node can have a live kubelet.
        let alive = kubelet_alive && i == 0 && state.is_some();
        if let Err(error) = drain(&client, &name, alive, config.drain_timeout).await {
            tracing::warn!(error = %format!("{error:#}"), node = %name, "draining the node");
        }
        clients.push(client);
    }
    let was_running = !pids.is_empty();
    let kube_bin = state
        .as_ref()
        .map(|s| s.kube_bin_dir.clone())
        .or_else(|| cp.map(|c| c.bin_dir().to_owned()));
    let config2 = config.clone();
    tokio::task::spawn_blocking(move || {
        host_cleanup(&config2, &pids, kube_bin.as_deref(), wipe_logs)
    })
    .await??;
    for client in &clients {
        let nodes: Api<Node> = Api::all(client.clone());
        match tokio::time::timeout(API_TIMEOUT, nodes.delete(&name, &DeleteParams::default())).await
        {
            Ok(Ok(_)) => {}
            Ok(Err(error)) if is_not_found(&error) => {}
            Ok(Err(error)) => tracing::warn!(%error, node = %name, "deleting the Node"),
            Err(_) => tracing::warn!(node = %name, "deleting the Node timed out"),
        }
    }
    super::claim::release(&config.run_dir);
    Ok(was_running)
}

/// Whether `error` is the API's 404.
fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// `(component, pid)` of the live recorded processes, in reverse start order.
pub(super) fn recorded_pids(
    config: &KubeletNodeConfig,
    state: Option<&State>,
) -> Vec<(String, u32)> {
    crate::run_state::recorded_pids(
        &config.run_dir,
        COMPONENTS,
        state.map(|s| s.components.as_slice()),
    )
}

/// A client of the admin `kubeconfig` of a control plane; `None` when it cannot be loaded
/// (that control plane is gone).
async fn api_client(kubeconfig: &Path) -> Option<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).ok()?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .ok()?;
    kube::Client::try_from(config).ok()
}

/// Cordons node `name` and deletes its pods: with a 1 s grace period and waiting (at most
/// `timeout`) for the kubelet to terminate them when it runs, else (or for what is left)
/// forcibly.
async fn drain(
    client: &kube::Client,
    name: &str,
    kubelet_alive: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Some(_) = tokio::time::timeout(API_TIMEOUT, nodes.get_opt(name)).await?? else {
        return Ok(());
    };
    let cordon = serde_json::json!({"spec": {"unschedulable": true}});
    tokio::time::timeout(
        API_TIMEOUT,
        nodes.patch(name, &PatchParams::default(), &Patch::Merge(&cordon)),
    )
    .await??;
    let grace = if kubelet_alive { 1 } else { 0 };
    delete_pods(client, name, grace).await?;
    if kubelet_alive {
        let deadline = Instant::now() + timeout;
        while !pods_on(client, name).await?.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        delete_pods(client, name, 0).await?;
    }
    Ok(())
}

/// `(namespace, name)` of the pods bound to `node`.
async fn pods_on(client: &kube::Client, node: &str) -> anyhow::Result<Vec<(String, String)>> {
    let pods: Api<Pod> = Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = tokio::time::timeout(API_TIMEOUT, pods.list(&params)).await??;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.namespace?, p.metadata.name?)))
        .collect())
}

/// Deletes every pod bound to `node` with `grace` seconds.
async fn delete_pods(client: &kube::Client, node: &str, grace: u32) -> anyhow::Result<()> {
    let params = DeleteParams {
        grace_period_seconds: Some(grace),
        ..DeleteParams::default()
    };
    for (ns, pod) in pods_on(client, node).await? {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        match tokio::time::timeout(API_TIMEOUT, api.delete(&pod, &params)).await? {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e).with_context(|| format!("deleting pod {ns}/{pod}")),
        }
    }
    Ok(())
}

/// Stops the processes and removes the node's host state (blocking).
fn host_cleanup(
    config: &KubeletNodeConfig,
    pids: &[(String, u32)],
    kube_bin: Option<&Path>,
    wipe_logs: bool,
) -> anyhow::Result<()> {
    let pid_of = |names: &[&str]| -> Vec<u32> {
        pids.iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .map(|(_, p)| *p)
            .collect()
    };
    let agents = pid_of(&["kube-proxy", "kubelet"]);
    let mut survivors = daemon::stop_all(&agents, Duration::from_secs(10));
    // Every step runs even when an earlier one failed; the first failures are reported.
    let mut errors: Vec<anyhow::Error> = Vec::new();
    let mut step = |result: anyhow::Result<()>| {
        if let Err(e) = result {
            errors.push(e);
        }
    };
    step(kill_pod_processes());
    survivors.extend(daemon::stop_all(
        &pid_of(&["containerd"]),
        Duration::from_secs(10),
    ));
    if !survivors.is_empty() {
        step(Err(anyhow::anyhow!(
            "kubelet node processes survived SIGKILL: {survivors:?}"
        )));
    }
    kill_shims(&config.containerd_socket());

    if let Some(proxy) = kube_bin
        .map(|b| b.join("kube-proxy"))
        .filter(|p| p.is_file())
    {
        match Command::new(&proxy).arg("--cleanup").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => tracing::warn!(
                stderr = %String::from_utf8_lossy(&out.stderr),
                "kube-proxy --cleanup failed"
            ),
            Err(error) => tracing::warn!(%error, "running kube-proxy --cleanup"),
        }
    }
    step(iptables::remove_ours().map(|_| ()));

    let shim_dir = files::shim_socket_dir(&config.run_dir);
    let unmounted = crate::mounts::unmount_under(&config.run_dir);
    let run_dir_unmounted = unmounted.is_ok();
    step(unmounted);
    step(crate::mounts::unmount_under(&shim_dir));
    if crate::control_plane::ip(&["link", "show", "dev", CNI_BRIDGE]).is_ok() {
        step(crate::control_plane::ip(&["link", "del", CNI_BRIDGE]).map(|_| ()));
    }
    remove_kubepods_cgroups();
    remove_cni_results();
    remove_container_log_links(&config.run_dir);
    // Never delete recursively through something still mounted.
    if run_dir_unmounted {
        if !shim_dir.starts_with(&config.run_dir) {
            let _ = std::fs::remove_dir_all(&shim_dir);
        }
        step(wipe(&config.run_dir, wipe_logs));
    }
    match errors.len() {
        0 => Ok(()),
        _ => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            bail!("stopping the kubelet node: {}", all.join("; "))
        }
    }
}

/// Removes the run directory (but `logs/` unless `logs_too`).
fn wipe(run_dir: &Path, logs_too: bool) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !logs_too && name == "logs" {
            continue;
        }
        let path = entry.path();
        let result = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        result.with_context(|| format!("removing {}", path.display()))?;
    }
    if logs_too {
        let _ = std::fs::remove_dir(run_dir);
    }
    Ok(())
}
