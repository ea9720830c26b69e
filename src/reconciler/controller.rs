//! The controller: what brings a reconcile (watches, the runtime ConfigMap, ServiceInstance/ServiceBinding
//! deletions while the CR is being deleted), and how failures are retried.

use super::context::Context;
use super::error::ReconcileError;
use super::gate::Cause;
use crate::config::{self, Config, Settings};
use crate::tasks::BoxedFuture;
use crate::watch_backoff::WatchBackoff;
use btp_api::{names, BtpOperator};
use futures::StreamExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The key every secondary watch maps to.
pub fn the_cr() -> ObjectRef<BtpOperator> {
    ObjectRef::new(names::BTP_OPERATOR_NAME).within(names::KYMA_SYSTEM)
}

/// Retry a failed reconcile with capped exponential backoff and jitter ([`super::requeue::error_backoff`]): the
/// failed pass recorded when its retry is due (see [`super::pass::reconcile`]); the count of consecutive failures
/// is reset by the next success.
pub fn error_policy(_cr: Arc<BtpOperator>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let failures = ctx.consecutive_failures();
    let delay = ctx.retry_in();
    tracing::warn!(error = %error, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The configuration the manager starts with: `flags` (defaults and flags) with the runtime ConfigMap's keys
/// on top ([`config::runtime::at_start`]), read once directly (no label needed) before anything else
/// starts, so that the first reconcile, the watches and the webhook rules all see it. A missing ConfigMap
/// is not an error; an unreadable one is logged and the flags stay.
pub async fn startup_config(client: &kube::Client, flags: &Config) -> Config {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &flags.chart_namespace);
    // Within one call's budget: a controller must not wait on an unanswered request before it starts.
    match super::cluster::retrying(|| api.get_opt(&flags.config_name)).await {
        Ok(Some(cm)) => {
            let config = config::runtime::at_start(flags, &cm.data.unwrap_or_default());
            tracing::info!(configmap = %flags.config_name, "runtime configuration read at start");
            config
        }
        Ok(None) => flags.clone(),
        Err(e) => {
            tracing::warn!(error = %super::error::summary(&e), "reading the runtime ConfigMap at start; using the flags");
            flags.clone()
        }
    }
}

/// Follow the runtime ConfigMap: on every change (or its deletion), the [`config::Follower`] computes the
/// next settings from `flags` and the running ones, and they are published as this term's
/// ([`Context::set_settings`]); each one brings a reconcile ([`settings_changes`]).
async fn follow_config(ctx: Arc<Context>, flags: Config) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event as W;
    let running = ctx.settings();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &running.config.chart_namespace);
    let mut events = watcher::watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={}", running.config.config_name)),
    )
    // With backoff: a lost API server must not turn this into a busy loop.
    .backoff(WatchBackoff::default())
    .boxed();
    let mut follower = config::Follower::new(flags);
    while let Some(event) = events.next().await {
        let data = match event {
            Ok(W::Apply(cm)) | Ok(W::InitApply(cm)) => Some(cm.data.unwrap_or_default()),
            Ok(W::Delete(_)) => None,
            Ok(W::Init) | Ok(W::InitDone) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "config ConfigMap watch");
                continue;
            }
        };
        let next = follower.next(data.as_ref(), &ctx.settings());
        ctx.metrics.custom_config_applied(data.is_some());
        ctx.set_settings(next);
        tracing::info!(applied = data.is_some(), "configuration updated");
    }
}

/// A reconcile of the CR for every settings snapshot published after `settings` last looked.
fn settings_changes(
    settings: watch::Receiver<Arc<Settings>>,
) -> impl futures::Stream<Item = ObjectRef<BtpOperator>> + Send + 'static {
    futures::stream::unfold(settings, |mut settings| async move {
        settings.changed().await.ok()?;
        Some((the_cr(), settings))
    })
}

/// A reconcile of the CR for every new verdict of the credentials check. A verdict is the manager's own
/// doing ([`Cause::Ours`]): deferred, never dropped, while a failed pass waits for its retry
/// ([`super::gate::Gate`]); the Secret change behind it already brought a pass.
fn verdict_changes(
    ctx: &Arc<Context>,
    verdicts: watch::Receiver<Option<crate::credentials_check::Verdict>>,
) -> impl futures::Stream<Item = ObjectRef<BtpOperator>> + Send + 'static {
    let wake = waker(ctx);
    futures::stream::unfold(verdicts, |mut verdicts| async move {
        verdicts.changed().await.ok()?;
        Some(((), verdicts))
    })
    .filter_map(move |()| std::future::ready(wake(Cause::Ours)))
}

/// Deletions of `kind` (ServiceInstance or ServiceBinding), as triggers while the CR is being deleted.
/// Metadata only, and nothing is stored: 10,000 of them cost a few pages of listing, not memory. After every
/// (re)list the CR is checked too, so deletions missed while the watch was down are not lost. It runs only
/// while the CR is being deleted ([`Context::deletion_begins`]; the first list of the watch brings the pass
/// that sees what it missed before), and only while the kind's CRD is established (a watch on that CRD starts
/// and stops it, [`CrdPresence`]): no request goes to a resource the API server does not serve, and none at
/// all while the module is installed or being installed.
fn service_deletions(
    ctx: Arc<Context>,
    kind: &'static str,
) -> impl futures::Stream<Item = ObjectRef<BtpOperator>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let follower = crate::tasks::AbortOnDrop::new(tokio::spawn(while_deleting(ctx, kind, tx)));
    // The follower (and the deletions watch it runs) ends with this stream.
    futures::stream::unfold((rx, follower), |(mut rx, follower)| async move {
        rx.recv().await.map(|cr| (cr, (rx, follower)))
    })
}

/// Whether a CRD's resource is served, from the events of a watch on that CRD by name: it is once the CRD is
/// `Established` (a real API server answers 404 for the resource between the CRD's create and that condition,
/// tens of milliseconds on a busy server), until the CRD is gone. Pure.
#[derive(Debug, Default)]
pub struct CrdPresence {
    present: bool,
    listing: Option<bool>,
}

impl CrdPresence {
    /// The presence after `event`, when it changed.
    pub fn on(&mut self, event: &watcher::Event<CustomResourceDefinition>) -> Option<bool> {
        let next = match event {
            watcher::Event::Init => {
                self.listing = Some(false);
                return None;
            }
            watcher::Event::InitApply(crd) => {
                self.listing = Some(established(crd));
                return None;
            }
            watcher::Event::InitDone => self.listing.take().unwrap_or(false),
            watcher::Event::Apply(crd) => established(crd),
            watcher::Event::Delete(_) => false,
        };
        (next != self.present).then(|| {
            self.present = next;
            next
        })
    }
}

/// Whether `crd` has the condition `Established` true: its resource is served.
fn established(crd: &CustomResourceDefinition) -> bool {
    use kube::runtime::wait::Condition as _;
    kube::runtime::wait::conditions::is_crd_established().matches_object(Some(crd))
}

/// While the CR is being deleted, follow the CRD of `kind` ([`follow_services_crd`]).
async fn while_deleting(
    ctx: Arc<Context>,
    kind: &'static str,
    tx: tokio::sync::mpsc::UnboundedSender<ObjectRef<BtpOperator>>,
) {
    let mut deleting = ctx.watch_deleting();
    loop {
        if deleting.wait_for(|d| *d).await.is_err() {
            return;
        }
        tracing::debug!(kind, "the CR is being deleted: following the CRD");
        tokio::select! {
            () = follow_services_crd(ctx.clone(), kind, tx.clone()) => return,
            over = deleting.wait_for(|d| !*d) => if over.is_err() { return },
        }
        tracing::debug!(kind, "the deletion is over: no longer following the CRD");
    }
}

/// Follow the CRD of `kind`: while it is established, run the watch of `kind`'s deletions, sending its triggers to
/// `tx`; when it goes, stop it.
async fn follow_services_crd(
    ctx: Arc<Context>,
    kind: &'static str,
    tx: tokio::sync::mpsc::UnboundedSender<ObjectRef<BtpOperator>>,
) {
    let resource = super::cluster::services_resource(kind);
    let crd = format!("{}.{}", resource.plural, resource.group);
    // The whole object (its status says whether it is established); one object, changed a few times an install.
    let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let mut events = watcher::watcher(api, watcher::Config::default().fields(&format!("metadata.name={crd}")))
        .backoff(WatchBackoff::default())
        .boxed();
    let mut presence = CrdPresence::default();
    let mut deletions: Option<crate::tasks::AbortOnDrop<()>> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(error = %e, crd, "services CRD watch");
                continue;
            }
        };
        match presence.on(&event) {
            Some(true) => {
                tracing::debug!(crd, "CRD present: watching deletions");
                let (ctx, tx) = (ctx.clone(), tx.clone());
                deletions = Some(crate::tasks::AbortOnDrop::new(tokio::spawn(async move {
                    let mut wakes = std::pin::pin!(watch_deletions(ctx, kind));
                    while let Some(cr) = wakes.next().await {
                        if tx.send(cr).is_err() {
                            return;
                        }
                    }
                })));
            }
            Some(false) => {
                tracing::debug!(crd, "CRD gone: no longer watching deletions");
                deletions = None;
            }
            None => {}
        }
    }
    drop(deletions);
}

/// The deletions watch of `kind` itself (see [`service_deletions`]).
fn watch_deletions(
    ctx: Arc<Context>,
    kind: &'static str,
) -> impl futures::Stream<Item = ObjectRef<BtpOperator>> + Send + 'static {
    let api: Api<PartialObjectMeta<DynamicObject>> =
        Api::all_with(ctx.client.clone(), &super::cluster::services_resource(kind));
    watcher::watcher(api, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .filter_map(move |event| {
            let wake = match event {
                // Someone else's: the operand removes them, or their owners do.
                Ok(watcher::Event::Delete(_)) => ctx.memory(|m| m.deleting()) && ctx.admit_trigger(Cause::Theirs),
                // A (re)list cannot tell whose deletions it missed: held back like our echoes.
                Ok(watcher::Event::InitDone) => ctx.memory(|m| m.deleting()) && ctx.admit_trigger(Cause::Ours),
                Ok(_) => false,
                Err(e) => {
                    tracing::debug!(error = %e, kind, "service watch");
                    false
                }
            };
            std::future::ready(wake.then(the_cr))
        })
}

/// The mapper of a secondary watch: any change brings the CR back, except an echo of our own write while a
/// failed pass waits for its retry (a pass that restores the operand must not re-trigger itself): then the
/// change is deferred, never dropped ([`super::gate::Gate`]).
fn waker(ctx: &Arc<Context>) -> impl Fn(Cause) -> Option<ObjectRef<BtpOperator>> + Send + Sync + 'static {
    let ctx = ctx.clone();
    move |cause| ctx.admit_trigger(cause).then(the_cr)
}

/// A hash of what a reconcile reads from the CR besides its status: identity, generation, labels,
/// annotations, finalizers and deletion. Status-only updates hash the same and are filtered out.
pub fn everything_but_status(cr: &BtpOperator) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let meta = &cr.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.uid.hash(&mut h);
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()).hash(&mut h);
    Some(h.finish())
}

/// Run the controller until `shutdown` resolves (a boxed future: see [`BoxedFuture`]).
pub fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) -> BoxedFuture<()> {
    run_until(ctx, Box::pin(shutdown))
}

fn run_until(ctx: Arc<Context>, shutdown: Pin<Box<dyn Future<Output = ()> + Send + Sync>>) -> BoxedFuture<()> {
    Box::pin(control(ctx, shutdown))
}

async fn control(ctx: Arc<Context>, shutdown: Pin<Box<dyn Future<Output = ()> + Send + Sync>>) {
    use futures::FutureExt as _;
    // A new term: nothing of the last one (failures, retry clock, deletion flag, clocks, configuration)
    // carries over.
    ctx.begin_term();
    let flags = ctx.flags();
    let client = ctx.client.clone();
    let config = startup_config(&client, &flags).await;
    ctx.set_settings(config::runtime::start(&ctx.settings(), config));
    let settings = ctx.settings();
    let config = &settings.config;
    // Subscribed before the follower starts: every snapshot it publishes brings a reconcile.
    let triggered = settings_changes(ctx.watch_settings());
    // Ends with this controller, however it ends (a dropped future included).
    let _config_task = crate::tasks::AbortOnDrop::new(tokio::spawn(follow_config(ctx.clone(), flags)));
    // The credentials check of this term (only the leader runs a term): a new verdict brings a pass, which
    // writes it.
    let exchange = ctx.credentials_check();
    let credentials_verdicts = verdict_changes(&ctx, exchange.verdicts());
    let _credentials_check = crate::tasks::AbortOnDrop::new(tokio::spawn(crate::credentials_check::runner::run(
        exchange,
        ctx.metrics.credentials_check(),
    )));

    // The module's kinds asked of discovery now, beside the view's first lists, rather than by the first pass:
    // a new CR does not wait for discovery (on a real API server the core group's answer alone took 50 ms).
    let _kinds = crate::tasks::AbortOnDrop::new(tokio::spawn(resolve_kinds(ctx.clone(), settings.clone())));

    // What passes read (super::view), its watches started before the first pass.
    let started = super::view::start(
        &client,
        &config.chart_namespace,
        &config.secret_name,
        ctx.watch_failing_limit,
    );
    ctx.set_view(started.view);
    let _keep = crate::tasks::AbortOnDrop::new(tokio::spawn(started.keep));
    let reader = started.crs;
    let crs_ready = reader.clone();
    let shutdown = shutdown.shared();
    // The CR, without the updates that change only its status: the manager's own status writes must not
    // bring it back (that would bypass the error backoff: a failing pass that reports its failure would
    // otherwise run again at once, forever).
    let crs = started
        .cr_events
        .applied_objects()
        .predicate_filter(everything_but_status, kube::runtime::PredicateConfig::default());
    // Every change of a module object, the credentials Secret or the API server's EndpointSlices (whose
    // ports the network policies carry).
    let changes = started.changes.filter_map({
        let wake = waker(&ctx);
        move |cause| std::future::ready(wake(cause))
    });
    let controller = Controller::for_stream(crs, reader)
        // The secondary watches share one backoff (kube's default would stretch every pause to 30 s).
        .trigger_backoff(WatchBackoff::default())
        // Edits and deletions are reverted, a Deployment that becomes available is seen, a credentials
        // change is followed.
        .reconcile_on(changes)
        .reconcile_on(triggered)
        .reconcile_on(credentials_verdicts)
        .reconcile_on(service_deletions(ctx.clone(), super::cluster::SERVICE_INSTANCE))
        .reconcile_on(service_deletions(ctx.clone(), super::cluster::SERVICE_BINDING))
        .graceful_shutdown_on(shutdown.clone())
        .run(super::pass::reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        });
    let asked = shutdown.clone();
    tokio::select! {
        () = controller => {
            if asked.now_or_never().is_none() {
                // kube's controller ends only after a shutdown: anything else is a bug worth seeing.
                tracing::error!("the controller ended without being asked to; restarting it");
            }
        }
        () = give_up_waiting(shutdown, crs_ready.clone()) => {}
        () = watch_the_start(&ctx, &crs_ready) => {}
    }
}

/// Resolve the kinds of the term's module and network policies (kept for the term, see
/// [`super::kinds`]). A failure is left to the first pass that needs them: it asks again, and reports it.
async fn resolve_kinds(ctx: Arc<Context>, settings: Arc<Settings>) {
    let cluster = super::cluster::Cluster::new(&ctx, &settings);
    if let Err(e) = cluster
        .resolve_kinds(&settings.module, &settings.network_policies, false)
        .await
    {
        tracing::debug!(error = %e, "resolving the module's kinds as the term begins; the first pass asks again");
    }
}

/// How long a controller may go after it starts before its first list of BtpOperators is done and, when one
/// exists, its first pass has begun.
pub const START_DEADLINE: Duration = Duration::from_secs(30);

/// Whether a controller that started `elapsed` ago is stuck: past [`START_DEADLINE`] without its first list
/// of BtpOperators (`listed`), or with a BtpOperator listed (`crs > 0`) and no pass begun. Pure.
pub fn stuck_at_start(elapsed: Duration, listed: bool, crs: usize, passes: u64) -> bool {
    elapsed >= START_DEADLINE && (!listed || (crs > 0 && passes == 0))
}

/// Resolves when the controller started here is stuck at its start (see [`stuck_at_start`]): its term then
/// ends, and `lead_and_reconcile` starts a new one while it still leads. A leader whose controller never
/// reconciles would leave the CR's status frozen with nothing in the logs: the watches and lists have no
/// call budget (a watch is meant to stay open), so one that never answers would hold it forever.
async fn watch_the_start(ctx: &Context, crs: &Store<BtpOperator>) {
    let started = tokio::time::Instant::now();
    tokio::time::sleep(START_DEADLINE).await;
    let listed = super::view::listed(crs);
    let count = if listed { crs.state().len() } else { 0 };
    if !stuck_at_start(started.elapsed(), listed, count, ctx.passes()) {
        // Started: nothing more to watch for in this term.
        return std::future::pending().await;
    }
    tracing::error!(
        listed,
        after = ?started.elapsed(),
        "the controller has not reconciled since it started (first list of BtpOperators {}); restarting it",
        if listed { "done, no pass began" } else { "not done" }
    );
}

/// How long a graceful shutdown may let the in-flight reconcile run before it is dropped.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Resolves when waiting any longer for the controller's graceful shutdown is pointless: at once when the
/// shutdown came before the CRs were first listed (nothing can be in flight then, and kube's controller,
/// which holds reconciles until that list, would wait for it forever), else after [`SHUTDOWN_GRACE`].
async fn give_up_waiting(shutdown: impl std::future::Future<Output = ()>, crs_ready: Store<BtpOperator>) {
    shutdown.await;
    if !super::view::listed(&crs_ready) {
        tracing::debug!("stopped before the first list of BtpOperators: nothing was in flight");
        return;
    }
    tokio::time::sleep(SHUTDOWN_GRACE).await;
    tracing::warn!(grace = ?SHUTDOWN_GRACE, "the in-flight reconcile did not finish in time; it is abandoned");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_is_stuck_at_its_start_without_its_first_list_or_first_pass() {
        let late = START_DEADLINE + Duration::from_millis(1);
        assert!(
            !stuck_at_start(Duration::from_secs(1), false, 0, 0),
            "not before the deadline"
        );
        assert!(stuck_at_start(late, false, 0, 0), "no first list");
        assert!(stuck_at_start(late, true, 1, 0), "a CR listed and no pass");
        assert!(!stuck_at_start(late, true, 0, 0), "nothing to reconcile is not stuck");
        assert!(!stuck_at_start(late, true, 1, 1), "a pass began");
    }

    /// A CRD as a real API server shows it: first without conditions (just created), then `Established`.
    fn crd(established: Option<&str>) -> CustomResourceDefinition {
        let conditions: Vec<_> = established
            .map(|status| serde_json::json!({"type": "Established", "status": status}))
            .into_iter()
            .chain([serde_json::json!({"type": "NamesAccepted", "status": "True"})])
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "serviceinstances.services.cloud.sap.com"},
            "spec": {"group": "services.cloud.sap.com", "scope": "Namespaced",
                     "names": {"plural": "serviceinstances", "kind": "ServiceInstance"}, "versions": []},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn crd_presence_follows_lists_and_events() {
        use watcher::Event as E;
        let (new, served, not_yet) = (crd(None), crd(Some("True")), crd(Some("False")));
        let mut p = CrdPresence::default();
        assert_eq!(p.on(&E::Init), None);
        assert_eq!(p.on(&E::InitDone), None, "listed, absent: unchanged");
        assert_eq!(
            p.on(&E::Apply(new.clone())),
            None,
            "created: not served before it is established"
        );
        assert_eq!(p.on(&E::Apply(not_yet.clone())), None, "Established False: not served");
        assert_eq!(p.on(&E::Apply(served.clone())), Some(true), "established");
        assert_eq!(p.on(&E::Apply(served.clone())), None, "updated");
        assert_eq!(p.on(&E::Delete(served.clone())), Some(false), "deleted");
        // A relist that finds it again.
        assert_eq!(p.on(&E::Init), None);
        assert_eq!(p.on(&E::InitApply(served.clone())), None, "decided at InitDone");
        assert_eq!(p.on(&E::InitDone), Some(true));
        // A relist that no longer finds it (deleted while the watch was down).
        assert_eq!(p.on(&E::Init), None);
        assert_eq!(p.on(&E::InitDone), Some(false));
        // A relist that finds it created but not yet established.
        assert_eq!(p.on(&E::Init), None);
        assert_eq!(p.on(&E::InitApply(new)), None);
        assert_eq!(p.on(&E::InitDone), None, "still not served");
    }

    #[test]
    fn only_status_changes_are_filtered_out() {
        let base: BtpOperator = serde_json::from_value(serde_json::json!({
            "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
            "metadata": {"name": "btpoperator", "namespace": "kyma-system", "uid": "u1", "generation": 1,
                         "resourceVersion": "1", "finalizers": ["operator.kyma-project.io/btp-manager"]},
        }))
        .unwrap();
        let h = everything_but_status(&base);
        let mut status = base.clone();
        status.status = Some(btp_api::BtpOperatorStatus {
            state: btp_api::State::Error,
            conditions: vec![],
        });
        status.metadata.resource_version = Some("2".into());
        assert_eq!(everything_but_status(&status), h, "a status write is not a trigger");
        let changed = |f: &dyn Fn(&mut BtpOperator)| {
            let mut cr = base.clone();
            f(&mut cr);
            everything_but_status(&cr) != h
        };
        assert!(changed(
            &|cr| cr.metadata.labels = Some([("force-delete".into(), "true".into())].into())
        ));
        assert!(changed(
            &|cr| cr.metadata.annotations = Some([("a".into(), "b".into())].into())
        ));
        assert!(changed(&|cr| cr.metadata.finalizers = None));
        assert!(changed(&|cr| cr.metadata.generation = Some(2)));
        assert!(changed(&|cr| cr.metadata.uid = Some("u2".into())));
        assert!(changed(&|cr| {
            cr.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ))
        }));
    }
}
