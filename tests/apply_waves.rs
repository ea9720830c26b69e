//! The apply's waves on the embedded server's request log (docs/behaviour.md#apply): what must come first is
//! written first, and a wave's first failure in its own order is the one reported. Some writes are made slow
//! on purpose (a simulated round trip, not a wait of the test): a later wave that did not wait for them would
//! show up before them in the log, which records requests in the order they were answered.

mod common;

use btp_api::{names, State};
use btp_apiserver::testing::{LatencyRule, RequestRecord};
use btp_manager::config::Config;
use common::{Env, StartOptions};
use std::time::Duration;

fn slow(env: &Env, resource: &str) {
    let server = env.server().expect("the embedded API server");
    server.faults().add_latency(LatencyRule {
        latency: Duration::from_millis(60),
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
async fn a_cold_install_writes_each_wave_after_the_one_before() {
    let Some(env) = start().await else { return };
    slow(&env, "customresourcedefinitions");
    slow(&env, "secrets");
    // Roles answered late: a binding sent alongside them would be refused (the role it references does not
    // exist yet) or answered first.
    slow(&env, "clusterroles");
    slow(&env, "roles");
    env.create_secret(common::credentials(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    env.wait_for(
        names::KYMA_SYSTEM,
        names::BTP_OPERATOR_NAME,
        State::Ready,
        "ReconcileSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let log = env.request_log().expect("request log").entries();
    let applies = applies(&log);
    let is = |resource: &'static str| move |r: &RequestRecord| r.resource == resource;
    let certificate = |r: &RequestRecord| {
        r.resource == "secrets"
            && [btp_certs::operand::CA_SECRET, btp_certs::operand::WEBHOOK_SECRET].contains(&r.name.as_str())
    };
    let webhook_configuration = |r: &RequestRecord| r.resource.ends_with("webhookconfigurations");
    let not_foundation = |r: &RequestRecord| {
        !["customresourcedefinitions", "serviceaccounts", "namespaces"].contains(&r.resource.as_str())
    };
    before(
        &applies,
        "the CRDs before everything of later waves",
        is("customresourcedefinitions"),
        not_foundation,
    );
    before(
        &applies,
        "the ServiceAccount before the bindings",
        is("serviceaccounts"),
        is("rolebindings"),
    );
    // A binding is checked against the role it references: sent first, it is refused (404).
    before(
        &applies,
        "the ClusterRoles before the ClusterRoleBindings",
        is("clusterroles"),
        is("clusterrolebindings"),
    );
    before(
        &applies,
        "the Roles before the RoleBindings",
        is("roles"),
        is("rolebindings"),
    );
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

#[tokio::test]
async fn the_first_failure_of_a_wave_in_its_order_is_reported_and_later_waves_are_not_sent() {
    let Some(env) = start().await else { return };
    let server = env.server().expect("the embedded API server");
    // Both fail for good (403 is not retried); the ConfigMap, first in the wave's order, answers last.
    slow(&env, "configmaps");
    server.faults().fail(1.0, 403, Some("patch"), Some("configmaps"));
    server.faults().fail(1.0, 403, Some("patch"), Some("services"));
    env.create_secret(common::credentials(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env
        .wait_for(
            names::KYMA_SYSTEM,
            names::BTP_OPERATOR_NAME,
            State::Error,
            "ProvisioningFailed",
            Duration::from_secs(20),
        )
        .await;
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
        !answered
            .iter()
            .any(|r| *r == "deployments" || r.ends_with("webhookconfigurations")),
        "a wave after the failed one was sent: {answered:?}"
    );
    env.stop().await;
}
