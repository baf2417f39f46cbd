//! Which syncs of a pod continue the trace of the cloud change that caused them.
//!
//! A pod's worker gets the W3C context of every change metamanager committed (the
//! `metamanager.apply` span); the syncs that act on it are `edged.sync` spans in that trace,
//! until the pod has started (phase no longer `Pending`) or [`MAX_TRACED_SYNCS`] syncs
//! later. Other syncs (the periodic resync, PLEG wake-ups of a running pod) are not
//! exported, so a running pod adds no trace every 10 s.

use verge_core::{ResourceKey, TraceContext};

/// Most syncs of one change that join its trace (a pod stuck in back-off stops adding).
const MAX_TRACED_SYNCS: u32 = 32;

/// The trace the next syncs continue; see the module docs.
#[derive(Debug, Default)]
pub(super) struct SyncTrace {
    parent: TraceContext,
    syncs: u32,
}

impl SyncTrace {
    /// Continues the trace of `change` from the next sync on, unless a change is being
    /// applied already: a pod keeps the trace of the change that started it (its creation)
    /// until it has started, whatever updates arrive meanwhile (e.g. edgecontroller's
    /// optional toleration patch). An empty context changes nothing.
    pub(super) fn follow(&mut self, change: TraceContext) {
        if !change.is_empty() && self.parent.is_empty() {
            self.parent = change;
            self.syncs = 0;
        }
    }

    /// The span of the next sync of `key`/`uid`: an `edged.sync` child of the followed
    /// trace, or a disabled span when none is followed.
    pub(super) fn sync_span(&mut self, key: &ResourceKey, uid: &str) -> tracing::Span {
        if self.parent.is_empty() {
            return tracing::Span::none();
        }
        self.syncs += 1;
        if self.syncs > MAX_TRACED_SYNCS {
            self.parent = TraceContext::default();
            return tracing::Span::none();
        }
        let span = verge_telemetry::span!(
            "edged.sync",
            k8s.namespace.name = %key.namespace,
            k8s.pod.name = %key.name,
            k8s.pod.uid = %uid,
            verge.sync = self.syncs,
        );
        verge_telemetry::propagation::set_parent(&span, &self.parent);
        span
    }

    /// The pod has started (or ended): later syncs are not traced until the next change.
    pub(super) fn settled(&mut self) {
        self.parent = TraceContext::default();
    }
}
