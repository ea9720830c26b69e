//! What every reconcile shares: the client, the settings (configuration and the operand's manifests, one
//! snapshot per change), metrics, the Event recorder, and what is remembered about the CR from one pass to
//! the next ([`CrMemory`]: the deletion flag, the `ReadyTimeout` wait and the hard delete).

use super::gate::Gate;
use super::memory::CrMemory;
use super::metrics::ReconcileMetrics;
use crate::config::{Config, Settings};
use btp_api::BtpOperator;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Resource as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Shared state of the controller. What belongs to one leadership term (one run of
/// [`super::controller::run`]) is kept apart, in [`Term`], and starts fresh with each run
/// ([`Context::begin_term`]); the rest (client, flags, the manifests they name, metrics) lives as long as
/// the process.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// The settings the process started with (defaults and flags, and the manifests they name); each term
    /// starts from them.
    base: Arc<Settings>,
    /// `SAP_BTP_SERVICE_OPERATOR`.
    pub image: String,
    /// `KUBE_RBAC_PROXY`.
    pub rbac_proxy_image: Option<String>,
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    /// The right to write (docs/behaviour.md#leader-election): a pass begins only while it holds.
    pub fence: crate::fence::Fence,
    events: super::events::Events,
    /// This term's state.
    term: RwLock<Arc<Term>>,
}

/// Everything that belongs to one leadership term: the running settings (the runtime ConfigMap on top of
/// the flags, and the manifests it names), the memory of the CR, the error backoff and the trigger gate. A
/// new term begins with [`Term::new`]: nothing carries over from the last one.
struct Term {
    /// The settings: the runtime follower publishes a new snapshot on every change
    /// ([`Context::set_settings`]); a pass takes one at its start ([`Context::settings`]).
    settings: watch::Sender<Arc<Settings>>,
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
    /// The watch-fed copies passes read (`controller::run` starts them with the term).
    caches: RwLock<Option<Arc<super::cache::Caches>>>,
    /// What passes hand the credentials check, and its verdicts ([`crate::credentials_check`]).
    credentials_check: Arc<crate::credentials_check::Exchange>,
    /// The `default/kubernetes` EndpointSlices (the API server's ports the network policies allow), kept
    /// by a watch that `controller::run` starts.
    api_server_slices: RwLock<Option<Store<k8s_openapi::api::discovery::v1::EndpointSlice>>>,
    /// The module-resource kinds resolved by discovery in this term ([`super::kinds`]).
    kinds: RwLock<Arc<super::kinds::Kinds>>,
}

impl Term {
    fn new(settings: Arc<Settings>) -> Self {
        Self {
            settings: watch::Sender::new(settings),
            memory: Mutex::new(CrMemory::default()),
            failures: AtomicU32::new(0),
            gate: Mutex::new(Gate::default()),
            passes: std::sync::atomic::AtomicU64::new(0),
            operand_secrets: RwLock::new(None),
            required_secret: RwLock::new(None),
            caches: RwLock::new(None),
            credentials_check: Arc::default(),
            api_server_slices: RwLock::new(None),
            kinds: RwLock::new(Arc::default()),
        }
    }
}

/// A mutex locked (a poisoned lock still holds a usable value).
pub(super) fn clock<T>(slot: &Mutex<T>) -> MutexGuard<'_, T> {
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
    /// A context; the manifests of `base` (the flags' settings) are loaded by the caller.
    pub fn new(
        client: kube::Client,
        base: Settings,
        image: String,
        rbac_proxy_image: Option<String>,
        metrics: ReconcileMetrics,
        fence: crate::fence::Fence,
    ) -> Self {
        let events = super::events::Events::new(client.clone());
        let base = Arc::new(base);
        let term = Term::new(base.clone());
        Self {
            client,
            base,
            image,
            rbac_proxy_image,
            metrics,
            fence,
            events,
            term: RwLock::new(Arc::new(term)),
        }
    }

    fn term(&self) -> Arc<Term> {
        read(&self.term)
    }

    /// A new leadership term begins (the controller starts): everything of the last term is forgotten —
    /// failures, the retry clock, deferred triggers, the memory of the CR (deletion flag, wait and hard delete),
    /// the operand Secrets' store — and the settings are again the ones the process started with (the
    /// runtime ConfigMap is read again on top).
    pub fn begin_term(&self) {
        write(&self.term, Arc::new(Term::new(self.base.clone())));
    }

    /// The configuration the process started with (defaults and flags, without the runtime ConfigMap).
    pub fn flags(&self) -> Config {
        self.base.config.clone()
    }

    /// The settings now: one immutable snapshot. A pass takes it once, at its start, and carries it
    /// throughout (a change published meanwhile applies to the next pass).
    pub fn settings(&self) -> Arc<Settings> {
        self.term().settings.borrow().clone()
    }

    /// Publish the next settings (for this term): passes that begin from now on use them, and
    /// [`Context::watch_settings`] sees the change.
    pub fn set_settings(&self, next: Settings) {
        self.term().settings.send_replace(Arc::new(next));
    }

    /// The settings of this term as they change: a receiver that has seen the current snapshot.
    pub fn watch_settings(&self) -> watch::Receiver<Arc<Settings>> {
        self.term().settings.subscribe()
    }

    /// Read through `caches` from now on (see [`super::cache`]).
    pub fn set_caches(&self, caches: Arc<super::cache::Caches>) {
        write(&self.term().caches, Some(caches));
    }

    /// This term's caches, once started (a pass without them reads from the API server).
    pub fn caches(&self) -> Option<Arc<super::cache::Caches>> {
        read(&self.term().caches)
    }

    /// The kinds resolved in this term so far (empty at its start: the built-in table answers).
    pub fn kinds(&self) -> Arc<super::kinds::Kinds> {
        read(&self.term().kinds)
    }

    /// Remember `kinds` for the rest of the term.
    pub fn set_kinds(&self, kinds: Arc<super::kinds::Kinds>) {
        write(&self.term().kinds, kinds);
    }

    /// Keep the API server's EndpointSlices in `store` from now on (see [`Context::api_server_slices`]).
    pub fn set_api_server_slices(&self, store: Store<k8s_openapi::api::discovery::v1::EndpointSlice>) {
        write(&self.term().api_server_slices, Some(store));
    }

    /// The API server's EndpointSlices' store once its first list has completed; None before (the caller
    /// lists them itself).
    pub fn api_server_slices(&self) -> Option<Store<k8s_openapi::api::discovery::v1::EndpointSlice>> {
        let store = read(&self.term().api_server_slices)?;
        super::cache::listed(&store).then_some(store)
    }

    /// Keep the operand Secrets in `store` from now on (see [`Context::operand_secrets`]).
    pub fn set_operand_secrets(&self, store: Store<PartialObjectMeta<Secret>>) {
        write(&self.term().operand_secrets, Some(store));
    }

    /// The operand Secrets' store once its first list has completed; None before (or without a watch):
    /// then the caller lists them itself.
    pub fn operand_secrets(&self) -> Option<Store<PartialObjectMeta<Secret>>> {
        let store = read(&self.term().operand_secrets)?;
        super::cache::listed(&store).then_some(store)
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
        let (ns, n, store) = read(&self.term().required_secret)?;
        if ns != namespace || n != name {
            return None;
        }
        super::cache::listed(&store).then(|| store.get(&ObjectRef::new(name).within(namespace)).map(|s| (*s).clone()))
    }

    /// This term's exchange with the credentials check: passes hand it what they read, and write its verdict.
    pub fn credentials_check(&self) -> Arc<crate::credentials_check::Exchange> {
        self.term().credentials_check.clone()
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

    /// A trigger from a secondary watch, caused as `cause`: true to pass it on, false when it echoes our own
    /// write while a failed pass waits for its retry (the trigger is then deferred, never dropped: see
    /// [`Gate`]).
    pub fn admit_trigger(&self, cause: super::gate::Cause) -> bool {
        clock(&self.term().gate).admit(Instant::now(), cause)
    }

    /// Whether a failed reconcile waits for its retry.
    pub fn backing_off(&self) -> bool {
        clock(&self.term().gate).backing_off(Instant::now())
    }
}
