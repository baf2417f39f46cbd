//! Programming time of the Service proxy: `services` Services with `endpoints` endpoints each,
//! planned (`verge_edge_net::services::model`), rendered (`nft`) and loaded by Debian's
//! `nft -f -` into a network namespace of the bench's own, as edgecore does at every change.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use verge_edge_net::catalog;
use verge_edge_net::services::model::{self, NodeContext};
use verge_edge_net::services::nft::{self, Scope};

/// One measurement: plan + render, and the load of the script.
#[derive(Debug, Clone, Copy)]
pub struct Programmed {
    /// Planning and rendering in edgecore's code.
    pub plan: Duration,
    /// `nft -f -` loading the script (one transaction replacing the table).
    pub load: Duration,
    /// The script's size, bytes.
    pub bytes: usize,
}

/// Removes the namespace when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The cluster IP of Service `i`.
fn cluster_ip(i: usize) -> Ipv4Addr {
    let i = u32::try_from(i).unwrap_or(u32::MAX);
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 16, 0)) + i)
}

/// `services` Services and their EndpointSlices of `endpoints` endpoints each, all on
/// pod CIDRs the node reaches directly (10.244.0.0/16); `generation` shifts the endpoints,
/// so each generation's script differs from the last.
pub fn objects(
    services: usize,
    endpoints: usize,
    generation: u32,
) -> anyhow::Result<(Vec<Service>, Vec<EndpointSlice>)> {
    let (mut svcs, mut slices) = (Vec::new(), Vec::new());
    for i in 0..services {
        let name = format!("svc-{i}");
        svcs.push(serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "bench" },
            "spec": { "clusterIP": cluster_ip(i).to_string(),
                "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] }
        }))?);
        let eps: Vec<serde_json::Value> = (0..endpoints)
            .map(|j| {
                let n = u32::try_from(i * endpoints + j).unwrap_or(0) + generation;
                let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 2)) + n);
                serde_json::json!({ "addresses": [ip.to_string()], "nodeName": "bench",
                    "conditions": { "ready": true } })
            })
            .collect();
        slices.push(serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("{name}-1"), "namespace": "bench",
                "labels": { model::SERVICE_NAME_LABEL: name } },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
            "endpoints": eps
        }))?);
    }
    Ok((svcs, slices))
}

/// Plans, renders and loads `runs` generations of `services` × `endpoints` into a fresh
/// network namespace; one [`Programmed`] per run (the first creates the table, the others
/// replace it).
///
/// # Errors
/// `ip netns` or `nft` failing.
pub fn measure(services: usize, endpoints: usize, runs: u32) -> anyhow::Result<Vec<Programmed>> {
    verge_testkit::packages::ensure_debian_packages(&["nftables", "iproute2"])?;
    let ns = Netns(format!("verge-bench-nft-{}", std::process::id()));
    let status = Command::new("ip").args(["netns", "add", &ns.0]).status()?;
    ensure!(status.success(), "ip netns add {}", ns.0);
    let ctx = NodeContext {
        node: "bench".into(),
        node_ip: Some(Ipv4Addr::new(192, 0, 2, 10)),
        zone: None,
        group: None,
        direct: vec!["10.244.0.0/16".parse()?],
    };
    let scope = Scope {
        table: "verge-vgbench".into(),
        bridge: Some("vgbench".into()),
        node_ip: ctx.node_ip,
        tunnel: None,
    };
    let mut out = Vec::new();
    for generation in 0..runs {
        let (svcs, slices) = objects(services, endpoints, generation)?;
        // As edgecore holds them: parsed from their JSON into the catalog's trimmed types.
        let svcs: Vec<catalog::Service> = svcs
            .iter()
            .map(|s| Ok(serde_json::from_value(serde_json::to_value(s)?)?))
            .collect::<anyhow::Result<_>>()?;
        let slices: Vec<catalog::EndpointSlice> = slices
            .iter()
            .map(|s| Ok(serde_json::from_value(serde_json::to_value(s)?)?))
            .collect::<anyhow::Result<_>>()?;
        let started = Instant::now();
        let ports = model::plan(&svcs, &slices, &ctx);
        let script = nft::render(&scope, &ports);
        let plan = started.elapsed();
        let started = Instant::now();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.0, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(script.as_bytes())?;
        let output = child.wait_with_output()?;
        let load = started.elapsed();
        ensure!(
            output.status.success(),
            "nft -f: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        out.push(Programmed {
            plan,
            load,
            bytes: script.len(),
        });
    }
    Ok(out)
}
