//! The firewall and routing steps around the site: forwarding in a namespace, the rule that
//! lets the host reach a namespace's pods, the host's routes to them, and removing what the
//! node on the host set up for its site peers.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The comment marking the rules made here (edgecore's own are `verge-site`).
const RULE_COMMENT: &str = "verge-xtask-host";

/// `program args`; its stdout, or an error with its stderr.
fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `program args` in network namespace `netns` (`ip netns exec`: iptables and sysctl act on
/// the namespace's own tables and settings).
fn in_netns(netns: &str, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["netns", "exec", netns, program];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// Deletes host link `link` if it exists (a leftover of a run whose record was lost).
pub fn delete_link(link: &str) {
    if run("ip", &["link", "show", "dev", link]).is_ok() {
        let _ = run("ip", &["link", "del", link]);
    }
}

/// Gives the engine in `netns` the host's forwarding and firewall, and lets the host reach its
/// pods: IPv4 forwarding on; the `FORWARD` policy the host has (Docker sets `DROP` when it
/// turns forwarding on itself, as on a host booting with it off; a namespace inherits the
/// host's forwarding, so its engine would leave the policy at `ACCEPT` and the namespaced
/// nodes would forward what the host's node drops); and a rule in the engine's `DOCKER-USER`
/// chain accepting what comes from the host's site address `host` (Docker forwards only
/// published ports into its networks; edgecore opens it for its site peers' pod CIDRs only),
/// which the API server's connections to pods need. Not what was DNATed (a node port): the
/// host's site address is node 1's node address too, whose pods' node-port connections are
/// masqueraded to it, and those are left to edgecore's rules as every other node's. Waits (at
/// most 20 s) for the engine to make the chain.
///
/// # Errors
/// `ip netns exec`, sysctl or iptables fail, or the chain does not appear.
pub fn firewall_like_host(netns: &str, host: Ipv4Addr) -> anyhow::Result<()> {
    in_netns(netns, "sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while in_netns(netns, "iptables", &["-w", "-S", "DOCKER-USER"]).is_err() {
        if Instant::now() > deadline {
            bail!("the engine in {netns} made no DOCKER-USER chain within 20 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let host_policy = run("iptables", &["-w", "-S", "FORWARD"])?;
    if host_policy.lines().any(|l| l == "-P FORWARD DROP") {
        in_netns(netns, "iptables", &["-w", "-P", "FORWARD", "DROP"])?;
    }
    let source = format!("{host}/32");
    in_netns(
        netns,
        "iptables",
        &[
            "-w",
            "-I",
            "DOCKER-USER",
            "1",
            "-s",
            &source,
            "-m",
            "conntrack",
            "!",
            "--ctstate",
            "DNAT",
            "-m",
            "comment",
            "--comment",
            RULE_COMMENT,
            "-j",
            "ACCEPT",
        ],
    )?;
    Ok(())
}

/// Whether the host routes `cidr` via `via` (the route the node on the host keeps for a site
/// peer's pod CIDR).
pub fn host_routes(cidr: &str, via: Ipv4Addr) -> bool {
    run("ip", &["-4", "route", "show", "exact", cidr])
        .is_ok_and(|routes| routes.contains(&format!(" via {via} ")))
}

/// Removes what the node on the host made for its site peers and leaves behind when it stops
/// (as edgecore keeps its rules over a restart): its routes to `cidrs` (protocol
/// `verge_edge_net::site::ROUTE_PROTO`) and its `verge-site` rules naming one of them in
/// `DOCKER-USER` and `nat POSTROUTING`. Returns how many went.
pub fn remove_site_leftovers(cidrs: &[String]) -> usize {
    use verge_edge_net::site::{ROUTE_PROTO, RULE_COMMENT as SITE_COMMENT};
    let names_ours = |line: &str| cidrs.iter().any(|c| line.contains(c.as_str()));
    let mut removed = 0;
    let routes = run("ip", &["-4", "route", "show", "proto", ROUTE_PROTO]).unwrap_or_default();
    for line in routes.lines() {
        let Some(cidr) = line.split_whitespace().next() else {
            continue;
        };
        if cidrs.iter().any(|c| c == cidr)
            && run("ip", &["-4", "route", "del", cidr, "proto", ROUTE_PROTO]).is_ok()
        {
            removed += 1;
        }
    }
    for (table, chain) in [("filter", "DOCKER-USER"), ("nat", "POSTROUTING")] {
        let Ok(rules) = run("iptables", &["-w", "-t", table, "-S", chain]) else {
            continue;
        };
        let prefix = format!("-A {chain} ");
        for rule in rules
            .lines()
            .filter(|l| l.contains(SITE_COMMENT) && names_ours(l))
            .filter_map(|l| l.strip_prefix(&prefix))
        {
            let mut args = vec!["-w", "-t", table, "-D", chain];
            args.extend(rule.split_whitespace());
            if run("iptables", &args).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// Removes the cgroups a namespace's engine was given as parent (`--cgroup-parent=<netns>`),
/// which outlive the engine, empty, in every hierarchy.
pub fn remove_cgroups(netns: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for hierarchy in hierarchies.flatten() {
        let _ = std::fs::remove_dir(hierarchy.path().join(netns));
    }
    let _ = std::fs::remove_dir(std::path::Path::new("/sys/fs/cgroup").join(netns));
}
