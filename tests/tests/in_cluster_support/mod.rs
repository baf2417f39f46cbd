//! The Python example in-cluster client (`examples/python-incluster/client.py`, the
//! official Kubernetes Python client from Debian) in a pod of the edge node, driven with
//! `docker exec` like kubectl.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use verge_e2e::{docker, wait_for};

/// A pod on `node` that keeps running with the Python client in it (for `docker exec`).
pub fn python_pod(ns: &str, name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "main", "image": verge_testkit::python_kube::IMAGE,
                "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"] }] }
    }))?)
}

/// `client.py read --custom <the test's widget>` in container `id`: what it printed.
pub fn read(id: &str) -> anyhow::Result<String> {
    docker(&[
        "exec",
        id,
        "python3",
        "/app/client.py",
        "read",
        "--custom",
        "example.verge.io/v1/widgets/w1",
    ])
}

/// The Python client's reads must show the client pod, the `settings` ConfigMap and widget
/// `w1`'s spec.
pub fn check_read(id: &str, phase: &str) -> anyhow::Result<()> {
    let out = read(id)?;
    for expected in [
        "pod client",
        "configmap settings",
        r#"custom w1 {"size": 3}"#,
    ] {
        ensure!(
            out.lines().any(|l| l == expected),
            "{phase}, the Python client's reads lack {expected:?}:\n{out}"
        );
    }
    Ok(())
}

/// Starts `client.py watch-configmap settings` in the background in `id`, printing to
/// `/tmp/<log>.log`.
pub fn start_watch(id: &str, log: &str) -> anyhow::Result<()> {
    let script = format!("python3 /app/client.py watch-configmap settings > /tmp/{log}.log 2>&1");
    docker(&["exec", "-d", id, "sh", "-c", &script]).map(|_| ())
}

/// What the watch of `log` printed so far.
fn printed(id: &str, log: &str) -> String {
    docker(&["exec", id, "cat", &format!("/tmp/{log}.log")]).unwrap_or_default()
}

/// Waits until the watch of `log` printed a line containing `expected`.
pub async fn wait_for_output(id: &str, log: &str, expected: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("{expected:?} from the Python watch {log}"),
        Duration::from_secs(90),
        || async { Ok(printed(id, log).contains(expected).then_some(())) },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}; it printed:\n{}", printed(id, log)))
}

/// The watch of `log` listed exactly once (it resumed every other time).
pub fn listed_once(id: &str, log: &str) -> anyhow::Result<()> {
    let out = printed(id, log);
    let lists = out.lines().filter(|l| l.starts_with("list ")).count();
    ensure!(
        lists == 1,
        "the Python watch {log} listed {lists} times:\n{out}"
    );
    Ok(())
}
