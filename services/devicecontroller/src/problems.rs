//! Clear errors for Devices that cannot go to their node: a Warning event on the Device
//! (`events.k8s.io/v1`, reportingController `devicecontroller`, reason
//! `DeviceModelNotFound` or `InvalidDevice`, the note naming the field), published once
//! per Device and problem; kube-runtime's [`Recorder`] turns a repetition within minutes
//! into a series (count) on the same Event.
//!
//! [`Reported`] decides what to publish (pure); [`run`] publishes.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
/// channel closes. A failed publish is logged (the Device's problem stays visible in the
/// log; it is published again when the Device or its model changes).
pub async fn run(
    client: kube::Client,
    instance: Option<String>,
    mut reports: mpsc::Receiver<Report>,
    shutdown: CancellationToken,
) {
    let reporter = Reporter {
        controller: crate::IDENTITY.name.to_owned(),
        instance,
    };
    let recorder = Recorder::new(client, reporter);
    loop {
        let report = tokio::select! {
            () = shutdown.cancelled() => break,
            r = reports.recv() => match r { Some(r) => r, None => break },
        };
        let device = report.device.name.clone().unwrap_or_default();
        let namespace = report.device.namespace.clone().unwrap_or_default();
        warn!(%namespace, %device, reason = report.reason, note = %report.note,
            "device not sent to its node");
        let event = Event {
            type_: EventType::Warning,
            reason: report.reason.to_owned(),
            note: Some(report.note),
            action: "SendToNode".to_owned(),
            secondary: None,
        };
        match recorder.publish(&event, &report.device).await {
            Ok(()) => debug!(%namespace, %device, "event published"),
            Err(error) => warn!(%error, %namespace, %device, "cannot publish event"),
        }
    }
}

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
    fn long_notes_are_cut_at_a_character() {
        let note = truncate("é".repeat(600));
        assert!(note.len() <= MAX_NOTE && note.chars().all(|c| c == 'é'));
    }
}
