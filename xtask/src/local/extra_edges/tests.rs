//! A site of three nodes on a control plane of its own (not the quickstart's): node 1 on the
//! host, nodes 2 and 3 in namespaces; a pod on each reaches the other two by pod IP, the API
//! server reaches each through `pods/proxy` and the three behind one Service through
//! `services/proxy`; then [`clean`] leaves nothing behind. Needs root, Docker, the kit's
//! control-plane build and the workspace's binaries (`cargo build --workspace --bins`):
//! `cargo test -p xtask -- --ignored three_nodes`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::PostParams;
use verge_testkit::ControlPlaneConfig;
use verge_testkit::wait::wait_for;

use super::*;
use crate::local;

const NAMESPACE: &str = "extra-edges-check";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "root, Docker, the kit's control plane and the workspace's binaries; minutes"]
async fn three_nodes_reach_each_other_and_the_api_server_reaches_their_pods() -> anyhow::Result<()>
{
    let run = verge_testkit::paths::run_dir().join("extra-edges-check");
    let dir = run.join("verge");
    std::fs::create_dir_all(&dir)?;
    let bin_dir = verge_testkit::process::workspace_bin("edgecore")?
        .parent()
        .context("no binaries' directory")?
        .to_owned();
    let config = ControlPlaneConfig {
        state_dir: run.join("control-plane"),
        front_bin_dir: Some(bin_dir.clone()),
        ..ControlPlaneConfig::from_env()
    };
    let cp = crate::control_plane::up(&config).await?;
    let names: Vec<String> = (1..=3).map(|k| format!("verge-nodes-{k}")).collect();
    let result = async {
        // The first pod CIDR (10.244.0.0/24) goes to a Node without a kubelet: a quickstart
        // cluster on this host may hold it in the host's engine already.
        placeholder_node(&cp).await?;
        let verge = local::start_with(&dir, &bin_dir, &cp, &names[0], &host_node_options()).await?;
        let extra = start(
            &dir,
            &bin_dir,
            &cp,
            &verge,
            &names[1..],
            &[verge_testkit::docker::TEST_IMAGE],
        )
        .await?;
        verge.wait_ready(&cp, Duration::from_secs(120)).await?;
        extra
            .wait_ready(&cp, &names[0], Duration::from_secs(120))
            .await?;
        scenario(&cp, &names).await
    }
    .await;
    let record = Record::load(&dir);
    let cleaned = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            local::stop_processes(&dir);
            local::remove_containers(&dir);
            clean(&dir)
        }
    })
    .await?;
    crate::control_plane::down(&config).await?;
    result?;
    ensure!(cleaned == 2, "{cleaned} namespaced nodes cleaned");
    nothing_left(&record.context("no record")?)
}

async fn placeholder_node(cp: &ControlPlane) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(cp.client().await?);
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "cidr-placeholder" },
        "spec": { "unschedulable": true }
    }))?;
    if nodes.get_opt("cidr-placeholder").await?.is_none() {
        nodes.create(&PostParams::default(), &node).await?;
    }
    wait_for(
        "the placeholder's pod CIDR",
        Duration::from_secs(30),
        || async {
            Ok(nodes
                .get_opt("cidr-placeholder")
                .await?
                .and_then(|n| n.spec?.pod_cidr))
        },
    )
    .await?;
    Ok(())
}

/// `kubectl args`; its stdout, or an error with its stderr.
fn kubectl(cp: &ControlPlane, args: &[&str]) -> anyhow::Result<String> {
    let out = cp.kubectl_command().args(args).output()?;
    ensure!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn scenario(cp: &ControlPlane, names: &[String]) -> anyhow::Result<()> {
    let client = cp.client().await?;
    verge_testkit::wait::create_namespace(&client, NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for (i, node) in names.iter().enumerate() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("web-{i}"), "labels": { "app": "web" } },
            "spec": { "nodeName": node, "terminationGracePeriodSeconds": 1,
                "containers": [{ "name": "main", "image": verge_testkit::docker::TEST_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c",
                        "echo $(hostname) > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"],
                    "ports": [{ "containerPort": 8080 }],
                    "readinessProbe": { "tcpSocket": { "port": 8080 }, "periodSeconds": 1 } }] }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let mut ips = Vec::new();
    for i in 0..names.len() {
        let name = format!("web-{i}");
        let ip = wait_for(
            &format!("{name} ready"),
            Duration::from_secs(90),
            || async {
                let pod = pods.get(&name).await?;
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                Ok(ready.then(|| pod.status.and_then(|s| s.pod_ip)).flatten())
            },
        )
        .await?;
        ips.push(ip);
    }
    // Pod to pod by IP across every pair of nodes (exec through the API server and cloudhub).
    for (i, from) in ips.iter().enumerate() {
        for (j, to) in ips.iter().enumerate().filter(|(j, _)| *j != i) {
            let script =
                format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 nc -w 3 {to} 8080");
            let out = kubectl(
                cp,
                &[
                    "exec",
                    "-n",
                    NAMESPACE,
                    &format!("web-{i}"),
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )?;
            ensure!(
                out.contains(&format!("web-{j}")),
                "web-{i} ({from}) to web-{j} ({to}): {out:?}"
            );
        }
    }
    // The API server to every pod (pods/proxy through the streams front and the host's routes).
    for i in 0..names.len() {
        let path = format!("/api/v1/namespaces/{NAMESPACE}/pods/web-{i}:8080/proxy/");
        let body = kubectl(cp, &["get", "--raw", &path])?;
        ensure!(body.contains(&format!("web-{i}")), "{path}: {body:?}");
    }
    // One Service over the three: services/proxy reaches each endpoint.
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "port": 80, "targetPort": 8080 }] }
    }))?;
    Api::<Service>::namespaced(client, NAMESPACE)
        .create(&PostParams::default(), &service)
        .await?;
    let path = format!("/api/v1/namespaces/{NAMESPACE}/services/web:80/proxy/");
    let seen = wait_for(
        "services/proxy reaches all three",
        Duration::from_secs(60),
        || {
            let path = path.clone();
            async move {
                let mut seen = BTreeSet::new();
                for _ in 0..30 {
                    if let Ok(body) = kubectl(cp, &["get", "--raw", &path]) {
                        seen.insert(body.trim().to_owned());
                    }
                }
                Ok((seen.len() == 3).then_some(seen))
            }
        },
    )
    .await?;
    eprintln!("services/proxy answered from {seen:?}");
    Ok(())
}

/// Nothing of `record` is left on the host: namespaces, links, routes, rules, processes.
fn nothing_left(record: &Record) -> anyhow::Result<()> {
    let run = |program: &str, args: &[&str]| -> anyhow::Result<String> {
        let out = Command::new(program).args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let namespaces = run("ip", &["netns", "list"])?;
    for edge in &record.edges {
        ensure!(!namespaces.contains(&edge.netns), "{} is left", edge.netns);
        ensure!(
            run("ip", &["link", "show", "dev", &edge.host_if])?.is_empty(),
            "{} is left",
            edge.host_if
        );
        ensure!(!edge.dir.exists(), "{} is left", edge.dir.display());
        let pid = edge.edgecore_pid.context("no edgecore pid")?;
        ensure!(!daemon::is_alive(pid, None), "edgecore {pid} runs");
    }
    let site = record.site.as_deref().context("no site")?;
    ensure!(!namespaces.contains(site), "{site} is left");
    ensure!(
        run("ip", &["link", "show", "dev", HOST_LINK])?.is_empty(),
        "{HOST_LINK} is left"
    );
    ensure!(record.pod_cidrs.len() == 3, "{:?}", record.pod_cidrs);
    let routes = run("ip", &["-4", "route"])?;
    let rules = run("iptables-save", &[])?;
    for cidr in &record.pod_cidrs[1..] {
        ensure!(!routes.contains(cidr.as_str()), "a route to {cidr} is left");
        ensure!(!rules.contains(cidr.as_str()), "a rule for {cidr} is left");
    }
    Ok(())
}
