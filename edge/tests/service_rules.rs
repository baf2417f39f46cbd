//! The Service proxy's nftables script against the real `nft` (Debian's nftables): it parses
//! and loads, and loading it again replaces the table in one transaction. Run in a network
//! namespace of the test's own, so the host's rules are never touched.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use verge_edgecore::net::services::model::{Backend, Protocol, ServicePort};
use verge_edgecore::net::services::nft::{Scope, render};

/// `ip netns exec <ns> nft <args>` with `stdin`; its stdout.
fn nft(ns: &str, args: &[&str], stdin: &str) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running nft")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn port(name: &str, backends: &[u8], affinity: Option<u32>, node_port: Option<u16>) -> ServicePort {
    ServicePort {
        name: name.into(),
        namespace: "a".into(),
        service: name.into(),
        protocol: Protocol::Tcp,
        cluster_ips: vec![Ipv4Addr::new(10, 96, 0, 20)],
        port: 80,
        node_port,
        backends: backends
            .iter()
            .map(|last| Backend {
                ip: Ipv4Addr::new(10, 244, 1, *last),
                port: 8080,
            })
            .collect(),
        remote: Vec::new(),
        affinity_seconds: affinity,
    }
}

#[test]
fn the_script_loads_and_replaces_the_table() -> anyhow::Result<()> {
    verge_testkit::packages::ensure_debian_packages(&["nftables", "iproute2"])?;
    let ns = Netns(format!("verge-nft-{}", std::process::id()));
    let status = Command::new("ip").args(["netns", "add", &ns.0]).status()?;
    ensure!(status.success(), "ip netns add");
    let scope = Scope {
        table: "verge-vgtest".into(),
        bridge: Some("vgtest".into()),
        node_ip: Some(Ipv4Addr::new(192, 0, 2, 10)),
        // Remote endpoints go to the Service tunnel (online).
        tunnel: Some("10.244.1.1:15001".parse()?),
    };
    let remote = |last: u8| Backend {
        ip: Ipv4Addr::new(10, 244, 9, last),
        port: 8080,
    };
    let mut udp = port("a/dns:53/udp", &[3], None, None);
    udp.protocol = Protocol::Udp;
    udp.port = 53;
    udp.cluster_ips = vec![Ipv4Addr::new(10, 96, 0, 10)];
    let ports = [
        {
            let mut p = port("a/web:http/tcp", &[5, 6, 7], None, Some(30080));
            p.remote = vec![remote(1), remote(2)];
            p
        },
        {
            let mut p = port("a/sticky:80/tcp", &[8, 9], Some(600), None);
            p.cluster_ips = vec![Ipv4Addr::new(10, 96, 0, 21)];
            p.remote = vec![remote(3)];
            p
        },
        {
            let mut p = port("a/empty:80/tcp", &[], None, Some(30081));
            p.cluster_ips = vec![Ipv4Addr::new(10, 96, 0, 22)];
            p
        },
        udp,
    ];
    let script = render(&scope, &ports);
    nft(&ns.0, &["-c", "-f", "-"], &script).with_context(|| script.clone())?;
    nft(&ns.0, &["-f", "-"], &script).with_context(|| script.clone())?;
    // Again, with one backend fewer: the table is replaced, not added to.
    let fewer = render(&scope, &ports[1..]);
    nft(&ns.0, &["-f", "-"], &fewer)?;
    let listed = nft(&ns.0, &["list", "table", "ip", "verge-vgtest"], "")?;
    ensure!(!listed.contains("10.244.1.5"), "old rules left:\n{listed}");
    ensure!(listed.contains("10.244.1.8:8080"), "{listed}");
    ensure!(listed.contains("30081"), "{listed}");
    ensure!(
        listed.contains("10.244.1.1:15001"),
        "no tunnel entry:\n{listed}"
    );
    Ok(())
}
