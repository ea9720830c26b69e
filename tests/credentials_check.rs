//! The credentials check (docs/behaviour.md#credentials-check): the leading manager asks the Secret's token
//! endpoint for a token and reports `CredentialsValid` on the CR, without touching the state or `Ready`. The
//! endpoint is the test kit's stand-in on loopback, over HTTPS with a CA of its own; the manager runs in this
//! process, so these tests also run through `BTP_E2E_KUBECONFIG`.

mod common;

use btp_api::{names, CredentialsReason, Reason};
use btp_manager::config::Config;
use common::token_endpoint::{self, condition, credentials_at, wait_credentials, Behaviour, StandIn, SECRET};
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use std::time::Duration;

/// An environment whose manager checks credentials, trusting `ca_bundle` besides the system roots.
async fn checking_env(ca_bundle: &str, interval: Duration) -> Env {
    let config = Config {
        credentials_check_interval: interval,
        credentials_check_ca_bundle: ca_bundle.into(),
        ..Config::default()
    };
    let options = StartOptions {
        credentials_check: true,
        ..StartOptions::default()
    };
    Env::start_with(config, true, options).await
}

async fn provision(env: &Env, endpoint: &StandIn, client_secret: &str) {
    env.create_secret(credentials_at(endpoint, client_secret), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
}

/// The reason of the `Ready` condition and the state: what the check must never change.
fn ready_of(cr: &btp_api::BtpOperator) -> (String, String) {
    let status = cr.status.as_ref().expect("a status");
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
    (status.state.as_str().to_string(), ready.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_credentials_get_a_token_and_a_wrong_secret_is_unauthorized_at_once() {
    let endpoint = token_endpoint::start().await;
    let env = checking_env(&endpoint.ca_pem, Duration::from_secs(3600)).await;
    provision(&env, &endpoint, SECRET).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    let cr = wait_credentials(&env, CredentialsReason::TokenIssued, 15).await;
    assert_eq!(condition(&cr), Some(("True".into(), "TokenIssued".into())));
    assert_eq!(
        cr.status.as_ref().unwrap().conditions[0].type_,
        "Ready",
        "Ready stays the first condition"
    );
    assert_eq!(endpoint.requests(), 1, "one check per Secret version");
    assert_eq!(env.ctx.metrics.credentials_check().exported(), Some("TokenIssued"));

    // A Secret change is checked at once (the interval is an hour).
    env.patch_secret(serde_json::json!({"stringData": {"clientsecret": "rotated-in-the-cockpit"}}))
        .await;
    let cr = wait_credentials(&env, CredentialsReason::Unauthorized, 15).await;
    assert_eq!(condition(&cr), Some(("False".into(), "Unauthorized".into())));
    let message = &cr.status.as_ref().unwrap().conditions[1].message;
    assert!(message.contains("Rotate the Secret"), "{message}");
    assert_eq!(
        ready_of(&cr),
        ("Ready".into(), "ReconcileSucceeded".into()),
        "the check never changes the state"
    );
    assert_eq!(env.ctx.metrics.credentials_check().exported(), Some("Unauthorized"));
    // An Event says so (published in the background).
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    eventually(Duration::from_secs(10), "an Unauthorized Event", || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Unauthorized") && e.type_.as_deref() == Some("Warning"))
    })
    .await;

    // The credentials rotated back: True again.
    env.patch_secret(serde_json::json!({"stringData": {"clientsecret": SECRET}}))
        .await;
    wait_credentials(&env, CredentialsReason::TokenIssued, 15).await;
    env.stop().await;
}

/// On an install, a verdict that comes while the pass applies goes with that pass's `Ready`, and so does an
/// operand Deployment that turned available meanwhile: one status write after `Initialized`, not a write of
/// the verdict alone just before `Ready`, nor `Ready` left to the next pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_and_a_deployment_ready_during_the_install_go_with_its_ready_in_one_write() {
    let endpoint = token_endpoint::start().await;
    let env = checking_env(&endpoint.ca_pem, Duration::from_secs(3600)).await;
    let Some(server) = env.embedded() else { return };
    // The CRDs' writes are held: the pass that installs is still applying when the verdict comes and the
    // operand Deployment (written without waiting for them) is marked available.
    let held = server.faults().hold(Some("patch"), Some("customresourcedefinitions"));
    let log = server.request_log();
    let skip = log.len();
    provision(&env, &endpoint, SECRET).await;
    eventually(Duration::from_secs(15), "the check's verdict", || async {
        env.ctx.metrics.credentials_check().exported() == Some("TokenIssued")
    })
    .await;
    let deployment = btp_manager::reconciler::view::ObjectKey::new(
        "apps/v1",
        "Deployment",
        Some(names::KYMA_SYSTEM),
        names::operand::DEPLOYMENT,
    );
    eventually(
        Duration::from_secs(15),
        "the manager's view shows the operand Deployment available",
        || async {
            let view = env.ctx.view()?;
            let seen = view.module_object(&deployment, false).known()??;
            let conditions = seen["status"]["conditions"].as_array()?.clone();
            conditions
                .iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
                .then_some(())
        },
    )
    .await;
    let status_writes = || {
        log.since(skip)
            .into_iter()
            .filter(|r| r.verb == "patch" && r.resource == "btpoperators" && r.subresource == "status")
            .count()
    };
    // A write's record follows its effect (the log takes it as the answer leaves): wait for the record.
    eventually(Duration::from_secs(10), "the Initialized write", || async {
        status_writes() >= 1
    })
    .await;
    assert_eq!(status_writes(), 1, "only Initialized while the CRDs are held");
    held.release();
    let cr = env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    assert_eq!(
        condition(&cr),
        Some(("True".into(), "TokenIssued".into())),
        "Ready came with the verdict"
    );
    eventually(Duration::from_secs(10), "the Ready write", || async {
        status_writes() >= 2
    })
    .await;
    assert_eq!(status_writes(), 2, "Initialized, then Ready with the verdict");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_ca_is_reported_until_the_bundle_trusts_it() {
    let endpoint = token_endpoint::start().await;
    let env = checking_env("", Duration::from_secs(3600)).await;
    provision(&env, &endpoint, SECRET).await;
    let cr = wait_credentials(&env, CredentialsReason::TLSUntrusted, 15).await;
    assert_eq!(condition(&cr), Some(("False".into(), "TLSUntrusted".into())));
    assert_eq!(env.ctx.metrics.credentials_check().exported(), Some("TLSUntrusted"));
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;

    // The endpoint's CA in the runtime ConfigMap: checked again at once, and trusted.
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM},
        "data": {"CredentialsCheckCABundle": endpoint.ca_pem}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let cr = wait_credentials(&env, CredentialsReason::TokenIssued, 15).await;
    assert_eq!(ready_of(&cr), ("Ready".into(), "ReconcileSucceeded".into()));
    assert_eq!(env.ctx.metrics.credentials_check().exported(), Some("TokenIssued"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_listener_and_a_stall_are_unreachable_and_provisioning_goes_on() {
    // A stalled endpoint: the check gives up after its bound, and the CR is Ready meanwhile.
    let endpoint = token_endpoint::start().await;
    endpoint.set(Behaviour::Stall);
    let env = checking_env(&endpoint.ca_pem, Duration::from_secs(3600)).await;
    provision(&env, &endpoint, SECRET).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    let cr = wait_credentials(&env, CredentialsReason::Unreachable, 20).await;
    let message = &cr.status.as_ref().unwrap().conditions[1].message;
    assert!(message.contains("did not answer within 5s"), "{message}");
    assert_eq!(endpoint.requests(), 1);

    // Nothing listens where the Secret points now.
    let closed = free_addr();
    env.patch_secret(serde_json::json!({"stringData": {"tokenurl": format!("https://{closed}")}}))
        .await;
    let cr = eventually(Duration::from_secs(15), "a refused connection is reported", || async {
        let cr = env.cr().await;
        let message = cr
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "CredentialsValid")?
            .message
            .clone();
        message.contains("No connection").then_some(cr)
    })
    .await;
    assert_eq!(condition(&cr), Some(("False".into(), "Unreachable".into())));
    assert_eq!(ready_of(&cr), ("Ready".into(), "ReconcileSucceeded".into()));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_unreachable_and_other_answers_unexpected() {
    let endpoint = token_endpoint::start().await;
    endpoint.set(Behaviour::Status(503));
    let env = checking_env(&endpoint.ca_pem, Duration::from_secs(3600)).await;
    provision(&env, &endpoint, SECRET).await;
    wait_credentials(&env, CredentialsReason::Unreachable, 15).await;
    endpoint.set(Behaviour::Status(404));
    // Another Secret version: checked at once.
    env.patch_secret(serde_json::json!({"stringData": {"tokenurlsuffix": "/wrong/path"}}))
        .await;
    wait_credentials(&env, CredentialsReason::UnexpectedResponse, 15).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_of_zero_disables_the_check_and_sends_nothing() {
    let endpoint = token_endpoint::start().await;
    let env = checking_env(&endpoint.ca_pem, Duration::ZERO).await;
    provision(&env, &endpoint, SECRET).await;
    let cr = env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    // Disabled is written with the first status: no request, no extra write.
    assert_eq!(condition(&cr), Some(("Unknown".into(), "Disabled".into())));
    // A Secret change brings a pass, and still no request.
    env.patch_secret(serde_json::json!({"stringData": {"clientsecret": "another"}}))
        .await;
    reconcile_now(&env).await;
    assert_eq!(condition(&env.cr().await), Some(("Unknown".into(), "Disabled".into())));
    assert_eq!(endpoint.requests(), 0, "a disabled check asks nothing");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_is_not_checked() {
    let endpoint = token_endpoint::start().await;
    let env = checking_env(&endpoint.ca_pem, Duration::from_secs(3600)).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = wait_credentials(&env, CredentialsReason::NotChecked, 15).await;
    assert_eq!(ready_of(&cr), ("Warning".into(), "MissingSecret".into()));
    assert_eq!(endpoint.requests(), 0);
    env.create_secret(credentials_at(&endpoint, SECRET), true).await;
    wait_credentials(&env, CredentialsReason::TokenIssued, 15).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leading_replica_asks() {
    let endpoint = token_endpoint::start().await;
    let config = Config {
        credentials_check_ca_bundle: endpoint.ca_pem.clone(),
        ..Config::default()
    };
    let options = StartOptions {
        reconcile: false,
        credentials_check: true,
        ..StartOptions::default()
    };
    let env = Env::start_with(config.clone(), true, options).await;
    // Two replicas, as `run --leader-elect` starts them: only the holder of the Lease reconciles and checks.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut options = btp_manager::manager::Options::in_process(config.clone(), IMAGE);
        options.leader_election = Some(Duration::from_secs(15));
        let replica = btp_manager::manager::ManagerBuilder::new(env.manager_client.clone(), options)
            .unwrap()
            .start_reconciler(stopped.clone())
            .await
            .unwrap();
        replicas.push(replica);
    }
    provision(&env, &endpoint, SECRET).await;
    wait_credentials(&env, CredentialsReason::TokenIssued, 20).await;
    let exported: Vec<Option<&str>> = replicas
        .iter()
        .map(|r| r.ctx.metrics.credentials_check().exported())
        .collect();
    assert!(
        exported.contains(&Some("TokenIssued")) && exported.contains(&None),
        "the leader exports the result, the standby nothing: {exported:?}"
    );
    assert_eq!(endpoint.requests(), 1, "one replica asked, once");
    let _ = stop.send(true);
    for replica in replicas {
        let _ = replica.task.await;
    }
    env.stop().await;
}
