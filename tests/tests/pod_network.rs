//! Issue 32, the pod network: an edge node's pods get addresses of its Node's `spec.podCIDR`
//! (kube-controller-manager's range allocator), on a Docker network of the node, and a pod
//! whose sandbox is made again with another address reports the new one in place of the old.
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
use verge_e2e::{Cloud, Edge, containers_with, create_namespace, docker, sleeper_pod, wait_for};

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

/// The sandbox container of pod `uid` and its address on network `network`.
fn sandbox(uid: &str, network: &str) -> anyhow::Result<(String, Ipv4Addr)> {
    let ids = containers_with(
        &[
            ("io.kubernetes.pod.uid", uid),
            ("io.kubernetes.container.name", "POD"),
        ],
        false,
    )?;
    let id = ids.first().context("no running sandbox")?.clone();
    let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
    let ip = docker(&["inspect", "-f", &format, &id])?;
    Ok((
        id,
        ip.trim()
            .parse()
            .with_context(|| format!("sandbox ip {ip:?}"))?,
    ))
}

#[tokio::test]
async fn pods_get_addresses_of_the_pod_cidr_and_a_new_sandbox_replaces_the_ip() -> anyhow::Result<()>
{
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
    let (old_sandbox, ip) = sandbox(&uid, &network)?;
    ensure!(ip == a, "the sandbox has {ip}, the status says {a}");

    // A reboot: edgecore is gone, the sandbox too, and its address is taken meanwhile, so the
    // sandbox made again gets another one.
    edge.kill9()?;
    docker(&["rm", "-f", &old_sandbox])?;
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
    let (_, ip) = sandbox(&uid, &network)?;
    ensure!(
        ip == moved,
        "the new sandbox has {ip}, the status says {moved}"
    );
    ensure!(cidr.contains(&moved), "{moved} not in {cidr}");
    drop(blocker);
    Ok(())
}
