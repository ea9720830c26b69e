//! What every reconcile shares: the client, the settings (configuration and the operand's manifests, one
//! snapshot per change), metrics, the Event recorder, the term's [`ClusterView`] (what a pass reads), and
//! what is remembered about the CR from one pass to the next ([`CrMemory`]: the deletion flag, the
//! `ReadyTimeout` wait and the hard delete). What belongs to a leadership term is dropped with it.

use super::gate::Gate;
use super::memory::CrMemory;
use super::metrics::ReconcileMetrics;
use super::view::ClusterView;
use crate::config::{Config, Settings};
use crate::sync::{lock, read, replace};
use btp_api::BtpOperator;
use kube::runtime::events::{Event, EventType};
use kube::Resource as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a store's watch may keep failing before the store answers nothing until it has listed again,
/// unless the manager says otherwise ([`Context::with_watch_failing_limit`]): the default Lease duration
/// (15 s; `manager::DEFAULT_LEASE_DURATION`, which this module does not import).
pub const DEFAULT_WATCH_FAILING_LIMIT: Duration = Duration::from_secs(15);

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
    /// How long a store's watch may keep failing before the store answers nothing until it has listed again
    /// (docs/behaviour.md#the-read-path): one Lease duration.
    pub watch_failing_limit: Duration,
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
    /// Whether the CR is being deleted, for what runs only then (the ServiceInstance/ServiceBinding
    /// deletions watches); the pass changes it with the memory's flag ([`Context::deletion_begins`]).
    deleting: watch::Sender<bool>,
    /// Consecutive failed reconciles (for the error backoff); reset by a success.
    failures: AtomicU32,
    /// When the retry of a failed reconcile is due, and whether a trigger was deferred to it ([`Gate`]).
    gate: Mutex<Gate>,
    /// Passes begun in this term (the controller's start watchdog looks for the first).
    passes: std::sync::atomic::AtomicU64,
    /// What passes read ([`super::view`]; `controller::run` starts its watches with the term).
    view: RwLock<Option<Arc<ClusterView>>>,
    /// What passes hand the credentials check, and its verdicts ([`crate::credentials_check`]).
    credentials_check: Arc<crate::credentials_check::Exchange>,
    /// The module-resource kinds resolved by discovery in this term ([`super::kinds`]).
    kinds: RwLock<Arc<super::kinds::Kinds>>,
    /// Held while this term's kinds are being resolved: one discovery at a time, so that a pass that comes
    /// while the term's first one (started with the term) is under way waits for its answer instead of
    /// asking again.
    resolving: Arc<tokio::sync::Mutex<()>>,
}

impl Term {
    fn new(settings: Arc<Settings>) -> Self {
        Self {
            settings: watch::Sender::new(settings),
            memory: Mutex::new(CrMemory::default()),
            deleting: watch::Sender::new(false),
            failures: AtomicU32::new(0),
            gate: Mutex::new(Gate::default()),
            passes: std::sync::atomic::AtomicU64::new(0),
            view: RwLock::new(None),
            credentials_check: Arc::default(),
            kinds: RwLock::new(Arc::default()),
            resolving: Arc::default(),
        }
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
            watch_failing_limit: DEFAULT_WATCH_FAILING_LIMIT,
            events,
            term: RwLock::new(Arc::new(term)),
        }
    }

    /// The same context, with a store's watch failing for `limit` (the Lease duration) making it answer
    /// nothing until it has listed again.
    pub fn with_watch_failing_limit(mut self, limit: Duration) -> Self {
        self.watch_failing_limit = limit;
        self
    }

    fn term(&self) -> Arc<Term> {
        read(&self.term)
    }

    /// A new leadership term begins (the controller starts): everything of the last term is forgotten —
    /// failures, the retry clock, deferred triggers, the memory of the CR (deletion flag, wait and hard delete),
    /// the operand Secrets' store — and the settings are again the ones the process started with (the
    /// runtime ConfigMap is read again on top).
    pub fn begin_term(&self) {
        replace(&self.term, Arc::new(Term::new(self.base.clone())));
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

    /// Read through `view` for the rest of the term.
    pub fn set_view(&self, view: Arc<ClusterView>) {
        replace(&self.term().view, Some(view));
    }

    /// This term's view, once started (a pass without one reads from the API server).
    pub fn view(&self) -> Option<Arc<ClusterView>> {
        read(&self.term().view)
    }

    /// The kinds resolved in this term so far (empty at its start: the built-in table answers).
    pub fn kinds(&self) -> Arc<super::kinds::Kinds> {
        read(&self.term().kinds)
    }

    /// The right to resolve this term's kinds (one discovery at a time; see [`Term`]'s `resolving`).
    pub async fn resolving_kinds(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.term().resolving.clone().lock_owned().await
    }

    /// Remember `kinds` for the rest of the term.
    pub fn set_kinds(&self, kinds: Arc<super::kinds::Kinds>) {
        replace(&self.term().kinds, kinds);
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

    /// The CR is being deleted (its pass deprovisions): remembered, and what runs only then starts.
    pub fn deletion_begins(&self) {
        let term = self.term();
        lock(&term.memory).set_deleting();
        term.deleting.send_if_modified(|d| !std::mem::replace(d, true));
    }

    /// The deletion is over, or there is none (see [`CrMemory::end_deletion`]); what ran for it stops.
    pub fn deletion_ends(&self) {
        let term = self.term();
        lock(&term.memory).end_deletion();
        term.deleting.send_if_modified(|d| std::mem::replace(d, false));
    }

    /// Whether the CR of this term is being deleted, as it changes.
    pub fn watch_deleting(&self) -> watch::Receiver<bool> {
        self.term().deleting.subscribe()
    }

    /// Read or change what is remembered about the CR ([`CrMemory`]; the lock is held only for `f`).
    pub fn memory<T>(&self, f: impl FnOnce(&mut CrMemory) -> T) -> T {
        f(&mut lock(&self.term().memory))
    }

    /// A pass begins (see [`Gate::begin_pass`]).
    pub fn begin_pass(&self) {
        let term = self.term();
        term.passes.fetch_add(1, Ordering::SeqCst);
        lock(&term.gate).begin_pass();
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
        let rerun = lock(&term.gate).succeeded();
        rerun
    }

    /// A pass failed: one more consecutive failure, and its retry is due after `backoff(failures)`; returns
    /// the failures so far and the delay. Recorded as the pass ends, so that no trigger slips between the
    /// failure and its retry clock.
    pub fn record_failure(&self, backoff: impl FnOnce(u32) -> Duration) -> (u32, Duration) {
        let term = self.term();
        let failures = term.failures.fetch_add(1, Ordering::SeqCst).saturating_add(1);
        let delay = backoff(failures);
        lock(&term.gate).failed(Instant::now() + delay);
        (failures, delay)
    }

    /// Consecutive failed reconciles.
    pub fn consecutive_failures(&self) -> u32 {
        self.term().failures.load(Ordering::SeqCst)
    }

    /// How long until the retry of the last failed pass is due (zero when it is due, or none is).
    pub fn retry_in(&self) -> Duration {
        lock(&self.term().gate)
            .retry_at()
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(Instant::now()))
    }

    /// A trigger from a secondary watch, caused as `cause`: true to pass it on, false when it echoes our own
    /// write while a failed pass waits for its retry (the trigger is then deferred, never dropped: see
    /// [`Gate`]).
    pub fn admit_trigger(&self, cause: super::gate::Cause) -> bool {
        lock(&self.term().gate).admit(Instant::now(), cause)
    }

    /// Whether a failed reconcile waits for its retry.
    pub fn backing_off(&self) -> bool {
        lock(&self.term().gate).backing_off(Instant::now())
    }
}
