//! How a started manager ends: gracefully on a shutdown request, or at once as a killed process.

use crate::ops;
use crate::tasks::AbortOnDrop;
use anyhow::Context as _;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long the in-flight reconcile and the Lease release may take after SIGTERM (deploy/deployment.yaml's
/// `terminationGracePeriodSeconds` is larger than this plus the drain delay).
pub const RECONCILER_STOP_BUDGET: Duration = Duration::from_secs(15);

/// What a started manager holds for its shutdown.
pub struct ShutdownPlan {
    /// Shutdown requested (the reconciler watches it too).
    pub term: watch::Receiver<bool>,
    /// The drain is over: stop serving (webhooks, probes, certificate rotation).
    pub stop: watch::Sender<bool>,
    pub ready: ops::Readiness,
    pub drain_delay: Duration,
    /// How long the reconciler may take to stop ([`RECONCILER_STOP_BUDGET`]).
    pub reconciler_budget: Duration,
    pub reconciler: JoinHandle<()>,
    pub webhooks: JoinHandle<std::io::Result<()>>,
}

impl ShutdownPlan {
    /// Wait for the shutdown request, then: not ready at once, reconciler stopped and Lease released (it
    /// saw `term` too), webhooks served through the drain delay, then stopped.
    pub async fn shut_down(self) -> anyhow::Result<()> {
        let ShutdownPlan {
            mut term,
            stop,
            ready,
            drain_delay,
            reconciler_budget,
            reconciler,
            webhooks,
        } = self;
        let _ = term.wait_for(|t| *t).await;
        ready.set(false);
        let started = tokio::time::Instant::now();
        tracing::info!(drain_delay = ?drain_delay, "shutdown requested: not ready; webhooks keep serving through the drain delay");
        let reconciler = async move {
            let mut reconciler = AbortOnDrop::new(reconciler);
            match tokio::time::timeout(reconciler_budget, reconciler.handle()).await {
                Ok(_) => tracing::info!(after = ?started.elapsed(), "reconciler stopped (lease released if held)"),
                // Dropping the guard aborts it: it must not go on (holding the Lease) after we said it stopped.
                Err(_) => tracing::warn!(budget = ?reconciler_budget, "reconciler did not stop in time; aborted"),
            }
        };
        let drain = async move {
            tokio::time::sleep(drain_delay).await;
            let _ = stop.send(true);
            let result = webhooks.await;
            tracing::info!(after = ?started.elapsed(), "webhook server stopped");
            result
        };
        let ((), served) = tokio::join!(reconciler, drain);
        served.context("webhook server task")?.context("webhook server")?;
        tracing::info!("stopped");
        Ok(())
    }

    /// Stop at once, as a killed process would: the in-flight reconcile is abandoned, a held Lease is not
    /// released (it expires), open webhook connections are dropped.
    pub async fn kill(self) {
        let ShutdownPlan {
            stop,
            ready,
            reconciler,
            webhooks,
            ..
        } = self;
        ready.set(false);
        reconciler.abort();
        webhooks.abort();
        let _ = reconciler.await;
        let _ = webhooks.await;
        // What remains (metrics, health, certificate rotation) has nothing in flight: it ends at once.
        let _ = stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// What the stand-in tasks saw, in order.
    type Seen = Arc<Mutex<Vec<String>>>;

    struct Fixture {
        term: watch::Sender<bool>,
        stop: watch::Receiver<bool>,
        ready: ops::Readiness,
        seen: Seen,
        plan: ShutdownPlan,
    }

    /// A plan whose reconciler stops when `term` is set (unless `stuck`) and whose webhook server stops
    /// when `stop` is set, answering `served`; both note what they saw.
    fn fixture(stuck: bool, served: std::io::Result<()>, reconciler_budget: Duration) -> Fixture {
        let (term_tx, term) = watch::channel(false);
        let (stop_tx, stop) = watch::channel(false);
        let ready = ops::Readiness::default();
        ready.set(true);
        ready.set_admission(true);
        let seen = Seen::default();
        let reconciler = {
            let (mut term, seen) = (term.clone(), seen.clone());
            tokio::spawn(async move {
                let _ = term.wait_for(|t| *t).await;
                if stuck {
                    std::future::pending::<()>().await;
                }
                seen.lock().unwrap().push("reconciler stopped".to_string());
            })
        };
        let webhooks = {
            let (mut stop, term, ready, seen) = (stop.clone(), term.clone(), ready.clone(), seen.clone());
            tokio::spawn(async move {
                let _ = stop.wait_for(|s| *s).await;
                let line = format!("webhooks stopped (term: {}, ready: {})", *term.borrow(), ready.get());
                seen.lock().unwrap().push(line);
                served
            })
        };
        Fixture {
            term: term_tx,
            stop,
            ready: ready.clone(),
            seen,
            plan: ShutdownPlan {
                term,
                stop: stop_tx,
                ready,
                drain_delay: Duration::ZERO,
                reconciler_budget,
                reconciler,
                webhooks,
            },
        }
    }

    fn seen(seen: &Seen) -> Vec<String> {
        seen.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_shutdown_waits_for_the_request_then_stops_ready_first_and_the_webhooks_last() {
        let f = fixture(false, Ok(()), RECONCILER_STOP_BUDGET);
        let shutdown = tokio::spawn(f.plan.shut_down());
        tokio::task::yield_now().await;
        assert!(f.ready.get() && !*f.stop.borrow(), "nothing happens before the request");
        f.term.send(true).unwrap();
        shutdown.await.unwrap().expect("a clean shutdown");
        assert!(!f.ready.get());
        assert!(*f.stop.borrow(), "the drain is over");
        let seen = seen(&f.seen);
        assert!(seen.contains(&"reconciler stopped".into()), "{seen:?}");
        assert!(
            seen.contains(&"webhooks stopped (term: true, ready: false)".into()),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_reconciler_that_does_not_stop_within_its_budget_is_aborted() {
        let f = fixture(true, Ok(()), Duration::from_millis(1));
        f.term.send(true).unwrap();
        f.plan.shut_down().await.expect("the shutdown still ends");
        assert_eq!(seen(&f.seen), ["webhooks stopped (term: true, ready: false)"]);
    }

    #[tokio::test]
    async fn a_failed_webhook_server_fails_the_shutdown() {
        let f = fixture(
            false,
            Err(std::io::Error::other("accept failed")),
            RECONCILER_STOP_BUDGET,
        );
        f.term.send(true).unwrap();
        let error = f.plan.shut_down().await.expect_err("the server's error is reported");
        assert!(
            format!("{error:#}").contains("webhook server: accept failed"),
            "{error:#}"
        );
    }

    #[tokio::test]
    async fn a_kill_abandons_the_reconciler_and_the_webhooks_without_a_request() {
        let f = fixture(true, Ok(()), RECONCILER_STOP_BUDGET);
        f.plan.kill().await;
        assert!(!f.ready.get());
        assert!(*f.stop.borrow(), "what remains is told to stop");
        assert!(!*f.term.borrow());
        assert!(seen(&f.seen).is_empty(), "neither ran to its end: {:?}", seen(&f.seen));
    }
}
