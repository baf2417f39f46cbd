//! Cloudhub's Prometheus series (docs/observability.md "Metrics"), registered by
//! [`Metrics::register`] into the process registry that `main` serves as `/metrics` on the
//! health endpoint. One process-wide instance ([`global`]) is counted into from the hot paths;
//! tests make their own with [`Metrics::default`].
//!
//! | series | type | labels |
//! |---|---|---|
//! | `verge_cloudhub_sessions` | gauge | — |
//! | `verge_cloudhub_messages_total` | counter | `direction` (`upstream`, `downstream`), `group`, `operation` |
//! | `verge_cloudhub_queue_depth` | gauge | `node` |
//! | `verge_cloudhub_delivery_retries_total` | counter | — |
//! | `verge_cloudhub_delivery_failures_total` | counter | `reason` (`unacknowledged`, `queue_full`, `not_connected`, `session_ended`, `group_not_served`) |
//! | `verge_cloudhub_refusals_total` | counter | `reason` (see [`refusal_reason`]) |
//! | `verge_cloudhub_tls_handshakes_total` | counter | `listener` (`edge`, `controller`, `join`, `streams`), `kind` (`full`, `resumed`) |
//! | `verge_cloudhub_service_dials_total` | counter | `result` ([`SERVICE_DIAL_RESULTS`]) |
//!
//! `queue_depth` is per node on purpose (which node is backed up is the question); its
//! series exists while the node has a session here, so it is bounded by `maxSessions`.
//! `downstream` messages are counted as written to the wire (resends included, and counted
//! again in `delivery_retries_total`); `upstream` ones as read from the edge.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use verge_core::Envelope;
use verge_runtime::metrics::MessageLabels;

use crate::Error;
use crate::trust::TrustError;

/// Which way a message went through cloudhub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From an edge (to a controller).
    Upstream,
    /// To an edge (from a controller, or cloudhub's own answers).
    Downstream,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Self::Upstream => "upstream",
            Self::Downstream => "downstream",
        }
    }
}

/// Labels of a per-node series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NodeLabels {
    /// The node name.
    pub node: String,
}

/// Labels of a counter by reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why (a fixed set per series).
    pub reason: &'static str,
}

/// Labels of the TLS handshake counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HandshakeLabels {
    /// The listener ([`TLS_LISTENERS`]).
    pub listener: &'static str,
    /// `full` or `resumed` (from a session ticket).
    pub kind: &'static str,
}

/// Every `listener` of `verge_cloudhub_tls_handshakes_total`.
pub const TLS_LISTENERS: [&str; 4] = ["edge", "controller", "join", "streams"];

/// Cloudhub's series (cheap to clone: the metrics are shared).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    sessions: Gauge,
    messages: Family<MessageLabels, Counter>,
    queue_depth: Family<NodeLabels, Gauge>,
    retries: Counter,
    failures: Family<ReasonLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    handshakes: Family<HandshakeLabels, Counter>,
    service_dials: Family<ResultLabels, Counter>,
}

/// Labels of a counter by result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabels {
    /// How it ended (a fixed set per series).
    pub result: &'static str,
}

/// Every `result` of `verge_cloudhub_service_dials_total`: `connected` (a ready endpoint,
/// dialled), `refused` (not a ready endpoint of the Service the edge named, or a malformed
/// dial), `failed` (a ready endpoint that did not accept the connection in time).
pub const SERVICE_DIAL_RESULTS: [&str; 3] = ["connected", "refused", "failed"];

/// Every `reason` of `verge_cloudhub_delivery_failures_total`.
pub const DELIVERY_FAILURE_REASONS: [&str; 5] = [
    "unacknowledged",
    "queue_full",
    "not_connected",
    "session_ended",
    "group_not_served",
];

/// Every `reason` of `verge_cloudhub_refusals_total` ([`refusal_reason`],
/// [`trust_refusal_reason`] and the rate limit).
pub const REFUSAL_REASONS: [&str; 12] = [
    "malformed",
    "oversize",
    "wrong_node",
    "too_many_sessions",
    "slow_controller",
    "rate_limit",
    "auth_token",
    "auth_csr",
    "auth_controller",
    "foreign_node",
    "expired_certificate",
    "revoked_certificate",
];

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's series.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

impl Metrics {
    /// Registers every series into `registry`. The failure and refusal series of every
    /// reason exist from the start, at 0, so a scrape shows them before the first one.
    pub fn register(&self, registry: &mut Registry) {
        for reason in DELIVERY_FAILURE_REASONS {
            drop(self.failures.get_or_create(&ReasonLabels { reason }));
        }
        for reason in REFUSAL_REASONS {
            drop(self.refusals.get_or_create(&ReasonLabels { reason }));
        }
        for result in SERVICE_DIAL_RESULTS {
            drop(self.service_dials.get_or_create(&ResultLabels { result }));
        }
        for listener in TLS_LISTENERS {
            for kind in ["full", "resumed"] {
                drop(
                    self.handshakes
                        .get_or_create(&HandshakeLabels { listener, kind }),
                );
            }
        }
        registry.register(
            "verge_cloudhub_sessions",
            "Edge node sessions connected to this replica.",
            self.sessions.clone(),
        );
        registry.register(
            "verge_cloudhub_messages",
            "Messages through cloudhub by direction (upstream: read from an edge; downstream: written to an edge, resends included), group and operation.",
            self.messages.clone(),
        );
        registry.register(
            "verge_cloudhub_queue_depth",
            "Downstream messages of a node's session not yet answered by the edge (waiting or in flight).",
            self.queue_depth.clone(),
        );
        registry.register(
            "verge_cloudhub_delivery_retries",
            "Downstream messages resent because the edge did not answer within ackTimeout.",
            self.retries.clone(),
        );
        registry.register(
            "verge_cloudhub_delivery_failures",
            "Downstream messages not delivered, by reason (unacknowledged after maxRetries, queue_full, not_connected, session_ended: a third-party message unacknowledged when its node's session ended, group_not_served: a group the controller did not name).",
            self.failures.clone(),
        );
        registry.register(
            "verge_cloudhub_refusals",
            "Streams, joins and messages refused, by reason.",
            self.refusals.clone(),
        );
        registry.register(
            "verge_cloudhub_tls_handshakes",
            "TLS handshakes completed, by listener and kind (full: certificates exchanged and verified; resumed: from a session ticket this process issued).",
            self.handshakes.clone(),
        );
        registry.register(
            "verge_cloudhub_service_dials",
            "Edge pods' connections to Service endpoints the edge does not reach directly (EdgeHub.Dial), by result (connected, refused: not a ready endpoint of the named Service, failed: the endpoint did not accept).",
            self.service_dials.clone(),
        );
    }

    /// Counts one `EdgeHub.Dial` that ended as `result` (one of [`SERVICE_DIAL_RESULTS`]).
    pub(crate) fn service_dial(&self, result: &'static str) {
        self.service_dials
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Sets the number of connected sessions.
    pub(crate) fn set_sessions(&self, sessions: usize) {
        self.sessions
            .set(i64::try_from(sessions).unwrap_or(i64::MAX));
    }

    /// Counts `envelope` going `direction`.
    pub(crate) fn message(&self, direction: Direction, envelope: &Envelope) {
        self.messages
            .get_or_create(&MessageLabels {
                direction: direction.as_str(),
                group: envelope.group.metric_label(),
                operation: envelope.operation().as_str(),
            })
            .inc();
    }

    /// Sets the queue depth of `node`.
    pub(crate) fn set_queue_depth(&self, node: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&NodeLabels {
                node: node.to_owned(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Drops the queue depth series of `node` (its session ended).
    pub(crate) fn forget_node(&self, node: &str) {
        self.queue_depth.remove(&NodeLabels {
            node: node.to_owned(),
        });
    }

    /// Counts `count` resends.
    pub(crate) fn retries(&self, count: u64) {
        if count > 0 {
            self.retries.inc_by(count);
        }
    }

    /// Counts a delivery failure of `reason`.
    pub(crate) fn delivery_failure(&self, reason: &'static str) {
        self.failures.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts a refusal of `reason`.
    pub(crate) fn refusal(&self, reason: &'static str) {
        self.refusals.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts a completed TLS handshake on `listener`, `resumed` from a session ticket or
    /// full.
    pub(crate) fn handshake(&self, listener: &'static str, resumed: bool) {
        let kind = if resumed { "resumed" } else { "full" };
        self.handshakes
            .get_or_create(&HandshakeLabels { listener, kind })
            .inc();
    }

    /// Counts `error` as a refusal if it is one ([`refusal_reason`]).
    pub(crate) fn refused(&self, error: &Error) {
        if let Some(reason) = refusal_reason(error) {
            self.refusal(reason);
        }
    }
}

/// The refusal reason of a trust error, `None` for failures that are not the peer's fault
/// (the API server, the CA).
pub fn trust_refusal_reason(error: &TrustError) -> Option<&'static str> {
    Some(match error {
        TrustError::Token(_) | TrustError::TokenNotAuthenticated { .. } => "auth_token",
        TrustError::Csr(_) | TrustError::OtherSubject { .. } => "auth_csr",
        TrustError::ForeignNode { .. } | TrustError::NodeTaken { .. } => "foreign_node",
        TrustError::IdentityMismatch { .. } | TrustError::NoClientCertificate(_) => "wrong_node",
        TrustError::CertificateNotCurrent { .. } => "expired_certificate",
        TrustError::NodeGone { .. } => "revoked_certificate",
        TrustError::ControllerUnauthenticated
        | TrustError::ControllerForbidden { .. }
        | TrustError::GroupTaken { .. } => "auth_controller",
        _ => return None,
    })
}

/// The refusal reason of an error that ends a stream, `None` when it is no refusal (the peer
/// left, timed out, was replaced, cloudhub is stopping). Trust refusals are counted where
/// they are decided (`Trust::refuse`), so they are `None` here too.
///
/// Reasons: `malformed` (not a valid frame or message), `oversize` (frame or inventory over
/// its limit), `wrong_node` (a message for another node than its path names), `too_many_sessions`,
/// `slow_controller` (a controller's control queue overflowed); further reasons counted
/// elsewhere: `rate_limit`, `auth_token`, `auth_csr`, `auth_controller`, `foreign_node`,
/// `expired_certificate`, `revoked_certificate`.
pub fn refusal_reason(error: &Error) -> Option<&'static str> {
    Some(match error {
        Error::InvalidNodeName { .. }
        | Error::InvalidControllerHello(_)
        | Error::UnexpectedFrame(_)
        | Error::MissingId
        | Error::MalformedRoute { .. }
        | Error::UndecodableFrame(_) => "malformed",
        Error::FrameTooLarge(_) | Error::InventoryTooLarge { .. } => "oversize",
        Error::NodeMismatch { .. } => "wrong_node",
        Error::TooManySessions(_) => "too_many_sessions",
        Error::ControllerQueueFull(_) => "slow_controller",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use verge_core::{Group, Operation};
    use verge_proto::Message;

    use super::*;

    fn pod() -> Envelope {
        Envelope::try_from(Message::build(
            "m1",
            "edgecontroller",
            Group::Resource,
            Operation::Update,
            "default/pod/web",
            Vec::new(),
        ))
        .expect("valid")
    }

    fn text(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        verge_runtime::metrics::encode(&registry).expect("encodes")
    }

    #[test]
    fn series_encode_with_conventional_names() {
        let metrics = Metrics::default();
        metrics.set_sessions(2);
        metrics.message(Direction::Downstream, &pod());
        metrics.message(Direction::Downstream, &pod());
        metrics.set_queue_depth("edge-1", 7);
        metrics.retries(3);
        metrics.retries(0);
        metrics.delivery_failure("queue_full");
        metrics.refused(&Error::MissingId);
        metrics.refused(&Error::Replaced);
        metrics.handshake("edge", false);
        metrics.handshake("edge", true);
        metrics.handshake("edge", true);
        let text = text(&metrics);
        for line in [
            "verge_cloudhub_sessions 2\n",
            "verge_cloudhub_messages_total{direction=\"downstream\",group=\"resource\",operation=\"update\"} 2\n",
            "verge_cloudhub_queue_depth{node=\"edge-1\"} 7\n",
            "verge_cloudhub_delivery_retries_total 3\n",
            "verge_cloudhub_delivery_failures_total{reason=\"queue_full\"} 1\n",
            "verge_cloudhub_refusals_total{reason=\"malformed\"} 1\n",
            "verge_cloudhub_tls_handshakes_total{listener=\"edge\",kind=\"full\"} 1\n",
            "verge_cloudhub_tls_handshakes_total{listener=\"edge\",kind=\"resumed\"} 2\n",
            "verge_cloudhub_tls_handshakes_total{listener=\"join\",kind=\"resumed\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert!(
            !text.contains("reason=\"replaced\""),
            "a replaced session is no refusal"
        );
        for reason in REFUSAL_REASONS {
            let line = format!("verge_cloudhub_refusals_total{{reason=\"{reason}\"}} ");
            assert!(text.contains(&line), "{line:?} missing from\n{text}");
        }
        assert!(
            text.contains("verge_cloudhub_delivery_failures_total{reason=\"not_connected\"} 0\n")
        );
    }

    #[test]
    fn a_node_series_goes_with_its_session() {
        let metrics = Metrics::default();
        metrics.set_queue_depth("edge-1", 1);
        metrics.forget_node("edge-1");
        assert!(!text(&metrics).contains("edge-1"));
    }

    #[test]
    fn refusal_reasons_are_bounded() {
        assert_eq!(
            refusal_reason(&Error::FrameTooLarge("big".into())),
            Some("oversize")
        );
        assert_eq!(
            refusal_reason(&Error::TooManySessions(1)),
            Some("too_many_sessions")
        );
        assert_eq!(refusal_reason(&Error::ShuttingDown), None);
        assert_eq!(
            trust_refusal_reason(&TrustError::ControllerUnauthenticated),
            Some("auth_controller")
        );
        for reason in [
            refusal_reason(&Error::MissingId),
            refusal_reason(&Error::NodeMismatch {
                id: "m".into(),
                routed: "a".into(),
                resource: "b".into(),
            }),
            trust_refusal_reason(&TrustError::ControllerUnauthenticated),
        ]
        .into_iter()
        .flatten()
        {
            assert!(REFUSAL_REASONS.contains(&reason), "{reason} not listed");
        }
    }
}
