//! Issue 32's two-site kit: edge hosts that are really separate. Each edge runs in a network
//! namespace of its own with a Docker engine of its own (own data and exec roots, so its
//! own pods, pod network bridge and iptables), joined to the cloud by its veth link and to
//! the other edges of its site by a site segment (`verge_testkit::netns::SiteNet`). Two
//! edges of site 0 and one of site 1 (Node label `verge.io/site`) each run a pod: every pod
//! runs in its own edge's engine (none in the host's), the pod IPs are unique and inside each
//! Node's `spec.podCIDR`, a pod reaches a pod of another node of its site by IP (edgecore
//! routes to its site peers' pod CIDRs) and does not reach the other site's directly, and a
//! Service backed by pods of both sites answers from both, by cluster IP, short name and
//! FQDN (the other site's pod through cloudhub, relayed over its node's session); with the
//! link cut, the site's own endpoint answers every request by name; with edges 0 and 2 in one
//! NodeGroup and the Service annotated `range-nodegroup` (KubeEdge's service topology), p0 is
//! answered only by p2, its group's, not by its own site's p1. A process on an edge host
//! (as a host-network pod) reaches a pod of a site peer by IP, and a node port of a peer's
//! address answers with that peer's own pod (Docker's forwarding opened for the Service
//! proxy's marked connections).

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use verge_e2e::{
    Cloud, Edge, containers_with, create_namespace, sleeper_pod, via_host, wait_running, web_pod,
};
use verge_testkit::netns::{EdgeNetns, SiteNet};
use verge_testkit::netns_docker::NetnsDocker;

/// One edge host of the kit: its namespace, engine and edgecore.
struct SiteEdge {
    edge: Edge,
    /// Its site address, the Node's InternalIP.
    edge_address: Ipv4Addr,
    docker: NetnsDocker,
    netns: EdgeNetns,
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
    // Forwarding as on a host whose Docker turned IP forwarding on itself (and this host's):
    // policy DROP, so a pod is reached from outside only through what edgecore opens.
    let policy = netns
        .command(std::path::Path::new("iptables"))
        .args(["-w", "-P", "FORWARD", "DROP"])
        .status()?;
    ensure!(
        policy.success(),
        "iptables -P FORWARD DROP in {}",
        netns.name()
    );
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
        edge_address: address,
        docker,
        netns,
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
    for (e, site) in edges.iter().zip(["s0", "s0", "s1"]) {
        let label = serde_json::json!({ "metadata": { "labels": { "verge.io/site": site } } });
        nodes
            .patch(&e.edge.name, &PatchParams::default(), &Patch::Merge(&label))
            .await?;
    }
    create_namespace(client, ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (i, e) in edges.iter().enumerate() {
        let pod = match i {
            0 => sleeper_pod(ns, "p0", &e.edge.name)?,
            _ => web_pod(ns, &format!("p{i}"), "web", &e.edge.name)?,
        };
        pods.create(&PostParams::default(), &pod).await?;
    }
    let mut ips: Vec<Ipv4Addr> = Vec::new();
    let mut client_id = String::new();
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
        ensure!(!ips.contains(&ip), "p{i}: {ip} is another pod's too");
        ips.push(ip);
        let filters = [
            "--filter".to_owned(),
            format!("label=io.kubernetes.pod.uid={uid}"),
            "--filter".to_owned(),
            "label=io.kubernetes.container.name=main".to_owned(),
        ];
        let mut args = vec!["ps", "-q"];
        args.extend(filters.iter().map(String::as_str));
        let own = e.docker.docker(&args)?;
        ensure!(
            !own.trim().is_empty(),
            "p{i} does not run in its edge's engine"
        );
        if i == 0 {
            own.trim().clone_into(&mut client_id);
        }
        ensure!(
            containers_with(&[("io.kubernetes.pod.uid", &uid)], true)?.is_empty(),
            "p{i} has containers in the host's engine"
        );
    }
    // Site 0: p0 (edge 0) reaches p1 (edge 1) by its IP, once edge 0 routes to its peer.
    let get = |ip: Ipv4Addr| {
        let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 nc -w 3 {ip} 8080");
        edges[0]
            .docker
            .docker(&["exec", &client_id, "sh", "-c", &script])
    };
    let peer = ips[1];
    let body = verge_e2e::wait_for(
        "a pod reaches a pod of its site by IP",
        Duration::from_secs(60),
        || async { Ok(get(peer).ok().filter(|out| out.contains("p1"))) },
    )
    .await
    .with_context(|| format!("{}\n{:?}", edges[0].edge.logs(40), get(peer)))?;
    ensure!(body.contains("p1"), "{body}");
    // Site 1's pod is not reached directly (no route; only through cloudhub, by Service).
    ensure!(
        get(ips[2]).is_err(),
        "p0 reached site 1's pod {} directly",
        ips[2]
    );

    // Edge 0's own processes (its host-network pods) reach p1 too: edge 1 lets its site
    // peers' addresses through, not only their pod CIDRs.
    let from_host_of = |edge: usize, target: &str, port: u16| {
        let script = format!(
            "exec 3<>/dev/tcp/{target}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 \
             && timeout 5 cat <&3"
        );
        let out = edges[edge]
            .netns
            .command(std::path::Path::new("/bin/bash"))
            .args(["-c", &script])
            .output()?;
        anyhow::Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let from_host = |target: &str, port: u16| from_host_of(0, target, port);
    verge_e2e::wait_for(
        "an edge host reaches a pod of its site by IP",
        Duration::from_secs(60),
        || async {
            Ok(from_host(&peer.to_string(), 8080)?
                .contains("p1")
                .then_some(()))
        },
    )
    .await
    .with_context(|| {
        format!(
            "{}\n{:?}",
            edges[1].edge.logs(40),
            from_host(&peer.to_string(), 8080)
        )
    })?;

    // A Service backed by p1 (site 0) and p2 (site 1): from p0, by cluster IP and by name,
    // both answer: p1 directly, p2 through cloudhub and p2's node's session.
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" },
            "ports": [{ "name": "web", "port": 80, "targetPort": "http" }] }
    }))?;
    let cluster_ip = Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("cluster IP")?;
    let fetch = |target: &str| {
        let script = format!("printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 nc -w 3 {target} 80");
        edges[0]
            .docker
            .docker(&["exec", &client_id, "sh", "-c", &script])
    };
    for target in [
        cluster_ip.as_str(),
        "web",
        &format!("web.{ns}.svc.cluster.local"),
    ] {
        let seen = verge_e2e::wait_for(
            &format!("both sites' endpoints answer at {target}"),
            Duration::from_secs(60),
            || async {
                let mut seen = std::collections::BTreeSet::new();
                for _ in 0..16 {
                    if let Ok(out) = fetch(target) {
                        seen.extend(["p1", "p2"].into_iter().filter(|p| out.contains(*p)));
                    }
                }
                Ok((seen.len() == 2).then_some(seen))
            },
        )
        .await
        .with_context(|| format!("{}\n{:?}", edges[0].edge.logs(40), fetch(target)))?;
        ensure!(seen.len() == 2, "{seen:?}");
    }

    // The same Service as a node port, reached at edge 1's address from edge 0's host: edge 1
    // sends it to its own p1 (or through the tunnel to p2); p1 answers.
    let node_port = serde_json::json!({ "spec": { "type": "NodePort" } });
    let node_port = Api::<Service>::namespaced(client.clone(), ns)
        .patch("web", &PatchParams::default(), &Patch::Merge(&node_port))
        .await?
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p.first().and_then(|p| p.node_port))
        .context("node port")?;
    let edge1_address = nodes
        .get(&edges[1].edge.name)
        .await?
        .status
        .and_then(|s| s.addresses)
        .and_then(|a| a.into_iter().find(|a| a.type_ == "InternalIP"))
        .context("edge 1's InternalIP")?
        .address;
    let port = u16::try_from(node_port)?;
    // From edge `from`'s host to the node port at `edge`'s address: some answer is p1's.
    let p1_answers_node_port = |what: &'static str, from: usize, edge: usize, address: String| {
        let from_host_of = &from_host_of;
        async move {
            verge_e2e::wait_for(what, Duration::from_secs(60), || async {
                let answers: Vec<String> = (0..8)
                    .filter_map(|_| from_host_of(from, &address, port).ok())
                    .collect();
                Ok(answers.iter().any(|a| a.contains("p1")).then_some(()))
            })
            .await
            .with_context(|| {
                let last = from_host_of(from, &address, port);
                format!("{}\n{last:?}", edges[edge].edge.logs(40))
            })
        }
    };
    p1_answers_node_port(
        "a node port of a site peer answers from the peer's own pod",
        0,
        1,
        edge1_address,
    )
    .await?;
    // The other way round, at edge 0's address from edge 1's host: edge 0 has no endpoint of
    // its own and sends the connection on to p1 at its peer (or through the tunnel to p2),
    // masqueraded, and forwards the answer back.
    p1_answers_node_port(
        "a node port sends a connection on to a site peer's pod",
        1,
        0,
        edges[0].edge_address.to_string(),
    )
    .await?;

    // Edge 0's link to the cloud is cut: once its session is gone, the Service keeps working
    // by name from the site's own endpoint (p1), and every request is answered.
    edges[0].netns.cut()?;
    let name = format!("web.{ns}.svc.cluster.local");
    verge_e2e::wait_for(
        "offline, the site's own endpoint answers every request",
        Duration::from_secs(90),
        || async {
            let answers: Vec<String> = (0..8).filter_map(|_| fetch(&name).ok()).collect();
            Ok((answers.len() == 8 && answers.iter().all(|a| a.contains("p1"))).then_some(()))
        },
    )
    .await
    .with_context(|| format!("{}\n{:?}", edges[0].edge.logs(40), fetch(&name)))?;
    edges[0].netns.heal()?;

    // KubeEdge's service topology: edges 0 (site 0) and 2 (site 1) form a NodeGroup; with the
    // Service annotated range-nodegroup, p0 on edge 0 is answered only by p2 on its group's
    // edge 2 (through cloudhub, another site), never by p1 on its own site's edge 1.
    let group = serde_json::json!({ "metadata": { "labels": {
        "apps.kubeedge.io/belonging-to": format!("g-{}", std::process::id()) } } });
    for e in [&edges[0], &edges[2]] {
        nodes
            .patch(&e.edge.name, &PatchParams::default(), &Patch::Merge(&group))
            .await?;
    }
    let topology = serde_json::json!({ "metadata": { "annotations": {
        "apps.kubeedge.io/service-topology": "range-nodegroup" } } });
    Api::<Service>::namespaced(client.clone(), ns)
        .patch("web", &PatchParams::default(), &Patch::Merge(&topology))
        .await?;
    verge_e2e::wait_for(
        "a range-nodegroup Service answers only from the group's endpoint",
        Duration::from_secs(90),
        || async {
            let answers: Vec<String> = (0..8).filter_map(|_| fetch(&cluster_ip).ok()).collect();
            Ok((answers.len() == 8 && answers.iter().all(|a| a.contains("p2"))).then_some(()))
        },
    )
    .await
    .with_context(|| format!("{}\n{:?}", edges[0].edge.logs(40), fetch(&cluster_ip)))?;
    Ok(())
}
