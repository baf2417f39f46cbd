//! Issue 32's two-site kit: edge hosts that are really separate. Each edge runs in a network
//! namespace of its own with a Docker engine of its own (own data and exec roots, so its
//! own pods, pod network bridge and iptables), joined to the cloud by its veth link and to
//! the other edges of its site by a site segment (`verge_testkit::netns::SiteNet`). Two
//! edges of site 0 and one of site 1 each run a pod: every pod runs in its own edge's engine
//! (none in the host's), and the pod IPs are unique and inside each Node's `spec.podCIDR`.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use verge_e2e::{
    Cloud, Edge, containers_with, create_namespace, sleeper_pod, via_host, wait_running,
};
use verge_testkit::netns::{EdgeNetns, SiteNet};
use verge_testkit::netns_docker::NetnsDocker;

/// One edge host of the kit: its namespace, engine and edgecore.
struct SiteEdge {
    edge: Edge,
    docker: NetnsDocker,
    _netns: EdgeNetns,
}

async fn site_edge(
    cloud: &Cloud,
    site: &SiteNet,
    index: u8,
    host: u8,
    name: &str,
    dir: &std::path::Path,
) -> anyhow::Result<SiteEdge> {
    let netns = EdgeNetns::create(index)?;
    let address = site.join(&netns, host)?;
    let docker = NetnsDocker::start(&netns, &dir.join(name))?;
    docker.load_image(verge_testkit::docker::TEST_IMAGE)?;
    let endpoint = docker.endpoint();
    let mut edge = Edge::with_config(name, cloud, |c| {
        via_host(c, cloud, netns.host_addr());
        c.edged.node_ip = Some(address.into());
        c.edged.container_runtime_endpoint = Some(endpoint);
    })?;
    edge.start_in(&netns)?;
    Ok(SiteEdge {
        edge,
        docker,
        _netns: netns,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn edges_of_two_sites_run_pods_on_engines_of_their_own() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    verge_testkit::packages::ensure_debian_packages(&["iproute2", "nftables"])?;
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let dir = tempfile::tempdir()?;
    let id = std::process::id();
    let sites = [SiteNet::create(0)?, SiteNet::create(1)?];
    let mut edges = Vec::new();
    for (i, (site, host)) in [(0usize, 1u8), (0, 2), (1, 1)].into_iter().enumerate() {
        let name = format!("e2e-site{site}-{host}-{id}");
        let index = 30 + u8::try_from(i)?;
        edges.push(site_edge(&cloud, &sites[site], index, host, &name, dir.path()).await?);
    }
    let ns = format!("e2e-sites-{id}");
    let result = scenario(&client, &ns, &edges).await;
    let logs: String = edges
        .iter()
        .map(|e| {
            format!(
                "--- {} ---\n{}\n{}",
                e.edge.name,
                e.edge.logs(30),
                e.docker.log_tail()
            )
        })
        .collect();
    let nodes: Api<Node> = Api::all(client.clone());
    for e in &edges {
        let _ = nodes.delete(&e.edge.name, &DeleteParams::default()).await;
    }
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    drop(edges);
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{}\n{logs}", cloud.logs(20)))
}

async fn scenario(client: &kube::Client, ns: &str, edges: &[SiteEdge]) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for e in edges {
        verge_testkit::wait::wait_node_ready(client, &e.edge.name, Duration::from_secs(60))
            .await
            .with_context(|| e.edge.logs(40))?;
    }
    create_namespace(client, ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (i, e) in edges.iter().enumerate() {
        pods.create(
            &PostParams::default(),
            &sleeper_pod(ns, &format!("p{i}"), &e.edge.name)?,
        )
        .await?;
    }
    let mut ips = std::collections::BTreeSet::new();
    for (i, e) in edges.iter().enumerate() {
        let pod = wait_running(&pods, &format!("p{i}"), Duration::from_secs(90))
            .await
            .with_context(|| format!("{}\n{}", e.edge.logs(40), e.docker.log_tail()))?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ip: Ipv4Addr = pod
            .status
            .and_then(|s| s.pod_ip)
            .context("pod IP")?
            .parse()?;
        let cidr: Ipv4Net = nodes
            .get(&e.edge.name)
            .await?
            .spec
            .and_then(|s| s.pod_cidr)
            .context("spec.podCIDR")?
            .parse()?;
        ensure!(cidr.contains(&ip), "p{i}: {ip} is outside {cidr}");
        ensure!(ips.insert(ip), "p{i}: {ip} is another pod's too");
        let filter = format!("label=io.kubernetes.pod.uid={uid}");
        let own = e.docker.docker(&["ps", "-q", "--filter", &filter])?;
        ensure!(
            !own.trim().is_empty(),
            "p{i} does not run in its edge's engine"
        );
        ensure!(
            containers_with(&[("io.kubernetes.pod.uid", &uid)], true)?.is_empty(),
            "p{i} has containers in the host's engine"
        );
    }
    Ok(())
}
