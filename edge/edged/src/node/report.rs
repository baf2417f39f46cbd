//! When a computed node status is sent: the kubelet's rule with node leases
//! (`pkg/kubelet/kubelet_node_status.go`, `tryUpdateNodeStatus`). The status is computed every
//! `nodeStatusUpdateFrequency`, but sent only when it changed in anything but the
//! conditions' `lastHeartbeatTime` (kubelet `nodeStatusHasChanged`), or when
//! `nodeStatusReportFrequency` has passed since the last send. The kubelet compares with the
//! Node it reads from the API server; edgecore compares with the status it last sent in the
//! current session, and every new session starts with a send.

use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
use tokio::time::Instant;

/// Why a status is sent, or that it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing was sent in this session yet.
    First,
    /// It differs from the last one sent in more than heartbeat timestamps.
    Changed,
    /// Unchanged, but `nodeStatusReportFrequency` has passed since the last send.
    Due,
    /// Unchanged and sent recently: not sent.
    Skip,
}

impl Decision {
    /// Whether the status is sent.
    pub const fn send(self) -> bool {
        !matches!(self, Self::Skip)
    }
}

/// The status last sent in one session and when; a new session starts with a new one.
#[derive(Debug, Default)]
pub struct LastSent {
    last: Option<(NodeStatus, Instant)>,
}

impl LastSent {
    /// Whether `status`, computed `now`, is sent when unchanged statuses wait up to
    /// `report_frequency`.
    pub fn decide(
        &self,
        status: &NodeStatus,
        now: Instant,
        report_frequency: Duration,
    ) -> Decision {
        let Some((last, at)) = &self.last else {
            return Decision::First;
        };
        if without_heartbeats(last) != without_heartbeats(status) {
            Decision::Changed
        } else if now.saturating_duration_since(*at) >= report_frequency {
            Decision::Due
        } else {
            Decision::Skip
        }
    }

    /// Records that `status` was sent (stored in the outbox) `now`.
    pub fn sent(&mut self, status: NodeStatus, now: Instant) {
        self.last = Some((status, now));
    }
}

/// What a [`Decision::Due`] report carries: only the conditions, each with only its `type`,
/// `status` and new `lastHeartbeatTime`. edgecontroller applies a report as a
/// strategic-merge patch of the Node's status, which merges conditions by `type` and merges
/// each condition field by field, so the API server keeps every field a report leaves out
/// (the rest of the status, and each condition's `reason`, `message` and
/// `lastTransitionTime`) from the session's earlier full reports: a Due report is sent only
/// when nothing but heartbeats changed. About 0.35 KB instead of 2 KB every
/// `nodeStatusReportFrequency`. (A full report still waiting in the outbox unacknowledged
/// when the next one is due would be replaced by it, as every newer status report replaces
/// an older one there; at the default 5 min, that is a report the cloud has refused for 5
/// minutes.)
pub fn heartbeat(status: &NodeStatus) -> NodeStatus {
    let conditions = status.conditions.as_ref().map(|conditions| {
        conditions
            .iter()
            .map(|c| NodeCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                last_heartbeat_time: c.last_heartbeat_time.clone(),
                ..NodeCondition::default()
            })
            .collect()
    });
    NodeStatus {
        conditions,
        ..NodeStatus::default()
    }
}

/// `status` with the conditions' `lastHeartbeatTime` cleared: what a change is judged on.
fn without_heartbeats(status: &NodeStatus) -> NodeStatus {
    let mut status = status.clone();
    for condition in status.conditions.iter_mut().flatten() {
        condition.last_heartbeat_time = None;
    }
    status
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSystemInfo;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    const REPORT: Duration = Duration::from_secs(300);

    fn status(heartbeat: i64, ready: &str, runtime: &str) -> NodeStatus {
        let time = |s| Some(Time(Timestamp::from_second(s).expect("time")));
        NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                last_heartbeat_time: time(heartbeat),
                last_transition_time: time(0),
                ..NodeCondition::default()
            }]),
            node_info: Some(NodeSystemInfo {
                container_runtime_version: runtime.into(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }
    }

    #[test]
    fn first_status_of_a_session_is_sent() {
        let decision =
            LastSent::default().decide(&status(0, "True", "docker://27"), Instant::now(), REPORT);
        assert_eq!(decision, Decision::First);
        assert!(decision.send());
    }

    #[test]
    fn heartbeat_only_change_waits_for_the_report_frequency() {
        let t0 = Instant::now();
        let mut last = LastSent::default();
        last.sent(status(0, "True", "docker://27"), t0);
        for secs in [10, 290] {
            let at = t0 + Duration::from_secs(secs);
            let decision = last.decide(
                &status(secs.try_into().expect("secs"), "True", "docker://27"),
                at,
                REPORT,
            );
            assert_eq!(decision, Decision::Skip, "after {secs} s");
            assert!(!decision.send());
        }
        let at = t0 + REPORT;
        assert_eq!(
            last.decide(&status(300, "True", "docker://27"), at, REPORT),
            Decision::Due
        );
        // The period counts from the last send.
        last.sent(status(300, "True", "docker://27"), at);
        assert_eq!(
            last.decide(
                &status(310, "True", "docker://27"),
                at + Duration::from_secs(10),
                REPORT
            ),
            Decision::Skip
        );
    }

    #[test]
    fn any_other_change_is_sent_at_once() {
        let t0 = Instant::now();
        let mut last = LastSent::default();
        last.sent(status(0, "True", "docker://unknown"), t0);
        let soon = t0 + Duration::from_secs(10);
        assert_eq!(
            last.decide(&status(10, "True", "docker://27"), soon, REPORT),
            Decision::Changed
        );
        assert_eq!(
            last.decide(&status(10, "False", "docker://unknown"), soon, REPORT),
            Decision::Changed
        );
        // The same status without a heartbeat change is not a change either.
        assert_eq!(
            last.decide(&status(0, "True", "docker://unknown"), soon, REPORT),
            Decision::Skip
        );
    }

    #[test]
    fn a_due_report_carries_only_the_conditions() {
        let full = status(300, "True", "docker://27");
        let beat = heartbeat(&full);
        assert!(beat.node_info.is_none(), "{beat:?}");
        let json = serde_json::to_value(&beat).expect("json");
        assert_eq!(json.as_object().map(|o| o.len()), Some(1), "{json}");
        let (sent, had) = (
            beat.conditions.expect("conditions"),
            full.conditions.expect("full"),
        );
        assert_eq!(sent.len(), had.len());
        for (sent, had) in sent.iter().zip(&had) {
            let fields = serde_json::to_value(sent).expect("json");
            assert_eq!(fields.as_object().map(|o| o.len()), Some(3), "{fields}");
            assert_eq!(
                (&sent.type_, &sent.status, &sent.last_heartbeat_time),
                (&had.type_, &had.status, &had.last_heartbeat_time)
            );
        }
    }
}
