//! [`Cloud`]: the cloudhub replica(s) and the edgecontroller of an end-to-end test.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use verge_testkit::ControlPlane;
use verge_testkit::ports::free_port;
use verge_testkit::process::{ChildProcess, workspace_bin};
use verge_testkit::trust::{
    TokenKind, VERGE_NAMESPACE, create_bootstrap_token, ensure_controller_accounts,
    service_account_credentials,
};
use verge_testkit::wait::wait_for_port;

/// The cloud side: one cloudhub (or several replicas) and one edgecontroller attached to
/// every replica, as separate processes.
#[derive(Debug)]
pub struct Cloud {
    /// The (first) cloudhub process, replica `hub-0`.
    pub cloudhub: ChildProcess,
    /// The edgecontroller process.
    pub edgecontroller: ChildProcess,
    /// The devicecontroller process, once [`Cloud::start_devicecontroller`] ran.
    pub devicecontroller: Option<ChildProcess>,
    /// The fleetcontroller process, once [`Cloud::start_fleetcontroller`] ran.
    pub fleetcontroller: Option<ChildProcess>,
    /// Where edges on this host connect to `hub-0`: `https://127.0.0.1:<port>`.
    pub edge_url: String,
    /// The port edges connect to (bound on `0.0.0.0`, so edges in network namespaces reach
    /// it through their veth link).
    pub edge_port: u16,
    /// Where edges on this host join at `hub-0`: `https://127.0.0.1:<port>`.
    pub join_url: String,
    /// `hub-0`'s join port (bound on `0.0.0.0`).
    pub join_port: u16,
    /// A valid bootstrap token (an hour) that every test edge joins with.
    pub bootstrap_token: String,
    /// The Verge CA's pin, `sha256:<hex>`, that every test edge joins with
    /// (`edgeHub.caCertHash`): read from the published `verge-system/verge-ca` once cloudhub
    /// is up.
    pub ca_cert_hash: String,
    /// `hub-0`'s ControllerHub: `https://127.0.0.1:<port>`.
    pub controller_url: String,
    /// Further cloudhub replicas (`hub-1`, ...); empty for [`Cloud::start`].
    pub replicas: Vec<Replica>,
    cloudhub_args: Vec<String>,
    controller_args: Vec<String>,
    dir: tempfile::TempDir,
}

/// A further cloudhub replica of a [`Cloud`].
#[derive(Debug)]
pub struct Replica {
    /// The replica name (`--replica-name`).
    pub name: String,
    /// The cloudhub process.
    pub process: ChildProcess,
    /// Where edges on this host connect: `https://127.0.0.1:<port>`.
    pub edge_url: String,
    /// The port edges connect to (bound on `0.0.0.0`).
    pub edge_port: u16,
    /// Where edges on this host join: `https://127.0.0.1:<port>`.
    pub join_url: String,
}

impl Replica {
    /// Points an edge's `config` at this replica: `edgeHub.server` and `edgeHub.joinServer`.
    pub fn serve(&self, config: &mut verge_edgecore::Config) {
        config.edge_hub.server.clone_from(&self.edge_url);
        config.edge_hub.join_server = Some(self.join_url.clone());
    }
}

impl Cloud {
    /// The second cloudhub replica (`hub-1`) of [`Cloud::start_replicas`].
    ///
    /// # Errors
    /// The cloud runs a single replica.
    pub fn second_replica(&self) -> anyhow::Result<&Replica> {
        self.replicas.first().context("no second cloudhub replica")
    }

    /// Starts cloudhub (keepalive 2 s, ack timeout 2 s; edge and join ports on all
    /// interfaces so edges in test network namespaces reach them; the Verge CA in the
    /// cluster) and edgecontroller (authenticated by a token of its service account) against
    /// `cp`, creates a bootstrap token for the edges, and waits until cloudhub listens.
    ///
    /// # Errors
    /// A binary is missing or does not come up within 20 s.
    pub async fn start(cp: &ControlPlane) -> anyhow::Result<Self> {
        Self::start_replicas(cp, 1).await
    }

    /// Like [`Cloud::start`] with `count` (at least one) cloudhub replicas named `hub-0`,
    /// `hub-1`, ..., each on its own ports, and one edgecontroller attached to all of them
    /// (`--cloudhub` repeated). `hub-0` is [`Cloud::cloudhub`], the others
    /// [`Cloud::replicas`].
    ///
    /// # Errors
    /// A binary is missing or does not come up within 20 s.
    pub async fn start_replicas(cp: &ControlPlane, count: usize) -> anyhow::Result<Self> {
        Self::start_with(cp, count, None, false).await
    }

    /// Like [`Cloud::start`], with cloudhub's token CA discovery on
    /// (`trust.tokenCaDiscovery: true`: edges without a CA pin may join). cloudhub reads
    /// bootstrap-token Secrets then, which its shipped RBAC does not allow: the caller applies
    /// `deploy/cloud/optional/token-ca-discovery.yaml`.
    ///
    /// # Errors
    /// As [`Cloud::start`].
    pub async fn start_with_token_ca_discovery(cp: &ControlPlane) -> anyhow::Result<Self> {
        Self::start_with(cp, 1, None, true).await
    }

    /// Like [`Cloud::start`], with every cloud process exporting its spans to the
    /// OTLP/gRPC endpoint `otlp` (`--otlp-endpoint`, e.g. the kit's Jaeger).
    ///
    /// # Errors
    /// As [`Cloud::start`].
    pub async fn start_traced(cp: &ControlPlane, otlp: &str) -> anyhow::Result<Self> {
        Self::start_with(cp, 1, Some(otlp), false).await
    }

    async fn start_with(
        cp: &ControlPlane,
        count: usize,
        otlp: Option<&str>,
        token_ca_discovery: bool,
    ) -> anyhow::Result<Self> {
        let client = cp.client().await?;
        ensure_controller_accounts(&client).await?;
        // Every service runs as its own service account with the shipped RBAC and admission
        // policy (deploy/cloud/access), as deployed; only the Lease names differ per test.
        verge_testkit::install_cloud_rbac(cp).await?;
        allow_test_leases(&client).await?;
        let bootstrap_token =
            create_bootstrap_token(&client, TokenKind::Valid, Duration::from_secs(3600)).await?;
        let dir = tempfile::tempdir()?;
        let (cloudhub_kubeconfig, _) =
            service_account_credentials(cp, "cloudhub", dir.path()).await?;
        let config = dir.path().join("cloudhub.yaml");
        std::fs::write(
            &config,
            format!(
                "keepaliveInterval: 2s\nackTimeout: 2s\n\
                 trust: {{serverSans: [localhost, 127.0.0.1], tokenCaDiscovery: {token_ca_discovery}}}\n\
                 streams: {{addr: \"127.0.0.1:0\", kubeletClientCaFile: {}, \
                 kubeletClientNames: [kube-apiserver-kubelet-client, {}]}}\n",
                cp.ca_cert_path().display(),
                verge_testkit::metrics_server::CLIENT_NAME,
            ),
        )?;
        let kubeconfig = cloudhub_kubeconfig.display().to_string();
        let mut hubs = Vec::new();
        let mut controller_args = Vec::new();
        for i in 0..count.max(1) {
            let (edge_port, ctrl_port, join_port) = (free_port()?, free_port()?, free_port()?);
            let mut args = vec![
                "--config".to_owned(),
                config.display().to_string(),
                "--kubeconfig".to_owned(),
                kubeconfig.clone(),
                "--edge-addr".to_owned(),
                format!("0.0.0.0:{edge_port}"),
                "--controller-addr".to_owned(),
                format!("127.0.0.1:{ctrl_port}"),
                "--join-addr".to_owned(),
                format!("0.0.0.0:{join_port}"),
                "--replica-name".to_owned(),
                format!("hub-{i}"),
                // Probe endpoints on free ports: tests run many services side by side.
                "--health-addr".to_owned(),
                "127.0.0.1:0".to_owned(),
            ];
            if let Some(otlp) = otlp {
                args.extend(["--otlp-endpoint".to_owned(), otlp.to_owned()]);
            }
            let process = spawn_cloudhub(&args, edge_port).await?;
            controller_args.push("--cloudhub".to_owned());
            controller_args.push(format!("https://127.0.0.1:{ctrl_port}"));
            hubs.push((args, process, edge_port, join_port, ctrl_port));
        }
        if let Some(otlp) = otlp {
            controller_args.extend(["--otlp-endpoint".to_owned(), otlp.to_owned()]);
        }
        controller_args.push("--health-addr".to_owned());
        controller_args.push("127.0.0.1:0".to_owned());
        // Each cloud elects its controllers' leaders on Leases of its own: tests share one
        // control plane. The hub's port (bound meanwhile) and our pid make the name unique.
        let run = format!("{}-{}", std::process::id(), hubs[0].4);
        for controller in ["edgecontroller", "devicecontroller", "fleetcontroller"] {
            let (_, hub_token) = service_account_credentials(cp, controller, dir.path()).await?;
            std::fs::write(
                dir.path().join(format!("{controller}.yaml")),
                format!(
                    "leaderElection:\n  leaseName: {controller}-{run}\n  \
                     leaseNamespace: {TEST_LEASE_NAMESPACE}\n  \
                     identity: {controller}-{run}-0\n\
                     cloudhubAuth:\n  tokenFile: {}\n",
                    hub_token.display()
                ),
            )?;
        }
        let edgecontroller = spawn_controller("edgecontroller", dir.path(), &controller_args)?;
        // cloudhub published the CA before it listened.
        let ca_cert_hash = verge_testkit::trust::verge_ca_hash(&client).await?;
        let mut hubs = hubs.into_iter();
        let (cloudhub_args, cloudhub, edge_port, join_port, ctrl_port) =
            hubs.next().context("at least one cloudhub")?;
        let replicas = hubs
            .enumerate()
            .map(|(i, (_, process, port, join, _))| Replica {
                name: format!("hub-{}", i + 1),
                process,
                edge_url: format!("https://127.0.0.1:{port}"),
                edge_port: port,
                join_url: format!("https://127.0.0.1:{join}"),
            })
            .collect();
        Ok(Self {
            cloudhub,
            edgecontroller,
            devicecontroller: None,
            fleetcontroller: None,
            edge_url: format!("https://127.0.0.1:{edge_port}"),
            edge_port,
            join_url: format!("https://127.0.0.1:{join_port}"),
            join_port,
            bootstrap_token,
            ca_cert_hash,
            controller_url: format!("https://127.0.0.1:{ctrl_port}"),
            replicas,
            cloudhub_args,
            controller_args,
            dir,
        })
    }

    /// Installs the device CRDs (`deploy/crds`) and starts devicecontroller, attached to
    /// every cloudhub replica like edgecontroller (a token of its own service account).
    ///
    /// # Errors
    /// The CRDs do not become Established, or the binary is missing.
    pub async fn start_devicecontroller(&mut self, cp: &ControlPlane) -> anyhow::Result<()> {
        verge_testkit::install_device_crds(cp).await?;
        self.devicecontroller = Some(spawn_controller(
            "devicecontroller",
            self.dir.path(),
            &self.controller_args,
        )?);
        Ok(())
    }

    /// Installs the fleet CRDs (`deploy/crds`) and starts fleetcontroller as its own service
    /// account with the shipped RBAC, electing its leader on a Lease of this cloud's own and
    /// attached to every cloudhub replica with its ControllerHub token (group `fleet`).
    ///
    /// # Errors
    /// The CRDs do not become Established, no token can be minted, or the binary is missing.
    pub async fn start_fleetcontroller(&mut self, cp: &ControlPlane) -> anyhow::Result<()> {
        verge_testkit::install_fleet_crds(cp).await?;
        self.fleetcontroller = Some(spawn_controller(
            "fleetcontroller",
            self.dir.path(),
            &self.controller_args,
        )?);
        Ok(())
    }

    /// `kill -9` edgecontroller and start it again: it must rebuild its state from the API
    /// server and the edges' inventories (cloudhub announces every connected node again).
    /// It keeps its leader-election identity, so it takes its unexpired Lease back at once
    /// (as a restarted container of the same pod).
    ///
    /// # Errors
    /// The process cannot be killed or started.
    pub fn restart_edgecontroller_hard(&mut self) -> anyhow::Result<()> {
        self.edgecontroller.kill9()?;
        self.edgecontroller =
            spawn_controller("edgecontroller", self.dir.path(), &self.controller_args)?;
        Ok(())
    }

    /// `kill -9` cloudhub (`hub-0`) and start it again on the same ports.
    ///
    /// # Errors
    /// The process cannot be killed or does not come back within 20 s.
    pub async fn restart_cloudhub_hard(&mut self) -> anyhow::Result<()> {
        self.cloudhub.kill9()?;
        self.cloudhub = spawn_cloudhub(&self.cloudhub_args, self.edge_port).await?;
        Ok(())
    }

    /// The last `n` log lines of every process, for failure messages.
    pub fn logs(&self, n: usize) -> String {
        let mut out = format!(
            "--- cloudhub ---\n{}\n--- edgecontroller ---\n{}",
            self.cloudhub.log_tail(n),
            self.edgecontroller.log_tail(n)
        );
        if let Some(dc) = &self.devicecontroller {
            out.push_str(&format!("\n--- devicecontroller ---\n{}", dc.log_tail(n)));
        }
        if let Some(fc) = &self.fleetcontroller {
            out.push_str(&format!("\n--- fleetcontroller ---\n{}", fc.log_tail(n)));
        }
        for r in &self.replicas {
            out.push_str(&format!(
                "\n--- cloudhub {} ---\n{}",
                r.name,
                r.process.log_tail(n)
            ));
        }
        out
    }
}

/// Starts `controller` with `args` and its configuration `<dir>/<controller>.yaml` (its
/// leader election).
/// Starts `controller` with its config file and its own service account's kubeconfig (both
/// in `dir`, written by [`Cloud::start`]) and `args`.
fn spawn_controller(controller: &str, dir: &Path, args: &[String]) -> anyhow::Result<ChildProcess> {
    let config = dir.join(format!("{controller}.yaml"));
    let kubeconfig = dir.join(format!("{controller}.kubeconfig"));
    let mut argv = vec![
        "--config".to_owned(),
        config.display().to_string(),
        "--kubeconfig".to_owned(),
        kubeconfig.display().to_string(),
    ];
    argv.extend_from_slice(args);
    ChildProcess::spawn(workspace_bin(controller)?, &argv, [("RUST_LOG", "info")])
}

async fn spawn_cloudhub(args: &[String], edge_port: u16) -> anyhow::Result<ChildProcess> {
    let p = ChildProcess::spawn(workspace_bin("cloudhub")?, args, [("RUST_LOG", "info")])?;
    wait_for_port(edge_port, Duration::from_secs(20)).await?;
    Ok(p)
}

/// The namespace of the e2e clouds' leader-election Leases (test-only).
pub const TEST_LEASE_NAMESPACE: &str = "verge-e2e-leases";

/// Test-only: each test's cloud elects its controllers' leaders on Leases of its own
/// (`<controller>-<run>`; tests share one control plane), in the namespace
/// [`TEST_LEASE_NAMESPACE`] whose Role lets both controllers' service accounts get, create and
/// update Leases there. verge-system keeps exactly the shipped RBAC (`tests/tests/manifests.rs`
/// checks it). Idempotent.
async fn allow_test_leases(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    use kube::api::{Patch, PatchParams};
    const NAME: &str = "verge-test-controller-leases";
    let params = PatchParams::apply("verge-e2e").force();
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": TEST_LEASE_NAMESPACE },
    }))?;
    kube::Api::<Namespace>::all(client.clone())
        .patch(TEST_LEASE_NAMESPACE, &params, &Patch::Apply(&namespace))
        .await?;
    let role = Role {
        metadata: kube::api::ObjectMeta {
            name: Some(NAME.to_owned()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
            resources: Some(vec!["leases".to_owned()]),
            verbs: vec!["get".to_owned(), "create".to_owned(), "update".to_owned()],
            ..Default::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(NAME.to_owned()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: NAME.to_owned(),
        },
        subjects: Some(
            ["edgecontroller", "devicecontroller", "fleetcontroller"]
                .into_iter()
                .map(|sa| Subject {
                    kind: "ServiceAccount".to_owned(),
                    name: sa.to_owned(),
                    namespace: Some(VERGE_NAMESPACE.to_owned()),
                    ..Default::default()
                })
                .collect(),
        ),
    };
    kube::Api::<Role>::namespaced(client.clone(), TEST_LEASE_NAMESPACE)
        .patch(NAME, &params, &Patch::Apply(&role))
        .await?;
    kube::Api::<RoleBinding>::namespaced(client.clone(), TEST_LEASE_NAMESPACE)
        .patch(NAME, &params, &Patch::Apply(&binding))
        .await?;
    Ok(())
}
