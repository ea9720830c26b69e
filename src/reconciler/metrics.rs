//! `controller_runtime_reconcile_time_seconds` and `controller_runtime_reconcile_total` with the
//! controller-runtime names the Go manager's performance tests read (docs/behaviour.md#metrics),
//! `btpmanager_certs_regenerations_total`, and what alerts need (`deploy/monitoring/`): whether this replica
//! leads, the CR's state, the last successful reconcile, and when each certificate expires.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabel {
    certificate: &'static str,
}

const CONTROLLER: &str = "btpoperator";

/// The states a `BtpOperator` can be in (`btpmanager_btpoperator_state{state}`).
const STATES: [&str; 5] = ["Processing", "Ready", "Error", "Deleting", "Warning"];

/// The certificates whose expiry is exported (`btpmanager_certificate_expiration_timestamp_seconds{certificate}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// The CA of the manager's own webhooks (Secret `btp-manager-webhook-cert`).
    ManagerCa,
    /// The manager's webhook serving certificate.
    ManagerLeaf,
    /// The operand's webhook CA (`ca-server-cert`).
    OperandCa,
    /// The operand's webhook serving certificate (`webhook-server-cert`).
    OperandLeaf,
}

impl Certificate {
    fn label(self) -> &'static str {
        match self {
            Certificate::ManagerCa => "manager-ca",
            Certificate::ManagerLeaf => "manager-leaf",
            Certificate::OperandCa => "operand-ca",
            Certificate::OperandLeaf => "operand-leaf",
        }
    }
}

/// When each certificate expires, as a Unix timestamp: an alert compares it with `time()`, so the value never
/// goes stale between two updates (as a "seconds left" gauge would). Shared by the reconciler (the operand's
/// certificates) and the manager's own webhook certificates.
#[derive(Clone, Debug, Default)]
pub struct CertificateExpiry(Family<CertificateLabel, Gauge<f64, AtomicU64>>);

impl CertificateExpiry {
    /// Record that `certificate` (PEM) expires when it says; a certificate that does not parse removes the series.
    pub fn observe_pem(&self, certificate: Certificate, pem: &[u8]) {
        match btp_certs::parse_cert_pem(pem) {
            Ok(info) => self.set(certificate, info.not_after),
            Err(_) => self.forget(certificate),
        }
    }

    /// Record `not_after` for `certificate`.
    pub fn set(&self, certificate: Certificate, not_after: SystemTime) {
        let seconds = not_after
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.0
            .get_or_create(&CertificateLabel {
                certificate: certificate.label(),
            })
            .set(seconds);
    }

    /// No such certificate (any more).
    pub fn forget(&self, certificate: Certificate) {
        self.0.remove(&CertificateLabel {
            certificate: certificate.label(),
        });
    }

    /// The recorded expiry of `certificate`, as a Unix timestamp.
    pub fn get(&self, certificate: Certificate) -> Option<f64> {
        let label = CertificateLabel {
            certificate: certificate.label(),
        };
        self.0.get(&label).map(|g| g.get())
    }
}

/// Reconcile duration and outcome counters, and the gauges alerts read.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    time: Family<ControllerLabel, Histogram>,
    total: Family<ResultLabels, Counter>,
    certs_regenerations: Counter,
    custom_config_applied: Gauge,
    leader: Gauge,
    state: Family<StateLabel, Gauge>,
    last_success: Gauge<f64, AtomicU64>,
    certificates: CertificateExpiry,
    credentials_check: crate::credentials_check::runner::CheckMetrics,
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
        let leader = Gauge::default();
        registry.register(
            "btpmanager_leader",
            "1 while this replica leads and reconciles, else 0",
            leader.clone(),
        );
        let state = Family::<StateLabel, Gauge>::default();
        registry.register(
            "btpmanager_btpoperator_state",
            "1 for the state kyma-system/btpoperator is in (exported by the leading replica while the CR exists)",
            state.clone(),
        );
        let last_success = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "btpmanager_reconcile_last_success_timestamp_seconds",
            "When a reconcile of kyma-system/btpoperator last succeeded (Unix time)",
            last_success.clone(),
        );
        let certificates = CertificateExpiry::default();
        registry.register(
            "btpmanager_certificate_expiration_timestamp_seconds",
            "When each webhook certificate expires (Unix time): manager-ca, manager-leaf, operand-ca, operand-leaf",
            certificates.0.clone(),
        );
        let credentials_check = crate::credentials_check::runner::CheckMetrics::register(registry);
        Self {
            time,
            total,
            certs_regenerations,
            custom_config_applied,
            leader,
            state,
            last_success,
            certificates,
            credentials_check,
        }
    }

    /// The certificate expiry family (shared with the manager's own webhook certificates).
    pub fn certificates(&self) -> CertificateExpiry {
        self.certificates.clone()
    }

    /// This replica starts or stops leading. A replica that does not lead exports no CR state (the leader's
    /// is the truth).
    pub fn set_leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            self.state.clear();
            self.credentials_check.clear();
        }
    }

    /// The credentials check's metrics.
    pub fn credentials_check(&self) -> crate::credentials_check::runner::CheckMetrics {
        self.credentials_check.clone()
    }

    /// Whether this replica leads.
    pub fn leading(&self) -> bool {
        self.leader.get() == 1
    }

    /// The CR is in `state` (`None`: it is gone, or has no state yet).
    pub fn cr_state(&self, state: Option<&str>) {
        for s in STATES {
            match state {
                Some(current) => {
                    self.state
                        .get_or_create(&StateLabel { state: s })
                        .set(i64::from(s == current));
                }
                None => {
                    self.state.remove(&StateLabel { state: s });
                }
            }
        }
    }

    /// The CR state exported, if any.
    pub fn exported_state(&self) -> Option<&'static str> {
        STATES
            .into_iter()
            .find(|s| self.state.get(&StateLabel { state: s }).is_some_and(|g| g.get() == 1))
    }

    /// A reconcile succeeded now.
    pub fn reconcile_succeeded(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_success.set(now);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn the_cr_state_is_one_hot_and_gone_with_the_cr_or_the_lead() {
        let mut registry = Registry::default();
        let m = ReconcileMetrics::register(&mut registry);
        m.set_leading(true);
        m.cr_state(Some("Ready"));
        let text = exposition(&registry);
        assert!(
            text.contains("btpmanager_btpoperator_state{state=\"Ready\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("btpmanager_btpoperator_state{state=\"Error\"} 0"),
            "{text}"
        );
        assert!(text.contains("btpmanager_leader 1"), "{text}");
        assert_eq!(m.exported_state(), Some("Ready"));
        m.cr_state(None);
        assert!(!exposition(&registry).contains("btpmanager_btpoperator_state{"));
        m.cr_state(Some("Processing"));
        m.set_leading(false);
        let text = exposition(&registry);
        assert!(!text.contains("btpmanager_btpoperator_state{"), "{text}");
        assert!(text.contains("btpmanager_leader 0"), "{text}");
    }

    #[test]
    fn certificate_expiry_is_the_not_after_of_the_pem_and_unparsable_removes_it() {
        let mut registry = Registry::default();
        let m = ReconcileMetrics::register(&mut registry);
        let spec = btp_certs::CaSpec {
            common_name: Some("test".into()),
            validity: Duration::from_secs(3600),
            key: btp_certs::KeyAlgorithm::default(),
        };
        let ca = btp_certs::generate_ca(&spec, SystemTime::now()).unwrap();
        m.certificates()
            .observe_pem(Certificate::OperandCa, ca.cert_pem.as_bytes());
        let info = btp_certs::parse_cert_pem(ca.cert_pem.as_bytes()).unwrap();
        let expected = info
            .not_after
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert_eq!(m.certificates().get(Certificate::OperandCa), Some(expected));
        assert!(exposition(&registry).contains("certificate=\"operand-ca\""));
        m.certificates().observe_pem(Certificate::OperandCa, b"garbage");
        assert_eq!(m.certificates().get(Certificate::OperandCa), None);
    }
}
