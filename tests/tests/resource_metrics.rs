//! `kubectl top` and autoscaling with edge pods (issue 34): metrics-server of the pinned
//! release, deployed from its own manifests on the kit's kubelet node, scrapes every node
//! through cloudhub (`HTTPS_PROXY` = the streams front, the cluster CA, a client certificate
//! of its own; no `--kubelet-insecure-tls`), reaching edges on either of two cloudhub
//! replicas by their stream addresses. Checked: `kubectl top node` and `kubectl top pod`
//! against `docker stats` for a pod burning a known amount of CPU and holding a known amount
//! of memory, an `autoscaling/v2` HPA scaling an edge Deployment from 1 to 3 replicas and
//! back, and an edge that goes offline dropping out of the metrics while the other stays.
//!
//! It needs the kit's kubelet node, so it runs with the deployment tests, after the others
//! (`as_workloads` in its name: `cargo xtask test`'s second phase).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use verge_e2e::{Cloud, Edge, containers_with, create_namespace, docker, wait_for};
use verge_testkit::{ControlPlane, KubeletNodeConfig};

/// The burner's CPU limit (millicores): it spins, so it uses this much.
const BURN_MILLIS: u64 = 200;
/// What the burner holds in `/dev/shm` (charged to its memory cgroup), MiB.
const HOLD_MIB: u64 = 48;

#[tokio::test]
async fn kubectl_top_and_hpa_with_metrics_server_as_workloads() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let node = KubeletNodeConfig::from_env().up(&cp).await?;
    let cloud = Cloud::start_replicas(&cp, 2).await?;
    let hub1 = cloud.second_replica()?;
    let pid = std::process::id();
    let ns = format!("e2e-top-{pid}");
    let mut edges = Vec::new();
    for (i, name) in [format!("e2e-top-a-{pid}"), format!("e2e-top-b-{pid}")]
        .into_iter()
        .enumerate()
    {
        let mut edge = Edge::with_config(&name, &cloud, |c| {
            if i == 1 {
                hub1.serve(c);
            }
        })?;
        edge.start()?;
        edges.push(edge);
    }
    let result = async {
        for edge in &edges {
            verge_testkit::wait::wait_node_ready(&client, &edge.name, Duration::from_secs(30))
                .await?;
        }
        create_namespace(&client, &ns).await?;
        verge_testkit::metrics_server::deploy(&cp, &node).await?;
        top_scenario(&cp, &ns, &edges).await?;
        hpa_scenario(&cp, &ns, &edges[1]).await?;
        offline_scenario(&cp, &mut edges).await
    }
    .await;
    if result.is_err() {
        let logs = cp
            .kubectl_command()
            .args([
                "-n",
                "kube-system",
                "logs",
                "deploy/metrics-server",
                "--tail=40",
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        eprintln!(
            "{}\n--- edge a ---\n{}\n--- edge b ---\n{}\n--- metrics-server ---\n{logs}",
            cloud.logs(30),
            edges[0].logs(30),
            edges[1].logs(30)
        );
    }
    let namespaces: Api<Namespace> = Api::all(client);
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    for id in containers_with(&[("io.kubernetes.pod.namespace", &ns)], true).unwrap_or_default() {
        let _ = docker(&["rm", "-f", &id]);
    }
    let _ = verge_testkit::metrics_server::remove(&cp).await;
    node.stop().await?;
    result
}

/// `kubectl <args>`: stdout, or an error with stderr.
fn kubectl(cp: &ControlPlane, args: &[&str]) -> anyhow::Result<String> {
    let out = cp.kubectl_command().args(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `123m` → 123 millicores, `1` → 1000; `45Mi` → bytes.
fn quantity(text: &str) -> Option<f64> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, ""), |i| text.split_at(i));
    let value: f64 = number.parse().ok()?;
    let factor = match unit {
        "" => 1.0,
        "m" => 1e-3,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(value * factor)
}

/// The burner on edge a: `kubectl top pod` within 10 % of `docker stats` for its container;
/// `kubectl top node` lists both edges (one on each replica).
async fn top_scenario(cp: &ControlPlane, ns: &str, edges: &[Edge]) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(cp.client().await?, ns);
    let script = format!("head -c {HOLD_MIB}m /dev/zero > /dev/shm/held; while :; do :; done");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "burner", "namespace": ns},
        "spec": {"nodeName": edges[0].name, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "burn", "image": verge_testkit::docker::TEST_IMAGE,
                                 "imagePullPolicy": "Never", "command": ["sh", "-c", script],
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                               "limits": {"cpu": format!("{BURN_MILLIS}m"),
                                                          "memory": "128Mi"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    verge_e2e::wait_running(&pods, "burner", Duration::from_secs(60)).await?;

    let nodes = wait_for(
        "kubectl top node lists both edges",
        Duration::from_secs(90),
        || async {
            let out = kubectl(cp, &["top", "node", "--no-headers"]).unwrap_or_default();
            Ok(edges
                .iter()
                .all(|e| {
                    out.lines()
                        .any(|l| l.starts_with(&e.name) && !l.contains("<unknown>"))
                })
                .then_some(out))
        },
    )
    .await?;
    eprintln!("kubectl top node:\n{nodes}");

    // `kubectl top pod`: NAME CPU(cores) MEMORY(bytes), over metrics-server's last window.
    let (cpu, memory) = wait_for(
        "kubectl top pod burner",
        Duration::from_secs(90),
        || async {
            let out = kubectl(cp, &["-n", ns, "top", "pod", "burner", "--no-headers"])
                .unwrap_or_default();
            let fields: Vec<&str> = out.split_whitespace().collect();
            Ok(match fields.as_slice() {
                ["burner", cpu, memory] => quantity(cpu).zip(quantity(memory)),
                _ => None,
            }
            .filter(|(cpu, _)| *cpu > 0.05))
        },
    )
    .await?;
    // `docker stats` of the container: CPU % of one core and usage minus inactive file.
    let id = containers_with(
        &[
            ("io.kubernetes.pod.namespace", ns),
            ("io.kubernetes.container.name", "burn"),
        ],
        false,
    )?
    .into_iter()
    .next()
    .ok_or_else(|| anyhow::anyhow!("no burner container"))?;
    let stats = docker(&[
        "stats",
        "--no-stream",
        "--format",
        "{{.CPUPerc}} {{.MemUsage}}",
        &id,
    ])?;
    let mut fields = stats.split_whitespace();
    let docker_cpu = fields
        .next()
        .and_then(|p| p.trim_end_matches('%').parse::<f64>().ok())
        .map(|percent| percent / 100.0)
        .ok_or_else(|| anyhow::anyhow!("docker stats CPU: {stats}"))?;
    let docker_memory = fields
        .next()
        .and_then(|m| {
            let unit = m.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
            let value: f64 = m[..m.len() - unit.len()].parse().ok()?;
            Some(
                value
                    * match unit {
                        "KiB" => 1024.0,
                        "MiB" => 1024.0 * 1024.0,
                        "GiB" => 1024.0 * 1024.0 * 1024.0,
                        _ => 1.0,
                    },
            )
        })
        .ok_or_else(|| anyhow::anyhow!("docker stats memory: {stats}"))?;
    eprintln!(
        "burner: kubectl top {:.0}m {:.1} MiB, docker stats {:.0}m {:.1} MiB",
        cpu * 1000.0,
        memory / 1048576.0,
        docker_cpu * 1000.0,
        docker_memory / 1048576.0
    );
    let within = |a: f64, b: f64| (a - b).abs() <= 0.1 * b;
    anyhow::ensure!(
        within(cpu, docker_cpu),
        "CPU {cpu} vs docker stats {docker_cpu}"
    );
    anyhow::ensure!(
        within(memory, docker_memory),
        "memory {memory} vs docker stats {docker_memory}"
    );
    // And against what was set up: the CPU limit, and at least the bytes held.
    anyhow::ensure!(
        within(cpu, BURN_MILLIS as f64 / 1000.0),
        "CPU {cpu} vs the limit"
    );
    anyhow::ensure!(
        memory >= (HOLD_MIB << 20) as f64,
        "memory {memory} below what is held"
    );
    pods.delete("burner", &DeleteParams::default()).await?;
    Ok(())
}

/// An HPA on CPU utilisation scales a Deployment on edge b from 1 to 3 replicas while its
/// first pod spins, and back to 1 once it stops.
async fn hpa_scenario(cp: &ControlPlane, ns: &str, edge: &Edge) -> anyhow::Result<()> {
    let manifest = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web", "namespace": ns},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"nodeName": edge.name, "terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "web", "image": verge_testkit::docker::TEST_IMAGE,
                        "imagePullPolicy": "Never",
                        // Spins while /tmp/load exists.
                        "command": ["sh", "-c",
                          "while :; do if [ -f /tmp/load ]; then :; else sleep 1; fi; done"],
                        "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "150m"}}}]}}}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": "web", "namespace": ns},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                  "minReplicas": 1, "maxReplicas": 3,
                  "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}}],
                  "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0},
                    "scaleDown": {"stabilizationWindowSeconds": 0,
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}}}
    ]});
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), manifest.to_string())?;
    kubectl(cp, &["apply", "-f", &file.path().display().to_string()])?;
    let pods: Api<Pod> = Api::namespaced(cp.client().await?, ns);
    let running = |want: usize| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("app=web")).await?;
            let names: Vec<String> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            anyhow::Ok((names.len() == want).then_some(names))
        }
    };
    let first = wait_for("one web pod", Duration::from_secs(60), || running(1)).await?;
    // The first pod's readings must reach the HPA before it can scale.
    wait_for(
        "HPA reads the pods' CPU",
        Duration::from_secs(120),
        || async {
            let out = kubectl(
                cp,
                &[
                    "-n",
                    ns,
                    "get",
                    "hpa",
                    "web",
                    "-o",
                    "jsonpath={.status.currentMetrics[0].resource.current.averageUtilization}",
                ],
            )?;
            Ok((!out.trim().is_empty()).then_some(()))
        },
    )
    .await?;
    kubectl(
        cp,
        &["-n", ns, "exec", &first[0], "--", "touch", "/tmp/load"],
    )?;
    let scaled = wait_for("the HPA scales web to 3", Duration::from_secs(180), || {
        running(3)
    })
    .await?;
    eprintln!("HPA scaled up: {scaled:?}");
    kubectl(cp, &["-n", ns, "exec", &first[0], "--", "rm", "/tmp/load"])?;
    wait_for(
        "the HPA scales web back to 1",
        Duration::from_secs(180),
        || running(1),
    )
    .await?;
    let status = kubectl(cp, &["-n", ns, "describe", "hpa", "web"])?;
    eprintln!("{status}");
    Ok(())
}

/// Edge b goes offline: metrics-server drops it (as an unreachable kubelet) and keeps
/// serving edge a.
async fn offline_scenario(cp: &ControlPlane, edges: &mut [Edge]) -> anyhow::Result<()> {
    edges[1].kill9()?;
    let (a, b) = (edges[0].name.clone(), edges[1].name.clone());
    wait_for(
        "the offline edge drops out of kubectl top",
        Duration::from_secs(90),
        || async {
            let out = kubectl(cp, &["top", "node", "--no-headers"]).unwrap_or_default();
            let serves = |n: &str| {
                out.lines()
                    .any(|l| l.starts_with(n) && !l.contains("<unknown>"))
            };
            Ok((serves(&a) && !serves(&b)).then_some(()))
        },
    )
    .await?;
    Ok(())
}
