//! Webhook request duration by webhook and verdict.

use crate::endpoint::Webhook;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// The outcome recorded for one request.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Verdict {
    /// Allowed without a patch.
    allowed,
    /// Allowed with a JSON patch.
    patched,
    /// Denied by a rule.
    denied,
    /// The request could not be decoded (4xx).
    bad_request,
}

impl Verdict {
    /// The label for a rule verdict.
    pub fn of(v: &crate::rules::Verdict) -> Self {
        match (&v.denial, v.patch.is_empty()) {
            (Some(_), _) => Verdict::denied,
            (None, false) => Verdict::patched,
            (None, true) => Verdict::allowed,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    webhook: &'static str,
    verdict: Verdict,
}

/// `btpmanager_webhook_request_duration_seconds{webhook, verdict}`.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    duration: Family<Labels, Histogram>,
}

impl WebhookMetrics {
    /// Create and register in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let duration = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0])
        });
        registry.register(
            "btpmanager_webhook_request_duration_seconds",
            "Time to answer an admission request, by webhook and verdict",
            duration.clone(),
        );
        Self { duration }
    }

    /// Record one request.
    pub fn observe(&self, webhook: Webhook, verdict: Verdict, elapsed: Duration) {
        self.duration
            .get_or_create(&Labels {
                webhook: webhook.as_str(),
                verdict,
            })
            .observe(elapsed.as_secs_f64());
    }
}
