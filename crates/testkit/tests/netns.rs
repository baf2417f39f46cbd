//! The partition helper really partitions: a TCP listener on the host end is reachable from
//! inside the namespace, not while the link is cut, and again after it heals.

use std::net::TcpListener;
use std::process::Command;

use verge_testkit::netns::EdgeNetns;

fn nc_connects(ns: &EdgeNetns, addr: &str, port: u16) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns.name(), "timeout", "2", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{addr}/{port}"))
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn cut_and_heal() -> anyhow::Result<()> {
    let ns = EdgeNetns::create(7)?;
    let listener = TcpListener::bind((ns.host_addr(), 0))?;
    let port = listener.local_addr()?.port();
    let host = ns.host_addr().to_string();
    assert!(nc_connects(&ns, &host, port), "reachable before the cut");
    assert!(
        !nc_connects(&ns, "127.0.0.1", port),
        "host loopback is not reachable from the namespace"
    );
    ns.cut()?;
    assert!(!nc_connects(&ns, &host, port), "unreachable while cut");
    ns.heal()?;
    assert!(nc_connects(&ns, &host, port), "reachable after heal");
    Ok(())
}
