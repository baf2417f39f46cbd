//! The cloud side as workloads on the kit's kubelet node ([`verge_testkit::deployment`]) and
//! the edges the test installs against it ([`install`], [`Edges`]).

pub mod install;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use install::InstalledEdge;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use verge_testkit::deployment::Deployment;
use verge_testkit::trust::{TokenKind, create_bootstrap_token};
use verge_testkit::wait::wait_node_ready;

/// What edgecore logs when a session with a cloudhub replica opens (`edgehub/session.rs`).
const SESSION_ESTABLISHED: &str = "cloudhub session established";

/// Edges installed through cloudhub's Service, each joined with its own bootstrap token.
pub struct Edges {
    /// The installed edges, in join order.
    pub edges: Vec<InstalledEdge>,
}

impl Edges {
    /// Installs, joins (the Verge CA pinned) and starts `count` edges named `<prefix>-<i>`
    /// through the cloudhub Service of `env`, and waits until every Node is Ready.
    ///
    /// # Errors
    /// A join fails or a node is not Ready within a minute (the error holds its log).
    pub async fn join(env: &Deployment, prefix: &str, count: usize) -> anyhow::Result<Self> {
        let hub = env.cloudhub_ip().await?;
        // Edges pin the Verge CA, as docs/install.md tells an operator.
        let ca_hash = verge_testkit::trust::verge_ca_hash(&env.client).await?;
        let mut edges = Vec::with_capacity(count);
        for i in 0..count {
            let name = format!("{prefix}-{i}");
            let token =
                create_bootstrap_token(&env.client, TokenKind::Valid, Duration::from_secs(3600))
                    .await?;
            let mut edge = InstalledEdge::configure(&name, hub)?;
            let out = edge
                .join(hub, &token, &ca_hash)
                .with_context(|| format!("joining through {hub}\n{}", env.cloud_diagnostics()))?;
            let joined = out.lines().find(|l| l.contains("joined")).unwrap_or(&out);
            eprintln!("deployed: {joined}");
            edge.start()?;
            edges.push(edge);
        }
        for edge in &edges {
            wait_node_ready(&env.client, &edge.name, Duration::from_secs(60))
                .await
                .with_context(|| edge.logs(30))?;
        }
        Ok(Self { edges })
    }

    /// The edge named `name`.
    ///
    /// # Errors
    /// No such edge.
    pub fn get(&self, name: &str) -> anyhow::Result<&InstalledEdge> {
        self.edges
            .iter()
            .find(|e| e.name == name)
            .with_context(|| format!("no edge {name}"))
    }

    /// How many sessions each edge has opened so far (its log's session lines), by name.
    pub fn sessions(&self) -> BTreeMap<String, usize> {
        self.edges
            .iter()
            .map(|e| {
                let opened = e.process.as_ref().map_or(0, |p| {
                    p.log()
                        .lines()
                        .filter(|l| l.contains(SESSION_ESTABLISHED))
                        .count()
                });
                (e.name.clone(), opened)
            })
            .collect()
    }

    /// Which cloudhub replica holds each edge: replica pod → edge names.
    ///
    /// # Errors
    /// As [`Deployment::cloudhub_holding`].
    pub async fn spread(&self, env: &Deployment) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
        let mut spread: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for edge in &self.edges {
            let replica = env.cloudhub_holding(&edge.name).await?;
            spread.entry(replica).or_default().push(edge.name.clone());
        }
        Ok(spread)
    }

    /// The Ready condition's status and last transition time of every edge's Node.
    ///
    /// # Errors
    /// API errors, or a Node without a Ready condition.
    pub async fn readiness(
        &self,
        client: &kube::Client,
    ) -> anyhow::Result<BTreeMap<String, (String, String)>> {
        let nodes: Api<Node> = Api::all(client.clone());
        let mut out = BTreeMap::new();
        for edge in &self.edges {
            let node = nodes.get(&edge.name).await?;
            let ready = node
                .status
                .and_then(|s| s.conditions)
                .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
                .with_context(|| format!("node {} has no Ready condition", edge.name))?;
            let since = ready
                .last_transition_time
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            out.insert(edge.name.clone(), (ready.status, since));
        }
        Ok(out)
    }
}

/// Pod `name`'s container id and restart count; fails unless it is Running.
///
/// # Errors
/// API errors, or the pod is not Running or has no container status.
pub async fn running_container(pods: &Api<Pod>, name: &str) -> anyhow::Result<(String, i32)> {
    let pod = pods.get(name).await?;
    let status = pod.status.context("no status")?;
    ensure!(
        status.phase.as_deref() == Some("Running"),
        "{name} not Running"
    );
    let container = status
        .container_statuses
        .and_then(|c| c.into_iter().next())
        .context("no container status")?;
    Ok((
        container.container_id.unwrap_or_default(),
        container.restart_count,
    ))
}
