//! The checker of one leadership term: it follows the inputs passes hand over ([`Exchange::submit`]), asks the
//! token endpoint when [`schedule::next`] says so, and publishes each verdict ([`Exchange::publish`]; a new
//! one brings a pass, which writes the condition) and its metrics. It starts and ends with the controller's
//! term, so only the leading replica asks.

use super::schedule::{self, Next};
use super::{request, Exchange, Input, Verdict};
use btp_api::CredentialsReason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// `btpmanager_credentials_check{result}` and `btpmanager_credential_probe_status`.
#[derive(Clone, Debug, Default)]
pub struct CheckMetrics {
    result: Family<ResultLabel, Gauge>,
    probe: Gauge,
}

impl CheckMetrics {
    /// Create and register.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "btpmanager_credentials_check",
            "1 for the last result of the credentials check (the CredentialsValid reason), exported by the leading \
             replica",
            metrics.result.clone(),
        );
        registry.register(
            "btpmanager_credential_probe_status",
            "1 when the token endpoint's TLS certificate is not trusted (the Go manager's CA-bundle probe), else 0",
            metrics.probe.clone(),
        );
        metrics
    }

    /// The last verdict is `verdict`.
    pub fn observe(&self, verdict: &Verdict) {
        for reason in CredentialsReason::ALL {
            self.result
                .get_or_create(&ResultLabel {
                    result: reason.as_str(),
                })
                .set(i64::from(reason == verdict.reason));
        }
        self.probe.set(verdict.probe_status());
    }

    /// This replica no longer checks: it exports no result (the leader's is the truth).
    pub fn clear(&self) {
        self.result.clear();
        self.probe.set(0);
    }

    /// The result exported, if any.
    pub fn exported(&self) -> Option<&'static str> {
        CredentialsReason::ALL
            .into_iter()
            .map(CredentialsReason::as_str)
            .find(|r| {
                self.result
                    .get(&ResultLabel { result: r })
                    .is_some_and(|g| g.get() == 1)
            })
    }
}

/// Check until the exchange is dropped (the term ends) or this task is aborted.
pub async fn run(exchange: Arc<Exchange>, metrics: CheckMetrics) {
    let mut inputs = exchange.inputs();
    let mut last: Option<(Input, Instant)> = None;
    // The TLS configuration of the last CA bundle (the system roots are read once per process).
    let mut tls: Option<(String, Result<Arc<rustls::ClientConfig>, Verdict>)> = None;
    loop {
        let input = inputs.borrow_and_update().clone();
        match schedule::next(input.as_ref(), last.as_ref(), Instant::now()) {
            Next::Idle => {}
            Next::Report(verdict) if verdict.reason == CredentialsReason::Disabled => {
                // Passes report `Disabled` from their settings ([`Exchange::verdict`]): no pass to bring, and
                // no earlier verdict to show once the check is on again.
                last = None;
                metrics.observe(&verdict);
                exchange.forget();
            }
            Next::Report(verdict) => {
                last = None;
                publish(&exchange, &metrics, verdict);
            }
            Next::CheckNow => {
                let Some(input) = input else { continue };
                let Ok(target) = &input.target else { continue };
                let config = match &tls {
                    Some((bundle, config)) if *bundle == input.ca_bundle => config.clone(),
                    _ => {
                        let config = request::tls_config(&input.ca_bundle);
                        tls = Some((input.ca_bundle.clone(), config.clone()));
                        config
                    }
                };
                let verdict = match config {
                    Ok(config) => request::check(target, config).await,
                    Err(verdict) => verdict,
                };
                last = Some((input, Instant::now()));
                publish(&exchange, &metrics, verdict);
                // The input may have changed during the request: look again at once.
                continue;
            }
            Next::At(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at.into()) => continue,
                    changed = inputs.changed() => if changed.is_err() { return } else { continue },
                }
            }
        }
        if inputs.changed().await.is_err() {
            return;
        }
    }
}

fn publish(exchange: &Exchange, metrics: &CheckMetrics, verdict: Verdict) {
    metrics.observe(&verdict);
    let reason = verdict.reason;
    if exchange.publish(verdict) {
        tracing::info!(result = %reason, "credentials check: a new result");
    } else {
        tracing::debug!(result = %reason, "credentials check: the same result");
    }
}
