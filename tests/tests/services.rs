//! Issue 32, Services on the edge node: a ClusterIP Service whose pods run on the edge node is
//! reached from another pod there by its cluster IP (named target port), every endpoint gets
//! requests, it works again from redb when edgecore restarts with the cloud gone and its
//! rules wiped, a NodePort answers on the node's address, and with no endpoint left a new
//! connection is refused at once; a Service whose endpoint the node does not reach directly
//! is reached through cloudhub (only ready endpoints are dialled). edgecore programs them with nftables from the Services and
//! EndpointSlices edgecontroller sends (verge_edge_net::services).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use verge_e2e::{
    Cloud, Edge, create_namespace, docker, main_container, sleeper_pod, wait_for, web_pod,
};
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{ServiceDial, TunnelFrame, tunnel_frame};

/// The node's Service rules, for failure messages.
fn rules(node: &str) -> String {
    let table = format!("verge-{}", verge_edgecore::net::podnet::bridge_name(node));
    std::process::Command::new("nft")
        .args(["list", "table", "ip", &table])
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_else(|e| e.to_string())
}

/// An HTTP/1.0 GET of `/` from container `id` to `addr`; the body or the error text.
fn fetch(id: &str, addr: &str) -> Result<String, String> {
    verge_e2e::http_get_in(id, addr)
}

/// An HTTP/1.0 GET of `/` from this host to `addr`; the body.
fn fetch_from_host(addr: &str) -> anyhow::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect_timeout(&addr.parse()?, Duration::from_secs(3))?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_owned())
}

#[tokio::test]
async fn cluster_ip_and_node_port_services_work_on_the_edge_node() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let mut cloud = Cloud::start(&cp).await?;
    let name = format!("e2e-svc-{}", std::process::id());
    let mut edge = Edge::new(&name, &cloud)?;
    edge.start()?;
    verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
    create_namespace(&client, &name).await?;
    let result = scenario(&client, &name, &mut cloud, &mut edge).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &name);
    let _ = pods
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n{}\n{}", cloud.logs(30), edge.logs(80)))
}

async fn scenario(
    client: &kube::Client,
    node: &str,
    cloud: &mut Cloud,
    edge: &mut Edge,
) -> anyhow::Result<()> {
    let ns = node;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    for p in ["web-a", "web-b"] {
        pods.create(&pp, &web_pod(ns, p, "web", node)?).await?;
    }
    pods.create(&pp, &sleeper_pod(ns, "client", node)?).await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "type": "NodePort", "selector": { "app": "web" },
            "ports": [{ "name": "web", "port": 80, "targetPort": "http" }] }
    }))?;
    let service = services.create(&pp, &service).await?;
    let spec = service.spec.context("spec")?;
    let cluster_ip = spec.cluster_ip.context("cluster IP")?;
    let node_port = spec
        .ports
        .and_then(|p| p.first().and_then(|p| p.node_port))
        .context("node port")?;
    let client_pod = verge_e2e::wait_running(&pods, "client", Duration::from_secs(60)).await?;
    let id = main_container(&client_pod.metadata.uid.clone().unwrap_or_default())?;

    // Both endpoints answer through the cluster IP (once the edge got the EndpointSlice).
    let url = format!("{cluster_ip}:80");
    let last = std::sync::Mutex::new(String::new());
    let seen = wait_for("both endpoints answer", Duration::from_secs(90), || async {
        let mut seen = BTreeSet::new();
        for _ in 0..20 {
            match fetch(&id, &url) {
                Ok(body) => {
                    seen.insert(body);
                }
                Err(e) => {
                    *last
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = e
                }
            }
        }
        Ok((seen.len() == 2).then_some(seen))
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e:#}; last error: {}\n{}",
            last.lock().map(|l| l.clone()).unwrap_or_default(),
            rules(node)
        )
    })?;
    ensure!(
        seen == BTreeSet::from(["web-a".to_owned(), "web-b".to_owned()]),
        "{seen:?}"
    );

    // Cluster DNS: the Service's name resolves to its cluster IP, from the node's resolver.
    let fqdn = format!("web.{ns}.svc.cluster.local");
    let resolved = docker(&["exec", &id, "nslookup", &fqdn]).map_err(|e| {
        anyhow::anyhow!(
            "nslookup {fqdn}: {e}\n{}",
            docker(&["exec", &id, "cat", "/etc/resolv.conf"]).unwrap_or_default()
        )
    })?;
    ensure!(resolved.contains(&cluster_ip), "{fqdn}: {resolved}");
    let conf = docker(&["exec", &id, "cat", "/etc/resolv.conf"])?;
    ensure!(
        conf.contains(&format!(
            "search {ns}.svc.cluster.local svc.cluster.local cluster.local"
        )) && conf.contains("options ndots:5"),
        "{conf}"
    );
    // A headless Service resolves to its pods' IPs; an ExternalName one to its CNAME.
    let headless: Service = serde_json::from_value(json!({
        "metadata": { "name": "web-pods" },
        "spec": { "clusterIP": "None", "selector": { "app": "web" },
            "ports": [{ "name": "web", "port": 80, "targetPort": "http" }] }
    }))?;
    services.create(&pp, &headless).await?;
    let external: Service = serde_json::from_value(json!({
        "metadata": { "name": "elsewhere" },
        "spec": { "type": "ExternalName", "externalName": "web.example.org" }
    }))?;
    services.create(&pp, &external).await?;
    let mut pod_ips = Vec::new();
    for p in ["web-a", "web-b"] {
        pod_ips.push(
            pods.get(p)
                .await?
                .status
                .and_then(|s| s.pod_ip)
                .context("pod IP")?,
        );
    }
    let headless_name = format!("web-pods.{ns}.svc.cluster.local");
    wait_for(
        "the headless Service resolves to both pods",
        Duration::from_secs(30),
        || async {
            let out = docker(&["exec", &id, "nslookup", &headless_name]).unwrap_or_default();
            Ok(pod_ips
                .iter()
                .all(|ip| out.contains(ip.as_str()))
                .then_some(()))
        },
    )
    .await?;
    let cname = wait_for(
        "the ExternalName Service resolves to its CNAME",
        Duration::from_secs(30),
        || async {
            // busybox nslookup prints the alias; the target itself is not resolvable offline.
            let out = match docker(&[
                "exec",
                &id,
                "nslookup",
                "-type=CNAME",
                &format!("elsewhere.{ns}.svc.cluster.local"),
            ]) {
                Ok(out) => out,
                Err(e) => e.to_string(),
            };
            Ok(out.contains("web.example.org").then_some(out))
        },
    )
    .await?;
    ensure!(cname.contains("canonical name"), "{cname}");

    // By short name (search domains) and by FQDN, as the pod's resolver finds them.
    for name in ["web:80".to_owned(), format!("{fqdn}:80")] {
        let body = fetch(&id, &name).map_err(|e| anyhow::anyhow!("GET {name}: {e}"))?;
        ensure!(body.starts_with("web-"), "GET {name}: {body}");
    }

    // Across the link: a Service whose only endpoint the node does not reach directly (here
    // a server of this test on the host, an endpoint of no node) is reached through
    // cloudhub; cloudhub refuses to dial what is not a ready endpoint of the Service named.
    let remote_url = across_the_link(client, ns, cloud, &id).await?;

    // Hairpin: a backend reaching its own Service gets answers, its own among them.
    let web_a = main_container(&pods.get("web-a").await?.metadata.uid.unwrap_or_default())?;
    let mut answers = BTreeSet::new();
    for _ in 0..20 {
        answers.insert(fetch(&web_a, &url).map_err(|e| anyhow::anyhow!("hairpin: {e}"))?);
    }
    ensure!(
        answers.contains("web-a"),
        "web-a never reached itself: {answers:?}"
    );

    // Offline, after a "reboot" of the node's rules: cloudhub is gone, edgecore is killed,
    // its table deleted (as a host reboot empties nftables) and the client pod's containers
    // removed; edgecore, started again with no cloud to talk to, programs the Service again
    // and re-creates the client from redb, with the same resolv.conf, and names resolve.
    cloud.cloudhub.kill9()?;
    edge.kill9()?;
    let client_uid = client_pod.metadata.uid.clone().unwrap_or_default();
    for container in verge_e2e::containers_with(&[("io.kubernetes.pod.uid", &client_uid)], true)? {
        docker(&["rm", "-f", &container])?;
    }
    let table = format!("verge-{}", verge_edgecore::net::podnet::bridge_name(node));
    let deleted = std::process::Command::new("nft")
        .args(["delete", "table", "ip", &table])
        .status()?;
    ensure!(deleted.success(), "nft delete table {table}");
    ensure!(
        fetch(&id, &url).is_err(),
        "the Service answered without rules"
    );
    edge.start()?;
    let id = wait_for(
        "the client pod re-created offline",
        Duration::from_secs(60),
        || async { Ok(main_container(&client_uid).ok()) },
    )
    .await?;
    let body = wait_for(
        "the Service answers offline",
        Duration::from_secs(30),
        || async { Ok(fetch(&id, &url).ok()) },
    )
    .await?;
    ensure!(body.starts_with("web-"), "{body}");
    let conf_again = docker(&["exec", &id, "cat", "/etc/resolv.conf"])?;
    ensure!(
        conf_again == conf,
        "resolv.conf changed:\n{conf}\n---\n{conf_again}"
    );
    let body = fetch(&id, "web:80").map_err(|e| anyhow::anyhow!("offline, GET web:80: {e}"))?;
    ensure!(body.starts_with("web-"), "{body}");
    // Offline, the Service whose endpoint is only reached through cloudhub refuses at once.
    match fetch(&id, &remote_url) {
        Err(e) if e.contains("refused") => {}
        other => bail!(
            "offline, the remote-only Service gave {other:?}\n{}",
            rules(node)
        ),
    }
    cloud.restart_cloudhub_hard().await?;
    verge_testkit::wait::wait_node_ready(client, node, Duration::from_secs(60)).await?;

    // The node port, on the node's address, from the node itself.
    let nodes: Api<Node> = Api::all(client.clone());
    let address = nodes
        .get(node)
        .await?
        .status
        .and_then(|s| s.addresses)
        .and_then(|a| a.into_iter().find(|a| a.type_ == "InternalIP"))
        .context("InternalIP")?
        .address;
    let node_url = format!("{address}:{node_port}");
    let body = wait_for("the node port answers", Duration::from_secs(30), || async {
        Ok(fetch_from_host(&node_url).ok().filter(|b| !b.is_empty()))
    })
    .await?;
    ensure!(body.starts_with("web-"), "{body}");

    // No endpoint left: refused at once, not a timeout.
    for p in ["web-a", "web-b"] {
        pods.delete(p, &DeleteParams::default().grace_period(0))
            .await?;
    }
    let refused = wait_for(
        "refused without endpoints",
        Duration::from_secs(60),
        || async {
            let started = Instant::now();
            match fetch(&id, &url) {
                Err(e) if e.contains("refused") => Ok(Some(started.elapsed())),
                _ => Ok(None),
            }
        },
    )
    .await?;
    if refused > Duration::from_secs(2) {
        bail!("the refusal took {refused:?}");
    }
    Ok(())
}

/// A Service `remote` without selector whose EndpointSlice names one ready endpoint of no
/// node: a TCP server of this test on the node's address. The client pod's container `id`
/// reaches it by cluster IP through cloudhub; a node asking cloudhub for another address, or
/// for this address under another Service, is refused. The Service's `ip:port`.
async fn across_the_link(
    client: &kube::Client,
    ns: &str,
    cloud: &Cloud,
    id: &str,
) -> anyhow::Result<String> {
    let host = verge_edgecore::edged::node::host::first_ipv4().context("the host's address")?;
    // A thread of its own: the test's runtime blocks in `docker exec`.
    let listener = std::net::TcpListener::bind((host, 0))?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        use std::io::Write as _;
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\n\r\ncloud-endpoint\n");
        }
    });
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "remote" },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": port }] }
    }))?;
    let cluster_ip = services
        .create(&pp, &service)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("cluster IP")?;
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "remote-1",
            "labels": { "kubernetes.io/service-name": "remote" } },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": port, "protocol": "TCP" }],
        "endpoints": [{ "addresses": [host.to_string()], "conditions": { "ready": true } }]
    }))?;
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(&pp, &slice)
        .await?;
    let url = format!("{cluster_ip}:80");
    let last = std::sync::Mutex::new(String::new());
    wait_for(
        "the remote endpoint answers through cloudhub",
        Duration::from_secs(60),
        || async {
            match fetch(id, &url) {
                Ok(body) if body == "cloud-endpoint" => Ok(Some(())),
                other => {
                    *last
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = format!("{other:?}");
                    Ok(None)
                }
            }
        },
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e:#}; last: {}",
            last.lock().map(|l| l.clone()).unwrap_or_default()
        )
    })?;

    // The node's own certificate, asking for what is not a ready endpoint: refused.
    let ca = verge_testkit::trust::verge_ca(client).await?;
    let config = verge_testkit::trust::node_client_config(&ca, ns)?;
    let endpoint = verge_proto::transport::endpoint(&cloud.edge_url)?;
    let channel = verge_proto::transport::connect_tls(endpoint, config, None).await?;
    let mut hub = EdgeHubClient::new(channel);
    let host = host.to_string();
    for (service, address, port) in [
        ("remote", "10.96.0.1", u32::from(port)),
        ("remote", host.as_str(), 22),
        ("web", host.as_str(), u32::from(port)),
    ] {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let dial = TunnelFrame {
            frame: Some(tunnel_frame::Frame::Dial(ServiceDial {
                namespace: ns.to_owned(),
                service: service.to_owned(),
                address: address.to_owned(),
                port,
            })),
        };
        tx.send(dial).await?;
        let code = match hub.dial(ReceiverStream::new(rx)).await {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        };
        ensure!(
            code == Code::PermissionDenied,
            "dial {address}:{port} of {service}: {code:?}"
        );
    }
    Ok(url)
}
