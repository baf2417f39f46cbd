//! Upstream: what edges report about their devices, written to the API server.
//!
//! A message arrives as an [`Envelope`] from `node` with a cloud-side path
//! `node/<node>/<namespace>/<type>/<name>`. [`parse`] turns it into an [`Inbound`];
//! [`handle`] applies it and builds the answer: `ack` after the API server accepted the
//! write (or when the report is for a Device that no longer exists at that uid: acked and
//! dropped), `error` with a UTF-8 reason otherwise (docs/protocol.md, "Messages").
//!
//! Served: `update <ns>/devicestatus/<name>` with a [`StatusReport`] body and header uid =
//! the Device's uid ([`status`]). A node may only report Devices bound to it
//! (`spec.nodeName`); a refusal is logged with the node and counted
//! ([`AUTHORIZATION_REFUSALS`]).
//!
//! Tracing: a report carrying a trace context is handled in a `devicecontroller.upstream`
//! span continuing it, with the DeviceStatus write as `kube.apply_device_status`.

pub mod status;

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{Instrument as _, debug, warn};
use verge_core::{Envelope, Group, Kind, NodeResource, Operation, Outcome, ResourceType};
use verge_device_api::StatusReport;

use crate::cache::Caches;
use crate::{Error, Result};

/// What upstream handlers need: the API client and the watch caches.
#[derive(Clone)]
pub struct Context {
    /// The Kubernetes client.
    pub client: kube::Client,
    /// The watch caches (Devices, for the uid and node checks).
    pub caches: Caches,
}

impl verge_controller::dispatch::Handler for Context {
    /// Reports of different Devices are independent objects: up to 8 DeviceStatus writes of
    /// one node run at once (each Device's reports stay in order), so a node with many
    /// devices is not held to one API round trip per report.
    const LANES: usize = 8;

    fn handle(
        &self,
        node: &str,
        message: &Envelope,
    ) -> impl std::future::Future<Output = Option<Envelope>> + Send {
        handle(self, node, message)
    }
}

/// A Device's status report, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    /// The Device's namespace.
    pub namespace: String,
    /// The Device's name (also the DeviceStatus's).
    pub name: String,
    /// The uid of the Device the report was made for (`header.uid`).
    pub uid: String,
    /// Twins, state and last online time.
    pub report: StatusReport,
}

/// An upstream message, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// `update <ns>/devicestatus/<name>`: write the DeviceStatus.
    Status(DeviceReport),
    /// The edge's answer (`ack`, `response`, `error`) to a downstream message; never answered.
    Answer {
        /// The answer's operation.
        operation: Operation,
        /// The id of the downstream message it answers.
        parent_id: String,
    },
}

/// Classifies `message`, received from the session of `node`.
///
/// # Errors
/// [`Error::Route`] for an edge-side path, [`Error::Forbidden`] when the path names another
/// node, [`Error::NoUid`] without a Device uid, [`Error::Decode`] for a body that is not a
/// status report, [`Error::Unsupported`] for any other operation, type or group.
pub fn parse(node: &str, message: &Envelope) -> Result<Inbound> {
    let operation = message.operation();
    if let Kind::Answer { to, .. } = &message.kind {
        return Ok(Inbound::Answer {
            operation,
            parent_id: to.to_string(),
        });
    }
    let unsupported = || Error::Unsupported {
        operation: operation.to_string(),
        resource: message.path(),
    };
    if message.group != Group::Device {
        return Err(unsupported());
    }
    let path: NodeResource = message.node_resource().ok_or_else(|| {
        Error::Route(verge_proto::Error::Invalid {
            id: message.id.to_string(),
            field: "route.resource",
            source: verge_core::Error::ResourcePath {
                path: message.path(),
                reason: "expected node/<node>/<namespace>/<type>/<name>",
            },
        })
    })?;
    if path.node != node {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!("objects of node {:?}", path.node),
        });
    }
    let key = &path.key;
    if operation != Operation::Update || key.kind != ResourceType::DeviceStatus {
        return Err(unsupported());
    }
    let Some(namespace) = key.k8s_namespace() else {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!("cluster-scoped {key}"),
        });
    };
    let uid = message
        .kind
        .version()
        .map(|v| v.uid.clone())
        .unwrap_or_default();
    if uid.is_empty() {
        return Err(Error::NoUid(key.to_string()));
    }
    let report = serde_json::from_slice(&message.body).map_err(|source| Error::Decode {
        kind: "device status report",
        source,
    })?;
    Ok(Inbound::Status(DeviceReport {
        namespace: namespace.to_owned(),
        name: key.name.clone(),
        uid,
        report,
    }))
}

/// Applies one upstream message from `node` and returns the answer to send back (`None` for
/// answers from the edge, which are not answered).
#[tracing::instrument(
    skip_all,
    fields(id = %message.id, node = %node, resource = %message.path())
)]
pub async fn handle(context: &Context, node: &str, message: &Envelope) -> Option<Envelope> {
    let result = match parse(node, message) {
        Ok(Inbound::Answer {
            operation,
            parent_id,
        }) => {
            debug!(%operation, %parent_id, "edge answered a downstream message");
            return None;
        }
        Ok(Inbound::Status(report)) => {
            // A traced report (a twin change on the edge, `devicetwin.report`) continues its
            // trace here, down to the DeviceStatus write.
            let span = verge_telemetry::propagation::continued(&message.trace, || {
                verge_telemetry::span!(
                    "devicecontroller.upstream",
                    verge.node = %node,
                    verge.message.id = %message.id,
                    verge.resource = %message.path(),
                    verge.operation = %message.operation(),
                    otel.status_code = tracing::field::Empty,
                )
            });
            let result = status::write(context, node, &report)
                .instrument(span.clone())
                .await;
            if result.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            result
        }
        Err(error) => Err(error),
    };
    Some(match result {
        Ok(written) => {
            debug!(?written, "applied");
            answer(message, Outcome::Ack)
        }
        Err(error) => {
            if matches!(error, Error::Forbidden { .. }) {
                AUTHORIZATION_REFUSALS.fetch_add(1, Ordering::Relaxed);
                warn!(%node, reason = %error.reason(), "refused by node authorization");
            } else {
                warn!(error = %error.reason(), "upstream message rejected");
            }
            answer(message, Outcome::Error(error.reason()))
        }
    })
}

/// Upstream messages refused by node authorization since start: a node reporting for a
/// Device bound to another node, or using another node's path. Each is also logged with
/// the node and the reason.
pub static AUTHORIZATION_REFUSALS: AtomicU64 = AtomicU64::new(0);

/// An answer (`ack`/`error`) to `message`: group `device`, source `devicecontroller`.
pub fn answer(message: &Envelope, outcome: Outcome) -> Envelope {
    crate::IDENTITY.answer(message, outcome, Vec::new())
}

#[cfg(test)]
mod tests;
