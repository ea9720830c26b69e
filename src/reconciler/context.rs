//! What every reconcile shares: the client, the configuration, the operand's manifests, metrics, the Event
//! recorder, and what is remembered about the CR from one pass to the next ([`CrMemory`]: the deletion flag,
//! the `ReadyTimeout` wait and the hard delete).

use super::gate::Gate;
use super::memory::CrMemory;
use super::metrics::ReconcileMetrics;
use super::resources::ModuleResources;
use crate::config::Config;
use btp_api::BtpOperator;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Resource as _;
use serde_json::Value;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// Shared state of the controller. What belongs to one leadership term (one run of
/// [`super::controller::run`]) is kept apart, in [`Term`], and starts fresh with each run
/// ([`Context::begin_term`]); the rest (client, flags, the built-in manifests, metrics) lives as long as
/// the process.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// The configuration the process started with (defaults and flags); each term starts from it.
    flags: Config,
    /// The operand's manifests and network policies the process started with; each term starts from them.
    base_resources: Arc<ModuleResources>,
    base_network_policies: RwLock<Arc<Vec<Value>>>,
    /// `SAP_BTP_SERVICE_OPERATOR`.
    pub image: String,
    /// `KUBE_RBAC_PROXY`.
    pub rbac_proxy_image: Option<String>,
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    events: super::events::Events,
    /// This term's state.
    term: RwLock<Arc<Term>>,
}

/// Everything that belongs to one leadership term: the running configuration (the runtime ConfigMap on top
/// of the flags), the manifests it names, the memory of the CR, the error backoff and the trigger
/// gate. A new term begins with [`Term::new`]: nothing carries over from the last one.
struct Term {
    /// Configuration; the runtime ConfigMap may change it.
    config: RwLock<Config>,
    /// The operand's manifests.
    resources: RwLock<Arc<ModuleResources>>,
    /// The operand's network policies (manager-resources/network-policies).
    network_policies: RwLock<Arc<Vec<Value>>>,
    /// What is remembered about the CR from one pass to the next.
    memory: Mutex<CrMemory>,
    /// Consecutive failed reconciles (for the error backoff); reset by a success.
    failures: AtomicU32,
    /// When the retry of a failed reconcile is due, and whether a trigger was deferred to it ([`Gate`]).
    gate: Mutex<Gate>,
    /// Passes begun in this term (the controller's start watchdog looks for the first).
    passes: std::sync::atomic::AtomicU64,
    /// The operand Secrets we created, anywhere in the cluster (metadata only), kept by a watch that
    /// `controller::run` starts: drift reads them on every pass without a cluster-wide list.
    operand_secrets: RwLock<Option<Store<PartialObjectMeta<Secret>>>>,
    /// The credentials Secret (`namespace`, `name`, and the store of the watch on it) that
    /// `controller::run` keeps: a pass reads it without a request.
    required_secret: RwLock<Option<(String, String, Store<Secret>)>>,
}

impl Term {
    fn new(config: Config, resources: Arc<ModuleResources>, network_policies: Arc<Vec<Value>>) -> Self {
        Self {
            config: RwLock::new(config),
            resources: RwLock::new(resources),
            network_policies: RwLock::new(network_policies),
            memory: Mutex::new(CrMemory::default()),
            failures: AtomicU32::new(0),
            gate: Mutex::new(Gate::default()),
            passes: std::sync::atomic::AtomicU64::new(0),
            operand_secrets: RwLock::new(None),
            required_secret: RwLock::new(None),
        }
    }
}

/// A mutex locked (a poisoned lock still holds a usable value).
fn clock<T>(slot: &Mutex<T>) -> MutexGuard<'_, T> {
    match slot.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Read a lock (a poisoned lock still holds a usable value).
fn read<T: Clone>(slot: &RwLock<T>) -> T {
    match slot.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

/// Replace a lock's value.
fn write<T>(slot: &RwLock<T>, value: T) {
    match slot.write() {
        Ok(mut g) => *g = value,
        Err(p) => *p.into_inner() = value,
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
        let events = super::events::Events::new(client.clone());
        let resources = Arc::new(resources);
        let term = Term::new(config.clone(), resources.clone(), Arc::new(Vec::new()));
        Self {
            client,
            flags: config,
            base_resources: resources,
            base_network_policies: RwLock::new(Arc::new(Vec::new())),
            image,
            rbac_proxy_image,
            metrics,
            events,
            term: RwLock::new(Arc::new(term)),
        }
    }

    fn term(&self) -> Arc<Term> {
        read(&self.term)
    }

    /// A new leadership term begins (the controller starts): everything of the last term is forgotten —
    /// failures, the retry clock, deferred triggers, the memory of the CR (deletion flag, wait and hard delete),
    /// the operand Secrets' store — and the configuration and manifests are again the ones the process
    /// started with (the runtime ConfigMap is read again on top).
    pub fn begin_term(&self) {
        let term = Term::new(
            self.flags.clone(),
            self.base_resources.clone(),
            read(&self.base_network_policies),
        );
        write(&self.term, Arc::new(term));
    }

    /// The configuration the process started with (defaults and flags, without the runtime ConfigMap).
    pub fn flags(&self) -> Config {
        self.flags.clone()
    }

    /// Keep the operand Secrets in `store` from now on (see [`Context::operand_secrets`]).
    pub fn set_operand_secrets(&self, store: Store<PartialObjectMeta<Secret>>) {
        write(&self.term().operand_secrets, Some(store));
    }

    /// The operand Secrets' store once its first list has completed; None before (or without a watch):
    /// then the caller lists them itself.
    pub fn operand_secrets(&self) -> Option<Store<PartialObjectMeta<Secret>>> {
        use futures::FutureExt as _;
        let store = read(&self.term().operand_secrets)?;
        matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))).then_some(store)
    }

    /// Keep the credentials Secret `namespace`/`name` in `store` from now on (see [`Context::required_secret`]).
    pub fn set_required_secret(&self, namespace: &str, name: &str, store: Store<Secret>) {
        write(
            &self.term().required_secret,
            Some((namespace.to_string(), name.to_string(), store)),
        );
    }

    /// The credentials Secret `namespace`/`name` as the watch on it last saw it (`Some(None)`: it does not
    /// exist), once the watch's first list has completed; None before, or when the watch is on another
    /// Secret: then the caller reads it itself. The watch brings a pass after every change it stores, so a
    /// pass never acts on a Secret older than the change that brought it.
    pub fn required_secret(&self, namespace: &str, name: &str) -> Option<Option<Secret>> {
        use futures::FutureExt as _;
        let (ns, n, store) = read(&self.term().required_secret)?;
        if ns != namespace || n != name {
            return None;
        }
        matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
            .then(|| store.get(&ObjectRef::new(name).within(namespace)).map(|s| (*s).clone()))
    }

    /// Install these network policies (unless a CR disables them), from now on and in every later term.
    pub fn with_network_policies(self, policies: Vec<Value>) -> Self {
        let policies = Arc::new(policies);
        write(&self.base_network_policies, policies.clone());
        write(&self.term().network_policies, policies);
        self
    }

    /// The operand's network policies now.
    pub fn network_policies(&self) -> Arc<Vec<Value>> {
        read(&self.term().network_policies)
    }

    /// Replace the network policies (for this term).
    pub fn set_network_policies(&self, policies: Vec<Value>) {
        write(&self.term().network_policies, Arc::new(policies));
    }

    /// The configuration now.
    pub fn config(&self) -> Config {
        read(&self.term().config)
    }

    /// Replace the configuration (for this term).
    pub fn set_config(&self, next: Config) {
        write(&self.term().config, next);
    }

    /// The operand's manifests now.
    pub fn resources(&self) -> Arc<ModuleResources> {
        read(&self.term().resources)
    }

    /// Replace the operand's manifests (for this term).
    pub fn set_resources(&self, module: ModuleResources) {
        write(&self.term().resources, Arc::new(module));
    }

    /// Publish an Event on `reference` in the background ([`super::events`]): the pass goes on at once; a
    /// failure is logged, never fatal.
    pub fn publish(&self, event: Event, reference: k8s_openapi::api::core::v1::ObjectReference) {
        self.events.publish(event, reference);
    }

    /// An Event on the BtpOperator saying which certificates were regenerated and why (no key material).
    /// The reference carries the CR's uid, which `kubectl describe` selects Events by.
    pub fn certificate_event(&self, cr: &BtpOperator, what: &str, decision: &btp_certs::operand::Decision) {
        let event = Event {
            type_: EventType::Normal,
            reason: "CertificatesRegenerated".into(),
            note: Some(format!("regenerated the operand's {what}: {decision}")),
            action: "Reconcile".into(),
            secondary: None,
        };
        self.publish(event, cr.object_ref(&()));
    }

    /// Read or change what is remembered about the CR ([`CrMemory`]; the lock is held only for `f`).
    pub fn memory<T>(&self, f: impl FnOnce(&mut CrMemory) -> T) -> T {
        f(&mut clock(&self.term().memory))
    }

    /// A pass begins (see [`Gate::begin_pass`]).
    pub fn begin_pass(&self) {
        let term = self.term();
        term.passes.fetch_add(1, Ordering::SeqCst);
        clock(&term.gate).begin_pass();
    }

    /// Passes begun in this term.
    pub fn passes(&self) -> u64 {
        self.term().passes.load(Ordering::SeqCst)
    }

    /// A pass succeeded: the failures and the retry clock are reset. True when a trigger was deferred while
    /// it ran: another pass must follow at once ([`Gate::succeeded`]).
    pub fn record_success(&self) -> bool {
        let term = self.term();
        term.failures.store(0, Ordering::SeqCst);
        let rerun = clock(&term.gate).succeeded();
        rerun
    }

    /// A pass failed: one more consecutive failure, and its retry is due after `backoff(failures)`; returns
    /// the failures so far and the delay. Recorded as the pass ends, so that no trigger slips between the
    /// failure and its retry clock.
    pub fn record_failure(&self, backoff: impl FnOnce(u32) -> Duration) -> (u32, Duration) {
        let term = self.term();
        let failures = term.failures.fetch_add(1, Ordering::SeqCst).saturating_add(1);
        let delay = backoff(failures);
        clock(&term.gate).failed(Instant::now() + delay);
        (failures, delay)
    }

    /// Consecutive failed reconciles.
    pub fn consecutive_failures(&self) -> u32 {
        self.term().failures.load(Ordering::SeqCst)
    }

    /// How long until the retry of the last failed pass is due (zero when it is due, or none is).
    pub fn retry_in(&self) -> Duration {
        clock(&self.term().gate)
            .retry_at()
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(Instant::now()))
    }

    /// A trigger from a secondary watch: true to pass it on, false when a failed pass waits for its retry
    /// (the trigger is then deferred, never dropped: see [`Gate`]).
    pub fn admit_trigger(&self) -> bool {
        clock(&self.term().gate).admit(Instant::now())
    }

    /// Whether a failed reconcile waits for its retry.
    pub fn backing_off(&self) -> bool {
        clock(&self.term().gate).backing_off(Instant::now())
    }
}
