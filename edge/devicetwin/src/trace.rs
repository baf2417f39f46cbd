//! Tracing of device twins, in both directions.
//!
//! * **Reports** (edge → cloud): every `devicestatus` report the writer commits is made in a
//!   `devicetwin.report` span whose context the report carries (in the outbox, then
//!   `edgehub.send` → cloudhub → devicecontroller). Only reports that change what the cloud
//!   sees start one, so a mapper polling an unchanged value adds no trace. The span is a
//!   root, or continues the trace of the change that caused it (an MQTT twin update from an
//!   edge app: `devicetwin.mqtt_update`).
//! * **Desired changes** (cloud → edge → mapper): a Device change metamanager committed is
//!   followed in a `devicetwin.desired` span continuing the message's trace; the next DMI call
//!   that gives the Device to its mapper (`dmi.update_device`, `dmi.register_device`) is its
//!   child (`DesiredTraces`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use verge_core::TraceContext;

use super::devices::DeviceId;

/// The `devicetwin.report` span of a report of `twins` properties of Device `id`, continuing
/// `parent` when it is set (else a root). End it with [`end`] after the commit.
pub(super) fn report_span(id: &DeviceId, twins: usize, parent: &TraceContext) -> tracing::Span {
    let span = verge_telemetry::span!(
        "devicetwin.report",
        k8s.namespace.name = %id.namespace,
        verge.device.name = %id.name,
        verge.twin.properties = twins,
        otel.status_code = tracing::field::Empty,
    );
    verge_telemetry::propagation::set_parent(&span, parent);
    span
}

/// Ends `span` now, `failed` marking it as an error: tracing-opentelemetry ends a span at its
/// last exit, so a span that was never entered is entered once here.
pub(super) fn end(span: tracing::Span, failed: bool) {
    if failed {
        span.record("otel.status_code", "ERROR");
    }
    span.in_scope(|| {});
}

/// The `devicetwin.mqtt_update` span of an edge app's MQTT twin update of Device
/// `namespace/name` naming `twins` properties: the root of the update's trace.
pub(super) fn mqtt_update_span(namespace: &str, name: &str, twins: usize) -> tracing::Span {
    verge_telemetry::span!(
        "devicetwin.mqtt_update",
        k8s.namespace.name = %namespace,
        verge.device.name = %name,
        verge.twin.properties = twins,
        otel.status_code = tracing::field::Empty,
    )
}

/// The `devicetwin.desired` span of a committed change of `resource` (a Device or
/// DeviceModel path), continuing `trace` (the change's message); disabled when `trace` is
/// empty.
pub(super) fn desired_span(resource: &str, trace: &TraceContext) -> tracing::Span {
    verge_telemetry::propagation::continued(
        trace,
        || verge_telemetry::span!("devicetwin.desired", verge.resource = %resource),
    )
}

/// Per Device, the trace of its latest traced desired change that no mapper call has
/// carried out yet; shared by the reconciler (which records) and the mapper workers (which
/// continue it). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(super) struct DesiredTraces(Arc<Mutex<HashMap<DeviceId, TraceContext>>>);

impl DesiredTraces {
    /// Records the context of the current span (a `devicetwin.desired`) for `id`; nothing
    /// when the current span is not exported.
    pub(super) fn record_current(&self, id: &DeviceId) {
        let trace = verge_telemetry::propagation::inject_current();
        if !trace.is_empty() {
            self.lock().insert(id.clone(), trace);
        }
    }

    /// The trace the next mapper call for `id` continues (empty: none).
    pub(super) fn get(&self, id: &DeviceId) -> TraceContext {
        self.lock().get(id).cloned().unwrap_or_default()
    }

    /// The mapper holds `id` as desired now: later calls are not part of that trace.
    pub(super) fn done(&self, id: &DeviceId) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<DeviceId, TraceContext>> {
        // The map holds no invariant a panic could break.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The span of a DMI call giving Device `id` to its mapper (`update`: `UpdateDevice`, else
/// `RegisterDevice`), continuing `trace`; disabled when `trace` is empty.
pub(super) fn dmi_span(update: bool, id: &DeviceId, trace: &TraceContext) -> tracing::Span {
    verge_telemetry::propagation::continued(trace, || {
        if update {
            verge_telemetry::span!(
                "dmi.update_device",
                k8s.namespace.name = %id.namespace,
                verge.device.name = %id.name,
                otel.status_code = tracing::field::Empty,
            )
        } else {
            verge_telemetry::span!(
                "dmi.register_device",
                k8s.namespace.name = %id.namespace,
                verge.device.name = %id.name,
                otel.status_code = tracing::field::Empty,
            )
        }
    })
}
