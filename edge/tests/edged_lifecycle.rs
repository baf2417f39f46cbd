//! More of edged against the real Docker engine: termination through `deletionTimestamp`
//! (SIGTERM within the grace period, containers removed, deletion reported), liveness
//! failures restarting the container (with `Unhealthy` and `Killing` events), hostNetwork,
//! securityContext (runAsUser, readOnlyRootFilesystem, capabilities) and the downward API's
//! `status.podIP`. The harness is in `edged_common`.

mod edged_common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use serde_json::json;
use verge_testkit::docker::TEST_IMAGE;

use edged_common::{
    Cleanup, Harness, SERIAL, container, docker, docker_id, docker_ids, pod, running, uid,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_timestamp_terminates_gracefully() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("term");
    let _cleanup = Cleanup(uid.clone());
    let out = tempfile::tempdir()?;
    let host = out.path().to_str().context("utf-8 path")?;
    // PID 1 traps SIGTERM, writes a marker and exits 0; without the signal it would need a
    // SIGKILL after the 20 s grace period. It says when the trap is set: a SIGTERM before
    // that would be ignored (PID 1 has no default handler), e.g. on a loaded machine.
    let script = "trap 'echo term > /out/term; exit 0' TERM; echo ready > /out/ready; while true; do sleep 1; done";
    let spec = json!({"terminationGracePeriodSeconds": 20,
        "volumes": [{"name": "out", "hostPath": {"path": host, "type": "Directory"}}],
        "containers": [{"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            "volumeMounts": [{"name": "out", "mountPath": "/out"}]}]});
    let mut p = pod("term", &uid, spec);
    h.put(&p, "1")?;
    h.status("term", |s| running(s, "app")).await?;
    let ready = out.path().join("ready");
    let since = Instant::now();
    while !ready.exists() {
        ensure!(
            since.elapsed() < Duration::from_secs(30),
            "the container never set its trap"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    p["metadata"]["deletionGracePeriodSeconds"] = json!(20);
    let t0 = Instant::now();
    h.put(&p, "2")?;
    h.deleted("term", &uid).await?;
    ensure!(
        t0.elapsed() < Duration::from_secs(15),
        "stopped by SIGTERM, not by the SIGKILL after the grace period: {:?}",
        t0.elapsed()
    );
    let term = std::fs::read_to_string(out.path().join("term")).context("SIGTERM marker")?;
    assert_eq!(term.trim(), "term");
    let last = h.last_status("term").context("a last status")?;
    let exit = container(&last, "app")
        .and_then(|c| c.state.as_ref()?.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(exit, Some(0), "the trap's exit code in the last status");
    assert!(docker_ids(&uid).is_empty(), "containers removed");
    h.event("term", "Killing", "Stopping container app").await?;
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_failure_restarts_the_container() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("live");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never",
         "command": ["sleep", "3600"],
         "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                           "periodSeconds": 1, "failureThreshold": 2}}]});
    h.put(&pod("live", &uid, spec), "1")?;
    let s = h
        .status("live", |s| {
            running(s, "app") && container(s, "app").is_some_and(|c| c.restart_count >= 1)
        })
        .await?;
    let last = container(&s, "app")
        .and_then(|c| c.last_state.as_ref()?.terminated.clone())
        .context("lastState.terminated")?;
    assert_eq!(
        last.exit_code, 137,
        "killed: sleep ignores SIGTERM as PID 1"
    );
    let e = h
        .event("live", "Unhealthy", "Liveness probe failed:")
        .await?;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(
        e.involved_object.field_path.as_deref(),
        Some("spec.containers{app}")
    );
    h.event(
        "live",
        "Killing",
        "Container app failed liveness probe, will be restarted",
    )
    .await?;
    h.event("live", "Pulled", "already present on machine")
        .await?;
    h.event("live", "Created", "Created container app").await?;
    h.event("live", "Started", "Started container app").await?;
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pod_sees_the_host_interfaces() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("hostnet");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"hostNetwork": true, "terminationGracePeriodSeconds": 0, "containers": [
        {"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]});
    h.put(&pod("hostnet", &uid, spec), "1")?;
    let s = h.status("hostnet", |s| running(s, "app")).await?;
    assert_eq!(s.pod_ip, s.host_ip, "podIP is the node's IP");
    let interfaces = |dev: &str| -> Vec<String> {
        let mut v: Vec<String> = dev
            .lines()
            .skip(2)
            .filter_map(|l| Some(l.split(':').next()?.trim().to_owned()))
            .collect();
        v.sort();
        v
    };
    let id = docker_id(&s, "app")?;
    let inside = interfaces(&docker(&["exec", &id, "cat", "/proc/net/dev"])?);
    let host = interfaces(&docker(&[
        "run",
        "--rm",
        "--network",
        "host",
        TEST_IMAGE,
        "cat",
        "/proc/net/dev",
    ])?);
    assert_eq!(inside, host, "the host's network namespace");
    let bridge = docker(&[
        "network",
        "inspect",
        "bridge",
        "-f",
        "{{index .Options \"com.docker.network.bridge.name\"}}",
    ])?;
    assert!(inside.contains(&bridge), "{bridge} in {inside:?}");
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_context_and_pod_ip_env() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("sec");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "locked", "image": TEST_IMAGE, "imagePullPolicy": "Never",
         "command": ["sleep", "3600"],
         "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
         "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": true}},
        {"name": "nocaps", "image": TEST_IMAGE, "imagePullPolicy": "Never",
         "command": ["sleep", "3600"],
         "securityContext": {"capabilities": {"drop": ["ALL"]}}}]});
    h.put(&pod("sec", &uid, spec), "1")?;
    let s = h
        .status("sec", |s| running(s, "locked") && running(s, "nocaps"))
        .await?;
    let locked = docker_id(&s, "locked")?;
    assert_eq!(docker(&["exec", &locked, "id", "-u"])?, "1000");
    assert!(
        docker(&["exec", &locked, "touch", "/x"]).is_err(),
        "read-only root filesystem"
    );
    assert!(
        docker(&["exec", &locked, "touch", "/tmp/x"]).is_err(),
        "/tmp is part of the root filesystem too"
    );
    let nocaps = docker_id(&s, "nocaps")?;
    let caps = docker(&["exec", &nocaps, "grep", "^CapBnd", "/proc/self/status"])?;
    assert!(
        caps.ends_with("0000000000000000"),
        "no capabilities: {caps}"
    );
    assert_eq!(
        docker(&["exec", &nocaps, "id", "-u"])?,
        "0",
        "root without caps"
    );
    // status.podIP is the sandbox's bridge IP.
    let pod_ip = s.pod_ip.clone().context("podIP")?;
    let env = docker(&["exec", &locked, "env"])?;
    assert!(
        env.lines().any(|l| l == format!("POD_IP={pod_ip}")),
        "{env}"
    );
    let sandbox = docker_ids(&uid)
        .into_iter()
        .find(|id| {
            docker(&[
                "inspect",
                "-f",
                "{{index .Config.Labels \"io.kubernetes.container.name\"}}",
                id,
            ])
            .is_ok_and(|n| n == "POD")
        })
        .context("sandbox")?;
    let ip = docker(&[
        "inspect",
        "-f",
        "{{.NetworkSettings.Networks.bridge.IPAddress}}",
        &sandbox,
    ])?;
    assert_eq!(ip, pod_ip);
    h.restart().await
}
