//! edged against the real Docker engine: pods run as an infra container plus app containers
//! sharing its network namespace, crash-loop back-off, init containers with an emptyDir,
//! deletion, `ErrImageNeverPull` (with their events), and recovery from the store after a restart.
//!
//! Edged is driven directly: pods go into a MetaStore and a `StoreEvent` announces them (as
//! metamanager does); upstream messages are captured from a detached `EdgeHubHandle`.
//! The harness is in `edged_common`.

mod edged_common;

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::PodStatus;
use serde_json::{Value, json};
use verge_testkit::docker::TEST_IMAGE;

use edged_common::{Cleanup, Harness, SERIAL, container, docker, docker_ids, pod, running, uid};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_runs_shares_network_and_is_deleted() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("net");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "web", "image": TEST_IMAGE, "imagePullPolicy": "IfNotPresent",
         "command": ["sh", "-c", "echo hello > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"]},
        {"name": "client", "image": TEST_IMAGE, "imagePullPolicy": "IfNotPresent",
         "command": ["sleep", "3600"]},
    ]});
    let key = h.put(&pod("net", &uid, spec), "1")?;
    let s = h
        .status("net", |s| running(s, "web") && running(s, "client"))
        .await?;
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert!(s.pod_ip.is_some(), "pod IP from the sandbox: {s:?}");
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    let client = container(&s, "client")
        .and_then(|c| c.container_id.clone())
        .context("id")?;
    let client = client.trim_start_matches("docker://");
    let labels = docker(&["inspect", "-f", "{{json .Config.Labels}}", client])?;
    let labels: Value = serde_json::from_str(&labels)?;
    assert_eq!(labels["io.kubernetes.pod.uid"], uid.as_str());
    assert_eq!(labels["io.kubernetes.container.name"], "client");
    assert_eq!(labels["io.kubernetes.pod.name"], "net");
    assert_eq!(docker_ids(&uid).len(), 3, "sandbox + 2 containers");
    // Shared network namespace: the client reaches the web server on localhost.
    let mut body = String::new();
    for _ in 0..20 {
        if let Ok(b) = docker(&[
            "exec",
            client,
            "wget",
            "-qO-",
            "http://127.0.0.1:8080/index.html",
        ]) {
            body = b;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(body, "hello");

    // Cloud delete: containers stopped and removed, deletion reported upstream.
    h.delete(&key, &uid)?;
    h.deleted("net", &uid).await?;
    assert!(docker_ids(&uid).is_empty(), "containers removed");
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_container_backs_off() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("crash");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "fail", "image": TEST_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", "exit 1"]},
    ]});
    h.put(&pod("crash", &uid, spec), "1")?;
    // Docker's start time of every attempt, from any status that names it: the gaps between
    // attempts measured by the engine, not by when this test happened to read a status.
    let mut starts = std::collections::BTreeSet::new();
    let mut backoff_seen = false;
    while starts.len() < 4 {
        // Every reported status, in order.
        let s = h.status("crash", |_| true).await?;
        let Some(c) = container(&s, "fail") else {
            continue;
        };
        let waiting = c.state.as_ref().and_then(|st| st.waiting.as_ref());
        if waiting.and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff") {
            backoff_seen = true;
            let last = c.last_state.as_ref().and_then(|l| l.terminated.as_ref());
            assert_eq!(last.map(|t| t.exit_code), Some(1));
        }
        let state = c.state.as_ref();
        let running = state.and_then(|st| st.running.as_ref());
        let terminated = [state, c.last_state.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|st| st.terminated.as_ref());
        starts.extend(
            running
                .and_then(|r| r.started_at.clone())
                .into_iter()
                .chain(terminated.filter_map(|t| t.started_at.clone()))
                .map(|t| t.0),
        );
    }
    assert!(backoff_seen, "reason CrashLoopBackOff reported");
    let e = h
        .event(
            "crash",
            "BackOff",
            "Back-off restarting failed container fail in pod crash_default(",
        )
        .await?;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    // Restarts: immediate, then after 2 s, then 4 s: the gaps grow.
    let starts: Vec<_> = starts.into_iter().collect();
    let gaps: Vec<Duration> = starts
        .windows(2)
        .map(|w| Duration::try_from(w[1].duration_since(w[0])))
        .collect::<std::result::Result<_, _>>()?;
    assert!(
        gaps[2] > gaps[0] + Duration::from_secs(1),
        "growing delays: {gaps:?}"
    );
    assert!(
        gaps[2] >= Duration::from_secs(3),
        "second back-off ~4 s: {gaps:?}"
    );
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_pull_of_a_missing_image_waits() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("never");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"containers": [
        {"name": "app", "image": "verge-test/absent:v1", "imagePullPolicy": "Never"},
    ]});
    h.put(&pod("never", &uid, spec), "1")?;
    let s = h
        .status("never", |s| {
            container(s, "app")
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .is_some_and(|r| r == "ErrImageNeverPull")
        })
        .await?;
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let msg = "Container image \"verge-test/absent:v1\" is not present with pull policy of Never";
    h.event("never", "ErrImageNeverPull", msg).await?;
    h.event("never", "Failed", "Error: ErrImageNeverPull")
        .await?;
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_fills_an_empty_dir() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("init");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0,
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "fill", "image": TEST_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo from-init > /data/msg"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "containers": [{"name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "cat /data/msg && exec sleep 3600"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]});
    h.put(&pod("init", &uid, spec), "1")?;
    let s = h.status("init", |s| running(s, "main")).await?;
    let init = s
        .init_container_statuses
        .as_ref()
        .and_then(|i| i.first())
        .context("init status")?;
    let term = init
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .context("terminated")?;
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (0, Some("Completed"))
    );
    let id = container(&s, "main")
        .and_then(|c| c.container_id.clone())
        .context("id")?;
    let out = docker(&[
        "exec",
        id.trim_start_matches("docker://"),
        "cat",
        "/data/msg",
    ])?;
    assert_eq!(out, "from-init");
    assert_eq!(container(&s, "main").map(|c| c.restart_count), Some(0));
    h.restart().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_come_back_after_an_offline_restart() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("back");
    let _cleanup = Cleanup(uid.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]},
    ]});
    h.put(&pod("back", &uid, spec), "1")?;
    let before = h.status("back", |s| running(s, "app")).await?;
    h.restart().await?;
    // Containers survive edgecore stopping; then they are lost (e.g. a reboot).
    assert_eq!(docker_ids(&uid).len(), 2);
    for id in docker_ids(&uid) {
        docker(&["rm", "-f", &id])?;
    }
    h.start();
    let after = h.status("back", |s| running(s, "app")).await?;
    let id = |s: &PodStatus| container(s, "app").and_then(|c| c.container_id.clone());
    assert_ne!(id(&before), id(&after), "recreated from the store alone");
    h.restart().await
}
