//! Issue 32, the pod network: an edge node's pods get addresses of its Node's `spec.podCIDR`
//! (kube-controller-manager's range allocator), on a Docker network of the node, and a pod
//! that must take another address reports the new one in place of the old.
//!
//! Issue 37: a pod of one container runs without a sandbox, its container holding the pod's
//! network and its address, which edged hands out: the address outlives the container (a
//! restart keeps it), and one taken by a stranger while the node was down is given up for
//! another. A pod of two containers has a sandbox, at an address handed out the same way.
//!
//! Before the fix, edgecontroller merged the new IP into `status.podIPs` beside the old one,
//! which the API server refused (`may specify no more than one IP for each IP family`), so
//! the pod showed its old IP for good.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use verge_e2e::{Cloud, Edge, create_namespace, docker, sleeper_pod, wait_for};

/// A container holding an address of the pod network; removed on drop.
struct Blocker(String);

impl Drop for Blocker {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

/// The pod's IP, once Running.
async fn running_ip(pods: &Api<Pod>, name: &str) -> anyhow::Result<Ipv4Addr> {
    let pod = verge_e2e::wait_running(pods, name, Duration::from_secs(60)).await?;
    let status = pod.status.unwrap_or_default();
    let ips: Vec<_> = status.pod_ips.unwrap_or_default();
    ensure!(ips.len() == 1, "{name}: podIPs {ips:?}");
    Ok(status.pod_ip.context("no podIP")?.parse()?)
}

/// The running container holding pod `uid`'s network (its sandbox, or its one container when
/// it has none), whether it is the sandbox, and its address on network `network`.
fn holder(uid: &str, network: &str) -> anyhow::Result<(String, bool, Ipv4Addr)> {
    let uid_filter = format!("label=io.kubernetes.pod.uid={uid}");
    let ids = docker(&[
        "ps",
        "-q",
        "--filter",
        &uid_filter,
        "--filter",
        "label=io.verge.pod-ip",
    ])?;
    let id = ids
        .lines()
        .next()
        .context("no running container holds the pod's network")?;
    let format = format!(
        "{{{{index .Config.Labels \"io.kubernetes.container.name\"}}}} \
         {{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"
    );
    let out = docker(&["inspect", "-f", &format, id])?;
    let (container, ip) = out.trim().split_once(' ').context("inspect output")?;
    let ip = ip.parse().with_context(|| format!("holder ip {ip:?}"))?;
    Ok((id.to_owned(), container == "POD", ip))
}

#[tokio::test]
async fn pods_get_addresses_of_the_pod_cidr_kept_across_restarts_and_replaced_when_taken()
-> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-podnet-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
    create_namespace(&client, &name).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &name);
    let result = scenario(&client, &pods, &mut edge).await;
    let _ = pods
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{}\n{}", cloud.logs(30), edge.logs(60)))
}

async fn scenario(client: &kube::Client, pods: &Api<Pod>, edge: &mut Edge) -> anyhow::Result<()> {
    let node = edge.name.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let cidr: Ipv4Net = nodes
        .get(&node)
        .await?
        .spec
        .and_then(|s| s.pod_cidr)
        .context("the Node has no spec.podCIDR (kube-controller-manager --allocate-node-cidrs)")?
        .parse()?;
    let network = format!("verge-pods-{node}");
    for p in ["a", "b"] {
        pods.create(&PostParams::default(), &sleeper_pod(&edge.name, p, &node)?)
            .await?;
    }
    let (a, b) = (running_ip(pods, "a").await?, running_ip(pods, "b").await?);
    ensure!(
        cidr.contains(&a) && cidr.contains(&b),
        "{a} {b} not in {cidr}"
    );
    ensure!(a != b, "two pods with one IP {a}");
    let uid = pods.get("a").await?.metadata.uid.unwrap_or_default();
    let (old_holder, is_sandbox, ip) = holder(&uid, &network)?;
    ensure!(!is_sandbox, "a pod of one container has a sandbox");
    ensure!(ip == a, "its container has {ip}, the status says {a}");

    // A container restart keeps the pod's address: the new container is created with it.
    let uid_b = pods.get("b").await?.metadata.uid.unwrap_or_default();
    let (b_holder, _, _) = holder(&uid_b, &network)?;
    docker(&["kill", &b_holder])?;
    wait_for("pod b restarted", Duration::from_secs(60), || async {
        let status = pods.get_status("b").await?.status.unwrap_or_default();
        let restarts = status
            .container_statuses
            .iter()
            .flatten()
            .map(|c| c.restart_count)
            .sum::<i32>();
        Ok((restarts >= 1 && status.phase.as_deref() == Some("Running")).then_some(()))
    })
    .await?;
    let (new_holder, _, ip) = wait_for("b's new container", Duration::from_secs(30), || async {
        Ok(holder(&uid_b, &network)
            .ok()
            .filter(|(id, _, _)| *id != b_holder))
    })
    .await?;
    ensure!(
        new_holder != b_holder && ip == b,
        "b's new container has {ip}, not {b}"
    );
    ensure!(
        running_ip(pods, "b").await? == b,
        "b's status moved off {b}"
    );

    // A pod of two containers has a sandbox, at an address of the pod CIDR.
    let mut two = sleeper_pod(&edge.name, "c", &node)?;
    if let Some(spec) = two.spec.as_mut() {
        let mut side = spec.containers[0].clone();
        side.name = "side".into();
        spec.containers.push(side);
    }
    pods.create(&PostParams::default(), &two).await?;
    let c = running_ip(pods, "c").await?;
    let uid_c = pods.get("c").await?.metadata.uid.unwrap_or_default();
    let (_, is_sandbox, ip) = holder(&uid_c, &network)?;
    ensure!(
        is_sandbox && ip == c && cidr.contains(&c),
        "c: sandbox {is_sandbox}, {ip}, {c}"
    );
    ensure!(c != a && c != b, "c has a or b's address {c}");

    // A reboot: edgecore is gone, the pod's container too, and its address is taken
    // meanwhile by a stranger, so the container made again gets another one.
    edge.kill9()?;
    docker(&["rm", "-f", &old_holder])?;
    let blocker = Blocker(format!("podnet-blocker-{node}"));
    docker(&[
        "run",
        "-d",
        "--name",
        &blocker.0,
        "--network",
        &network,
        "--ip",
        &a.to_string(),
        verge_testkit::docker::TEST_IMAGE,
        "sleep",
        "600",
    ])?;
    edge.start()?;
    let moved = wait_for(
        "pod a reports its new IP",
        Duration::from_secs(60),
        || async {
            let status = pods.get_status("a").await?.status.unwrap_or_default();
            let ips: Vec<_> = status.pod_ips.unwrap_or_default();
            let ip = status.pod_ip.and_then(|ip| ip.parse::<Ipv4Addr>().ok());
            Ok(ip.filter(|ip| {
                *ip != a && ips.len() == 1 && status.phase.as_deref() == Some("Running")
            }))
        },
    )
    .await?;
    let (_, _, ip) = holder(&uid, &network)?;
    ensure!(
        ip == moved,
        "the new container has {ip}, the status says {moved}"
    );
    ensure!(cidr.contains(&moved), "{moved} not in {cidr}");
    drop(blocker);
    Ok(())
}
