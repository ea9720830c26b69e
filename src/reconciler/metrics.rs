//! `controller_runtime_reconcile_time_seconds` and `controller_runtime_reconcile_total` with the
//! controller-runtime names the Go manager's performance tests read (docs/behaviour.md#metrics), and
//! `btpmanager_certs_regenerations_total`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

const CONTROLLER: &str = "btpoperator";

/// Reconcile duration and outcome counters.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    time: Family<ControllerLabel, Histogram>,
    total: Family<ResultLabels, Counter>,
    certs_regenerations: Counter,
    custom_config_applied: Gauge,
}

impl ReconcileMetrics {
    /// Create and register.
    pub fn register(registry: &mut Registry) -> Self {
        let time = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ])
        });
        let total = Family::<ResultLabels, Counter>::default();
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            time.clone(),
        );
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            total.clone(),
        );
        // Make every result series visible from the start (a 0 is information).
        for result in ["success", "error", "requeue", "requeue_after"] {
            let _ = total.get_or_create(&ResultLabels {
                controller: CONTROLLER,
                result,
            });
        }
        let certs_regenerations = Counter::default();
        registry.register(
            "btpmanager_certs_regenerations",
            "Regenerations of the operand's webhook certificates",
            certs_regenerations.clone(),
        );
        let custom_config_applied = Gauge::default();
        registry.register(
            "btpmanager_custom_config_applied",
            "1 while the runtime config ConfigMap exists and is applied",
            custom_config_applied.clone(),
        );
        Self {
            time,
            total,
            certs_regenerations,
            custom_config_applied,
        }
    }

    /// One regeneration of the operand's certificates.
    pub fn cert_regenerated(&self) {
        self.certs_regenerations.inc();
    }

    /// The runtime ConfigMap is (not) applied.
    pub fn custom_config_applied(&self, applied: bool) {
        self.custom_config_applied.set(i64::from(applied));
    }

    /// Regenerations so far.
    pub fn cert_regenerations(&self) -> u64 {
        self.certs_regenerations.get()
    }

    /// Reconciles finished so far (any result).
    pub fn reconciles(&self) -> u64 {
        ["success", "error", "requeue", "requeue_after"]
            .into_iter()
            .map(|result| {
                self.total
                    .get_or_create(&ResultLabels {
                        controller: CONTROLLER,
                        result,
                    })
                    .get()
            })
            .sum()
    }

    /// Record one reconcile under its controller-runtime `result` label (`success`, `requeue_after`,
    /// `requeue`, `error`).
    pub fn observe(&self, label: &'static str, elapsed: Duration) {
        self.time
            .get_or_create(&ControllerLabel { controller: CONTROLLER })
            .observe(elapsed.as_secs_f64());
        self.total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER,
                result: label,
            })
            .inc();
    }
}
