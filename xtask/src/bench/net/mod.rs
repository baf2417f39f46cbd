//! `cargo xtask bench net`: edge networking (issue 32). On one local edge node (the release
//! build of cloudhub, edgecontroller and edgecore; the kit's control plane with its pod CIDR
//! allocator):
//! - request latency (p50/p99, a new connection per request) and bulk throughput from an edge
//!   pod to a Service whose endpoint is a pod on the same node, against the same requests to
//!   the pod's IP directly (the baseline), in the same run, interleaved;
//! - the same through cloudhub (`EdgeHub.Dial`) to a Service whose endpoint is a server of the
//!   bench on the host (the cloud side), against requests to that server directly;
//! - the time to plan, render and load the rules of 1,000 Services with 10 endpoints each
//!   ([`program`], in a network namespace of its own);
//! - edgecore's resident memory before and after the cluster gets 1,000 Services with
//!   10,000 endpoints (EndpointSlices of 10), which edgecontroller sends to the node.

mod client;
mod program;

use std::net::{SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::PostParams;

use super::Summary;
use super::record::{self, Target};
use crate::local;

/// Arguments of `cargo xtask bench net`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Measured requests per target (after 20 of warm-up).
    #[arg(long, default_value_t = 500)]
    pub requests: usize,
    /// Size of the bulk transfer, MiB.
    #[arg(long, default_value_t = 64)]
    pub mib: u64,
    /// Services of the programming and memory measurements.
    #[arg(long, default_value_t = 1000)]
    pub services: usize,
    /// Endpoints per Service.
    #[arg(long, default_value_t = 10)]
    pub endpoints: usize,
    /// Use the debug build instead of the release build.
    #[arg(long)]
    pub debug: bool,
}

const NAMESPACE: &str = "verge-bench-net";
const NODE: &str = "verge-bench-net";

/// Runs the benchmark.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    eprintln!(
        "bench net: [1/3] programming {} Services × {} endpoints",
        args.services, args.endpoints
    );
    let programmed = tokio::task::spawn_blocking({
        let (s, e) = (args.services, args.endpoints);
        move || program::measure(s, e, 5)
    })
    .await??;
    super::env::with_one_node("bench-net", NODE, !args.debug, false, async |cp, verge| {
        measure(cp, verge, &args, &programmed).await
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// A pod's first IP, once it is Running (and Ready, when `ready`).
async fn wait_pod_ip(pods: &Api<Pod>, name: &str) -> anyhow::Result<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = pods.get(name).await?.status.unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && let Some(ip) = status.pod_ip.clone() {
            let id = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .find_map(|c| c.container_id)
                .context("no container id")?;
            return Ok((ip, id.trim_start_matches("docker://").to_owned()));
        }
        if Instant::now() > deadline {
            bail!("pod {name} not Ready with an IP within 2 min");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn create_service(
    client: &kube::Client,
    name: &str,
    selector: Option<&str>,
    target: u16,
) -> anyhow::Result<String> {
    let mut spec =
        serde_json::json!({ "ports": [{ "name": "http", "port": 80, "targetPort": target }] });
    if let Some(app) = selector {
        spec["selector"] = serde_json::json!({ "app": app });
    }
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": NAMESPACE }, "spec": spec
    }))?;
    Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &service)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("cluster IP")
}

async fn measure(
    cp: &verge_testkit::ControlPlane,
    verge: &local::LocalVerge,
    args: &Args,
    programmed: &[program::Programmed],
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    local::create_namespace(&client, NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let big = args.mib * 1024 * 1024;
    let image = verge_testkit::docker::TEST_IMAGE;
    let server: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "server", "namespace": NAMESPACE, "labels": { "app": "server" } },
        "spec": { "nodeName": NODE, "containers": [{ "name": "main", "image": image,
            "imagePullPolicy": "Never", "command": ["sh", "-c", format!(
                "echo server > /tmp/index.html && head -c {big} /dev/zero > /tmp/big && exec httpd -f -p 8080 -h /tmp")],
            "readinessProbe": { "tcpSocket": { "port": 8080 }, "periodSeconds": 1 } }] }
    }))?;
    let sleeper: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "client", "namespace": NAMESPACE },
        "spec": { "nodeName": NODE, "containers": [{ "name": "main", "image": image,
            "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
    }))?;
    pods.create(&PostParams::default(), &server).await?;
    pods.create(&PostParams::default(), &sleeper).await?;
    let (server_ip, _) = wait_pod_ip(&pods, "server").await?;
    let (_, client_id) = wait_pod_ip(&pods, "client").await?;
    let pid: u32 = verge_testkit::docker::docker(&["inspect", "-f", "{{.State.Pid}}", &client_id])?
        .trim()
        .parse()?;
    // The cloud endpoint: a server of the bench on the host's address.
    let host: std::net::Ipv4Addr = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(NODE)
        .await?
        .status
        .and_then(|s| s.addresses)
        .and_then(|a| a.into_iter().find(|a| a.type_ == "InternalIP"))
        .context("the node's InternalIP")?
        .address
        .parse()?;
    let listener = std::net::TcpListener::bind((host, 0))?;
    let cloud_port = listener.local_addr()?.port();
    client::serve(listener, big);
    let local_ip = create_service(&client, "local", Some("server"), 8080).await?;
    let remote_ip = create_service(&client, "remote", None, cloud_port).await?;
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "remote-1", "namespace": NAMESPACE,
            "labels": { "kubernetes.io/service-name": "remote" } },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": cloud_port, "protocol": "TCP" }],
        "endpoints": [{ "addresses": [host.to_string()], "conditions": { "ready": true } }]
    }))?;
    Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &slice)
        .await?;
    let addr = |ip: &str, port: u16| -> anyhow::Result<SocketAddr> {
        Ok(SocketAddr::V4(SocketAddrV4::new(ip.parse()?, port)))
    };
    let targets = vec![
        addr(&server_ip, 8080)?,
        addr(&local_ip, 80)?,
        SocketAddr::V4(SocketAddrV4::new(host, cloud_port)),
        addr(&remote_ip, 80)?,
    ];
    eprintln!("bench net: [2/3] waiting for both Services to answer from the client pod");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe = tokio::task::spawn_blocking({
            let targets = targets.clone();
            move || client::measure_in(pid, targets, 0, 1, 0, 0)
        })
        .await?;
        match probe {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => bail!("the Services do not answer: {e:#}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    eprintln!(
        "bench net: {} requests to each of 4 targets, then {} MiB from each, 3 times",
        args.requests, args.mib
    );
    let measured = tokio::task::spawn_blocking({
        let (targets, requests) = (targets.clone(), args.requests);
        move || client::measure_in(pid, targets, 20, requests, 3, big)
    })
    .await??;

    eprintln!(
        "bench net: [3/3] edgecore memory with {} Services × {} endpoints",
        args.services, args.endpoints
    );
    let rss_before = local::settled_rss(verge.edgecore_pid).await?;
    let started = Instant::now();
    create_many(&client, args.services, args.endpoints).await?;
    let created = started.elapsed();
    let table = format!("verge-{}", bridge_of(NODE));
    let last_ip = Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .get(&format!("many-{}", args.services - 1))
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("cluster IP")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while !nft_has(&table, &last_ip) {
        if Instant::now() > deadline {
            bail!("the node's rules never got {last_ip}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let programmed_at = started.elapsed();
    let rss_after = local::settled_rss(verge.edgecore_pid).await?;
    report(
        args,
        programmed,
        &measured,
        (rss_before, rss_after),
        created,
        programmed_at,
    )
}

/// The node's pod network bridge (edgecore's naming).
fn bridge_of(node: &str) -> String {
    verge_edge_net::podnet::bridge_name(node)
}

/// Whether the node's nftables table maps `ip`.
fn nft_has(table: &str, ip: &str) -> bool {
    std::process::Command::new("nft")
        .args(["list", "map", "ip", table, "service-ips"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!("{ip} . tcp . 80")))
}

/// `services` selectorless Services with one EndpointSlice of `endpoints` endpoints each
/// (pod addresses of another node, 10.245.0.0/16), 16 requests in flight.
async fn create_many(
    client: &kube::Client,
    services: usize,
    endpoints: usize,
) -> anyhow::Result<()> {
    let (svcs, slices) = program::objects(services, endpoints, 0)?;
    let svc_api: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let slice_api: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let results: Vec<anyhow::Result<()>> =
        futures::stream::iter(svcs.into_iter().zip(slices).enumerate())
            .map(|(i, (mut svc, mut slice))| {
                let (svc_api, slice_api) = (svc_api.clone(), slice_api.clone());
                async move {
                    let name = format!("many-{i}");
                    svc.metadata.name = Some(name.clone());
                    svc.metadata.namespace = None;
                    if let Some(spec) = svc.spec.as_mut() {
                        spec.cluster_ip = None;
                    }
                    svc_api.create(&PostParams::default(), &svc).await?;
                    slice.metadata.name = Some(format!("{name}-1"));
                    slice.metadata.namespace = None;
                    slice.metadata.labels =
                        Some([("kubernetes.io/service-name".to_owned(), name)].into());
                    for e in slice.endpoints.iter_mut().flatten() {
                        e.node_name = None;
                        for a in &mut e.addresses {
                            *a = a.replacen("10.244.", "10.245.", 1);
                        }
                    }
                    slice_api.create(&PostParams::default(), &slice).await?;
                    Ok(())
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
    results.into_iter().collect()
}

fn report(
    args: &Args,
    programmed: &[program::Programmed],
    measured: &[client::Measured],
    (rss_before, rss_after): (u64, u64),
    created: Duration,
    programmed_at: Duration,
) -> anyhow::Result<()> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let s: Vec<Summary> = measured.iter().map(|m| Summary::of(&m.latencies)).collect();
    let p99 = |s: &Summary| {
        s.p99
            .map_or_else(|| "–".to_owned(), |d| format!("{:.2} ms", ms(d)))
    };
    let names = [
        "pod IP directly (baseline)",
        "Service, endpoint on the same node",
        "cloud endpoint directly (baseline)",
        "Service through cloudhub to the cloud endpoint",
    ];
    let mut rows =
        String::from("| path | n | p50 | p99 | bulk, best of 3 |\n|---|---|---|---|---|\n");
    for (i, name) in names.iter().enumerate() {
        rows.push_str(&format!(
            "| {name} | {} | {:.2} ms | {} | {:.0} MB/s |\n",
            s[i].n,
            ms(s[i].p50),
            p99(&s[i]),
            measured[i].mbps
        ));
    }
    let ratio = |a: usize, b: usize| s[a].p50.as_secs_f64() / s[b].p50.as_secs_f64();
    let worst = programmed
        .iter()
        .map(|p| p.plan + p.load)
        .max()
        .unwrap_or_default();
    let median_of = |v: &[&program::Programmed], f: fn(&program::Programmed) -> Duration| {
        let mut d: Vec<Duration> = v.iter().map(|p| f(p)).collect();
        d.sort();
        d.get(d.len() / 2).copied().unwrap_or_default()
    };
    let all: Vec<&program::Programmed> = programmed.iter().collect();
    let (plan_med, load_med) = (median_of(&all, |p| p.plan), median_of(&all, |p| p.load));
    let growth_mib = (rss_after.saturating_sub(rss_before)) as f64 / 1024.0;
    let targets = [
        Target {
            goal: "same-node Service p50 ≤ 1.1× the pod IP directly".into(),
            figure: format!("{:.2}× ({:.2} ms)", ratio(1, 0), ms(s[1].p50)),
            anchor: format!("pod IP: {:.2} ms (same run)", ms(s[0].p50)),
            met: ratio(1, 0) <= 1.1,
        },
        Target {
            goal: format!(
                "programming {} Services × {} endpoints ≤ 1 s",
                args.services, args.endpoints
            ),
            figure: format!("{:.0} ms worst of {} loads", ms(worst), programmed.len()),
            anchor: "–".into(),
            met: worst <= Duration::from_secs(1),
        },
        Target {
            goal: format!("edgecore ≤ +10 MiB at {} Services", args.services),
            figure: format!("+{growth_mib:.1} MiB"),
            anchor: format!("{:.1} MiB before (same run)", rss_before as f64 / 1024.0),
            met: growth_mib <= 10.0,
        },
    ];
    let body = format!(
        "One local edge node ({} build). Two pods on it: `server` (busybox `httpd`) and \
         `client`; the bench joins the client pod's network namespace and makes HTTP/1.0 \
         requests from there, a new TCP connection each ({} measured per path after 20 of \
         warm-up, interleaved path by path, each round starting at the next path), then \
         fetches {} MiB from each path 3 times. \
         The cloud endpoint is an HTTP server of the bench on the host's address, the only \
         endpoint of a selectorless Service; through the Service the connection goes to \
         edgecore's Service tunnel, over the node's gRPC session (TLS) to cloudhub, which \
         dials the server (all on this machine, so the link's latency is not in it). \
         Programming: plan, render and `nft -f` of {} Services × {} endpoints into a network \
         namespace, {} generations (the first creates the table, each later one replaces it). \
         Memory: edgecore's RSS settled before and after the cluster got {} more Services with \
         one EndpointSlice of {} endpoints each (created in {:.1} s; in the node's rules {:.1} s \
         after the first was created).\n\n{}\n{rows}\n\
         | ratio | p50 |\n|---|---|\n| Service, same node ÷ pod IP | {:.2}× |\n\
         | through cloudhub ÷ cloud endpoint directly | {:.2}× |\n\n\
         | programming | median | worst |\n|---|---|---|\n\
         | plan + render | {:.0} ms | |\n| `nft -f` load | {:.0} ms | |\n\
         | total | | {:.0} ms ({} KiB script) |\n\n\
         | edgecore RSS | MiB |\n|---|---|\n| before | {:.1} |\n| with {} Services × {} endpoints | {:.1} |\n",
        if args.debug { "debug" } else { "release" },
        args.requests,
        args.mib,
        args.services,
        args.endpoints,
        programmed.len(),
        args.services,
        args.endpoints,
        created.as_secs_f64(),
        programmed_at.as_secs_f64(),
        record::targets_table(&targets),
        ratio(1, 0),
        ratio(3, 2),
        ms(plan_med),
        ms(load_med),
        ms(worst),
        programmed.first().map_or(0, |p| p.bytes / 1024),
        rss_before as f64 / 1024.0,
        args.services,
        args.endpoints,
        rss_after as f64 / 1024.0,
    );
    println!("{body}");
    record::write("net", "net: Services and the link on the edge node", &body)
}
