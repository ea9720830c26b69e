//! The apply's order on the embedded server's request log (docs/behaviour.md#apply): what must come first is
//! written first, what needs nothing of it goes alongside, and the first failure in the plan's order is the
//! one reported. Some writes are made slow on purpose (a simulated round trip, not a wait of the test): a
//! write that did not wait for them would show up before them in the log, which records requests in the order
//! they were answered.

mod common;

use btp_api::{names, Reason};
use btp_apiserver::testing::{LatencyRule, RequestRecord};
use btp_manager::config::Config;
use common::{copy_chart, temp_dir, Env, StartOptions};
use std::time::Duration;

fn slow(env: &Env, resource: &str) {
    slow_by(env, resource, Duration::from_millis(60));
}

fn slow_by(env: &Env, resource: &str, latency: Duration) {
    let server = env.server().expect("the embedded API server");
    server.faults().add_latency(LatencyRule {
        latency,
        verb: Some("patch".into()),
        resource: Some(resource.into()),
    });
}

async fn start() -> Option<Env> {
    let options = StartOptions {
        // Authorized as `deploy/` authorizes the manager (the embedded server enforces RBAC for it).
        manager_user: Some(common::install::manager_user()),
        ..StartOptions::default()
    };
    let env = Env::start_with(Config::default(), true, options).await;
    // The log and the faults are the embedded server's.
    env.server()?;
    Some(env)
}

/// The manager's server-side applies (not status writes), in the order the server answered them.
fn applies(log: &[RequestRecord]) -> Vec<&RequestRecord> {
    let manager = common::install::manager_user();
    log.iter()
        .filter(|r| r.user == manager && r.verb == "patch" && r.subresource.is_empty() && r.resource != "btpoperators")
        .collect()
}

fn positions(applies: &[&RequestRecord], pick: impl Fn(&RequestRecord) -> bool) -> Vec<usize> {
    applies
        .iter()
        .enumerate()
        .filter(|(_, r)| pick(r))
        .map(|(i, _)| i)
        .collect()
}

/// Every write `first` picks was answered before any `then` picks (both must exist).
fn before(
    applies: &[&RequestRecord],
    what: &str,
    first: impl Fn(&RequestRecord) -> bool,
    then: impl Fn(&RequestRecord) -> bool,
) {
    let (a, b) = (positions(applies, first), positions(applies, then));
    assert!(
        !a.is_empty() && !b.is_empty(),
        "{what}: both kinds of write are in the log"
    );
    let order: Vec<String> = applies.iter().map(|r| format!("{} {}", r.resource, r.name)).collect();
    assert!(
        a.iter().max() < b.iter().min(),
        "{what}; the applies in order: {order:#?}"
    );
}

#[tokio::test]
async fn a_cold_install_writes_what_must_come_first_first_and_the_rest_alongside() {
    let Some(env) = start().await else { return };
    // The CRDs answered much later than anything else: the module holds no instance of them, so nothing
    // waits for them.
    slow_by(&env, "customresourcedefinitions", Duration::from_secs(1));
    slow(&env, "secrets");
    // Roles answered late: the bindings go alongside them (the manager may `bind` the operand's roles, so
    // the API server does not resolve them), and are answered first.
    slow(&env, "clusterroles");
    slow(&env, "roles");
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let log = env.request_log().expect("request log").entries();
    let applies = applies(&log);
    let is = |resource: &'static str| move |r: &RequestRecord| r.resource == resource;
    let certificate = |r: &RequestRecord| {
        r.resource == "secrets"
            && [btp_certs::operand::CA_SECRET, btp_certs::operand::WEBHOOK_SECRET].contains(&r.name.as_str())
    };
    let webhook_configuration = |r: &RequestRecord| r.resource.ends_with("webhookconfigurations");
    before(
        &applies,
        "the writes that wait for others (the Deployment, the bindings, the webhook configurations) do not \
         wait for the CRDs",
        |r| r.resource == "deployments" || r.resource.ends_with("bindings") || webhook_configuration(r),
        is("customresourcedefinitions"),
    );
    // A binding to a role the manager may bind does not wait for the role (deploy/rbac.yaml).
    before(
        &applies,
        "the ClusterRoleBindings beside the ClusterRoles, answered first",
        is("clusterrolebindings"),
        is("clusterroles"),
    );
    before(
        &applies,
        "the RoleBindings beside the Roles, answered first",
        is("rolebindings"),
        is("roles"),
    );
    let refused: Vec<String> = applies
        .iter()
        .filter(|r| !(200..300).contains(&r.code))
        .map(|r| format!("{} {} {}", r.resource, r.name, r.code))
        .collect();
    assert!(refused.is_empty(), "no apply was refused: {refused:?}");
    before(
        &applies,
        "the certificate Secrets before the webhook configurations",
        certificate,
        webhook_configuration,
    );
    before(
        &applies,
        "the operand's Secrets and ConfigMap before its Deployment",
        |r| r.resource == "secrets" || r.resource == "configmaps",
        is("deployments"),
    );
    // Each object was written once: nothing differed after the first pass wrote it.
    let mut written: Vec<(String, String)> = applies.iter().map(|r| (r.resource.clone(), r.name.clone())).collect();
    let count = written.len();
    written.sort();
    written.dedup();
    assert_eq!(written.len(), count, "an object was applied twice: {written:?}");
    env.stop().await;
}

/// The finalizer is in place before anything of the operand is written (a CR deleted meanwhile must not
/// leave an operand behind); the first status (`Processing/Initialized`) goes beside the apply, not before it.
#[tokio::test]
async fn the_finalizer_comes_before_the_apply_and_the_first_status_beside_it() {
    let Some(env) = start().await else { return };
    // The CR's writes (finalizer and status) answered late: an apply that did not wait for the finalizer
    // would be answered before it; one that waited for the first status would be answered after it.
    slow_by(&env, "btpoperators", Duration::from_millis(300));
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let log = env.request_log().expect("request log").entries();
    let manager = common::install::manager_user();
    let ours: Vec<&RequestRecord> = log.iter().filter(|r| r.user == manager).collect();
    let first = |pick: &dyn Fn(&RequestRecord) -> bool| ours.iter().position(|r| pick(r));
    let is_apply = |r: &RequestRecord| r.verb == "patch" && r.subresource.is_empty() && r.resource != "btpoperators";
    let finalizer = first(&|r| r.verb == "patch" && r.resource == "btpoperators" && r.subresource.is_empty());
    let status = first(&|r| r.verb == "patch" && r.resource == "btpoperators" && r.subresource == "status");
    let apply = first(&is_apply);
    let order: Vec<String> = ours
        .iter()
        .filter(|r| r.verb == "patch")
        .map(|r| format!("{} {} {}", r.resource, r.subresource, r.name))
        .collect();
    assert!(
        finalizer.is_some() && status.is_some() && apply.is_some(),
        "the finalizer, a status and an apply are in the log: {order:#?}"
    );
    assert!(
        finalizer < apply,
        "an operand write was answered before the finalizer: {order:#?}"
    );
    assert!(apply < status, "the apply waited for the first status: {order:#?}");
    let applies_before_status = ours[..status.unwrap_or_default()]
        .iter()
        .filter(|r| is_apply(r))
        .count();
    assert!(
        applies_before_status > 1,
        "the apply's writes go on while the first status is written: {order:#?}"
    );
    env.stop().await;
}

/// As shipped, the mutating webhook adds the finalizer when the CR is created: nothing has to go before the
/// first status then, and `Processing/Initialized` goes beside the pass's first reads and writes, not after
/// them.
#[tokio::test]
async fn a_cr_created_with_the_finalizer_is_initialized_beside_the_first_reads_and_writes() {
    let Some(env) = start().await else { return };
    let server = env.server().expect("the embedded API server");
    // The ServiceAccount answered late, read (when no cache answers) or written: a first status that waited
    // for the reads or the apply would come after it.
    for verb in ["get", "patch"] {
        server.faults().add_latency(LatencyRule {
            latency: Duration::from_millis(300),
            verb: Some(verb.into()),
            resource: Some("serviceaccounts".into()),
        });
    }
    env.create_secret(common::credentials(), true).await;
    let mut cr = btp_api::BtpOperator::new(names::BTP_OPERATOR_NAME);
    cr.metadata.finalizers = Some(vec![names::FINALIZER.into()]);
    env.crs(names::KYMA_SYSTEM)
        .create(&kube::api::PostParams::default(), &cr)
        .await
        .expect("create the CR");
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let log = env.request_log().expect("request log").entries();
    let manager = common::install::manager_user();
    let ours: Vec<&RequestRecord> = log.iter().filter(|r| r.user == manager).collect();
    let order: Vec<String> = ours
        .iter()
        .map(|r| format!("{} {} {} {}", r.verb, r.resource, r.subresource, r.name))
        .collect();
    let position = |pick: &dyn Fn(&RequestRecord) -> bool| ours.iter().position(|r| pick(r));
    assert_eq!(
        position(&|r| r.verb == "patch" && r.resource == "btpoperators" && r.subresource.is_empty()),
        None,
        "the finalizer was there: no patch of the CR is needed: {order:#?}"
    );
    let status = position(&|r| r.resource == "btpoperators" && r.subresource == "status");
    let service_account = position(&|r| r.resource == "serviceaccounts" && (r.verb == "get" || r.verb == "patch"));
    assert!(status.is_some() && service_account.is_some(), "{order:#?}");
    assert!(
        status < service_account,
        "the first status waited for the first reads or writes: {order:#?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn the_first_failure_in_the_plans_order_is_reported_and_what_needs_the_failed_is_not_sent() {
    let Some(env) = start().await else { return };
    let server = env.server().expect("the embedded API server");
    // Both fail for good (403 is not retried); the ConfigMap, first in the plan's order, answers last.
    slow(&env, "configmaps");
    server.faults().fail(1.0, 403, Some("patch"), Some("configmaps"));
    server.faults().fail(1.0, 403, Some("patch"), Some("services"));
    env.create_secret_and_cr().await;
    let cr = env.wait_cr(Reason::ProvisioningFailed, 20).await;
    let message = cr
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.starts_with("applying ConfigMap sap-btp-operator-config:") && !message.contains("Service"),
        "{message}"
    );
    let log = env.request_log().expect("request log").entries();
    let applies = applies(&log);
    let answered: Vec<&str> = applies.iter().map(|r| r.resource.as_str()).collect();
    let services = answered.iter().position(|r| *r == "services");
    let configmap = answered.iter().position(|r| *r == "configmaps");
    assert!(
        services.is_some() && services < configmap,
        "the Service's failure came first in time: {answered:?}"
    );
    assert!(
        !answered.contains(&"deployments"),
        "the Deployment, which needs the failed ConfigMap, was sent: {answered:?}"
    );
    assert!(
        answered.iter().any(|r| r.ends_with("webhookconfigurations")),
        "the webhook configurations need the Secrets, not the Services they call: {answered:?}"
    );
    env.stop().await;
}

/// Point the manager at the module chart in `chart` (the runtime ConfigMap's `ResourcesPath`) and wait until
/// it uses it; `what` names the chart.
async fn use_chart(env: &Env, chart: &std::path::Path, what: &str) {
    let runtime: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM},
        "data": {"ResourcesPath": chart.display().to_string()}
    }))
    .expect("ConfigMap");
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .create(&Default::default(), &runtime)
        .await
        .expect("the runtime ConfigMap");
    common::eventually(Duration::from_secs(10), &format!("{what} is in use"), || async {
        env.ctx.settings().config.resources_path == chart
    })
    .await;
}

/// A chart of the module with a CRD of its own and an instance of it (a kind the plan does not name).
fn chart_with_an_instance() -> std::path::PathBuf {
    let dir = temp_dir("apply-waves");
    copy_chart(&dir);
    let widgets = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: the-widget
  namespace: kyma-system
spec:
  size: 3
"#;
    std::fs::write(dir.join("apply").join("widgets.yml"), widgets).expect("write the chart");
    dir
}

#[tokio::test]
async fn an_instance_of_a_crd_of_the_module_is_written_after_the_crds() {
    // The admin's identity: `deploy/` grants nothing on widgets.
    let env = Env::start_with(Config::default(), true, StartOptions::default()).await;
    let Some(server) = env.server() else {
        return env.stop().await;
    };
    let chart = chart_with_an_instance();
    use_chart(&env, &chart, "the chart with the Widget").await;
    slow_by(&env, "customresourcedefinitions", Duration::from_millis(300));
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let log = server.request_log().entries();
    // The server-side applies (the test and the Deployment stand-in send none: creates and status writes).
    let manager: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.verb == "patch" && r.subresource.is_empty() && r.resource != "btpoperators")
        .collect();
    before(
        &manager,
        "the CRDs (and everything else the plan names) before an instance of a CRD",
        |r| r.resource == "customresourcedefinitions" || r.resource == "deployments",
        |r| r.resource == "widgets",
    );
    env.stop().await;
    let _ = std::fs::remove_dir_all(chart);
}

/// A chart whose Role the shipped RBAC does not let the manager `bind` (`deploy/rbac.yaml` grants it for the
/// operand's roles by name): the API server refuses its RoleBinding while the Role does not exist (404), and
/// the apply, which sends bindings beside their roles, sends it once more as soon as the Role is applied
/// (`src/reconciler/waves.rs`). The CR turns Ready.
#[tokio::test]
async fn a_binding_whose_role_the_manager_may_not_bind_is_sent_again_after_its_role() {
    const ROLE: &str = "sap-btp-operator-leader-election-role";
    const RENAMED: &str = "sap-btp-operator-elections-role";
    let Some(env) = start().await else {
        common::skip("orders the Role after its binding with the embedded server's latency injection");
        return;
    };
    let chart = temp_dir("apply-waves-renamed-role");
    copy_chart(&chart);
    let rbac = chart.join("apply").join("rbac.yml");
    let text = std::fs::read_to_string(&rbac).expect("the chart's rbac.yml");
    assert!(text.contains(ROLE), "the chart's Role is {ROLE}");
    std::fs::write(&rbac, text.replace(ROLE, RENAMED)).expect("write the chart");
    use_chart(&env, &chart, "the chart with the renamed Role").await;
    // The Role answered well after its binding, which is sent alongside it.
    slow_by(&env, "roles", Duration::from_millis(300));
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let log = env.request_log().expect("request log").entries();
    let applies = applies(&log);
    let answers: Vec<(&str, u16)> = applies
        .iter()
        .filter(|r| r.resource == "rolebindings" || r.resource == "roles")
        .map(|r| (r.resource.as_str(), r.code))
        .collect();
    assert_eq!(
        answers,
        [("rolebindings", 404), ("roles", 201), ("rolebindings", 201)],
        "the binding went beside its Role and was refused, then was sent again after the Role"
    );
    // In the same pass: no status was written between the Role applied and the binding applied (a failed
    // pass reports its failure before it is retried; the first status goes beside the apply, long before
    // the slow Role).
    let manager = common::install::manager_user();
    let between: Vec<String> = log
        .iter()
        .filter(|r| r.user == manager)
        .skip_while(|r| !(r.resource == "roles" && r.code == 201))
        .take_while(|r| !(r.resource == "rolebindings" && r.code == 201))
        .filter(|r| r.resource == "btpoperators" && r.subresource == "status")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(between.is_empty(), "the pass failed and was retried: {between:?}");
    env.stop().await;
    let _ = std::fs::remove_dir_all(&chart);
}
