//! node: registration, status and lease of this edge node (what the kubelet's node status
//! manager and node lease controller do).
//!
//! On every new cloudhub session: `insert` `_/node/<node>` with a `v1.Node` (name, labels,
//! taints). While the session lasts: `update` `_/nodestatus/<node>` with a `v1.NodeStatus`
//! every `node_status_update_frequency`, and `update` `kube-node-lease/lease/<node>` with a
//! `coordination.k8s.io/v1.Lease` every `node_lease_renew_interval`; both also right after
//! registration. Registration and status are durable reports ([`EdgeHubHandle::report`],
//! keys [`OutboxKey::Node`](crate::OutboxKey::Node) and [`OutboxKey::NodeStatus`](crate::OutboxKey::NodeStatus): only the newest waits, and it is
//! sent until the cloud acks it). The lease stays transient ([`EdgeHubHandle::try_send`]): a
//! renewal is worthless once stale, and the next one is due within
//! `node_lease_renew_interval`. Nothing is produced while disconnected: the next session
//! sends fresh reports. Messages use group `resource` and source `edged`.

pub mod host;
pub mod quantity;
pub mod status;

use std::sync::Arc;

use serde::Serialize;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use verge_core::{Envelope, ResourceKey, ResourceType, Write};

use crate::config::{Config, Reserved};
use verge_runtime::ErrorChain;

use crate::edgehub::EdgeHubHandle;
use crate::{Error, Result};
use host::HostFacts;
use status::Conditions;
use verge_core::NODE_LEASE_NAMESPACE;

/// The node component; see the module docs.
#[derive(Debug)]
pub struct NodeAgent {
    config: Arc<Config>,
    reserved: Reserved,
    hub: EdgeHubHandle,
    conditions: Conditions,
    runtime_version: Option<tokio::sync::watch::Receiver<String>>,
}

impl NodeAgent {
    /// A node agent reporting through `hub`.
    ///
    /// # Errors
    /// [`Error::ConfigValue`] if `system_reserved` does not parse.
    pub fn new(config: Arc<Config>, hub: EdgeHubHandle) -> Result<Self> {
        let reserved = config.reserved()?;
        Ok(Self {
            config,
            reserved,
            hub,
            conditions: Conditions::default(),
            runtime_version: None,
        })
    }

    /// Reports `nodeInfo.containerRuntimeVersion` from `version` (edged's
    /// [`Edged::runtime_version`](crate::Edged::runtime_version)) instead of
    /// `docker://unknown`.
    #[must_use]
    pub fn with_runtime_version(mut self, version: tokio::sync::watch::Receiver<String>) -> Self {
        self.runtime_version = Some(version);
        self
    }

    /// Registers and reports the node on every session until `shutdown`.
    ///
    /// # Errors
    /// [`Error::Encode`] if an object cannot be serialized (not expected).
    #[tracing::instrument(name = "node", skip_all, fields(node = %self.config.node_name))]
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        let data_dir = self.config.data_dir.clone();
        let facts = tokio::task::spawn_blocking(move || HostFacts::collect(&data_dir))
            .await
            .map_err(Error::Blocking)?;
        debug!(?facts, "host facts");
        let mut sessions = self.hub.sessions();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = sessions.wait_for(Option::is_some) => if changed.is_err() { break },
            }
            sessions.mark_unchanged();
            let node = status::node_object(&self.config, &facts);
            let key = ResourceKey::cluster(ResourceType::Node, &self.config.node_name);
            let msg = message(Write::Insert, &key, &node, "node")?;
            match self.hub.report(msg).await {
                Ok(()) => info!("node registration reported"),
                Err(Error::EdgeHub(crate::edgehub::error::Error::HubStopped)) => break,
                Err(e) => error!(error = %ErrorChain(&e), "node registration not stored"),
            }
            let mut status_tick =
                tokio::time::interval(self.config.edged.node_status_update_frequency);
            let mut lease_tick = tokio::time::interval(self.config.edged.node_lease_renew_interval);
            status_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            lease_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            // edged learns Docker's version after the node registered; report it at once
            // instead of showing `docker://unknown` until the next status period.
            let mut runtime_version = self.runtime_version.clone();
            loop {
                let version_known = async {
                    match runtime_version.as_mut() {
                        Some(rx) => rx.changed().await.ok(),
                        None => None,
                    }
                };
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    changed = sessions.changed() => {
                        if changed.is_err() { return Ok(()) }
                        break;
                    }
                    _ = status_tick.tick() => self.report_status(&facts).await?,
                    Some(()) = version_known => self.report_status(&facts).await?,
                    _ = lease_tick.tick() => self.renew_lease()?,
                }
            }
        }
        Ok(())
    }

    async fn report_status(&mut self, facts: &HostFacts) -> Result<()> {
        let mut status = status::node_status(
            &self.config,
            &self.reserved,
            facts,
            &mut self.conditions,
            status::now(),
        );
        if let (Some(v), Some(info)) = (&self.runtime_version, status.node_info.as_mut()) {
            info.container_runtime_version = v.borrow().clone();
        }
        let key = ResourceKey::cluster(ResourceType::NodeStatus, &self.config.node_name);
        let msg = message(Write::Update, &key, &status, "node status")?;
        if let Err(e) = self.hub.report(msg).await {
            // A store failure; the next period reports a fresh status.
            error!(error = %ErrorChain(&e), "node status not stored");
        }
        Ok(())
    }

    fn renew_lease(&self) -> Result<()> {
        let lease = status::lease(&self.config, status::now());
        let key = ResourceKey::new(
            NODE_LEASE_NAMESPACE,
            ResourceType::Lease,
            &self.config.node_name,
        );
        self.offer(message(Write::Update, &key, &lease, "node lease")?);
        Ok(())
    }

    /// Queues a lease renewal without waiting: if the queue is full the next period sends
    /// a fresh one, so this one is dropped with a warning.
    fn offer(&self, msg: Envelope) {
        if let Err(error) = self.hub.try_send(msg) {
            warn!(%error, "node lease renewal dropped");
        }
    }
}

/// An upstream `write` message for `key` carrying `object` as JSON.
fn message<T: Serialize>(
    write: Write,
    key: &ResourceKey,
    object: &T,
    what: &'static str,
) -> Result<Envelope> {
    let content = serde_json::to_vec(object).map_err(|source| Error::Encode { what, source })?;
    Ok(crate::edged::status::report(write, key, content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn facts() -> HostFacts {
        HostFacts {
            hostname: "host-a".into(),
            ipv4: Some("192.0.2.10".parse().expect("ip")),
            cpu_millis: 4000,
            memory_bytes: 16 << 30,
            ephemeral_storage_bytes: Some(100 << 30),
            machine_id: "m".into(),
            system_uuid: "m".into(),
            boot_id: "b".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 13 (trixie)".into(),
            architecture: "amd64".into(),
        }
    }

    #[test]
    fn node_status_shape() {
        let config = Config::from_yaml(
            "nodeName: edge-1\nedged: {systemReserved: {cpu: 500m, memory: 1Gi}}\n",
            "t",
        )
        .expect("config");
        let reserved = config.reserved().expect("reserved");
        let mut conditions = Conditions::default();
        let t0 = status::now();
        let s = status::node_status(&config, &reserved, &facts(), &mut conditions, t0);
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["capacity"]["cpu"], "4");
        assert_eq!(json["capacity"]["memory"], "16777216Ki");
        assert_eq!(json["capacity"]["pods"], "110");
        assert_eq!(json["allocatable"]["cpu"], "3500m");
        assert_eq!(json["allocatable"]["memory"], "15728640Ki");
        assert_eq!(json["capacity"]["ephemeral-storage"], "104857600Ki");
        assert_eq!(json["addresses"][0]["type"], "InternalIP");
        assert_eq!(json["addresses"][0]["address"], "192.0.2.10");
        assert_eq!(json["addresses"][1]["type"], "Hostname");
        // The API server dials `<node name>:<port>` for logs and exec (architecture.md §10).
        assert_eq!(json["addresses"][1]["address"], "edge-1");
        assert_eq!(
            json["nodeInfo"]["kubeletVersion"],
            status::kubelet_version()
        );
        assert_eq!(
            json["nodeInfo"]["containerRuntimeVersion"],
            "docker://unknown"
        );
        assert_eq!(json["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        let ready = s
            .conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );

        let t1 = t0 + Duration::from_secs(10);
        let s = status::node_status(&config, &reserved, &facts(), &mut conditions, t1);
        for c in s.conditions.expect("conditions") {
            assert_eq!(
                c.last_transition_time.expect("transition").0,
                t0,
                "{}",
                c.type_
            );
            assert_eq!(c.last_heartbeat_time.expect("heartbeat").0, t1);
        }
    }

    #[test]
    fn node_object_and_lease() {
        let config = Config::from_yaml(
            "nodeName: edge-1\nedged:\n  nodeLabels: {zone: a}\n  \
             registerWithTaints: [{key: edge, value: 'true', effect: NoSchedule}]\n",
            "t",
        )
        .expect("config");
        let json = serde_json::to_value(status::node_object(&config, &facts())).expect("json");
        assert_eq!(json["kind"], "Node");
        assert_eq!(json["metadata"]["name"], "edge-1");
        let labels = &json["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["node-role.kubernetes.io/edge"], "");
        assert_eq!(labels["zone"], "a");
        assert_eq!(json["spec"]["taints"][0]["effect"], "NoSchedule");
        let lease = serde_json::to_value(status::lease(&config, status::now())).expect("json");
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(lease["spec"]["holderIdentity"], "edge-1");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert!(lease["spec"]["renewTime"].is_string());
    }
}
