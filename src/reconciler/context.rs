//! What every reconcile shares: the client, the configuration, the operand's manifests, metrics, the Event
//! recorder, and the few clocks that span passes (the `ReadyTimeout` wait and the hard-delete deadline).

use super::metrics::ReconcileMetrics;
use super::resources::ModuleResources;
use crate::config::Config;
use btp_api::BtpOperator;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::Resource as _;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

/// Shared state of the controller.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// Configuration; the runtime ConfigMap may change it.
    pub config: RwLock<Config>,
    /// The operand's manifests.
    pub resources: RwLock<Arc<ModuleResources>>,
    /// `SAP_BTP_SERVICE_OPERATOR`.
    pub image: String,
    /// `KUBE_RBAC_PROXY`.
    pub rbac_proxy_image: Option<String>,
    /// The operand's network policies (manager-resources/network-policies).
    network_policies: RwLock<Arc<Vec<Value>>>,
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    recorder: Recorder,
    /// The `ReadyTimeout` clock: which CR (uid) waits for the operand Deployment, since when, and whether the
    /// wait began in `Ready`.
    waiting_since: Mutex<Option<(String, Instant, bool)>>,
    /// The hard delete of the CR being deleted in this process.
    hard_delete: Mutex<Option<HardDeleteClock>>,
    /// Whether the CR is being deleted: ServiceInstance/ServiceBinding deletions only wake the reconciler then.
    deleting: AtomicBool,
    /// Consecutive failed reconciles (for the error backoff); reset by a success.
    failures: AtomicU32,
    /// When the retry of a failed reconcile is due; until then, changes of secondary objects do not
    /// bring the CR back (a failing pass that restores the operand would otherwise trigger itself).
    retry_at: Mutex<Option<Instant>>,
    /// The operand Secrets we created, anywhere in the cluster (metadata only), kept by a watch that
    /// `controller::run` starts: drift reads them on every pass without a cluster-wide list.
    operand_secrets: RwLock<Option<Store<PartialObjectMeta<Secret>>>>,
}

/// When the hard delete of one CR incarnation began, and whether it was given up (soft delete instead).
struct HardDeleteClock {
    uid: String,
    since: Instant,
    given_up: bool,
}

/// One of the clocks below, locked (a poisoned lock still holds a usable value).
fn clock<T>(slot: &Mutex<Option<T>>) -> MutexGuard<'_, Option<T>> {
    match slot.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Context {
    /// A context; `resources` are loaded by the caller.
    pub fn new(
        client: kube::Client,
        config: Config,
        resources: ModuleResources,
        image: String,
        rbac_proxy_image: Option<String>,
        metrics: ReconcileMetrics,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "btp-manager".into(),
                instance: None,
            },
        );
        Self {
            client,
            config: RwLock::new(config),
            resources: RwLock::new(Arc::new(resources)),
            image,
            rbac_proxy_image,
            network_policies: RwLock::new(Arc::new(Vec::new())),
            metrics,
            recorder,
            waiting_since: Mutex::new(None),
            hard_delete: Mutex::new(None),
            deleting: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            retry_at: Mutex::new(None),
            operand_secrets: RwLock::new(None),
        }
    }

    /// Keep the operand Secrets in `store` from now on (see [`Context::operand_secrets`]).
    pub fn set_operand_secrets(&self, store: Store<PartialObjectMeta<Secret>>) {
        match self.operand_secrets.write() {
            Ok(mut s) => *s = Some(store),
            Err(s) => *s.into_inner() = Some(store),
        }
    }

    /// The operand Secrets' store once its first list has completed; None before (or without a watch):
    /// then the caller lists them itself.
    pub fn operand_secrets(&self) -> Option<Store<PartialObjectMeta<Secret>>> {
        use futures::FutureExt as _;
        let store = match self.operand_secrets.read() {
            Ok(s) => s.clone(),
            Err(s) => s.into_inner().clone(),
        }?;
        matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))).then_some(store)
    }

    /// Install these network policies (unless a CR disables them).
    pub fn with_network_policies(self, policies: Vec<Value>) -> Self {
        self.set_network_policies(policies);
        self
    }

    /// The operand's network policies now.
    pub fn network_policies(&self) -> Arc<Vec<Value>> {
        match self.network_policies.read() {
            Ok(p) => p.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replace the network policies.
    pub fn set_network_policies(&self, policies: Vec<Value>) {
        match self.network_policies.write() {
            Ok(mut p) => *p = Arc::new(policies),
            Err(p) => *p.into_inner() = Arc::new(policies),
        }
    }

    /// The configuration now.
    pub fn config(&self) -> Config {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replace the configuration.
    pub fn set_config(&self, next: Config) {
        match self.config.write() {
            Ok(mut c) => *c = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    /// The operand's manifests now.
    pub fn resources(&self) -> Arc<ModuleResources> {
        match self.resources.read() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replace the operand's manifests.
    pub fn set_resources(&self, module: ModuleResources) {
        match self.resources.write() {
            Ok(mut r) => *r = Arc::new(module),
            Err(p) => *p.into_inner() = Arc::new(module),
        }
    }

    /// Publish an Event on `reference`; a failure is logged, never fatal.
    pub async fn publish(&self, event: Event, reference: &k8s_openapi::api::core::v1::ObjectReference) {
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, "publishing an Event");
        }
    }

    /// An Event on the BtpOperator saying which certificates were regenerated and why (no key material).
    /// The reference carries the CR's uid, which `kubectl describe` selects Events by.
    pub async fn certificate_event(&self, cr: &BtpOperator, what: &str, decision: &btp_certs::operand::Decision) {
        let reference = cr.object_ref(&());
        let event = Event {
            type_: EventType::Normal,
            reason: "CertificatesRegenerated".into(),
            note: Some(format!("regenerated the operand's {what}: {decision}")),
            action: "Reconcile".into(),
            secondary: None,
        };
        self.publish(event, &reference).await;
    }

    /// When the CR `uid` began waiting for the operand Deployment (now, on the first call of this wait), and
    /// whether that wait began in `Ready` (a timeout is then `ReconcileFailed`, not `ProvisioningFailed`).
    pub fn start_waiting(&self, uid: &str, from_ready: bool) -> (Instant, bool) {
        let mut slot = clock(&self.waiting_since);
        match slot.as_ref() {
            Some((owner, since, began_ready)) if owner == uid => (*since, *began_ready),
            _ => {
                let now = Instant::now();
                *slot = Some((uid.to_string(), now, from_ready));
                (now, from_ready)
            }
        }
    }

    /// The wait for the operand Deployment is over (or interrupted: the next wait starts a new clock).
    pub fn stop_waiting(&self) {
        *clock(&self.waiting_since) = None;
    }

    /// When the hard delete of the CR `uid` began, and whether it begins now (its deletes are to be issued).
    pub fn hard_delete_clock(&self, uid: &str) -> (Instant, bool) {
        let mut slot = clock(&self.hard_delete);
        match slot.as_ref() {
            Some(c) if c.uid == uid => (c.since, false),
            _ => {
                let since = Instant::now();
                *slot = Some(HardDeleteClock {
                    uid: uid.to_string(),
                    since,
                    given_up: false,
                });
                (since, true)
            }
        }
    }

    /// The hard delete of the CR `uid` failed or timed out: later passes go straight to soft delete.
    pub fn give_up_hard_delete(&self, uid: &str) {
        let mut slot = clock(&self.hard_delete);
        match slot.as_mut() {
            Some(c) if c.uid == uid => c.given_up = true,
            _ => {
                *slot = Some(HardDeleteClock {
                    uid: uid.to_string(),
                    since: Instant::now(),
                    given_up: true,
                })
            }
        }
    }

    /// Whether the hard delete of the CR `uid` was given up in this process.
    pub fn hard_delete_given_up(&self, uid: &str) -> bool {
        clock(&self.hard_delete)
            .as_ref()
            .is_some_and(|c| c.uid == uid && c.given_up)
    }

    /// The deletion is over (the CR is gone, or no longer being deleted).
    pub fn end_deletion(&self) {
        *clock(&self.hard_delete) = None;
        self.set_deleting(false);
    }

    /// Mark whether the CR is being deleted (ServiceInstance/ServiceBinding deletions wake the reconciler).
    pub fn set_deleting(&self, deleting: bool) {
        self.deleting.store(deleting, Ordering::SeqCst);
    }

    /// Whether the CR is being deleted.
    pub fn deleting(&self) -> bool {
        self.deleting.load(Ordering::SeqCst)
    }

    /// Record a reconcile's result; returns the consecutive failures so far.
    pub fn record_result(&self, ok: bool) -> u32 {
        if ok {
            *clock(&self.retry_at) = None;
            self.failures.store(0, Ordering::SeqCst);
            0
        } else {
            self.failures.fetch_add(1, Ordering::SeqCst).saturating_add(1)
        }
    }

    /// Consecutive failed reconciles.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures.load(Ordering::SeqCst)
    }

    /// The retry of a failed reconcile is due after `delay`.
    pub fn retry_after(&self, delay: std::time::Duration) {
        *clock(&self.retry_at) = Some(Instant::now() + delay);
    }

    /// Whether a failed reconcile waits for its retry (secondary watches do not trigger meanwhile).
    pub fn backing_off(&self) -> bool {
        clock(&self.retry_at).is_some_and(|at| Instant::now() < at)
    }
}
