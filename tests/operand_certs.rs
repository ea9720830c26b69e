//! The operand's webhook certificates (docs/behaviour.md#operand-certificates, with the Go project's certificate scenarios) against the embedded API
//! server: generation, injection into both webhook configurations, and every regeneration trigger.

mod common;

use btp_api::names;
use btp_certs::operand::{self, keys};
use btp_certs::{generate_ca, generate_leaf, verify_signed_by, CaSpec, CertPair, KeyAlgorithm, LeafSpec};
use btp_manager::config::Config;
use common::*;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

const DAY: Duration = Duration::from_secs(24 * 3600);

async fn secret(env: &Env, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    let api: Api<Secret> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    api.get_opt(name)
        .await
        .unwrap()
        .map(|s| s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect())
}

async fn bundles(env: &Env) -> Vec<Vec<u8>> {
    let m: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    let v: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    let mut out = Vec::new();
    let m = m.get(operand::MUTATING_WEBHOOK_CONFIGURATION).await.unwrap();
    out.extend(
        m.webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()),
    );
    let v = v.get(operand::VALIDATING_WEBHOOK_CONFIGURATION).await.unwrap();
    out.extend(
        v.webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()),
    );
    out
}

async fn put_secret(env: &Env, name: &str, data: BTreeMap<String, Vec<u8>>) {
    let api: Api<Secret> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    let mut s = api.get(name).await.unwrap();
    s.data = Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect());
    api.replace(name, &PostParams::default(), &s).await.unwrap();
}

fn ca_at(now: SystemTime, validity: Duration) -> CertPair {
    generate_ca(
        &CaSpec {
            common_name: None,
            validity,
            key: KeyAlgorithm::EcdsaP256,
        },
        now,
    )
    .unwrap()
}

fn leaf_at(ca: &CertPair, now: SystemTime, validity: Duration) -> CertPair {
    let spec = LeafSpec {
        common_name: None,
        dns_names: operand::webhook_dns_names(names::KYMA_SYSTEM),
        ip_addresses: vec![],
        validity,
        key: KeyAlgorithm::EcdsaP256,
    };
    generate_leaf(ca, &spec, now).unwrap()
}

fn current_pair(ca: &BTreeMap<String, Vec<u8>>) -> CertPair {
    CertPair {
        cert_pem: String::from_utf8(ca[keys::CA_CRT].clone()).unwrap(),
        key_pem: String::from_utf8(ca[keys::CA_KEY].clone()).unwrap(),
    }
}

#[tokio::test]
async fn initial_pair_is_valid_and_both_bundles_hold_the_ca() {
    let env = ready_env(Config::default()).await;
    let ca = secret(&env, operand::CA_SECRET).await.expect("ca-server-cert");
    let webhook = secret(&env, operand::WEBHOOK_SECRET)
        .await
        .expect("webhook-server-cert");
    verify_signed_by(&webhook[keys::TLS_CRT], &ca[keys::CA_CRT]).unwrap();
    let info = btp_certs::parse_cert_pem(&webhook[keys::TLS_CRT]).unwrap();
    assert!(info
        .dns_names
        .contains(&"sap-btp-operator-webhook-service.kyma-system.svc".to_string()));
    let all = bundles(&env).await;
    assert_eq!(all.len(), 4);
    assert!(all.iter().all(|b| *b == ca[keys::CA_CRT]), "every caBundle is ca.crt");
    assert!(env.ctx.metrics.cert_regenerations() >= 1);
    env.stop().await;
}

#[tokio::test]
async fn a_replaced_ca_regenerates_both() {
    let env = ready_env(Config::default()).await;
    let before = secret(&env, operand::CA_SECRET).await.unwrap();
    let injected = ca_at(SystemTime::now(), 365 * DAY);
    put_secret(&env, operand::CA_SECRET, operand::to_ca_secret_data(&injected)).await;
    eventually(
        Duration::from_secs(5),
        "a new CA, different from the old and the injected one",
        || async {
            let now = secret(&env, operand::CA_SECRET).await.unwrap();
            now[keys::CA_CRT] != before[keys::CA_CRT] && now[keys::CA_CRT] != injected.cert_pem.as_bytes()
        },
    )
    .await;
    let ca = secret(&env, operand::CA_SECRET).await.unwrap();
    let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
    eventually(Duration::from_secs(5), "leaf and bundles follow the new CA", || async {
        let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
        verify_signed_by(&webhook[keys::TLS_CRT], &ca[keys::CA_CRT]).is_ok()
            && bundles(&env).await.iter().all(|b| *b == ca[keys::CA_CRT])
    })
    .await;
    drop(webhook);
    env.stop().await;
}

#[tokio::test]
async fn a_leaf_from_the_same_ca_is_accepted_and_a_foreign_one_regenerates_both() {
    let env = ready_env(Config::default()).await;
    let ca_data = secret(&env, operand::CA_SECRET).await.unwrap();
    let ours = leaf_at(&current_pair(&ca_data), SystemTime::now(), 365 * DAY);
    put_secret(&env, operand::WEBHOOK_SECRET, operand::to_webhook_secret_data(&ours)).await;
    reconcile_now(&env).await;
    let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
    assert_eq!(
        webhook[keys::TLS_CRT],
        ours.cert_pem.as_bytes(),
        "a leaf signed by the CA is kept"
    );
    assert_eq!(secret(&env, operand::CA_SECRET).await.unwrap(), ca_data, "CA unchanged");

    let foreign = leaf_at(&ca_at(SystemTime::now(), 365 * DAY), SystemTime::now(), 365 * DAY);
    put_secret(&env, operand::WEBHOOK_SECRET, operand::to_webhook_secret_data(&foreign)).await;
    eventually(
        Duration::from_secs(5),
        "both regenerated after a foreign leaf",
        || async {
            let ca = secret(&env, operand::CA_SECRET).await.unwrap();
            let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
            ca[keys::CA_CRT] != ca_data[keys::CA_CRT]
                && webhook[keys::TLS_CRT] != foreign.cert_pem.as_bytes()
                && verify_signed_by(&webhook[keys::TLS_CRT], &ca[keys::CA_CRT]).is_ok()
        },
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn an_edited_ca_bundle_is_restored() {
    let env = ready_env(Config::default()).await;
    let ca = secret(&env, operand::CA_SECRET).await.unwrap();
    let other = ca_at(SystemTime::now(), 365 * DAY);
    let api: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    for garbage in [other.cert_pem.as_bytes().to_vec(), b"dummy".to_vec()] {
        let mut config = api.get(operand::VALIDATING_WEBHOOK_CONFIGURATION).await.unwrap();
        for hook in config.webhooks.as_mut().unwrap() {
            hook.client_config.ca_bundle = Some(ByteString(garbage.clone()));
        }
        api.replace(
            operand::VALIDATING_WEBHOOK_CONFIGURATION,
            &PostParams::default(),
            &config,
        )
        .await
        .unwrap();
        eventually(
            Duration::from_secs(5),
            "caBundle restored to the current CA",
            || async { bundles(&env).await.iter().all(|b| *b == ca[keys::CA_CRT]) },
        )
        .await;
    }
    assert_eq!(
        secret(&env, operand::CA_SECRET).await.unwrap(),
        ca,
        "a caBundle edit does not regenerate the CA"
    );
    env.stop().await;
}

#[tokio::test]
async fn near_expiry_renews_the_leaf_only_or_both_for_the_ca() {
    let env = ready_env(Config::default()).await;
    let ca_data = secret(&env, operand::CA_SECRET).await.unwrap();
    // A leaf issued 360 days ago for a year: it expires in 5 days, inside the 7-day boundary.
    let old = SystemTime::now() - 360 * DAY;
    let expiring = leaf_at(&current_pair(&ca_data), old, 365 * DAY);
    put_secret(
        &env,
        operand::WEBHOOK_SECRET,
        operand::to_webhook_secret_data(&expiring),
    )
    .await;
    eventually(Duration::from_secs(5), "only the leaf renewed", || async {
        let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
        webhook[keys::TLS_CRT] != expiring.cert_pem.as_bytes()
    })
    .await;
    assert_eq!(secret(&env, operand::CA_SECRET).await.unwrap(), ca_data, "CA kept");

    // A CA that expires in 5 days: both renewed.
    let expiring_ca = ca_at(SystemTime::now() - 360 * DAY, 365 * DAY);
    put_secret(&env, operand::CA_SECRET, operand::to_ca_secret_data(&expiring_ca)).await;
    eventually(Duration::from_secs(5), "CA renewed", || async {
        let ca = secret(&env, operand::CA_SECRET).await.unwrap();
        let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
        ca[keys::CA_CRT] != expiring_ca.cert_pem.as_bytes()
            && verify_signed_by(&webhook[keys::TLS_CRT], &ca[keys::CA_CRT]).is_ok()
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_deleted_ca_secret_is_recreated_and_bundles_updated_within_two_seconds() {
    let env = ready_env(Config::default()).await;
    let before = secret(&env, operand::CA_SECRET).await.unwrap();
    let api: Api<Secret> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    api.delete(operand::CA_SECRET, &DeleteParams::default()).await.unwrap();
    eventually(
        Duration::from_secs(2),
        "ca-server-cert recreated and both caBundles updated",
        || async {
            let Some(ca) = secret(&env, operand::CA_SECRET).await else {
                return false;
            };
            ca[keys::CA_CRT] != before[keys::CA_CRT] && bundles(&env).await.iter().all(|b| *b == ca[keys::CA_CRT])
        },
    )
    .await;
    env.stop().await;
}

/// The chain the manager produces works for a real TLS client that trusts only the injected caBundle and
/// connects by the Service DNS name.
#[tokio::test]
async fn a_real_tls_client_accepts_the_served_chain() {
    use btp_webhooks::client::{tls_config, Connection, Protocol};
    let env = ready_env(Config::default()).await;
    let webhook = secret(&env, operand::WEBHOOK_SECRET).await.unwrap();
    let bundle = bundles(&env).await.remove(0);
    let cert = btp_webhooks::tls::SwappableCert::from_pem(&webhook[keys::TLS_CRT], &webhook[keys::TLS_KEY]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = btp_webhooks::tls::server_config(cert).unwrap();
    let state = btp_webhooks::WebhookState::new(
        btp_webhooks::RulesConfig::default(),
        std::sync::Arc::new(btp_webhooks::FixedServiceCounter(Ok(Default::default()))),
    );
    tokio::spawn(btp_webhooks::server::serve(
        listener,
        tls,
        btp_webhooks::router(state),
        std::future::pending(),
    ));
    let client_tls = tls_config(&bundle, Protocol::Http2).unwrap();
    let mut conn = Connection::open(
        addr,
        "sap-btp-operator-webhook-service.kyma-system.svc",
        client_tls,
        Protocol::Http2,
    )
    .await
    .expect("TLS handshake with the injected caBundle and the Service name");
    let reply = conn
        .send(http::Method::GET, "/healthz", None, bytes::Bytes::new())
        .await
        .unwrap();
    assert_eq!(reply.status, 200);
    env.stop().await;
}
