//! Clear errors for Devices that cannot go to their node: a Warning event on the Device
//! (`events.k8s.io/v1`, reportingController `devicecontroller`, reason
//! `DeviceModelNotFound` or `InvalidDevice`, the note naming the field), published once
//! per Device and problem.
//!
//! [`Reported`] decides what to publish (pure); [`run`] publishes, creating one Event per
//! report. (kube-runtime's `Recorder` is not used: it folds every event of the same reason
//! within minutes into a series of the first one, keeping its note, so a second, different
//! `InvalidDevice` problem would show the first one's text.)

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Resource};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use verge_core::ResourceKey;

use crate::cache::device_resource;
use crate::desired::Problem;

/// Longest event note, in bytes (the API's limit is 1 kB).
const MAX_NOTE: usize = 1000;

/// An event to publish about a Device.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The Device (with its uid).
    pub device: ObjectReference,
    /// The event reason, e.g. `DeviceModelNotFound`.
    pub reason: &'static str,
    /// What is wrong.
    pub note: String,
}

/// The problem last reported per Device: its uid and the note.
#[derive(Debug, Default)]
pub struct Reported(HashMap<ResourceKey, (String, String)>);

impl Reported {
    /// The outcome of validating `device` (key `key`): the [`Report`] to publish when the
    /// problem is new for this Device (another problem, or another uid, than the last one
    /// reported), `None` when it was reported already or the Device is valid (a valid
    /// Device's next problem is reported again).
    pub fn check(
        &mut self,
        key: &ResourceKey,
        device: &DynamicObject,
        outcome: Result<(), &Problem>,
    ) -> Option<Report> {
        let problem = match outcome {
            Ok(()) => {
                self.0.remove(key);
                return None;
            }
            Err(problem) => problem,
        };
        let uid = device.metadata.uid.clone().unwrap_or_default();
        let note = truncate(problem.note());
        let current = (uid, note.clone());
        if self.0.get(key) == Some(&current) {
            return None;
        }
        self.0.insert(key.clone(), current);
        Some(Report {
            device: device.object_ref(&device_resource()),
            reason: problem.reason(),
            note,
        })
    }

    /// The Device is gone (or its report could not be queued): its next problem is new.
    pub fn forget(&mut self, key: &ResourceKey) {
        self.0.remove(key);
    }
}

/// `note` cut to at most [`MAX_NOTE`] bytes at a character boundary.
fn truncate(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

/// Publishes every [`Report`] of `reports` as a Warning event until `shutdown` or until the
/// channel closes; `instance` is the event's `reportingInstance`. A failed publish is logged
/// (the problem stays visible in the log; it is published again when the Device or its
/// model changes in a way that changes the problem, or after a restart).
pub async fn run(
    client: kube::Client,
    instance: String,
    mut reports: mpsc::Receiver<Report>,
    shutdown: CancellationToken,
) {
    loop {
        let report = tokio::select! {
            () = shutdown.cancelled() => break,
            r = reports.recv() => match r { Some(r) => r, None => break },
        };
        let device = report.device.name.clone().unwrap_or_default();
        let namespace = report.device.namespace.clone().unwrap_or_default();
        warn!(%namespace, %device, reason = report.reason, note = %report.note,
            "device not sent to its node");
        let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
        let event = event(&report, &instance, Timestamp::now());
        match events.create(&PostParams::default(), &event).await {
            Ok(_) => debug!(%namespace, %device, "event published"),
            Err(error) => warn!(%error, %namespace, %device, "cannot publish event"),
        }
    }
}

/// The Warning event of `report` at `now`, named `<device>.<nanoseconds as hex>` (as
/// Kubernetes' event recorders name theirs).
pub fn event(report: &Report, instance: &str, now: Timestamp) -> Event {
    let device = report.device.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{device}.{:x}", now.as_nanosecond())),
            namespace: report.device.namespace.clone(),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".to_owned()),
        reason: Some(report.reason.to_owned()),
        note: Some(report.note.clone()),
        action: Some(ACTION.to_owned()),
        regarding: Some(report.device.clone()),
        reporting_controller: Some(crate::IDENTITY.name.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Event::default()
    }
}

/// The event's `action`: what devicecontroller did not do.
pub const ACTION: &str = "SendToNode";

#[cfg(test)]
mod tests {
    use serde_json::json;
    use verge_core::ResourceType;
    use verge_device_api::Invalid;

    use super::*;

    fn device(uid: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
            "metadata": { "name": "d", "namespace": "ns", "uid": uid },
        }))
        .expect("device")
    }

    #[test]
    fn each_problem_is_reported_once_per_device() {
        let key = ResourceKey::new("ns", ResourceType::Device, "d");
        let missing = Problem::Invalid(Invalid::ModelNotFound {
            namespace: "ns".into(),
            name: "m".into(),
        });
        let mut r = Reported::default();
        let report = r.check(&key, &device("u1"), Err(&missing)).expect("new");
        assert_eq!(report.reason, "DeviceModelNotFound");
        assert_eq!(report.note, "device model ns/m not found");
        assert_eq!(report.device.uid.as_deref(), Some("u1"));
        assert_eq!(report.device.kind.as_deref(), Some("Device"));
        assert!(r.check(&key, &device("u1"), Err(&missing)).is_none());
        // A replaced Device (new uid) gets its own event.
        assert!(r.check(&key, &device("u2"), Err(&missing)).is_some());
        // Fixed, then broken again: reported again.
        assert!(r.check(&key, &device("u2"), Ok(())).is_none());
        let no_visitor = Problem::Invalid(Invalid::NoVisitor {
            property: "t".into(),
        });
        let report = r.check(&key, &device("u2"), Err(&no_visitor)).expect("new");
        assert_eq!(report.reason, "InvalidDevice");
        r.forget(&key);
        assert!(r.check(&key, &device("u2"), Err(&no_visitor)).is_some());
    }

    #[test]
    fn the_event_names_device_reason_and_controller() {
        let key = ResourceKey::new("ns", ResourceType::Device, "d");
        let problem = Problem::Invalid(Invalid::NoProtocol);
        let report = Reported::default()
            .check(&key, &device("u1"), Err(&problem))
            .expect("new");
        let e = event(&report, "dc-0", Timestamp::UNIX_EPOCH);
        assert_eq!(e.metadata.name.as_deref(), Some("d.0"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("InvalidDevice"));
        assert_eq!(
            e.note.as_deref(),
            Some("spec.protocol.protocolName is empty")
        );
        assert_eq!(e.reporting_controller.as_deref(), Some("devicecontroller"));
        assert_eq!(e.reporting_instance.as_deref(), Some("dc-0"));
        assert_eq!(e.regarding.and_then(|r| r.uid).as_deref(), Some("u1"));
    }

    #[test]
    fn long_notes_are_cut_at_a_character() {
        let note = truncate("é".repeat(600));
        assert!(note.len() <= MAX_NOTE && note.chars().all(|c| c == 'é'));
    }
}
