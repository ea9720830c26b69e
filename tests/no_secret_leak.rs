//! No credential value ever appears in a log line (at trace level, every crate), an Event, a status field
//! or an error, the credentials check's (which sends them to a token endpoint) included. Its own test binary: it installs the process-wide log subscriber.

mod common;

use base64::Engine as _;
use btp_api::{names, CredentialsReason, Reason};
use btp_manager::config::Config;
use common::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CANARY: &str = "CANARY-7f3a9c-do-not-log";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_credential_appears_nowhere() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
        .with_writer(move || writer.clone())
        .json()
        .init();

    // The credentials check runs too, against the test kit's token endpoint, which accepts the canary.
    let endpoint = common::token_endpoint::StandIn::start(&format!("{CANARY}-id"), CANARY)
        .await
        .unwrap();
    let config = Config {
        credentials_check_ca_bundle: endpoint.ca_pem.clone(),
        ..Config::default()
    };
    let options = StartOptions {
        credentials_check: true,
        ..StartOptions::default()
    };
    let env = Env::start_with(config, true, options).await;
    let mut creds = common::token_endpoint::credentials_at(&endpoint, CANARY);
    creds["clientid"] = serde_json::json!(format!("{CANARY}-id"));
    env.create_secret(creds, true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let ready = env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    let issued = common::token_endpoint::wait_credentials(&env, CredentialsReason::TokenIssued, 15).await;
    // The endpoint refuses the canary now (a rotation in SAP BTP): the refusal's path produces messages too.
    endpoint.accept("someone-else", "another-secret");
    env.patch_secret(serde_json::json!({"stringData": {"tokenurlsuffix": "/oauth/token?again"}}))
        .await;
    let refused = common::token_endpoint::wait_credentials(&env, CredentialsReason::Unauthorized, 15).await;

    // Break the Secret (a key removed, a value emptied) and repair it: error paths produce messages too.
    env.patch_secret(serde_json::json!({"data": {"cluster_id": null, "sm_url": ""}}))
        .await;
    let error = env.wait_cr(Reason::InvalidSecret, 10).await;
    env.patch_secret(
        serde_json::json!({"stringData": {"cluster_id": "cluster-1", "sm_url": "https://sm.example.com"}}),
    )
    .await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;

    let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    let leaked = |text: &str| text.contains(CANARY) || text.contains(&b64);

    for cr in [&ready, &issued, &refused, &error] {
        let status = serde_json::to_string(&cr.status).unwrap();
        assert!(!leaked(&status), "status leaks the credential: {status}");
    }
    let events_v1: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.client.clone());
    // Events are published in the background: wait for the last state change's (the second time Ready: a
    // repeated Event is counted in its series), so that every Event of the scenario is looked at.
    eventually(
        Duration::from_secs(10),
        "both Ready states' Events are recorded",
        || async {
            let events = events_v1.list(&ListParams::default()).await.unwrap().items;
            let ready: i32 = events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("ReconcileSucceeded"))
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .sum();
            ready >= 2
        },
    )
    .await;
    let events: Api<Event> = Api::all(env.client.clone());
    let events = events.list(&ListParams::default()).await.unwrap();
    for e in &events.items {
        let text = serde_json::to_string(e).unwrap();
        assert!(!leaked(&text), "an Event leaks the credential: {text}");
    }
    let events_v1 = events_v1.list(&ListParams::default()).await.unwrap().items;
    assert!(!events_v1.is_empty(), "the manager records Events");
    for e in events_v1 {
        let text = serde_json::to_string(&e).unwrap();
        assert!(!leaked(&text), "an Event leaks the credential: {text}");
    }
    env.stop().await;

    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(
        text.lines().count() > 50,
        "trace logging was captured ({} lines)",
        text.lines().count()
    );
    let bad: Vec<&str> = text.lines().filter(|l| leaked(l)).take(3).collect();
    assert!(bad.is_empty(), "log lines leak the credential: {bad:#?}");
}
