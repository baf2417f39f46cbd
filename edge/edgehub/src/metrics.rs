//! edgehub's series, counted into one process-wide instance ([`global`]) and registered by
//! edgecore with its own ([`HubMetrics::register`]):
//!
//! | series | type | labels |
//! |---|---|---|
//! | `verge_edgecore_messages_total` | counter | `direction` (`upstream`, `downstream`), `group`, `operation` |
//! | `verge_edgecore_connected` | gauge | — (1 while a cloudhub session is up) |
//! | `verge_edgecore_reconnects_total` | counter | — (sessions established after the first) |

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use verge_core::Envelope;
use verge_runtime::metrics::MessageLabels;

/// edgehub's series (cheap to clone: shared).
#[derive(Debug, Clone, Default)]
pub struct HubMetrics {
    messages: Family<MessageLabels, Counter>,
    connected: Gauge,
    reconnects: Counter,
}

static GLOBAL: LazyLock<HubMetrics> = LazyLock::new(HubMetrics::default);

/// The process's series.
pub fn global() -> &'static HubMetrics {
    &GLOBAL
}

impl HubMetrics {
    /// Registers these series into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "verge_edgecore_messages",
            "Messages on the cloudhub stream by direction (upstream: written; downstream: read), group and operation.",
            self.messages.clone(),
        );
        registry.register(
            "verge_edgecore_connected",
            "1 while a cloudhub session is established, else 0.",
            self.connected.clone(),
        );
        registry.register(
            "verge_edgecore_reconnects",
            "Cloudhub sessions established after the first one of this process.",
            self.reconnects.clone(),
        );
    }

    /// Counts `envelope` written upstream (`upstream: true`) or read downstream.
    pub fn message(&self, upstream: bool, envelope: &Envelope) {
        self.messages
            .get_or_create(&MessageLabels {
                direction: if upstream { "upstream" } else { "downstream" },
                group: envelope.group.metric_label(),
                operation: envelope.operation().as_str(),
            })
            .inc();
    }

    /// Session `generation` (1 for the first) was established.
    pub fn session_established(&self, generation: u64) {
        self.connected.set(1);
        if generation > 1 {
            self.reconnects.inc();
        }
    }

    /// The session ended.
    pub fn session_ended(&self) {
        self.connected.set(0);
    }
}
