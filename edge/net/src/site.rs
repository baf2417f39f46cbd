//! Routing between the pod networks of one site: the edge nodes that reach each other
//! directly (Node label `verge.io/site`; edgecontroller sends each node a trimmed Node of every
//! other node of its site, with its pod CIDR and InternalIP). For each such peer this node
//! holds a route to its pod CIDR via its address, so pods reach pods of the site by their IPs,
//! with their own source addresses (as the Kubernetes network model asks).
//!
//! Routes are iproute2's (`ip route replace <cidr> via <address> proto 220`; the protocol
//! number marks ours, so a peer that left is found and removed). Docker's own firewall is
//! opened with iptables rules marked `verge-site`: `DOCKER-USER` accepts new connections to
//! this node's pod CIDR from a peer's pod CIDR and from a peer's own address (its
//! host-network pods and processes), and, as kube-proxy's `KUBE-FORWARD` does, connections
//! the Service proxy marked for masquerading (a node port reached from another machine,
//! DNATed to a pod here or at a peer) and packets of connections already let through, since
//! Docker forwards only its published ports otherwise; `POSTROUTING` returns before Docker's masquerade for traffic to a peer's pod
//! CIDR.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Node;
use tracing::{debug, info, warn};

/// The route protocol number marking this node's site routes.
pub const ROUTE_PROTO: &str = "220";

/// The iptables comment marking this node's site rules.
pub const RULE_COMMENT: &str = "verge-site";

/// Another node of this node's site.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Peer {
    /// Its node name.
    pub name: String,
    /// Its pod CIDR.
    pub pod_cidr: Ipv4Net,
    /// Its InternalIP.
    pub address: Ipv4Addr,
}

pub use verge_core::well_known::SITE_LABEL;

/// `node`'s label `key`, when set and not empty.
pub(crate) fn label(node: &Node, key: &str) -> Option<String> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

/// The site peers among `nodes` (the stored Nodes): every Node other than `own` with `own`'s
/// site label, a pod CIDR and an InternalIP, sorted by name. edgecontroller also sends the
/// nodes of this node's NodeGroup, which may be at other sites: those are not routed to.
/// None when `own` is not stored or has no site.
pub fn peers(nodes: &[Node], own: &str) -> Vec<Peer> {
    let site = |n: &Node| label(n, SITE_LABEL);
    let Some(own_site) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(own))
        .and_then(site)
    else {
        return Vec::new();
    };
    let mut out: Vec<Peer> = nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(own))
        .filter(|n| site(n).as_deref() == Some(own_site.as_str()))
        .filter_map(|n| {
            let pod_cidr = n.spec.as_ref()?.pod_cidr.as_deref()?.parse().ok()?;
            let address = n
                .status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .find(|a| a.type_ == "InternalIP")?
                .address
                .parse()
                .ok()?;
            Some(Peer {
                name: n.metadata.name.clone()?,
                pod_cidr,
                address,
            })
        })
        .collect();
    out.sort();
    out
}

/// Brings the routes and rules to `peers` for this node's pod CIDR `own` (none: only routes).
/// Failures are logged; what can be done is done.
pub async fn apply(own: Option<Ipv4Net>, peers: &[Peer]) {
    let peers = peers.to_vec();
    let done = tokio::task::spawn_blocking(move || {
        apply_routes(&peers);
        if let Some(own) = own {
            apply_rules(own, &peers);
        }
    })
    .await;
    if let Err(e) = done {
        warn!(error = %e, "site routes: task failed");
    }
}

/// Runs `program args`; its stdout, or `None` (logged at debug) when it fails.
fn run(program: &str, args: &[&str]) -> Option<String> {
    match std::process::Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => {
            debug!(program, ?args, stderr = %String::from_utf8_lossy(&out.stderr).trim(), "failed");
            None
        }
        Err(e) => {
            debug!(program, ?args, error = %e, "cannot run");
            None
        }
    }
}

fn apply_routes(peers: &[Peer]) {
    let current = run("ip", &["-4", "route", "show", "proto", ROUTE_PROTO]).unwrap_or_default();
    let wanted: Vec<String> = peers.iter().map(|p| p.pod_cidr.to_string()).collect();
    for line in current.lines() {
        let Some(cidr) = line.split_whitespace().next() else {
            continue;
        };
        if !wanted.iter().any(|w| w == cidr) {
            let _ = run("ip", &["-4", "route", "del", cidr, "proto", ROUTE_PROTO]);
            info!(%cidr, "site route removed");
        }
    }
    for peer in peers {
        let (cidr, via) = (peer.pod_cidr.to_string(), peer.address.to_string());
        let had = current
            .lines()
            .any(|l| l.starts_with(&format!("{cidr} via {via} ")));
        match run(
            "ip",
            &[
                "-4",
                "route",
                "replace",
                &cidr,
                "via",
                &via,
                "proto",
                ROUTE_PROTO,
            ],
        ) {
            Some(_) if !had => info!(peer = %peer.name, %cidr, %via, "site route"),
            Some(_) => {}
            None => warn!(peer = %peer.name, %cidr, %via, "site route not set"),
        }
    }
}

/// The rules (`-A` form without the chain, as `iptables -S` prints them) this node wants in
/// `table`/`chain`.
fn wanted_rules(table: &str, own: Ipv4Net, peers: &[Peer]) -> Vec<String> {
    let accept = |source: &str| {
        format!("-s {source} -d {own} -m comment --comment {RULE_COMMENT} -j ACCEPT")
    };
    match table {
        "filter" => {
            // Shared by every edgecore of the host (kube-proxy's `KUBE-FORWARD`): what the
            // Service proxy marked (a node port reached from another machine, DNATed to a pod
            // here or at a peer) and the packets of connections already let through.
            let mark = crate::services::nft::MASQUERADE_MARK;
            let mut rules = vec![
                format!(
                    "-m mark --mark {mark:#x}/{mark:#x} -m comment --comment {RULE_COMMENT} \
                     -j ACCEPT"
                ),
                format!(
                    "-m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment \
                     {RULE_COMMENT} -j ACCEPT"
                ),
            ];
            for p in peers {
                rules.push(accept(&p.pod_cidr.to_string()));
                rules.push(accept(&format!("{}/32", p.address)));
            }
            rules
        }
        _ => peers
            .iter()
            .map(|p| {
                format!(
                    "-s {own} -d {} -m comment --comment {RULE_COMMENT} -j RETURN",
                    p.pod_cidr
                )
            })
            .collect(),
    }
}

fn apply_rules(own: Ipv4Net, peers: &[Peer]) {
    for (table, chain) in [("filter", "DOCKER-USER"), ("nat", "POSTROUTING")] {
        // No such chain (no Docker firewall here): nothing to open.
        let Some(current) = run("iptables", &["-w", "-t", table, "-S", chain]) else {
            continue;
        };
        let prefix = format!("-A {chain} ");
        // This node's rules name its own pod CIDR (as destination in `filter`, as source in
        // `nat`), or are the shared ones it wants too: another edgecore on the same host
        // (tests, local clusters) keeps its own.
        let own_part = match table {
            "filter" => format!("-d {own} "),
            _ => format!("-s {own} "),
        };
        let wanted = wanted_rules(table, own, peers);
        let ours: Vec<String> = current
            .lines()
            .filter(|l| l.contains(RULE_COMMENT))
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
            .filter(|r| r.contains(&own_part) || wanted.contains(r))
            .collect();
        for rule in ours.iter().filter(|r| !wanted.contains(r)) {
            let mut args = vec!["-w", "-t", table, "-D", chain];
            args.extend(rule.split_whitespace());
            let _ = run("iptables", &args);
        }
        for rule in wanted.iter().filter(|r| !ours.contains(r)) {
            let mut args = vec!["-w", "-t", table, "-I", chain, "1"];
            args.extend(rule.split_whitespace());
            if run("iptables", &args).is_none() {
                warn!(table, chain, %rule, "site rule not set");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_peers_share_the_site_label_and_group_peers_elsewhere_are_not_routed() {
        let node = |name: &str, site: Option<&str>, cidr: &str, ip: &str| -> Node {
            let labels = site.map_or(
                serde_json::json!({}),
                |s| serde_json::json!({ SITE_LABEL: s }),
            );
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "labels": labels },
                "spec": { "podCIDR": cidr },
                "status": { "addresses": [{ "type": "InternalIP", "address": ip }] },
            }))
            .expect("node")
        };
        let nodes = [
            node("a", Some("s0"), "10.244.1.0/24", "10.214.0.1"),
            node("b", Some("s0"), "10.244.2.0/24", "10.214.0.2"),
            // A peer of a's NodeGroup at another site, and one without a site.
            node("c", Some("s1"), "10.244.3.0/24", "10.214.1.1"),
            node("d", None, "10.244.4.0/24", "10.214.9.1"),
        ];
        let names: Vec<String> = peers(&nodes, "a").into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["b"]);
        assert!(
            peers(&nodes, "d").is_empty(),
            "a node without a site has no site peers"
        );
    }

    #[test]
    fn rules_open_docker_for_peers_and_skip_its_masquerade() {
        let own: Ipv4Net = "10.244.1.0/24".parse().expect("cidr");
        let peers = [Peer {
            name: "b".into(),
            pod_cidr: "10.244.2.0/24".parse().expect("cidr"),
            address: Ipv4Addr::new(10, 214, 0, 2),
        }];
        assert_eq!(
            wanted_rules("filter", own, &peers),
            [
                "-m mark --mark 0x4000/0x4000 -m comment --comment verge-site -j ACCEPT",
                "-m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment verge-site -j \
                 ACCEPT",
                "-s 10.244.2.0/24 -d 10.244.1.0/24 -m comment --comment verge-site -j ACCEPT",
                "-s 10.214.0.2/32 -d 10.244.1.0/24 -m comment --comment verge-site -j ACCEPT",
            ]
        );
        assert_eq!(
            wanted_rules("nat", own, &peers),
            ["-s 10.244.1.0/24 -d 10.244.2.0/24 -m comment --comment verge-site -j RETURN"]
        );
    }
}
