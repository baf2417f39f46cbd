//! The Service proxy's rules in the kernel: one nftables table per node, rendered from the
//! plan ([`super::model`]) as a script for Debian's `nft -f -` (kube-proxy's nftables mode
//! does the same through knftables), replacing the whole table in one transaction. Every
//! value in the script is typed (addresses, ports, numbers, names made here); nothing of an
//! object's text (names, annotations) reaches it.
//!
//! The table `ip <table>` holds:
//! - `nat-prerouting` (hook prerouting, priority dstnat): traffic from this node's pods (the
//!   pod network's bridge) goes through `services`, traffic to the node's address through
//!   `nodeports`; `nat-output` does the same for the node's own processes;
//! - `services`: a verdict map from cluster IP, protocol and port to the port's chain, and
//!   `nodeports` one from protocol and node port;
//! - a chain per Service port: it marks a connection from outside to a node port for
//!   masquerading, then DNATs new connections at random (`numgen random`) to one of its
//!   backends through an address-and-port map, one rule per port (a chain per backend would
//!   make a thousand Services four times slower to load); with `sessionAffinity: ClientIP`, a
//!   client that used a backend within the timeout goes back to it (a set per backend with that
//!   timeout, and a chain per backend that remembers the client and DNATs);
//! - `filter-forward`, `filter-input`, `filter-output` (priority filter - 10, before Docker's
//!   rules): a Service port without backends refuses new connections at once (TCP reset, ICMP
//!   port unreachable) instead of sending them on to nowhere, and so does any other port of a
//!   cluster IP (the `cluster-ips` set; served ports were DNATed away from it before these
//!   hooks), as kube-proxy's nftables mode rejects traffic to invalid ports of cluster IPs;
//! - `nat-postrouting`: masquerades marked connections and hairpin ones (a backend reaching
//!   itself through its Service: the `hairpin` set of backend . backend pairs).
//!
//! A TCP port's remote endpoints ([`ServicePort::remote`]) are reached through edgecore's
//! Service tunnel ([`Scope::tunnel`], set while the node is online): each is one more entry
//! of the port's map, all DNATed to the tunnel's address, so every endpoint keeps an equal
//! share; the tunnel reads the connection's original destination and picks the endpoint.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

use super::model::{Backend, Protocol, ServicePort};

/// The packet mark asking for masquerading (kube-proxy's `0x4000`).
pub const MASQUERADE_MARK: u32 = 0x4000;

/// Where the rules apply: the table's name, the bridge of this node's pod network and the
/// node's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The nftables table (`ip` family).
    pub table: String,
    /// The pod network's bridge device (traffic from this node's pods).
    pub bridge: Option<String>,
    /// The node's address (node ports).
    pub node_ip: Option<Ipv4Addr>,
    /// Edgecore's Service tunnel, while remote endpoints are reachable (the node is online).
    pub tunnel: Option<SocketAddrV4>,
}

/// Where new connections to `port` go: its direct backends, then one tunnel entry per remote
/// endpoint (TCP, while [`Scope::tunnel`] is set).
pub fn targets(port: &ServicePort, scope: &Scope) -> Vec<Backend> {
    let mut out = port.backends.clone();
    if let Some(tunnel) = scope.tunnel
        && port.protocol == Protocol::Tcp
    {
        let via = Backend {
            ip: *tunnel.ip(),
            port: tunnel.port(),
        };
        out.extend(std::iter::repeat_n(via, port.remote.len()));
    }
    out
}

/// The script that replaces the table of `scope` with the rules for `ports`.
pub fn render(scope: &Scope, ports: &[ServicePort]) -> String {
    let mut s = String::new();
    let table = &scope.table;
    // Create it if missing, so that the delete succeeds; then make it anew. One transaction.
    let _ = writeln!(
        s,
        "table ip {table} {{}}\ndelete table ip {table}\ntable ip {table} {{"
    );
    let targets: Vec<Vec<Backend>> = ports.iter().map(|p| targets(p, scope)).collect();
    render_maps(&mut s, ports, &targets);
    render_affinity_sets(&mut s, ports, &targets);
    render_hooks(&mut s, scope);
    for (i, port) in ports.iter().enumerate() {
        render_port(&mut s, i, port, &targets[i], scope);
    }
    s.push_str("}\n");
    s
}

/// A `key : verdict` element list, or nothing when `elements` is empty.
fn elements(s: &mut String, elements: &[String]) {
    if !elements.is_empty() {
        let _ = writeln!(s, "    elements = {{ {} }}", elements.join(", "));
    }
}

fn render_maps(s: &mut String, ports: &[ServicePort], targets: &[Vec<Backend>]) {
    let (mut services, mut nodeports, mut closed, mut closed_nodeports) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, port) in ports.iter().enumerate() {
        let proto = port.protocol.nft();
        for ip in &port.cluster_ips {
            let key = format!("{ip} . {proto} . {}", port.port);
            if targets[i].is_empty() {
                closed.push(key);
            } else {
                services.push(format!("{key} : goto svc-{i}"));
            }
        }
        if let Some(node_port) = port.node_port {
            let key = format!("{proto} . {node_port}");
            if targets[i].is_empty() {
                closed_nodeports.push(key);
            } else {
                nodeports.push(format!("{key} : goto svc-{i}"));
            }
        }
    }
    s.push_str("  map service-ips {\n    type ipv4_addr . inet_proto . inet_service : verdict\n");
    elements(s, &services);
    s.push_str("  }\n  map service-nodeports {\n    type inet_proto . inet_service : verdict\n");
    elements(s, &nodeports);
    s.push_str("  }\n  set no-endpoints {\n    type ipv4_addr . inet_proto . inet_service\n");
    elements(s, &closed);
    s.push_str("  }\n  set no-endpoint-nodeports {\n    type inet_proto . inet_service\n");
    elements(s, &closed_nodeports);
    let cluster_ips: std::collections::BTreeSet<_> =
        ports.iter().flat_map(|p| p.cluster_ips.iter()).collect();
    let cluster_ips: Vec<String> = cluster_ips.iter().map(ToString::to_string).collect();
    s.push_str("  }\n  set cluster-ips {\n    type ipv4_addr\n");
    elements(s, &cluster_ips);
    let hairpin: std::collections::BTreeSet<_> = ports
        .iter()
        .flat_map(|p| p.backends.iter().map(|b| b.ip))
        .collect();
    let hairpin: Vec<String> = hairpin.iter().map(|ip| format!("{ip} . {ip}")).collect();
    s.push_str("  }\n  set hairpin {\n    type ipv4_addr . ipv4_addr\n");
    elements(s, &hairpin);
    s.push_str("  }\n");
}

/// A set per backend of each port with `sessionAffinity: ClientIP`: the clients that used it
/// within the timeout.
fn render_affinity_sets(s: &mut String, ports: &[ServicePort], targets: &[Vec<Backend>]) {
    for (i, port) in ports.iter().enumerate() {
        let Some(timeout) = port.affinity_seconds else {
            continue;
        };
        for j in 0..targets[i].len() {
            let _ = writeln!(
                s,
                "  set affinity-{i}-{j} {{\n    type ipv4_addr\n    flags dynamic,timeout\n    timeout {timeout}s\n  }}"
            );
        }
    }
}

fn render_hooks(s: &mut String, scope: &Scope) {
    let from_pods = scope
        .bridge
        .as_ref()
        .map(|b| format!("    iifname \"{b}\" jump services\n"))
        .unwrap_or_default();
    let to_node = scope
        .node_ip
        .map(|ip| format!("    ip daddr {ip} jump nodeports\n"))
        .unwrap_or_default();
    let _ = write!(
        s,
        "  chain services {{\n    ip daddr . meta l4proto . th dport vmap @service-ips\n  }}\n\
         \x20 chain nodeports {{\n    meta l4proto . th dport vmap @service-nodeports\n  }}\n\
         \x20 chain nat-prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n\
         {from_pods}{to_node}  }}\n\
         \x20 chain nat-output {{\n    type nat hook output priority -100; policy accept;\n\
         \x20   jump services\n{to_node}  }}\n\
         \x20 chain nat-postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n\
         \x20   meta mark & {MASQUERADE_MARK:#x} == {MASQUERADE_MARK:#x} masquerade\n\
         \x20   ct status dnat ip saddr . ip daddr @hairpin masquerade\n  }}\n\
         \x20 chain reject-closed {{\n    meta l4proto tcp reject with tcp reset\n    reject\n  }}\n\
         \x20 chain closed {{\n    ip daddr . meta l4proto . th dport @no-endpoints goto reject-closed\n\
         \x20   ip daddr @cluster-ips goto reject-closed\n  }}\n"
    );
    let nodeports_closed = scope
        .node_ip
        .map(|ip| {
            format!(
                "    ip daddr {ip} meta l4proto . th dport @no-endpoint-nodeports goto reject-closed\n"
            )
        })
        .unwrap_or_default();
    for (chain, hook) in [
        ("filter-forward", "forward"),
        ("filter-output", "output"),
        ("filter-input", "input"),
    ] {
        let _ = write!(
            s,
            "  chain {chain} {{\n    type filter hook {hook} priority filter - 10; policy accept;\n\
             \x20   ct state new jump closed\n"
        );
        if hook == "input" {
            let _ = write!(
                s,
                "    ct state new{}",
                nodeports_closed.trim_start_matches("   ")
            );
        }
        s.push_str("  }\n");
    }
}

fn render_port(s: &mut String, i: usize, port: &ServicePort, backends: &[Backend], scope: &Scope) {
    if backends.is_empty() {
        return;
    }
    let _ = writeln!(s, "  chain svc-{i} {{");
    if port.node_port.is_some()
        && let Some(node_ip) = scope.node_ip
    {
        // From outside to a node port: masquerade, so replies come back through this node.
        let _ = writeln!(
            s,
            "    ip daddr {node_ip} meta mark set meta mark | {MASQUERADE_MARK:#x}"
        );
    }
    if port.affinity_seconds.is_some() {
        for j in 0..backends.len() {
            let _ = writeln!(s, "    ip saddr @affinity-{i}-{j} goto ep-{i}-{j}");
        }
    }
    let proto = port.protocol.nft();
    let n = backends.len();
    if port.affinity_seconds.is_none() {
        let target = if n == 1 {
            let b = backends[0];
            format!("dnat ip to {}:{}", b.ip, b.port)
        } else {
            let targets: Vec<String> = backends
                .iter()
                .enumerate()
                .map(|(j, b)| format!("{j} : {} . {}", b.ip, b.port))
                .collect();
            format!(
                "dnat ip addr . port to numgen random mod {n} map {{ {} }}",
                targets.join(", ")
            )
        };
        let _ = writeln!(s, "    meta l4proto {proto} {target}\n  }}");
        return;
    }
    if n == 1 {
        let _ = writeln!(s, "    goto ep-{i}-0");
    } else {
        let targets: Vec<String> = (0..n).map(|j| format!("{j} : goto ep-{i}-{j}")).collect();
        let _ = writeln!(
            s,
            "    numgen random mod {n} vmap {{ {} }}",
            targets.join(", ")
        );
    }
    s.push_str("  }\n");
    for (j, backend) in backends.iter().enumerate() {
        let _ = writeln!(
            s,
            "  chain ep-{i}-{j} {{\n    update @affinity-{i}-{j} {{ ip saddr }}\n    \
             meta l4proto {proto} dnat ip to {}:{}\n  }}",
            backend.ip, backend.port
        );
    }
}

#[cfg(test)]
#[path = "nft_tests.rs"]
mod tests;
