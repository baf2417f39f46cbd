//! One namespaced edge node: its network namespace on the site, its Docker engine with the
//! images its pods use, and its edgecore, each written to the record as soon as it exists.

use std::path::Path;

use verge_testkit::daemon;
use verge_testkit::netns::{EdgeNetns, SiteNet};
use verge_testkit::netns_docker::NetnsDocker;

use super::record::{EdgeRecord, Record};
use super::{HOST, SITE_LABEL, SITE_NAME, net};
use crate::local::HubAccess;
use crate::local::edge_yaml::EdgeYaml;

/// What starting one node needs.
#[derive(Debug)]
pub struct NewEdge<'a> {
    /// Its node name.
    pub name: &'a str,
    /// Its host number on the site (2..): its site address is `site.addr(host)`, its
    /// namespace's number `199 + host`.
    pub host: u8,
    /// The site.
    pub site: &'a SiteNet,
    /// How it joins cloudhub.
    pub hub: &'a HubAccess,
    /// The run directory (its own under `edge-<host>/`, its log in `logs/`).
    pub run_dir: &'a Path,
    /// The directory of the edgecore binary.
    pub bin_dir: &'a Path,
    /// The images loaded into its engine.
    pub images: &'a [&'a str],
}

impl NewEdge<'_> {
    /// Starts the node (blocking: `ip`, `dockerd`, `docker save | docker load`), adding what it
    /// makes to `record` in `run_dir` as it goes.
    ///
    /// # Errors
    /// An `ip`, iptables or docker step fails, or edgecore cannot be started.
    pub fn start(&self, record: &mut Record) -> anyhow::Result<()> {
        let netns = EdgeNetns::create(199 + self.host)?;
        let dir = self.run_dir.join(format!("edge-{}", self.host));
        record.edges.push(EdgeRecord {
            node: self.name.to_owned(),
            netns: netns.name().to_owned(),
            host_if: netns.host_if().to_owned(),
            dir: dir.clone(),
            edgecore_pid: None,
        });
        record.save(self.run_dir)?;
        let address = self.site.join(&netns, self.host)?;
        let docker = NetnsDocker::start_detached(&netns, &dir.join("docker"))?;
        net::firewall_like_host(netns.name(), self.site.addr(HOST))?;
        for image in self.images {
            docker.load_image(image)?;
        }
        let data_dir = dir.join("data");
        std::fs::create_dir_all(&data_dir)?;
        let labels = [(SITE_LABEL.to_owned(), SITE_NAME.to_owned())];
        let config = EdgeYaml {
            node_name: self.name,
            data_dir: &data_dir,
            server: format!("https://{}:{}", netns.host_addr(), self.hub.edge_port),
            join_server: format!("https://{}:{}", netns.host_addr(), self.hub.join_port),
            tls_server_name: Some("localhost"),
            token: &self.hub.token,
            ca_cert_hash: &self.hub.ca_cert_hash,
            node_ip: Some(address),
            node_labels: &labels,
            runtime_endpoint: Some(docker.endpoint()),
            dmi_socket: &dir.join("dmi.sock"),
            event_bus: None,
            metrics_addr: None,
        }
        .render();
        let config_path = crate::local::write(&dir, "edgecore.yaml", &config)?;
        // `nsenter --net`, not `ip netns exec` (which gives the process a mount namespace of
        // its own): the tmpfs edged mounts for secret and projected volumes must be seen by
        // the engine, which runs in the host's mount namespace.
        let argv = [
            format!("--net=/var/run/netns/{}", netns.name()),
            crate::local::binary(self.bin_dir, "edgecore")
                .display()
                .to_string(),
            "--config".to_owned(),
            config_path,
        ];
        let log = self
            .run_dir
            .join("logs")
            .join(format!("edgecore-{}.log", self.name));
        let pid = daemon::spawn_detached(Path::new("nsenter"), &argv, &[], &log)?;
        eprintln!(
            "  edgecore of {} pid {pid} in {}, log {}",
            self.name,
            netns.name(),
            log.display()
        );
        if let Some(edge) = record.edges.last_mut() {
            edge.edgecore_pid = Some(pid);
        }
        record.save(self.run_dir)?;
        netns.keep();
        Ok(())
    }
}
