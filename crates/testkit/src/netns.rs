//! Network namespaces for partition tests: an edge "host" whose only link to the cloud is
//! a veth pair the test can cut and heal.
//!
//! Layout of one [`EdgeNetns`] numbered `n` (0..=250):
//!
//! ```text
//!  host (root namespace)                      namespace verge-e2e-<pid>-<n>
//!  vh<pid>x<n>  10.213.<n>.1/30  <==== veth ====>  ve<pid>x<n>  10.213.<n>.2/30
//! ```
//!
//! Both addresses belong to the test's own hosts; nothing else is ever addressed. Cloud
//! services under test listen on `0.0.0.0` (or on the host address) so the edge reaches
//! them at [`EdgeNetns::host_addr`]. The namespace has its own loopback, so an edge
//! process in it cannot reach the host's `127.0.0.1` services: only the veth link, which
//! [`EdgeNetns::cut`] takes down and [`EdgeNetns::heal`] brings back.
//!
//! Requires root and `ip` (Debian's iproute2; [`crate::packages::ensure_packages`]).

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context as _, bail};

/// One network namespace joined to the host by a veth pair. Deleted (with its veth pair)
/// on drop, unless [`EdgeNetns::keep`] said otherwise.
#[derive(Debug)]
pub struct EdgeNetns {
    name: String,
    host_if: String,
    index: u8,
    kept: bool,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
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
    Ok(())
}

impl EdgeNetns {
    /// Creates namespace number `index` (0..=250) for this process, with the veth pair up
    /// and addressed, and loopback up inside.
    ///
    /// # Errors
    /// `index` out of range, not root, or an `ip` command fails (its stderr is in the error).
    pub fn create(index: u8) -> anyhow::Result<Self> {
        if index > 250 {
            bail!("netns index {index} out of range 0..=250");
        }
        let pid = std::process::id() % 100_000;
        let name = format!("verge-e2e-{pid}-{index}");
        let host_if = format!("vh{pid}x{index}");
        let ns_if = format!("ve{pid}x{index}");
        let _ = ip(&["netns", "del", &name]);
        let _ = ip(&["link", "del", &host_if]);
        ip(&["netns", "add", &name])?;
        let this = Self {
            name: name.clone(),
            host_if: host_if.clone(),
            index,
            kept: false,
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ])?;
        ip(&["link", "set", &ns_if, "netns", &name])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", this.host_addr()),
            "dev",
            &host_if,
        ])?;
        ip(&["link", "set", &host_if, "up"])?;
        let ns = |args: &[&str]| {
            let mut full = vec!["-n", name.as_str()];
            full.extend_from_slice(args);
            ip(&full)
        };
        ns(&[
            "addr",
            "add",
            &format!("{}/30", this.edge_addr()),
            "dev",
            &ns_if,
        ])?;
        ns(&["link", "set", &ns_if, "up"])?;
        ns(&["link", "set", "lo", "up"])?;
        Ok(this)
    }

    /// The namespace's name (for `ip netns exec <name> ...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host end of the veth pair (`vh<pid>x<index>`).
    pub fn host_if(&self) -> &str {
        &self.host_if
    }

    /// Leaves the namespace and its veth pair in place when this value goes: for a
    /// deployment that outlives this process (`cargo xtask conformance --keep`), which
    /// records [`EdgeNetns::name`] and [`EdgeNetns::host_if`] and deletes them later with
    /// [`EdgeNetns::delete`].
    pub fn keep(mut self) {
        self.kept = true;
    }

    /// Deletes namespace `name` and the host's veth end `host_if` (an [`EdgeNetns`] kept
    /// earlier, maybe by another process); what is already gone is skipped.
    pub fn delete(name: &str, host_if: &str) {
        let _ = ip(&["link", "del", host_if]);
        let _ = ip(&["netns", "del", name]);
    }

    /// The host end's address, `10.213.<index>.1`: where the edge reaches the cloud.
    pub fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.index, 1)
    }

    /// The edge end's address, `10.213.<index>.2`.
    pub fn edge_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.index, 2)
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`; the program
    /// replaces `ip`, so the child's pid is the program's).
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Cuts the link (host end down): the edge's packets go nowhere, established TCP
    /// connections stall until their timeouts, as on a real partition.
    ///
    /// # Errors
    /// The `ip` command fails.
    pub fn cut(&self) -> anyhow::Result<()> {
        ip(&["link", "set", &self.host_if, "down"])
    }

    /// Heals the link cut by [`EdgeNetns::cut`].
    ///
    /// # Errors
    /// The `ip` command fails.
    pub fn heal(&self) -> anyhow::Result<()> {
        ip(&["link", "set", &self.host_if, "up"])?;
        // Bringing the link down drops the host end's address route on some kernels.
        let _ = ip(&[
            "addr",
            "add",
            &format!("{}/30", self.host_addr()),
            "dev",
            &self.host_if,
        ]);
        Ok(())
    }
}

impl Drop for EdgeNetns {
    fn drop(&mut self) {
        if !self.kept {
            Self::delete(&self.name, &self.host_if);
        }
    }
}

/// A site of the two-site kit (issue 32): edge hosts that reach each other directly, on one
/// layer-2 segment. The segment is a bridge in a network namespace of its own (so the host's
/// firewall, e.g. Docker's, never sees its frames); each edge joins it with a second veth pair
/// and the address `10.214.<site>.<host>/24`, its node address on the site. The host itself
/// may join too ([`SiteNet::join_host`]): an edge node running on the host is then a site peer
/// of the namespaced ones. Deleted (with the edges' and the host's legs) on drop, unless
/// [`SiteNet::keep`] said otherwise.
#[derive(Debug)]
pub struct SiteNet {
    name: String,
    index: u8,
    kept: bool,
}

impl SiteNet {
    /// Creates site number `index` (0..=250) for this process: its namespace and bridge.
    ///
    /// # Errors
    /// `index` out of range, not root, or an `ip` command fails.
    pub fn create(index: u8) -> anyhow::Result<Self> {
        if index > 250 {
            bail!("site index {index} out of range 0..=250");
        }
        let pid = std::process::id() % 100_000;
        let name = format!("verge-site-{pid}-{index}");
        let _ = ip(&["netns", "del", &name]);
        ip(&["netns", "add", &name])?;
        let this = Self {
            name,
            index,
            kept: false,
        };
        this.ip(&["link", "add", "br0", "type", "bridge"])?;
        this.ip(&["link", "set", "br0", "up"])?;
        Ok(this)
    }

    fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// The site's namespace.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address host `host` (1..=254) gets on this site.
    pub fn addr(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 214, self.index, host)
    }

    /// Joins the host (the root network namespace) to the site as host `host` (1..=254): a
    /// veth pair from the site's bridge to the host, whose end `link` (at most 15 bytes; best
    /// a name starting `verge-`, which edged passes over when it picks a node address of its
    /// own) gets [`SiteNet::addr`]`/24`. Returns that address. The link goes with the site.
    ///
    /// # Errors
    /// `host` out of range, `link` exists already, or an `ip` command fails.
    pub fn join_host(&self, host: u8, link: &str) -> anyhow::Result<Ipv4Addr> {
        if host == 0 || host == 255 {
            bail!("site host {host} out of range 1..=254");
        }
        let pid = std::process::id() % 100_000;
        let site_end = format!("sa{pid}x{}y{host}", self.index);
        ip(&[
            "link", "add", link, "type", "veth", "peer", "name", &site_end,
        ])?;
        ip(&["link", "set", &site_end, "netns", &self.name])?;
        self.ip(&["link", "set", &site_end, "master", "br0"])?;
        self.ip(&["link", "set", &site_end, "up"])?;
        let addr = self.addr(host);
        ip(&["addr", "add", &format!("{addr}/24"), "dev", link])?;
        ip(&["link", "set", link, "up"])?;
        Ok(addr)
    }

    /// Leaves the site in place when this value goes (see [`EdgeNetns::keep`]); deleted later
    /// by name with [`SiteNet::delete`].
    pub fn keep(mut self) {
        self.kept = true;
    }

    /// Deletes the site namespace `name` (a [`SiteNet`] kept earlier): its bridge goes, and
    /// with it every leg's veth pair, the host's included.
    pub fn delete(name: &str) {
        let _ = ip(&["netns", "del", name]);
    }

    /// Joins `edge` to the site as host `host` (1..=254): a veth pair from the site's bridge
    /// to the edge's namespace, where its end (`site0`) gets [`SiteNet::addr`]`/24`. Returns
    /// that address.
    ///
    /// # Errors
    /// `host` out of range, or an `ip` command fails.
    pub fn join(&self, edge: &EdgeNetns, host: u8) -> anyhow::Result<Ipv4Addr> {
        if host == 0 || host == 255 {
            bail!("site host {host} out of range 1..=254");
        }
        let pid = std::process::id() % 100_000;
        let (site_end, edge_end) = (
            format!("sa{pid}x{}y{host}", self.index),
            format!("sb{pid}x{}y{host}", self.index),
        );
        let _ = ip(&["link", "del", &site_end]);
        ip(&[
            "link", "add", &site_end, "type", "veth", "peer", "name", &edge_end,
        ])?;
        ip(&["link", "set", &site_end, "netns", &self.name])?;
        ip(&["link", "set", &edge_end, "netns", edge.name()])?;
        self.ip(&["link", "set", &site_end, "master", "br0"])?;
        self.ip(&["link", "set", &site_end, "up"])?;
        let addr = self.addr(host);
        let in_edge = |args: &[&str]| {
            let mut full = vec!["-n", edge.name()];
            full.extend_from_slice(args);
            ip(&full)
        };
        in_edge(&["link", "set", &edge_end, "name", "site0"])?;
        in_edge(&["addr", "add", &format!("{addr}/24"), "dev", "site0"])?;
        in_edge(&["link", "set", "site0", "up"])?;
        Ok(addr)
    }
}

impl Drop for SiteNet {
    fn drop(&mut self) {
        if !self.kept {
            Self::delete(&self.name);
        }
    }
}
