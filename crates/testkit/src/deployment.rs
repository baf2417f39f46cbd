//! The cloud side as Kubernetes workloads on the kit's kubelet node ([`crate::KubeletNode`]):
//! the images of `cargo xtask images` imported into the node's containerd, `kubectl apply -k
//! deploy/cloud` as docs/install.md tells an operator, and what tests, `cargo xtask quickstart
//! --deployed` and `cargo xtask bench deploy` read back (Deployments, the controllers' Lease
//! holders, cloudhub replicas and the edges they hold).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use crate::wait::wait_for;
use crate::{ControlPlane, KubeletNode, KubeletNodeConfig};

/// The namespace of the cloud side.
pub const NAMESPACE: &str = "verge-system";

/// The four cloud services (Deployment, image and Lease names).
pub const SERVICES: [&str; 4] = [
    "cloudhub",
    "edgecontroller",
    "devicecontroller",
    "fleetcontroller",
];

/// The image tag the manifests use (the workspace version).
pub const TAG: &str = env!("CARGO_PKG_VERSION");

/// The label every object of `deploy/cloud` carries.
const PART_OF: &str = "app.kubernetes.io/part-of=verge";

/// `deploy/cloud` (the kustomization).
pub fn deploy_cloud() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/cloud")
}

/// The image of `service` the manifests name: `verge/<service>:<TAG>`.
pub fn image(service: &str) -> String {
    format!("verge/{service}:{TAG}")
}

/// A kubelet node with the cloud side's images, onto which [`Deployment::apply`] deploys it.
pub struct Deployment {
    /// The control plane.
    pub cp: ControlPlane,
    /// An admin client.
    pub client: kube::Client,
    node: Option<KubeletNode>,
}

impl Deployment {
    /// Starts the kubelet node `node` on `cp` and imports the four service images into its
    /// containerd. The images must exist in the local Docker engine (`cargo xtask images`;
    /// `cargo xtask test` builds them beside the tests, and this waits for a build in
    /// progress).
    ///
    /// # Errors
    /// An image is missing, or the node does not come up.
    pub async fn start(cp: ControlPlane, node: &KubeletNodeConfig) -> anyhow::Result<Self> {
        // A build in progress (`cargo xtask test` builds the images beside the other tests,
        // at low priority) holds the images lock until every image is written: wait for it
        // before looking for them.
        if !SERVICES
            .iter()
            .all(|s| crate::docker::image_exists(&image(s)))
        {
            eprintln!("verge-testkit: waiting for a build of the service images in progress");
            tokio::task::spawn_blocking(crate::docker::ImagesLock::acquire).await??;
        }
        for service in SERVICES {
            let image = image(service);
            ensure!(
                crate::docker::image_exists(&image),
                "image {image} is missing: run `cargo xtask images` (`cargo xtask test` does)"
            );
        }
        let node = node.up(&cp).await?;
        let node = tokio::task::spawn_blocking(move || -> anyhow::Result<KubeletNode> {
            for service in SERVICES {
                node.import_image(&image(service))?;
            }
            Ok(node)
        })
        .await??;
        let client = cp.client().await?;
        Ok(Self {
            cp,
            client,
            node: Some(node),
        })
    }

    /// The kubelet node.
    pub fn node(&self) -> Option<&KubeletNode> {
        self.node.as_ref()
    }

    /// `kubectl <args>`; returns stdout.
    ///
    /// # Errors
    /// kubectl fails (the error holds its stderr).
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.cp.kubectl_command().args(args).output()?;
        ensure!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -k deploy/cloud`.
    ///
    /// # Errors
    /// kubectl fails.
    pub fn apply(&self) -> anyhow::Result<()> {
        self.kubectl(&["apply", "-k", &deploy_cloud().display().to_string()])?;
        Ok(())
    }

    /// Waits until every Deployment of the cloud side is Available with all its replicas
    /// updated and ready (`kubectl rollout status`).
    ///
    /// # Errors
    /// Not so within `timeout` (the error holds the pods' states and the node's logs).
    pub async fn wait_available(&self, timeout: Duration) -> anyhow::Result<()> {
        for service in SERVICES {
            self.wait_rollout(service, timeout)?;
        }
        Ok(())
    }

    /// `kubectl -n verge-system rollout status deployment/<name>` for at most `timeout`.
    ///
    /// # Errors
    /// Not complete within `timeout` (the error holds the pods' states and the node's logs).
    pub fn wait_rollout(&self, name: &str, timeout: Duration) -> anyhow::Result<()> {
        let secs = format!("{}s", timeout.as_secs().max(1));
        let rollout = self.kubectl(&[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout",
            &secs,
        ]);
        if let Err(e) = rollout {
            let pods = self
                .kubectl(&["-n", NAMESPACE, "get", "pods", "-o", "wide"])
                .unwrap_or_default();
            bail!("{e:#}\npods:\n{pods}\n{}", self.node_logs());
        }
        Ok(())
    }

    /// The `cloudhub` Service's cluster IP (what edges dial; kube-proxy on this host routes
    /// it to a replica).
    ///
    /// # Errors
    /// No such Service or no cluster IP.
    pub async fn cloudhub_ip(&self) -> anyhow::Result<IpAddr> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), NAMESPACE);
        let ip = services
            .get("cloudhub")
            .await?
            .spec
            .and_then(|s| s.cluster_ip)
            .context("cloudhub Service has no cluster IP")?;
        Ok(ip.parse()?)
    }

    /// The holder of the Lease `name` in verge-system (a pod name), if any.
    ///
    /// # Errors
    /// API errors.
    pub async fn lease_holder(&self, name: &str) -> anyhow::Result<Option<String>> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NAMESPACE);
        Ok(leases
            .get_opt(name)
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// Waits until Lease `name` has a holder other than `differs_from`; returns it.
    ///
    /// # Errors
    /// None within `timeout`.
    pub async fn wait_lease_holder(
        &self,
        name: &str,
        timeout: Duration,
        differs_from: Option<&str>,
    ) -> anyhow::Result<String> {
        wait_for(&format!("a holder of Lease {name}"), timeout, || async {
            Ok(self
                .lease_holder(name)
                .await?
                .filter(|h| Some(h.as_str()) != differs_from))
        })
        .await
    }

    /// The running, not terminating pods of `service`.
    ///
    /// # Errors
    /// API errors.
    pub async fn pods_of(&self, service: &str) -> anyhow::Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        let list = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={service}")))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect())
    }

    /// The cloudhub pod whose log shows the newest edge session of `node` (`kubectl logs`).
    ///
    /// # Errors
    /// API or kubectl errors, or no replica logged an open session of `node`.
    pub async fn cloudhub_holding(&self, node: &str) -> anyhow::Result<String> {
        for pod in self.pods_of("cloudhub").await? {
            let name = pod.metadata.name.unwrap_or_default();
            let logs = self.kubectl(&["-n", NAMESPACE, "logs", &name])?;
            if holds_session(&logs, node) {
                return Ok(name);
            }
        }
        bail!("no cloudhub replica logs an open session of {node}")
    }

    /// Deletes pod `name` of verge-system with its default grace period.
    ///
    /// # Errors
    /// API errors.
    pub async fn delete_pod(&self, name: &str) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        pods.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// The last lines of the kubelet's and containerd's logs.
    pub fn node_logs(&self) -> String {
        let Some(node) = &self.node else {
            return String::new();
        };
        ["kubelet", "containerd"]
            .iter()
            .map(|c| {
                format!(
                    "--- {c}:\n{}",
                    crate::process::log_tail(&node.log_path(c), 15)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What a failed connection to the cloud side needs to be explained: the `verge-system`
    /// Services and EndpointSlices, the cloudhub pods with their IPs, and the last lines of
    /// each cloudhub's log (each part says why it is missing when kubectl fails).
    pub fn cloud_diagnostics(&self) -> String {
        let mut out = String::new();
        for args in [
            &[
                "-n",
                "verge-system",
                "get",
                "services,endpointslices",
                "-o",
                "wide",
            ][..],
            &["-n", "verge-system", "get", "pods", "-o", "wide"][..],
            &[
                "-n",
                "verge-system",
                "logs",
                "-l",
                "app.kubernetes.io/name=cloudhub",
                "--tail=20",
                "--prefix",
            ][..],
        ] {
            let text = self.kubectl(args).unwrap_or_else(|e| format!("({e:#})"));
            out.push_str(&format!("--- kubectl {}:\n{text}\n", args.join(" ")));
        }
        out
    }

    /// Removes the workloads of `deploy/cloud` (Deployments, Services, PDBs, ConfigMaps) and
    /// the controllers' Leases, then stops the kubelet node. The namespace, CRDs and RBAC stay:
    /// other tests on the shared control plane use them.
    ///
    /// # Errors
    /// kubectl fails or the node does not stop cleanly.
    pub async fn teardown(mut self) -> anyhow::Result<()> {
        self.kubectl(&[
            "-n",
            NAMESPACE,
            "delete",
            "deploy,svc,pdb,cm",
            "-l",
            PART_OF,
            "--wait=false",
        ])?;
        self.kubectl(&[
            "-n",
            NAMESPACE,
            "delete",
            "lease",
            "edgecontroller",
            "devicecontroller",
            "fleetcontroller",
            "--ignore-not-found",
        ])?;
        if let Some(node) = self.node.take() {
            node.stop().await?;
        }
        Ok(())
    }
}

/// Whether cloudhub's log `logs` shows an edge session of `node` started after the last one
/// that ended.
fn holds_session(logs: &str, node: &str) -> bool {
    let mine: Vec<&str> = logs.lines().filter(|l| l.contains(node)).collect();
    let started = mine
        .iter()
        .rposition(|l| l.contains("edge session started"));
    let ended = mine.iter().rposition(|l| l.contains("edge session ended"));
    started.is_some() && started > ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_held_when_its_last_start_follows_its_last_end() {
        let log = "edge session started node=a\nedge session started node=b\n\
                   edge session ended node=a\n";
        assert!(!holds_session(log, "node=a"));
        assert!(holds_session(log, "node=b"));
        assert!(!holds_session(log, "node=c"));
        let again = format!("{log}edge session started node=a\n");
        assert!(holds_session(&again, "node=a"));
    }

    #[test]
    fn images_are_those_the_manifests_name() -> anyhow::Result<()> {
        let manifest = std::fs::read_to_string(deploy_cloud().join("cloudhub.yaml"))?;
        assert!(manifest.contains(&format!("image: {}", image("cloudhub"))));
        Ok(())
    }
}
