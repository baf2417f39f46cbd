//! node: registration, status and lease of this edge node (what the kubelet's node status
//! manager and node lease controller do).
//!
//! On every new cloudhub session: `insert` `_/node/<node>` with a `v1.Node` (name, labels,
//! taints), then `update` `kube-node-lease/lease/<node>` with a
//! `coordination.k8s.io/v1.Lease` once, and a full `update` `_/nodestatus/<node>` with a
//! `v1.NodeStatus`. While the session lasts, the status is computed every
//! `node_status_update_frequency` and sent only when it changed in anything but the
//! conditions' `lastHeartbeatTime` since the last one sent in this session, or when
//! `node_status_report_frequency` has passed since then (the kubelet's
//! `nodeStatusUpdateFrequency` / `nodeStatusReportFrequency` with node leases, [`report`]);
//! edged learning Docker's version is such a change. A report sent only because the period
//! passed carries just the conditions ([`report::heartbeat`]). The Lease is not renewed from here:
//! edgecontroller renews it every quarter of its `leaseDurationSeconds` for as long as the
//! session lasts, so a live session is what keeps the node alive.
//!
//! Registration and status are durable reports ([`EdgeHubHandle::report`],
//! keys [`OutboxKey::Node`](verge_edge_store::OutboxKey::Node) and [`OutboxKey::NodeStatus`](verge_edge_store::OutboxKey::NodeStatus): only the newest waits, and it is
//! sent until the cloud acks it); so is the Lease (key
//! [`OutboxKey::Lease`](verge_edge_store::OutboxKey::Lease)), so that a session whose first messages
//! reach cloudhub before edgecontroller attached still gets it. Nothing is produced while disconnected: the next session sends fresh reports.
//! Messages use group `resource` and source `edged`.

pub mod host;
pub mod report;
pub mod status;

use std::sync::Arc;

use serde::Serialize;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};
use verge_core::{Envelope, ResourceKey, ResourceType, Write};

use crate::config::{EdgedSettings, Reserved};
use verge_runtime::ErrorChain;

use crate::{Error, Result};
use host::HostFacts;
use report::{Decision, LastSent};
use status::Conditions;
use verge_core::NODE_LEASE_NAMESPACE;
use verge_edgehub::EdgeHubHandle;

/// The node component; see the module docs.
#[derive(Debug)]
pub struct NodeAgent {
    config: Arc<EdgedSettings>,
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
    pub fn new(config: Arc<EdgedSettings>, hub: EdgeHubHandle) -> Result<Self> {
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
                Err(verge_edgehub::Error::HubStopped) => break,
                Err(e) => error!(error = %ErrorChain(&e), "node registration not stored"),
            }
            if !self.send_lease().await? {
                break;
            }
            // The first tick is at once: the session's full status. Later ones send only
            // what `report` lets through.
            let mut status_tick =
                tokio::time::interval(self.config.edged.node_status_update_frequency);
            status_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut last_sent = LastSent::default();
            // edged learns Docker's version after the node registered; a new version is a
            // change, reported at once instead of showing `docker://unknown` until the next
            // status period.
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
                    _ = status_tick.tick() => self.update_status(&facts, &mut last_sent).await?,
                    Some(()) = version_known => {
                        self.update_status(&facts, &mut last_sent).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Computes the node status and sends it when [`LastSent::decide`] says so.
    async fn update_status(&mut self, facts: &HostFacts, last_sent: &mut LastSent) -> Result<()> {
        let mut status = status::node_status(
            &self.config,
            &self.reserved,
            facts,
            &mut self.conditions,
            verge_edge_store::clock::now(),
        );
        if let (Some(v), Some(info)) = (&self.runtime_version, status.node_info.as_mut()) {
            info.container_runtime_version = v.borrow().clone();
        }
        let now = Instant::now();
        let decision =
            last_sent.decide(&status, now, self.config.edged.node_status_report_frequency);
        if !decision.send() {
            return Ok(());
        }
        debug!(?decision, "node status report");
        let key = ResourceKey::cluster(ResourceType::NodeStatus, &self.config.node_name);
        let msg = if decision == Decision::Due {
            message(
                Write::Update,
                &key,
                &report::heartbeat(&status),
                "node status",
            )?
        } else {
            message(Write::Update, &key, &status, "node status")?
        };
        match self.hub.report(msg).await {
            Ok(()) => last_sent.sent(status, now),
            // A store failure; the next period computes and tries again.
            Err(e) => error!(error = %ErrorChain(&e), "node status not stored"),
        }
        Ok(())
    }

    /// Reports the node Lease once for this session (a durable report, key
    /// [`OutboxKey::Lease`](verge_edge_store::OutboxKey::Lease)); edgecontroller renews it from then on.
    /// Returns `false` when edgehub stopped.
    async fn send_lease(&self) -> Result<bool> {
        let lease = status::lease(&self.config, verge_edge_store::clock::now());
        let key = ResourceKey::new(
            NODE_LEASE_NAMESPACE,
            ResourceType::Lease,
            &self.config.node_name,
        );
        let msg = message(Write::Update, &key, &lease, "node lease")?;
        match self.hub.report(msg).await {
            Ok(()) => {}
            Err(verge_edgehub::Error::HubStopped) => return Ok(false),
            Err(e) => error!(error = %ErrorChain(&e), "node lease not stored"),
        }
        Ok(true)
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
    Ok(crate::status::report(write, key, content))
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

    /// Settings of node `edge-1` with the `edged:` section `edged_yaml`.
    fn settings(edged_yaml: &str) -> EdgedSettings {
        let mut settings = EdgedSettings::new("edge-1", "/var/lib/verge/edgecore");
        settings.edged = serde_norway::from_str(edged_yaml).expect("edged section");
        settings.edged.validate().expect("valid");
        settings
    }

    #[test]
    fn node_status_shape() {
        let config = settings("{systemReserved: {cpu: 500m, memory: 1Gi}}");
        let reserved = config.reserved().expect("reserved");
        let mut conditions = Conditions::default();
        let t0 = verge_edge_store::clock::now();
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
        // The API server dials `[<stream address>]:<port>` for logs, exec and the node proxy
        // (architecture.md §10).
        assert_eq!(
            json["addresses"][1]["address"],
            verge_pki::stream_address("edge-1").to_string()
        );
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
    fn pods_are_weighed_against_what_the_node_status_reports() {
        let config = settings("{systemReserved: {cpu: 500m, memory: 1Gi}}");
        let reserved = config.reserved().expect("reserved");
        let mut odd = facts();
        odd.memory_bytes += 512;
        let node = crate::admission::NodeResources::of(&config, &reserved, &odd);
        assert_eq!(
            node.allocatable,
            crate::admission::Allocatable {
                cpu_millis: 3500,
                memory_bytes: 15 << 30,
                ephemeral_storage_bytes: 100 << 30,
                pods: 110,
            }
        );
        assert_eq!(node.memory_capacity, 16 << 30, "whole KiB, as reported");
    }

    #[test]
    fn node_object_and_lease() {
        let config = settings(
            "nodeLabels: {zone: a}\n\
             registerWithTaints: [{key: edge, value: 'true', effect: NoSchedule}]\n",
        );
        let json = serde_json::to_value(status::node_object(&config, &facts())).expect("json");
        assert_eq!(json["kind"], "Node");
        assert_eq!(json["metadata"]["name"], "edge-1");
        let labels = &json["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["node-role.kubernetes.io/edge"], "");
        assert_eq!(labels["zone"], "a");
        assert_eq!(json["spec"]["taints"][0]["effect"], "NoSchedule");
        let lease = serde_json::to_value(status::lease(&config, verge_edge_store::clock::now()))
            .expect("json");
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(lease["spec"]["holderIdentity"], "edge-1");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert!(lease["spec"]["renewTime"].is_string());
    }
}
