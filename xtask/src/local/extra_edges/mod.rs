//! Edge nodes beside the local deployment's node on the host (`cargo xtask conformance --nodes
//! N`), each a really separate edge host as the two-site e2e kit makes them
//! (`tests/tests/sites.rs`): a network namespace of its own joined to the host by a veth pair
//! (its link to cloudhub), a Docker engine of its own in that namespace (own pods, pod network
//! bridge, iptables and nftables), and edgecore in that namespace. All of them and the node on
//! the host are one site (Node label `verge.io/site`), so pods reach each other directly by
//! pod IP: every edgecore routes its site peers' pod CIDRs via their addresses
//! (architecture.md §12, sites).
//!
//! Layout: [`edge`] starts one namespaced node, [`net`] the forwarding, firewall and routing
//! steps, [`record`] what was made, for [`clean`].
//!
//! ```text
//!  host (root namespace)                        site namespace verge-site-<pid>-200, bridge br0
//!  node 1: edgecore, the host's Docker
//!  verge-site200 10.214.200.1/24 <== veth ==> br0 <== veth ==> site0 10.214.200.2/24 (node 2)
//!                                                 <== veth ==> site0 10.214.200.3/24 (node 3)
//!  vh<pid>x201 10.213.201.1/30  <== veth ==>  ve<pid>x201 10.213.201.2/30  namespace of node 2
//!  vh<pid>x202 10.213.202.1/30  <== veth ==>  ve<pid>x202 10.213.202.2/30  namespace of node 3
//! ```
//!
//! * **Node addresses.** Node k's InternalIP (`edged.nodeIP`) is its site address
//!   `10.214.200.k`; node 1's is the host's leg on the site. A site peer's route needs an
//!   address on a link the node shares with it: the namespaces share none with the host's own
//!   addresses, so the host joins the site segment (`SiteNet::join_host`) instead of routing
//!   between the namespaces (which would take proxy ARP and forwarding rules in the host's
//!   firewall, Docker's, between the veth links).
//! * **Routes.** Each edgecore routes the pod CIDR of every peer via its site address
//!   (protocol 220); on the host that is node 1's edgecore, and those routes are also how the
//!   API server (through the streams front, on the host) reaches the namespaced nodes' pod IPs
//!   for `pods/proxy` and `services/proxy`. Routes of the host's own to the same CIDRs would
//!   only replace edgecore's and be replaced again; [`ExtraEdges::wait_ready`] waits until
//!   edgecore has set them.
//! * **Firewall.** Each namespace's engine gets the host's `FORWARD` policy (Docker's `DROP`
//!   here), so every node forwards as the host's does; edgecore opens Docker's forwarding for
//!   its peers' pod CIDRs only, and in each namespace a rule accepts what comes from the
//!   host's site address ([`net::firewall_like_host`]), so the API server's connections reach
//!   the pods. The namespaces and the site segment are not behind the host's firewall: their
//!   frames never cross the host's bridge or FORWARD chain, except what goes to or from node
//!   1's pods, which node 1's own `verge-site` rules let through.
//! * **cloudhub** listens on every address ([`crate::local::StartOptions`]); each namespaced
//!   edgecore joins through its veth link (`10.213.<n>.1`), checking cloudhub's certificate for
//!   `localhost`. Its configuration is the node on the host's ([`crate::local::edge_yaml`])
//!   with the engine's socket, the site address and label, and no MQTT broker (the host's
//!   listens on its loopback only).
//! * **Names.** Namespaces and links are named by the test kit after this process's pid; the
//!   record keeps them, and [`clean`] (from `cargo xtask down` and before every
//!   [`crate::local::start`]) stops the edgecores and engines and deletes the namespaces, the
//!   site and the host's routes and rules for the site's pod CIDRs.

mod edge;
mod net;
mod record;
#[cfg(test)]
mod tests;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use verge_testkit::ControlPlane;
use verge_testkit::daemon;
use verge_testkit::netns::{EdgeNetns, SiteNet};
use verge_testkit::netns_docker::NetnsDocker;

use super::{LocalVerge, StartOptions};
use record::Record;

/// The test kit's `SiteNet` number of the site (its addresses are `10.214.200.0/24`); its
/// namespaced nodes take `EdgeNetns` numbers 201, 202, ...: clear of the e2e tests' numbers.
const SITE_INDEX: u8 = 200;

/// The host's number on the site: node 1's address is `10.214.200.1`.
const HOST: u8 = 1;

/// The host's leg on the site.
const HOST_LINK: &str = "verge-site200";

/// The Node label of a site (edgecontroller's `site::SITE_LABEL`).
const SITE_LABEL: &str = "verge.io/site";

/// The site's name.
const SITE_NAME: &str = "quickstart";

/// The most nodes of a site here, the host's included.
const MAX_NODES: usize = 9;

/// How the node on the host starts when namespaced nodes join it: cloudhub listening on every
/// address, and the node on the site with its site address.
pub fn host_node_options() -> StartOptions<'static> {
    StartOptions {
        hub_on_all_addresses: true,
        node_ip: Some(site_address(HOST)),
        node_labels: vec![(SITE_LABEL.to_owned(), SITE_NAME.to_owned())],
        ..StartOptions::default()
    }
}

/// The site address of host number `host` (the test kit's `SiteNet::addr`).
fn site_address(host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 214, SITE_INDEX, host)
}

/// The namespaced nodes of a site, started.
#[derive(Debug)]
pub struct ExtraEdges {
    dir: PathBuf,
    /// Each node's name and site address.
    nodes: Vec<(String, Ipv4Addr)>,
}

/// Starts the site (its namespace, the host's leg) and one namespaced node per name of
/// `names` (nodes 2, 3, ...), with the images `images` (from the host's engine) in each
/// node's engine, joining `verge`'s cloudhub; the node on the host must have been started
/// with [`host_node_options`]. Deletes each name's Node first (a fresh join). Everything is
/// recorded in `dir` (`verge`'s run directory) as it is made, for [`clean`].
///
/// # Errors
/// Not root, too many names, an `ip`, docker or API step fails (what was made stays
/// recorded).
pub async fn start(
    dir: &Path,
    bin_dir: &Path,
    cp: &ControlPlane,
    verge: &LocalVerge,
    names: &[String],
    images: &[&str],
) -> anyhow::Result<ExtraEdges> {
    ensure!(
        names.len() < MAX_NODES,
        "at most {} namespaced nodes",
        MAX_NODES - 1
    );
    let client = cp.client().await?;
    for name in names {
        verge_testkit::trust::forget_node(&client, name).await?;
    }
    let (dir, bin_dir, hub) = (dir.to_owned(), bin_dir.to_owned(), verge.hub.clone());
    let names = names.to_vec();
    let images: Vec<String> = images.iter().map(|&i| i.to_owned()).collect();
    tokio::task::spawn_blocking(move || -> anyhow::Result<ExtraEdges> {
        verge_testkit::packages::ensure_debian_packages(&["iproute2", "iptables", "nftables"])?;
        let mut record = Record::default();
        record.save(&dir)?;
        net::delete_link(HOST_LINK);
        let site = SiteNet::create(SITE_INDEX)?;
        record.site = Some(site.name().to_owned());
        record.host_link = Some(HOST_LINK.to_owned());
        record.save(&dir)?;
        let host = site.join_host(HOST, HOST_LINK)?;
        ensure!(
            host == site_address(HOST),
            "the host's site address is {host}"
        );
        let images: Vec<&str> = images.iter().map(String::as_str).collect();
        let mut nodes = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let number = u8::try_from(i + 2)?;
            eprintln!("  node {name}: namespace, engine and images, edgecore");
            edge::NewEdge {
                name,
                host: number,
                site: &site,
                hub: &hub,
                run_dir: &dir,
                bin_dir: &bin_dir,
                images: &images,
            }
            .start(&mut record)?;
            nodes.push((name.clone(), site.addr(number)));
        }
        site.keep();
        Ok(ExtraEdges { dir, nodes })
    })
    .await?
}

impl ExtraEdges {
    /// The nodes' names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|(name, _)| name.as_str())
    }

    /// Waits until every namespaced node is Ready, records the pod CIDRs of the site's nodes
    /// (`host_node`, the node on the host, among them) and waits until the host routes each
    /// namespaced node's pod CIDR via its site address.
    ///
    /// # Errors
    /// API errors, or a node not Ready, without a pod CIDR or not routed within `timeout`
    /// (the error holds the tail of its edgecore's log).
    pub async fn wait_ready(
        &self,
        cp: &ControlPlane,
        host_node: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let client = cp.client().await?;
        for (name, _) in &self.nodes {
            verge_testkit::wait::wait_node_ready(&client, name, timeout)
                .await
                .with_context(|| self.log_tail(name))?;
        }
        let nodes: Api<Node> = Api::all(client);
        let mut cidrs = Vec::new();
        for name in std::iter::once(host_node).chain(self.names()) {
            let cidr = verge_testkit::wait::wait_for(
                &format!("node {name}'s spec.podCIDR"),
                timeout,
                || async { Ok(nodes.get_opt(name).await?.and_then(|n| n.spec?.pod_cidr)) },
            )
            .await?;
            cidrs.push(cidr);
        }
        let mut record = Record::load(&self.dir).context("the site's record is gone")?;
        record.pod_cidrs.clone_from(&cidrs);
        record.save(&self.dir)?;
        for ((name, address), cidr) in self.nodes.iter().zip(&cidrs[1..]) {
            verge_testkit::wait::wait_for(
                &format!("the host's route to {name}'s pods ({cidr} via {address})"),
                timeout,
                || async { Ok(net::host_routes(cidr, *address).then_some(())) },
            )
            .await
            .with_context(|| self.log_tail(host_node))?;
        }
        Ok(())
    }

    /// The last lines of node `name`'s edgecore log.
    fn log_tail(&self, name: &str) -> String {
        let file = if self.nodes.iter().any(|(n, _)| n == name) {
            format!("edgecore-{name}.log")
        } else {
            "edgecore.log".to_owned()
        };
        let path = self.dir.join("logs").join(file);
        format!(
            "{}:\n{}",
            path.display(),
            verge_testkit::process::log_tail(&path, 30)
        )
    }
}

/// Undoes what [`start`] recorded in `dir`, in reverse: stops the namespaced edgecores, then
/// each engine (its containers removed first), unmounts what edged left under each node's
/// directory and removes it, deletes the namespaces, the site (the host's leg with it) and the
/// cgroups the engines were given, and removes the host's routes and `verge-site` rules for
/// the site's pod CIDRs. Blocking. Returns how many namespaced nodes were recorded.
pub fn clean(dir: &Path) -> usize {
    let Some(record) = Record::load(dir) else {
        return 0;
    };
    let pids: Vec<u32> = record
        .edges
        .iter()
        .filter_map(|e| e.edgecore_pid)
        .filter(|pid| daemon::is_alive(*pid, Some("edgecore")))
        .collect();
    daemon::stop_all(&pids, Duration::from_secs(10));
    for edge in &record.edges {
        NetnsDocker::stop_detached(&edge.dir.join("docker"));
        if let Err(error) = verge_testkit::mounts::unmount_under(&edge.dir) {
            eprintln!("warning: {error:#}");
        }
        let _ = std::fs::remove_dir_all(&edge.dir);
        EdgeNetns::delete(&edge.netns, &edge.host_if);
        net::remove_cgroups(&edge.netns);
    }
    net::remove_site_leftovers(&record.pod_cidrs);
    if let Some(site) = &record.site {
        SiteNet::delete(site);
    }
    if let Some(link) = &record.host_link {
        net::delete_link(link);
    }
    Record::remove(dir);
    record.edges.len()
}
