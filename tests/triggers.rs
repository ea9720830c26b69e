//! Never lose a trigger, never hang on a call (issue 17; docs/behaviour.md#watches-and-triggers and
//! #retries-and-budgets). One regression test for each way the manager used to break the level-triggered
//! promise ("any change that lands after a pass read the state brings another pass"):
//!
//! 1. a change of a secondary object while a failed pass waits for its retry was dropped when a pass ran
//!    early and succeeded (the credentials Secret, and the operand Deployment turning Available);
//! 2. the error backoff of one leadership term gated the next;
//! 3. a failed read of the credentials Secret was reported as the user's `InvalidSecret`;
//! 4. two retry layers let one call (and a shutdown) wait minutes on a `Retry-After`;
//! 5. a change someone else made while a failed pass waited for its retry waited with it (only the echoes of
//!    the manager's own writes need holding back).
//!
//! Embedded API server only: they need its fault injection, scoped to the manager's user so that the test's
//! own requests are not disturbed.

mod common;

use btp_api::{names, Reason};
use btp_apiserver::{testing::FaultRule, RunningApiServer};
use btp_manager::config::Config;
use btp_manager::reconciler::{self, cluster::CALL_BUDGET, controller::SHUTDOWN_GRACE};
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use std::time::{Duration, Instant};

/// The shipped ServiceAccount (`deploy/`), as the harness installs its RBAC for it.
const MANAGER: &str = "system:serviceaccount:kyma-system:btp-manager-controller-manager";
const OPERAND_CONFIGMAP: &str = "sap-btp-operator-config";

fn options(reconcile: bool) -> StartOptions {
    StartOptions {
        manager_user: Some(MANAGER.into()),
        reconcile,
        ..StartOptions::default()
    }
}

/// Fail `fraction` of the manager's requests with `code` (only `verb` on `resource` when given).
fn fail_manager(server: &RunningApiServer, code: u16, verb: Option<&str>, resource: Option<&str>) {
    server.faults().add(FaultRule {
        fraction: 1.0,
        code,
        verb: verb.map(str::to_string),
        resource: resource.map(str::to_string),
        user: Some(MANAGER.into()),
    });
}

/// The operand's metrics Service (chart v0.11.10).
const METRICS_SERVICE: &str = "sap-btp-operator-controller-manager-metrics-service";

/// Change a label of the CR: a trigger the gate does not filter (a pass starts at once).
async fn touch(env: &Env, n: u32) {
    env.patch_cr(serde_json::json!({"metadata": {"labels": {"touched": n.to_string()}}}))
        .await;
}

/// Make `n` passes in a row fail, quickly: every pass fails on removing the `operation: reconcile`
/// annotation (500 on the manager's patches of the CR), and a CR change starts each. The next failure is
/// then retried after 2^n s (±20 %).
async fn fail_passes(env: &Env, server: &RunningApiServer, n: u32) {
    fail_manager(server, 500, Some("patch"), Some("btpoperators"));
    let start = env.ctx.consecutive_failures();
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}}))
        .await;
    for k in 1..=n {
        if k > 1 {
            touch(env, k).await;
        }
        eventually(Duration::from_secs(10), &format!("failed pass {k}"), || async {
            env.ctx.consecutive_failures() >= start + k
        })
        .await;
    }
}

/// Index of the first request of the manager after `mark` that `matches`, once it is there.
async fn wait_for_request(
    server: &RunningApiServer,
    mark: usize,
    what: &str,
    matches: impl Fn(&btp_apiserver::testing::RequestRecord) -> bool,
) {
    let log = server.request_log();
    eventually(Duration::from_secs(10), what, || {
        let found = log.since(mark).iter().any(|r| r.user == MANAGER && matches(r));
        async move { found }
    })
    .await;
}

async fn operand_cluster_id(env: &Env) -> Option<String> {
    Api::<ConfigMap>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .get_opt(OPERAND_CONFIGMAP)
        .await
        .unwrap()
        .and_then(|c| c.data)
        .and_then(|d| d.get("CLUSTER_ID").cloned())
}

/// 1. The recipe: six failed passes (the next retry about 64 s away), then a pass that runs early
///    (a CR change) and succeeds; the Secret's `cluster_id` changes after that pass read the Secret. The
///    operand ConfigMap follows within seconds, not at the periodic pass (15 minutes).
#[tokio::test]
async fn a_secret_change_during_an_early_pass_is_not_lost() {
    let env = Env::start_with(Config::default(), true, options(true)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    assert_eq!(operand_cluster_id(&env).await.as_deref(), Some("cluster-1"));

    fail_passes(&env, server, 6).await;
    assert!(env.ctx.backing_off(), "the retry is tens of seconds away");
    // The next pass reads the Secret, then stalls on restoring the operand's metrics Service (429,
    // Retry-After 1 s), deleted while the retry is pending (a change the gate defers to the retry).
    let mark = server.request_log().len();
    server.faults().clear();
    fail_manager(server, 429, Some("patch"), Some("services"));
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    services
        .delete(METRICS_SERVICE, &Default::default())
        .await
        .expect("delete the metrics Service");
    eventually(
        Duration::from_secs(10),
        "the manager's view sees the Service gone",
        || async {
            use btp_manager::reconciler::view::{ObjectKey, Read};
            let key = ObjectKey::core("Service", names::KYMA_SYSTEM, METRICS_SERVICE);
            env.ctx.view().map(|v| v.module_object(&key, false)) == Some(Read::Absent)
        },
    )
    .await;
    // Removing the annotation is a CR change: the pass starts at once, while the retry is still pending.
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: null}}}))
        .await;
    wait_for_request(
        server,
        mark,
        "the pass read the Secret and stalls on the Service",
        |r| r.resource == "services" && r.code == 429,
    )
    .await;
    env.patch_secret(serde_json::json!({"stringData": {"cluster_id": "cluster-2"}}))
        .await;
    server.faults().clear();
    eventually(
        Duration::from_secs(10),
        "the operand ConfigMap follows the new cluster_id",
        || async { operand_cluster_id(&env).await.as_deref() == Some("cluster-2") },
    )
    .await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    env.stop().await;
}

/// 1, second variant: the operand Deployment turns Available while an early pass (that saw it not
/// Available) finishes with "waiting"; the CR is Ready within seconds, not after `ReadyTimeout − waited`.
#[tokio::test]
async fn the_deployment_turning_available_during_an_early_pass_is_not_lost() {
    let env = Env::start_with(Config::default(), false, options(true)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    set_available(&env, true).await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;

    fail_passes(&env, server, 6).await;
    // Not Available: deferred (the retry is tens of seconds away).
    set_available(&env, false).await;
    // The next pass sees the Deployment not Available, then stalls writing `Processing / Updated`.
    let mark = server.request_log().len();
    server.faults().clear();
    fail_manager(server, 429, Some("patch"), Some("btpoperators"));
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: null}}}))
        .await;
    wait_for_request(
        server,
        mark,
        "the pass saw the Deployment and stalls on the status",
        |r| r.resource == "btpoperators" && r.subresource == "status" && r.code == 429,
    )
    .await;
    set_available(&env, true).await;
    server.faults().clear();
    // The pass ends having written `Processing / Updated` (it saw the Deployment not Available) ...
    wait_for_request(server, mark, "the pass wrote Processing / Updated", |r| {
        r.resource == "btpoperators" && r.subresource == "status" && r.code == 200
    })
    .await;
    // ... and the Deployment's change, which came while it ran, brings the CR to Ready.
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    env.stop().await;
}

/// 5. Only our own echoes wait for the backoff: seven failed passes (the next retry 64 s away, 51 to 77 s
///    with the jitter), then a person changes the credentials Secret's `cluster_id`. A pass runs at once and the operand ConfigMap
///    follows within seconds, long before the retry is due.
#[tokio::test]
async fn a_persons_secret_change_during_the_backoff_brings_a_pass_at_once() {
    let env = Env::start_with(Config::default(), true, options(true)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    fail_passes(&env, server, 7).await;
    server.faults().clear();
    assert!(env.ctx.backing_off(), "the retry is tens of seconds away");
    let retry_in = env.ctx.retry_in();
    assert!(retry_in > Duration::from_secs(30), "{retry_in:?}");
    let passes = env.ctx.passes();
    env.patch_secret(serde_json::json!({"stringData": {"cluster_id": "cluster-2"}}))
        .await;
    // Well within the backoff: only a pass brought by the change itself can do it.
    eventually(
        Duration::from_secs(5),
        "the operand ConfigMap follows the new cluster_id before the retry",
        || async { operand_cluster_id(&env).await.as_deref() == Some("cluster-2") },
    )
    .await;
    assert!(env.ctx.passes() > passes);
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    env.stop().await;
}

/// 5, second variant: a person deletes one of the operand's objects (its metrics Service) during the
///    backoff: it is back within seconds, and the pass that restored it (failing again on the CR's
///    annotation) leaves the backoff in place.
#[tokio::test]
async fn a_persons_edit_of_an_operand_object_during_the_backoff_brings_a_pass_at_once() {
    let env = Env::start_with(Config::default(), true, options(true)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    fail_passes(&env, server, 6).await;
    assert!(env.ctx.backing_off(), "the retry is tens of seconds away");
    let failures = env.ctx.consecutive_failures();
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    services
        .delete(METRICS_SERVICE, &Default::default())
        .await
        .expect("delete the metrics Service");
    // The pass it brings restores the Service, then fails again on the CR's annotation (still refused).
    eventually(
        Duration::from_secs(5),
        "the metrics Service is back before the retry",
        || async { services.get_opt(METRICS_SERVICE).await.unwrap().is_some() },
    )
    .await;
    eventually(Duration::from_secs(5), "that pass failed", || async {
        env.ctx.consecutive_failures() > failures
    })
    .await;
    assert!(env.ctx.backing_off(), "the failed pass set a new retry");
    server.faults().clear();
    env.stop().await;
}

/// 2. A new leadership term starts fresh: failures of the last term do not stretch the first retry of the
///    next one (nor gate its triggers).
#[tokio::test]
async fn a_new_term_does_not_inherit_the_last_terms_backoff() {
    let env = Env::start_with(Config::default(), true, options(false)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    let term = |ctx| {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(reconciler::run(ctx, async move {
            let _ = stopped.await;
        }));
        (stop, task)
    };
    let (stop, task) = term(env.ctx.clone());
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    fail_passes(&env, server, 5).await;
    let _ = stop.send(());
    task.await.unwrap();

    // The next term: its first pass still fails (the fault stays) ...
    let passes = env.ctx.metrics.reconciles();
    let (stop, task) = term(env.ctx.clone());
    eventually(Duration::from_secs(10), "the first pass of the new term", || async {
        env.ctx.metrics.reconciles() > passes
    })
    .await;
    assert_eq!(
        env.ctx.consecutive_failures(),
        1,
        "the first failure of a term is its first (its retry is due in 1 s, not 32 s)"
    );
    // ... and its retry comes after about a second.
    server.faults().clear();
    let crs = env.crs(names::KYMA_SYSTEM);
    eventually(Duration::from_secs(5), "the retry removed the annotation", || {
        reconcile_annotation_consumed(&crs)
    })
    .await;
    let _ = stop.send(());
    task.await.unwrap();
    env.stop().await;
}

/// 3. A failed read of the credentials Secret is the API server's failure, retried with backoff; it is never
///    reported as the user's `InvalidSecret` (which waits 15 minutes or an edit of the Secret). A pass takes
///    the Secret from the term's watch once that has listed it; until then it reads the Secret itself. Here
///    the watch cannot list (every list of Secrets fails), so the pass reads, and that read fails.
#[tokio::test]
async fn a_failed_secret_read_is_retried_not_blamed_on_the_secret() {
    let env = Env::start_with(Config::default(), true, options(false)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    fail_manager(server, 500, Some("list"), Some("secrets"));
    fail_manager(server, 500, Some("get"), Some("secrets"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(reconciler::run(env.ctx.clone(), async move {
        let _ = stopped.await;
    }));
    eventually(
        Duration::from_secs(10),
        "the failed read is retried with backoff",
        || async { env.ctx.consecutive_failures() >= 2 },
    )
    .await;
    let failed_reads = server
        .request_log()
        .filter(|r| r.user == MANAGER && r.verb == "get" && r.name == names::REQUIRED_SECRET_NAME && r.code == 500);
    assert!(
        !failed_reads.is_empty(),
        "the pass read the credentials Secret itself, and the read failed"
    );
    let cr = env.cr().await;
    let status = cr.status.expect("a status");
    assert!(
        status.conditions.iter().all(|c| c.reason != "InvalidSecret"),
        "an unreadable Secret is not the user's error: {:?}",
        status.conditions
    );
    server.faults().clear();
    eventually(Duration::from_secs(10), "the retry succeeds", || async {
        env.ctx.consecutive_failures() == 0
    })
    .await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let _ = stop.send(());
    controller.await.expect("the controller stops");
    env.stop().await;
}

/// 4. A sustained 503 or 429 with `Retry-After: 30` cannot keep a pass beyond the budget of one call (the
///    client does not wait out the `Retry-After`; the pass fails and backs off).
#[tokio::test]
async fn a_sustained_retry_after_cannot_hold_a_pass() {
    let env = Env::start_with(Config::default(), true, options(true)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;

    for code in [503, 429] {
        // The pass that wrote Ready records its success only after its status write returns: wait for it, then
        // for the failure itself (a count of passes taken before it would be one short).
        eventually(Duration::from_secs(10), "the last success is recorded", || async {
            env.ctx.consecutive_failures() == 0
        })
        .await;
        server.faults().set_retry_after(Some(30));
        fail_manager(server, code, None, None);
        let started = Instant::now();
        // A pass with a request to make: the operation annotation is removed (reads come from caches).
        env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}}))
            .await;
        eventually(
            CALL_BUDGET,
            &format!("a pass under a sustained {code} fails"),
            || async { env.ctx.consecutive_failures() > 0 },
        )
        .await;
        let took = started.elapsed();
        assert!(
            took < CALL_BUDGET,
            "under a sustained {code} with Retry-After: 30 the pass took {took:?}"
        );
        server.faults().clear();
        env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    }
    env.stop().await;
}

/// 4, shutdown: under a sustained 503 with `Retry-After: 30`, stopping a leading manager (the in-flight pass,
/// then the Lease release) stays within the shutdown grace and one call's budget.
#[tokio::test]
async fn a_sustained_retry_after_cannot_hold_a_shutdown() {
    let env = Env::start_with(Config::default(), true, options(false)).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    // The manager's reconciler as `run --leader-elect` starts it, with the manager's client.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let args = run_args();
    let mut options = btp_manager::manager::Options::run(&args);
    options.namespace = names::KYMA_SYSTEM.into();
    options.leader_election = Some(Duration::from_secs(15));
    let manager = btp_manager::manager::ManagerBuilder::new(env.manager_client.clone(), options)
        .unwrap()
        .start_reconciler(stop_rx)
        .await
        .unwrap()
        .task;
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;

    server.faults().set_retry_after(Some(30));
    fail_manager(server, 503, None, None);
    let mark = server.request_log().len();
    touch(&env, 1).await;
    wait_for_request(server, mark, "a pass meets the fault", |r| r.code == 503).await;
    let started = Instant::now();
    let _ = stop_tx.send(true);
    let budget = SHUTDOWN_GRACE + CALL_BUDGET;
    tokio::time::timeout(budget, manager)
        .await
        .unwrap_or_else(|_| panic!("the shutdown did not end within {budget:?}"))
        .unwrap();
    let took = started.elapsed();
    assert!(took < budget, "the shutdown took {took:?}");
    server.faults().clear();
    env.stop().await;
}

fn run_args() -> btp_manager::cli::RunArgs {
    let repo = |p: &str| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(p);
    common::run_args([
        "--leader-elect".into(),
        "--operand-image".into(),
        IMAGE.into(),
        "--resources-path".into(),
        repo("module-resources").into_os_string(),
        "--manager-resources-path".into(),
        repo("manager-resources").into_os_string(),
    ])
}
