//! The cloud side of the fleet bench, as deployed: three cloudhub replicas (`hub-0..2`, each
//! on its own ports, as the Deployment's pods behind the `cloudhub` Service) and two
//! edgecontrollers with leader election on one Lease (the leader attaches to every replica, the
//! other stands by), from the release build, with their shipped defaults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use verge_testkit::{ControlPlane, daemon};

use crate::bench::reconnect::wait_log;
use crate::local::{free_port, wait_for_port, write};

/// cloudhub replicas, as the shipped Deployment's `replicas` for a fleet.
pub(super) const REPLICAS: usize = 3;

/// One cloudhub replica.
#[derive(Debug, Clone)]
pub(super) struct Replica {
    /// `hub-<i>`.
    pub name: String,
    /// Its process.
    pub pid: u32,
    /// Its edge address, `https://127.0.0.1:<port>`.
    pub edge_url: String,
    /// Its configuration file.
    config: String,
    /// Its log.
    log: PathBuf,
    edge_port: u16,
}

/// The running cloud.
#[derive(Debug)]
pub(super) struct Cloud {
    /// The replicas, `hub-0` first.
    pub replicas: Vec<Replica>,
    /// The edgecontrollers' processes, the first started first (it leads).
    pub controllers: Vec<u32>,
    kubeconfig: String,
    bin_dir: PathBuf,
    dir: PathBuf,
}

impl Cloud {
    /// Starts the replicas and the edgecontrollers detached from `bin_dir`, logging into
    /// `<dir>/logs`; waits until the leader attached to every replica and synced its caches.
    ///
    /// # Errors
    /// A process does not come up.
    pub(super) async fn start(
        dir: &Path,
        bin_dir: &Path,
        cp: &ControlPlane,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir.join("logs"))?;
        let _ = std::fs::remove_file(dir.join("pids"));
        verge_testkit::trust::ensure_controller_accounts(&cp.client().await?).await?;
        let kubeconfig = cp.kubeconfig().display().to_string();
        let mut replicas = Vec::with_capacity(REPLICAS);
        let mut controller_urls = Vec::with_capacity(REPLICAS);
        for i in 0..REPLICAS {
            let (edge_port, ctrl_port, join_port) = (free_port()?, free_port()?, free_port()?);
            let name = format!("hub-{i}");
            let config = write(
                dir,
                &format!("{name}.yaml"),
                &format!(
                    "replicaName: {name}\nedgeAddr: 127.0.0.1:{edge_port}\n\
                     controllerAddr: 127.0.0.1:{ctrl_port}\njoinAddr: 127.0.0.1:{join_port}\n\
                     healthAddr: 127.0.0.1:0\nstreams:\n  addr: 127.0.0.1:0\n"
                ),
            )?;
            controller_urls.push(format!("https://127.0.0.1:{ctrl_port}"));
            let mut replica = Replica {
                name,
                pid: 0,
                edge_url: format!("https://127.0.0.1:{edge_port}"),
                config,
                log: dir.join("logs").join(format!("hub-{i}.log")),
                edge_port,
            };
            replica.pid = spawn_replica(bin_dir, &replica, &kubeconfig)?;
            // Written as each starts, so that a failed start leaves nothing running.
            let line = format!("{} {}\n", replica.name, replica.pid);
            append(&dir.join("pids"), &line)?;
            replicas.push(replica);
        }
        for r in &replicas {
            wait_for_port(r.edge_port, Duration::from_secs(30)).await?;
        }
        let lease = format!("edgecontroller-fleet-{}", std::process::id());
        let mut controllers = Vec::new();
        for i in 0..2 {
            let hubs: String = controller_urls
                .iter()
                .map(|u| format!("  - {u}\n"))
                .collect();
            let config = write(
                dir,
                &format!("edgecontroller-{i}.yaml"),
                &format!(
                    "cloudhub:\n{hubs}healthAddr: 127.0.0.1:0\nleaderElection:\n  \
                     leaseName: {lease}\n  identity: {lease}-{i}\n"
                ),
            )?;
            let log = dir.join("logs").join(format!("edgecontroller-{i}.log"));
            let _ = std::fs::remove_file(&log);
            let argv = [
                "--config".to_owned(),
                config,
                "--kubeconfig".to_owned(),
                kubeconfig.clone(),
            ];
            let pid = daemon::spawn_detached(&bin_dir.join("edgecontroller"), &argv, &[], &log)?;
            append(&dir.join("pids"), &format!("edgecontroller {pid}\n"))?;
            if i == 0 {
                wait_log(
                    pid,
                    &log,
                    &["attached to cloudhub", "caches synced"],
                    Duration::from_secs(120),
                )
                .await
                .context("the leading edgecontroller")?;
            }
            controllers.push(pid);
        }
        let cloud = Self {
            replicas,
            controllers,
            kubeconfig,
            bin_dir: bin_dir.to_owned(),
            dir: dir.to_owned(),
        };
        cloud.save_pids()?;
        Ok(cloud)
    }

    /// Every process id, for the bench's clean-up (`<dir>/pids`).
    fn save_pids(&self) -> anyhow::Result<()> {
        let mut pids: Vec<String> = self
            .replicas
            .iter()
            .map(|r| format!("{} {}", r.name, r.pid))
            .collect();
        pids.extend(
            self.controllers
                .iter()
                .map(|p| format!("edgecontroller {p}")),
        );
        std::fs::write(self.dir.join("pids"), pids.join("\n") + "\n")?;
        Ok(())
    }

    /// Kills replica `i` (SIGKILL: its sessions end without a goodbye).
    pub(super) fn kill(&self, i: usize) {
        daemon::signal_group(self.replicas[i].pid, "KILL");
    }

    /// Starts replica `i` again, on its ports; waits until it listens.
    ///
    /// # Errors
    /// It does not come up.
    pub(super) async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let pid = spawn_replica(&self.bin_dir, &self.replicas[i], &self.kubeconfig)?;
        self.replicas[i].pid = pid;
        self.save_pids()?;
        wait_for_port(self.replicas[i].edge_port, Duration::from_secs(30)).await
    }

    /// The leading edgecontroller's process id.
    pub(super) fn leader(&self) -> u32 {
        self.controllers[0]
    }
}

/// Appends `line` to `path`.
fn append(path: &Path, line: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(line.as_bytes())?;
    Ok(())
}

fn spawn_replica(bin_dir: &Path, r: &Replica, kubeconfig: &str) -> anyhow::Result<u32> {
    let argv = [
        "--config".to_owned(),
        r.config.clone(),
        "--kubeconfig".to_owned(),
        kubeconfig.to_owned(),
    ];
    daemon::spawn_detached(&bin_dir.join("cloudhub"), &argv, &[], &r.log)
}
