//! The address pods reach the API server at: one private `/32` on a link of the kit's own.
//!
//! kube-apiserver binds `0.0.0.0` (so `127.0.0.1` keeps working for every host-side client)
//! and advertises [`ADVERTISE_ADDRESS`]: the `kubernetes` Service (`10.96.0.1:443`) then has
//! that address as its endpoint, which pods of the kit's kubelet node reach through
//! kube-proxy. The address sits on the link [`ADVERTISE_LINK`] that the kit creates (a
//! bridge without ports: the `dummy` link type is not built into every kernel, bridges are
//! wherever containers run); nothing else is ever addressed.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context as _, bail};

/// The link holding [`ADVERTISE_ADDRESS`].
pub const ADVERTISE_LINK: &str = "verge-cp0";

/// kube-apiserver's `--advertise-address`: a private address no real network uses here
/// (not Docker's `172.17.0.0/16`, the service CIDR `10.96.0.0/16`, the kubelet node's pod
/// CIDR `10.244.0.0/16` or the partition tests' `10.213.0.0/16`).
pub const ADVERTISE_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 199, 0, 1);

/// `ip <args>`; the error holds its stderr.
pub(crate) fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `link` exists.
pub(crate) fn link_exists(link: &str) -> bool {
    ip(&["link", "show", "dev", link]).is_ok()
}

/// Creates [`ADVERTISE_LINK`] if missing, gives it `addr/32` and sets it up. Idempotent
/// (a few `ip` calls).
///
/// # Errors
/// Not root, or an `ip` command fails.
pub(crate) fn ensure(addr: Ipv4Addr) -> anyhow::Result<()> {
    if !link_exists(ADVERTISE_LINK) {
        ip(&["link", "add", ADVERTISE_LINK, "type", "bridge"])
            .context("creating the control plane's advertise link")?;
    }
    ip(&[
        "addr",
        "replace",
        &format!("{addr}/32"),
        "dev",
        ADVERTISE_LINK,
    ])?;
    ip(&["link", "set", ADVERTISE_LINK, "up"])?;
    Ok(())
}

/// Deletes [`ADVERTISE_LINK`] unless a live kube-apiserver (of another state directory)
/// still advertises `addr`. Returns whether it was deleted.
///
/// # Errors
/// `ip link del` fails for an existing link.
pub(crate) fn remove_if_unused(addr: Ipv4Addr) -> anyhow::Result<bool> {
    if !link_exists(ADVERTISE_LINK) || apiserver_advertising(addr) {
        return Ok(false);
    }
    ip(&["link", "del", ADVERTISE_LINK])?;
    Ok(true)
}

/// Whether any live process named `kube-apiserver` runs with `--advertise-address=<addr>`.
fn apiserver_advertising(addr: Ipv4Addr) -> bool {
    let flag = format!("--advertise-address={addr}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            return false;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let mut args = cmdline.split(|b| *b == 0);
        let is_apiserver = args.next().is_some_and(|a| a.ends_with(b"kube-apiserver"));
        is_apiserver
            && args.any(|a| a == flag.as_bytes())
            && crate::daemon::is_alive(pid, Some("kube-apiserver"))
    })
}
