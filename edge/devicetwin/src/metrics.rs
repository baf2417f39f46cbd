//! devicetwin's series, counted into one process-wide instance ([`global`]) and registered by
//! edgecore with its own ([`TwinMetrics::register`]):
//!
//! | series | type | labels |
//! |---|---|---|
//! | `verge_edgecore_twin_reports_total` | counter | `result` (`ok`, `error`) |

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `verge_edgecore_twin_reports_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok` or `error`.
    pub result: &'static str,
}

/// devicetwin's series (cheap to clone: shared).
#[derive(Debug, Clone, Default)]
pub struct TwinMetrics {
    twin_reports: Family<ResultLabels, Counter>,
}

static GLOBAL: LazyLock<TwinMetrics> = LazyLock::new(TwinMetrics::default);

/// The process's series.
pub fn global() -> &'static TwinMetrics {
    &GLOBAL
}

impl TwinMetrics {
    /// Registers these series into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "verge_edgecore_twin_reports",
            "Device twin reports from mappers and edge apps, by result.",
            self.twin_reports.clone(),
        );
    }

    /// Counts a twin report that succeeded (`ok`) or not.
    pub fn twin_report(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.twin_reports
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}
