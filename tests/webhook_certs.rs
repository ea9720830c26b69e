//! The manager's own webhook certificates against the embedded API server: one CA for concurrent
//! replicas, caBundle publication, repair, the run loop, and admission end to end through the API server.

mod common;

use btp_apiserver::{ApiServer, Config, RunningApiServer};
use btp_certs::rotation::{keys, Policy, Stored};
use btp_manager::ops::Readiness;
use btp_manager::webhook_certs::WebhookCerts;
use btp_webhooks::manifests::{Endpoint, WebhookManifests};
use btp_webhooks::tls::SwappableCert;
use common::{btp_operator_crd_served, eventually};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, PostParams};
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "kyma-system";
const SECRET: &str = "btp-manager-webhook-cert";

async fn api_server() -> (RunningApiServer, kube::Client) {
    let server = ApiServer::start(Config::default()).await.expect("embedded API server");
    let client = server.client().await;
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    (server, client)
}

fn manifests(url: &str) -> WebhookManifests {
    WebhookManifests {
        endpoint: Endpoint::Url(url.into()),
        ..WebhookManifests::in_cluster(NS)
    }
}

fn policy() -> Policy {
    Policy::new(vec!["localhost".into()], vec!["127.0.0.1".parse().unwrap()])
}

fn certs(client: &kube::Client, policy: Policy, url: &str) -> WebhookCerts {
    WebhookCerts::new(client.clone(), NS, SECRET, policy, manifests(url))
}

async fn stored(secrets: &Api<Secret>) -> Option<Stored> {
    let secret = secrets.get_opt(SECRET).await.unwrap()?;
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    Some(Stored::from_data(&data))
}

async fn bundles(client: &kube::Client) -> Vec<Vec<u8>> {
    let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let m: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut out = Vec::new();
    if let Some(c) = v
        .get_opt(btp_api::names::webhook::VALIDATING_CONFIGURATION)
        .await
        .unwrap()
    {
        out.extend(
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()),
        );
    }
    if let Some(c) = m
        .get_opt(btp_api::names::webhook::MUTATING_CONFIGURATION)
        .await
        .unwrap()
    {
        out.extend(
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()),
        );
    }
    out
}

#[tokio::test]
async fn replicas_starting_together_converge_on_one_ca() {
    let (_server, client) = api_server().await;
    let replicas: Vec<WebhookCerts> = (0..3)
        .map(|_| certs(&client, policy(), "https://127.0.0.1:1"))
        .collect();
    let (a, b, c) = tokio::join!(replicas[0].settle(), replicas[1].settle(), replicas[2].settle());
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let in_cluster = stored(&secrets).await.expect("secret created");
    for replica in [&a, &b, &c] {
        assert_eq!(replica.ca, in_cluster.ca, "every replica ends with the stored CA");
        assert_eq!(replica.leaf, in_cluster.leaf);
    }
    let secret = secrets.get(SECRET).await.unwrap();
    let labels = secret.metadata.labels.unwrap();
    // The manager's own labels, never the pair that marks what deprovisioning removes.
    assert_eq!(labels["app.kubernetes.io/part-of"], "btp-manager");
    assert_eq!(labels["kyma-project.io/module"], "btp-operator");
    assert!(!labels.contains_key("app.kubernetes.io/managed-by"), "{labels:?}");
    // Settled: another round writes nothing.
    let rv = secret.metadata.resource_version;
    replicas[0].settle().await.unwrap();
    assert_eq!(secrets.get(SECRET).await.unwrap().metadata.resource_version, rv);
}

#[tokio::test]
async fn publish_serves_the_leaf_and_puts_the_ca_bundle_in_both_configurations() {
    let (_server, client) = api_server().await;
    let manager = certs(&client, policy(), "https://127.0.0.1:9443");
    let s = manager.settle().await.unwrap();
    let placeholder = btp_webhooks::tls::certified_key(
        s.leaf.as_ref().unwrap().cert_pem.as_bytes(),
        s.leaf.as_ref().unwrap().key_pem.as_bytes(),
    )
    .unwrap();
    let cert = SwappableCert::new(placeholder);
    manager.publish(&s, &cert).await.unwrap();
    let all = bundles(&client).await;
    assert_eq!(
        all.len(),
        5,
        "three validating webhooks (BtpOperator CREATE, DELETE, Secret), two mutating"
    );
    for bundle in all {
        assert_eq!(bundle, s.ca_bundle().into_bytes());
    }
    let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = v.get(btp_api::names::webhook::VALIDATING_CONFIGURATION).await.unwrap();
    let hook = &config.webhooks.unwrap()[0];
    assert_eq!(
        hook.client_config.url.as_deref(),
        Some("https://127.0.0.1:9443/validate")
    );
    assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
}

#[tokio::test]
async fn a_damaged_secret_is_repaired_keeping_the_ca_when_it_is_intact() {
    let (_server, client) = api_server().await;
    let manager = certs(&client, policy(), "https://127.0.0.1:1");
    let first = manager.settle().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let mut secret = secrets.get(SECRET).await.unwrap();
    secret
        .data
        .as_mut()
        .unwrap()
        .insert(keys::TLS_CRT.into(), ByteString(b"garbage".to_vec()));
    secrets.replace(SECRET, &PostParams::default(), &secret).await.unwrap();
    let repaired = manager.settle().await.unwrap();
    assert_eq!(repaired.ca, first.ca, "the CA survives a broken leaf");
    assert_ne!(repaired.leaf, first.leaf);
    btp_certs::verify_signed_by(
        repaired.leaf.unwrap().cert_pem.as_bytes(),
        first.ca.unwrap().cert_pem.as_bytes(),
    )
    .unwrap();
}

/// A keeper that leads for its whole life (as without leader election).
fn leading() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(true);
    // The sender may go: the receiver keeps the last value.
    drop(tx);
    rx
}

/// The run loop: a deleted Secret is recreated (new CA), the caBundles follow, and the served certificate
/// follows; with short lifetimes the leaf is renewed before it expires, without anyone touching anything.
#[tokio::test]
async fn the_run_loop_repairs_deletion_and_renews_before_expiry() {
    let (_server, client) = api_server().await;
    let mut short = policy();
    short.leaf_validity = Duration::from_secs(4);
    short.leaf_renew_before = Duration::from_secs(2);
    let manager = certs(&client, short.clone(), "https://127.0.0.1:1");
    let first = manager.settle().await.unwrap();
    let leaf = first.leaf.as_ref().unwrap();
    let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(certs(&client, short, "https://127.0.0.1:1").run(
        cert.clone(),
        leading(),
        Readiness::default(),
        async move {
            let _ = stop_rx.await;
        },
    ));

    let served = |cert: Arc<SwappableCert>| cert.current().expect("a served certificate").cert[0].to_vec();
    let first_served = served(cert.clone());
    // Renewal before expiry (leaf lives 4 s, renewed in its last 2 s).
    eventually(Duration::from_secs(10), "leaf renewed and served", || {
        let cert = cert.clone();
        let first_served = first_served.clone();
        async move { served(cert) != first_served }
    })
    .await;

    // Deletion: a new CA, published and served.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let old_ca = stored(&secrets).await.unwrap().ca;
    secrets.delete(SECRET, &DeleteParams::default()).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "secret recreated with a new CA, bundles and served leaf follow",
        || {
            let (secrets, client, cert, old_ca) = (secrets.clone(), client.clone(), cert.clone(), old_ca.clone());
            async move {
                let Some(now) = stored(&secrets).await else {
                    return false;
                };
                if now.ca == old_ca || now.ca.is_none() {
                    return false;
                }
                let bundle_ok = bundles(&client)
                    .await
                    .iter()
                    .all(|b| *b == now.ca_bundle().into_bytes());
                let leaf_pem = now.leaf.as_ref().unwrap().cert_pem.clone();
                let der = rustls::pki_types::pem::PemObject::from_pem_slice(leaf_pem.as_bytes())
                    .map(|d: rustls::pki_types::CertificateDer| d.to_vec())
                    .unwrap_or_default();
                bundle_ok && served(cert) == der
            }
        },
    )
    .await;
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("run loop stops")
        .unwrap();
}

/// The whole path: the manager's certificates and configurations, the real webhook server on loopback,
/// and the API server calling it (verifying the published caBundle) for kube-client requests.
#[tokio::test]
async fn the_api_server_refuses_a_misnamed_cr_and_an_incomplete_secret_through_our_webhooks() {
    use btp_api::BtpOperator;
    use btp_webhooks::{FixedServiceCounter, RulesConfig, WebhookState};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let (_server, client) = api_server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &BtpOperator::crd().unwrap())
        .await
        .unwrap();
    btp_operator_crd_served(&client).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let manager = certs(&client, policy(), &url);
    let s = manager.settle().await.unwrap();
    let leaf = s.leaf.as_ref().unwrap();
    let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    manager.publish(&s, &cert).await.unwrap();
    let state = WebhookState::new(
        RulesConfig::default(),
        Arc::new(FixedServiceCounter(Ok(Default::default()))),
    );
    let tls = btp_webhooks::tls::server_config(cert).unwrap();
    tokio::spawn(btp_webhooks::server::serve(
        listener,
        tls,
        btp_webhooks::router(state),
        std::future::pending(),
    ));

    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), NS);
    let err = crs
        .create(&PostParams::default(), &BtpOperator::new("btpoperator-test"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("denied the request") && msg.contains("\"btpoperator-test\""),
        "{msg}"
    );
    assert!(
        crs.get_opt("btpoperator-test").await.unwrap().is_none(),
        "nothing stored"
    );

    let created = crs
        .create(&PostParams::default(), &BtpOperator::new("btpoperator"))
        .await
        .unwrap();
    assert_eq!(
        created.metadata.finalizers,
        Some(vec![btp_api::names::FINALIZER.to_string()]),
        "mutating webhook ran"
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let incomplete: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"}},
        "stringData": {"clientid": "id", "clientsecret": "  \n", "sm_url": "https://sm.example.com"}
    }))
    .unwrap();
    let msg = secrets
        .create(&PostParams::default(), &incomplete)
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing key(s): tokenurl, cluster_id"), "{msg}");
    assert!(msg.contains("empty value(s) for key(s): clientsecret"), "{msg}");

    let complete: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"}},
        "stringData": {"clientid": "id\n", "clientsecret": "secret", "sm_url": "https://sm.example.com",
                       "tokenurl": "https://auth.example.com", "cluster_id": "c1"}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &complete).await.unwrap();
    let stored = secrets.get("sap-btp-manager").await.unwrap();
    let clientid = stored
        .data
        .as_ref()
        .and_then(|d| d.get("clientid"))
        .map(|v| v.0.clone());
    let clientid = clientid.or_else(|| {
        stored
            .string_data
            .as_ref()
            .and_then(|d| d.get("clientid"))
            .map(|v| v.clone().into_bytes())
    });
    assert_eq!(
        clientid.as_deref(),
        Some(&b"id"[..]),
        "trailing newline trimmed by the mutating webhook"
    );
}

#[tokio::test]
async fn a_certificate_secret_with_the_module_resource_labels_is_relabelled_in_place() {
    let (_server, client) = api_server().await;
    let manager = certs(&client, policy(), "https://127.0.0.1:1");
    let first = manager.settle().await.unwrap();
    // As an older version labelled it: deprovisioning would remove it.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let old = serde_json::json!({"metadata": {"labels": {
        "app.kubernetes.io/managed-by": "btp-manager", "app.kubernetes.io/part-of": null, "team": "x"}}});
    secrets
        .patch(
            SECRET,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&old),
        )
        .await
        .unwrap();
    let again = manager.settle().await.unwrap();
    assert_eq!(again.ca, first.ca, "the certificates are kept");
    let labels = secrets.get(SECRET).await.unwrap().metadata.labels.unwrap();
    assert!(!labels.contains_key("app.kubernetes.io/managed-by"), "{labels:?}");
    assert_eq!(labels["app.kubernetes.io/part-of"], "btp-manager");
    assert_eq!(labels["team"], "x", "labels others added are kept");
}

/// The run loop watches the manager's own webhook configurations: a wiped caBundle and a foreign one are
/// put back within 2 s, without waiting for the hourly re-check; a steady state writes nothing.
#[tokio::test]
async fn a_wiped_or_foreign_ca_bundle_is_restored_at_once() {
    use kube::api::{Patch, PatchParams};
    let (server, client) = api_server().await;
    let manager = certs(&client, policy(), "https://127.0.0.1:1");
    let s = manager.settle().await.unwrap();
    let leaf = s.leaf.as_ref().unwrap();
    let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    manager.publish(&s, &cert).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(certs(&client, policy(), "https://127.0.0.1:1").run(
        cert,
        leading(),
        Readiness::default(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let want = s.ca_bundle().into_bytes();
    let all_ours = |client: kube::Client, want: Vec<u8>| async move {
        let all = bundles(&client).await;
        all.len() == 5 && all.iter().all(|b| *b == want)
    };
    eventually(Duration::from_secs(5), "the run loop settled", || {
        all_ours(client.clone(), want.clone())
    })
    .await;

    // Settled: a further round (a watch event of our own) writes nothing.
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let name = btp_api::names::webhook::VALIDATING_CONFIGURATION;
    let rv = validating.get(name).await.unwrap().metadata.resource_version;
    manager
        .publish(
            &s,
            &SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        validating.get(name).await.unwrap().metadata.resource_version,
        rv,
        "an unchanged configuration is not re-written"
    );

    // A real CA, but not ours: the API server's.
    let foreign = server.ca_pem();
    for (what, bundle) in [("wiped", None), ("foreign", Some(foreign))] {
        let mut config = validating.get(name).await.unwrap();
        for hook in config.webhooks.iter_mut().flatten() {
            hook.client_config.ca_bundle = bundle.clone().map(|b| ByteString(b.into_bytes()));
        }
        // The stored edit (the manager may put it back before we could read it again).
        let edited = validating.replace(name, &PostParams::default(), &config).await.unwrap();
        assert!(
            edited
                .webhooks
                .iter()
                .flatten()
                .all(|h| h.client_config.ca_bundle.as_ref().map(|b| &b.0) != Some(&want)),
            "{what}: the edit took"
        );
        eventually(Duration::from_secs(2), &format!("{what} caBundle restored"), || {
            all_ours(client.clone(), want.clone())
        })
        .await;
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let wipe = serde_json::json!({"webhooks": [{"name": "mbtpoperator.operator.kyma-project.io", "clientConfig": {"caBundle": null}}]});
    mutating
        .patch(
            btp_api::names::webhook::MUTATING_CONFIGURATION,
            &PatchParams::default(),
            &Patch::Strategic(&wipe),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(2), "mutating caBundle restored", || {
        all_ours(client.clone(), want.clone())
    })
    .await;
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("run loop stops")
        .unwrap();
    drop(server);
}

/// The BtpOperator webhooks as split: with the manager unreachable, CREATE is refused (`Fail`: a misnamed CR
/// must never slip through) and DELETE goes through (`Ignore`: it only warns, a down manager must never
/// block a deletion). The embedded API server selects webhooks by operation and honours each policy.
#[tokio::test]
async fn with_the_manager_down_create_is_refused_and_delete_is_not_blocked() {
    use btp_api::BtpOperator;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let (_server, client) = api_server().await;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &BtpOperator::crd().unwrap())
        .await
        .unwrap();
    btp_operator_crd_served(&client).await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), NS);
    crs.create(&PostParams::default(), &BtpOperator::new("btpoperator"))
        .await
        .unwrap();
    // Registered, but nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", closed.local_addr().unwrap());
    drop(closed);
    let manager = certs(&client, policy(), &url);
    let s = manager.settle().await.unwrap();
    let leaf = s.leaf.as_ref().unwrap();
    let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    manager.publish(&s, &cert).await.unwrap();

    let refused = crs
        .create(&PostParams::default(), &BtpOperator::new("another"))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("failed calling webhook"), "{refused}");
    crs.delete("btpoperator", &DeleteParams::default())
        .await
        .expect("DELETE is not blocked by a manager that is down");
    assert!(crs.get_opt("btpoperator").await.unwrap().is_none());
}

/// The manager's own `matchConditions`, evaluated with CEL as the (embedded) API server does: the Secret
/// webhooks see the required Secret only, and the BtpOperator webhooks have no conditions.
#[test]
fn the_secret_webhooks_match_the_required_secret_only() {
    let config = serde_json::to_value(WebhookManifests::in_cluster(NS).validating()).unwrap();
    let mutating = serde_json::to_value(WebhookManifests::in_cluster(NS).mutating()).unwrap();
    let hooks: Vec<serde_json::Value> = [config, mutating]
        .iter()
        .flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default())
        .collect();
    let request = |name: &str| {
        let object =
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}});
        serde_json::json!({"operation": "CREATE", "object": object, "oldObject": null})
    };
    for hook in &hooks {
        let name = hook["name"].as_str().unwrap();
        let secret_hook = name.contains("secret");
        assert_eq!(
            btp_apiserver::testing::match_conditions(hook, &request("sap-btp-manager")),
            Ok(true),
            "{name}"
        );
        assert_eq!(
            btp_apiserver::testing::match_conditions(hook, &request("other")),
            Ok(!secret_hook),
            "{name}"
        );
    }
}

/// The endpoints of every webhook of both configurations: (url set, service set).
async fn endpoints(client: &kube::Client) -> Vec<(bool, bool)> {
    let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let m: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let v = v.get(btp_api::names::webhook::VALIDATING_CONFIGURATION).await.unwrap();
    let m = m.get(btp_api::names::webhook::MUTATING_CONFIGURATION).await.unwrap();
    let configs = v
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.client_config)
        .chain(m.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config));
    configs.map(|c| (c.url.is_some(), c.service.is_some())).collect()
}

/// `btp-manager run` outside the cluster against a cluster installed from `deploy/` (the development loop):
/// it takes over the installed configurations, whose webhooks name the Service (set by kubectl), switching
/// them to its URL; a later in-cluster start switches them back. A server-side apply alone would merge `url`
/// into kubectl's `service`, which a real API server refuses (422, "exactly one of url or service").
#[tokio::test]
async fn run_outside_the_cluster_takes_over_the_installed_configurations_and_in_cluster_takes_them_back() {
    let (server, client) = api_server().await;
    // As `kubectl apply -k deploy/` creates them (client-side apply: a POST by kubectl's field manager).
    let installed = btp_manager::app::webhook_manifests_yaml(NS).unwrap();
    let post = PostParams {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..PostParams::default()
    };
    for doc in serde_saphyr::from_multiple::<serde_json::Value>(&installed).unwrap() {
        match doc["kind"].as_str() {
            Some("ValidatingWebhookConfiguration") => {
                let c: ValidatingWebhookConfiguration = serde_json::from_value(doc).unwrap();
                Api::all(client.clone()).create(&post, &c).await.unwrap();
            }
            Some("MutatingWebhookConfiguration") => {
                let c: MutatingWebhookConfiguration = serde_json::from_value(doc).unwrap();
                Api::all(client.clone()).create(&post, &c).await.unwrap();
            }
            _ => {}
        }
    }
    assert!(endpoints(&client).await.iter().all(|e| *e == (false, true)));

    let outside = certs(&client, policy(), "https://127.0.0.1:9443");
    let s = outside.settle().await.unwrap();
    let leaf = s.leaf.as_ref().unwrap();
    let cert = SwappableCert::new(
        btp_webhooks::tls::certified_key(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap(),
    );
    outside
        .publish(&s, &cert)
        .await
        .expect("run outside the cluster takes over");
    assert!(endpoints(&client).await.iter().all(|e| *e == (true, false)));
    for bundle in bundles(&client).await {
        assert_eq!(bundle, s.ca_bundle().into_bytes());
    }
    // Nothing left to change: a second round writes nothing.
    let log = server.request_log();
    let before = log.len();
    outside.publish(&s, &cert).await.unwrap();
    assert!(
        log.since(before).iter().all(|r| r.verb != "patch"),
        "an unchanged configuration is not written"
    );

    let in_cluster = WebhookCerts::new(client.clone(), NS, SECRET, policy(), WebhookManifests::in_cluster(NS));
    in_cluster
        .publish(&s, &cert)
        .await
        .expect("an in-cluster start takes them back");
    assert!(endpoints(&client).await.iter().all(|e| *e == (false, true)));
}

/// The configurations as `kubectl apply -k deploy/` creates them: no caBundle.
async fn install_configurations(client: &kube::Client) {
    let installed = btp_manager::app::webhook_manifests_yaml(NS).unwrap();
    for doc in serde_saphyr::from_multiple::<serde_json::Value>(&installed).unwrap() {
        match doc["kind"].as_str() {
            Some("ValidatingWebhookConfiguration") => {
                let c: ValidatingWebhookConfiguration = serde_json::from_value(doc).unwrap();
                Api::all(client.clone())
                    .create(&PostParams::default(), &c)
                    .await
                    .unwrap();
            }
            Some("MutatingWebhookConfiguration") => {
                let c: MutatingWebhookConfiguration = serde_json::from_value(doc).unwrap();
                Api::all(client.clone())
                    .create(&PostParams::default(), &c)
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
}

/// A follower's first writes (docs/behaviour.md#who-writes-what): where our configurations wait for a caBundle
/// and no certificate is stored, followers starting together create one certificate Secret (the other's create
/// is refused, and it serves the stored one) and add the caBundle once; both turn ready. Then a follower never
/// rewrites: not a caBundle someone else put there (it is not ready instead), not the stored certificate.
#[tokio::test]
async fn followers_write_the_first_certificate_and_ca_bundle_only_where_none_exists() {
    let (server, client) = api_server().await;
    install_configurations(&client).await;
    let log = server.request_log();
    let installed = log.len();
    let first = || btp_manager::first_writes::FirstWrites::new(client.clone());
    let one = certs(&client, policy(), "https://127.0.0.1:9443").with_first_writes(first());
    let two = certs(&client, policy(), "https://127.0.0.1:9443").with_first_writes(first());
    let (cert_one, cert_two) = (SwappableCert::pending(), SwappableCert::pending());
    let (ready_one, ready_two) = tokio::join!(one.follow(&cert_one), two.follow(&cert_two));
    assert!(ready_one.unwrap() && ready_two.unwrap(), "both followers can serve");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let s = stored(&secrets).await.expect("the first certificate");
    let leaf = s.leaf.as_ref().unwrap();
    let stored_leaf = btp_webhooks::tls::certified_key(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    for cert in [&cert_one, &cert_two] {
        assert_eq!(
            cert.current().and_then(|c| c.cert.first().cloned()),
            stored_leaf.cert.first().cloned(),
            "each serves the stored leaf"
        );
    }
    for bundle in bundles(&client).await {
        assert_eq!(bundle, s.ca_bundle().into_bytes());
    }
    let writes: Vec<_> = log
        .since(installed)
        .into_iter()
        .filter(|r| r.changed && r.method != "GET")
        .map(|r| format!("{} {} {}", r.verb, r.resource, r.name))
        .collect();
    // One Secret and one patch of each configuration.
    assert_eq!(writes.len(), 3, "{writes:#?}");

    // A caBundle that is there is never replaced, whoever put it there: the follower is not ready instead.
    let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut foreign = v.get(btp_api::names::webhook::VALIDATING_CONFIGURATION).await.unwrap();
    for hook in foreign.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = Some(ByteString(b"-----BEGIN CERTIFICATE-----\nforeign\n".to_vec()));
    }
    v.replace(
        btp_api::names::webhook::VALIDATING_CONFIGURATION,
        &PostParams::default(),
        &foreign,
    )
    .await
    .unwrap();
    let before = log.len();
    assert!(
        !one.follow(&cert_one).await.unwrap(),
        "not ready under a foreign caBundle"
    );
    let rewrites: Vec<_> = log
        .since(before)
        .into_iter()
        .filter(|r| r.changed && r.method != "GET")
        .map(|r| format!("{} {} {}", r.verb, r.resource, r.name))
        .collect();
    assert!(rewrites.is_empty(), "a follower rewrites nothing: {rewrites:?}");
}
