use crate::common::*;
use axum::body::Body;
use axum::http::Request;
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A test HTTPS webhook server with its own rcgen CA. Behaviour is chosen by the request path.
struct Hook {
    addr: SocketAddr,
    ca_b64: String,
    reviews: Arc<Mutex<Vec<(String, Value)>>>,
}

async fn respond(path: &str, review: Value) -> Value {
    let uid = review["request"]["uid"].clone();
    let mut resp = json!({"uid": uid, "allowed": true});
    match path {
        "/deny" => {
            resp["allowed"] = json!(false);
            resp["status"] = json!({"code": 403, "message": "no widgets today"});
        }
        "/mutate" => {
            let patch = json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]);
            resp["patchType"] = json!("JSONPatch");
            resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        "/warn" => resp["warnings"] = json!(["be careful", "second warning"]),
        "/slow" => tokio::time::sleep(Duration::from_secs(3)).await,
        "/echo-version" => {
            return json!({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": resp});
        }
        _ => {}
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
}

async fn spawn_hook() -> Hook {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let certs = btp_apiserver::testing::tls::generate(&["hook.webhooks.svc".to_string()]).unwrap();
    let cfg = Arc::new(btp_apiserver::testing::tls::server_config(&certs).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reviews: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let rv = reviews.clone();
    tokio::spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let rv = rv.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let app = axum::Router::new().fallback(move |req: Request<Body>| {
                    let rv = rv.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
                        let review: Value = serde_json::from_slice(&body).unwrap();
                        rv.lock().unwrap().push((path.clone(), review.clone()));
                        axum::Json(respond(&path, review).await)
                    }
                });
                let svc = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Hook {
        addr,
        ca_b64: base64::engine::general_purpose::STANDARD.encode(certs.ca_pem.as_bytes()),
        reviews,
    }
}

fn rule(resources: &str) -> Value {
    json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": [resources], "scope": "*"}])
}

fn webhook(name: &str, client_config: Value, extra: Value) -> Value {
    let mut w = json!({"name": name, "clientConfig": client_config, "rules": rule("configmaps"),
        "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5});
    for (k, v) in extra.as_object().unwrap() {
        w[k] = v.clone();
    }
    w
}

async fn add_validating(client: &kube::Client, name: &str, hooks: Vec<Value>) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let c = serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": hooks})).unwrap();
    api.create(&PostParams::default(), &c).await.unwrap();
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

#[tokio::test]
async fn deny_mutate_warn() {
    let hook = spawn_hook().await;
    let srv = start().await;
    srv.set_service_address("webhooks", "hook", 8443, hook.addr);
    let client = srv.client().await;
    let url = |p: &str| json!({"url": format!("https://127.0.0.1:{}{p}", hook.addr.port()), "caBundle": hook.ca_b64});
    add_validating(
        &client,
        "v",
        vec![
            webhook(
                "deny.example.com",
                url("/deny"),
                json!({"objectSelector": {"matchLabels": {"hook": "deny"}}}),
            ),
            webhook(
                "warn.example.com",
                url("/warn"),
                json!({"objectSelector": {"matchLabels": {"hook": "warn"}}}),
            ),
        ],
    )
    .await;
    let mapi: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let svc = json!({"service": {"namespace": "webhooks", "name": "hook", "port": 8443, "path": "/mutate"}, "caBundle": hook.ca_b64});
    mapi.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "m"},
        "webhooks": [webhook("mutate.example.com", svc, json!({"objectSelector": {"matchLabels": {"hook": "mutate"}}}))]})).unwrap())
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // denial
    let e = api
        .create(&PostParams::default(), &cm("d", json!({"hook": "deny"})))
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "admission webhook \"deny.example.com\" denied the request: no widgets today"
            );
        }
        other => panic!("{other:?}"),
    }
    // not selected -> allowed
    api.create(&PostParams::default(), &cm("free", json!({"hook": "none"})))
        .await
        .unwrap();
    // mutation through a service reference
    let m = api
        .create(&PostParams::default(), &cm("m", json!({"hook": "mutate"})))
        .await
        .unwrap();
    assert_eq!(m.metadata.labels.unwrap()["mutated"], "yes");
    assert_eq!(api.get("m").await.unwrap().metadata.labels.unwrap()["mutated"], "yes");
    // warnings become Warning headers
    let (code, headers, body) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w","labels":{"hook":"warn"}}}"#,
        None,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let ws: Vec<&str> = headers.get_all("warning").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(ws, ["299 - \"be careful\"", "299 - \"second warning\""]);
    // the AdmissionReview is a real admission.k8s.io/v1 request; DELETE carries oldObject only
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let reviews = hook.reviews.lock().unwrap().clone();
    let (_, create) = reviews
        .iter()
        .find(|(p, r)| p == "/warn" && r["request"]["operation"] == "CREATE")
        .unwrap();
    let rq = &create["request"];
    assert_eq!(create["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(rq["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(
        rq["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(
        (rq["name"].as_str(), rq["namespace"].as_str()),
        (Some("w"), Some("default"))
    );
    assert!(rq["uid"].as_str().unwrap().len() == 36 && rq["userInfo"]["username"].is_string());
    assert_eq!(rq["object"]["metadata"]["name"], "w");
    assert!(rq["oldObject"].is_null());
    let review: kube::core::admission::AdmissionReview<ConfigMap> = serde_json::from_value(create.clone()).unwrap();
    let _req: kube::core::admission::AdmissionRequest<ConfigMap> = review.try_into().unwrap();
    let (_, del) = reviews
        .iter()
        .find(|(p, r)| p == "/warn" && r["request"]["operation"] == "DELETE")
        .unwrap();
    assert!(del["request"]["object"].is_null());
    assert_eq!(del["request"]["oldObject"]["metadata"]["name"], "w");
}

#[tokio::test]
async fn failure_policy_timeout_and_ca_bundle() {
    let hook = spawn_hook().await;
    let other_ca = btp_apiserver::testing::tls::generate(&[]).unwrap();
    let other_b64 = base64::engine::general_purpose::STANDARD.encode(other_ca.ca_pem.as_bytes());
    // a port nobody listens on
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let srv = start().await;
    let client = srv.client().await;
    let url = |port: u16, p: &str, ca: &str| json!({"url": format!("https://127.0.0.1:{port}{p}"), "caBundle": ca});
    add_validating(
        &client,
        "v",
        vec![
            webhook(
                "dead-fail.example.com",
                url(dead_port, "/", &hook.ca_b64),
                json!({"failurePolicy": "Fail", "objectSelector": {"matchLabels": {"t": "dead-fail"}}}),
            ),
            webhook(
                "dead-ignore.example.com",
                url(dead_port, "/", &hook.ca_b64),
                json!({"failurePolicy": "Ignore", "objectSelector": {"matchLabels": {"t": "dead-ignore"}}}),
            ),
            webhook(
                "slow.example.com",
                url(hook.addr.port(), "/slow", &hook.ca_b64),
                json!({"timeoutSeconds": 1, "objectSelector": {"matchLabels": {"t": "slow"}}}),
            ),
            webhook(
                "badca.example.com",
                url(hook.addr.port(), "/allow", &other_b64),
                json!({"objectSelector": {"matchLabels": {"t": "badca"}}}),
            ),
        ],
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let e = api
        .create(&PostParams::default(), &cm("a", json!({"t": "dead-fail"})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 500 && s.reason == "InternalError" && s.message.contains("failed calling webhook \"dead-fail.example.com\"")),
        "{e:?}"
    );
    api.create(&PostParams::default(), &cm("b", json!({"t": "dead-ignore"})))
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let e = api
        .create(&PostParams::default(), &cm("c", json!({"t": "slow"})))
        .await
        .unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "timeoutSeconds honoured: {:?}",
        t0.elapsed()
    );
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 500 && s.message.contains("deadline")),
        "{e:?}"
    );
    let e = api
        .create(&PostParams::default(), &cm("d", json!({"t": "badca"})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 500 && s.message.contains("badca.example.com")),
        "{e:?}"
    );
    assert!(
        hook.reviews.lock().unwrap().iter().all(|(p, _)| p != "/allow"),
        "no request reached the hook through an untrusted CA"
    );
}

#[tokio::test]
async fn namespace_selector_and_rules() {
    let hook = spawn_hook().await;
    let srv = start().await;
    let client = srv.client().await;
    let ns: Api<Namespace> = Api::all(client.clone());
    for n in ["guarded", "open"] {
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": n}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let cc = json!({"url": format!("https://127.0.0.1:{}/deny", hook.addr.port()), "caBundle": hook.ca_b64});
    add_validating(&client, "v", vec![webhook("ns.example.com", cc, json!({
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["guarded"]}]},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"], "scope": "Namespaced"}],
    }))]).await;
    let guarded: Api<ConfigMap> = Api::namespaced(client.clone(), "guarded");
    let open: Api<ConfigMap> = Api::namespaced(client.clone(), "open");
    assert!(guarded
        .create(&PostParams::default(), &cm("x", json!({})))
        .await
        .is_err());
    open.create(&PostParams::default(), &cm("x", json!({}))).await.unwrap();
    // operation not in rules: delete is allowed
    open.delete("x", &DeleteParams::default()).await.unwrap();
    // other resources are not matched
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, "guarded");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn subresource_rules() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let hook = spawn_hook().await;
    let srv = start().await;
    let client = srv.client().await;
    let cc = json!({"url": format!("https://127.0.0.1:{}/deny", hook.addr.port()), "caBundle": hook.ca_b64});
    let mut w = webhook("status-only.example.com", cc, json!({}));
    w["rules"] = json!([{"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["deployments/status"]}]);
    add_validating(&client, "v", vec![w]).await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(
        json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    api.patch(
        "d",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    let e = api
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 403 && s.message.contains("status-only.example.com")),
        "{e:?}"
    );
    let reviews = hook.reviews.lock().unwrap();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].1["request"]["subResource"], "status");
}

/// `matchConditions` are evaluated with CEL: the webhook is called only when all hold, an evaluation error
/// follows `failurePolicy`. (What the manager relies on: its Secret webhooks only see the required Secret.)
#[tokio::test]
async fn match_conditions_select_the_webhook_with_cel() {
    let hook = spawn_hook().await;
    let srv = start().await;
    let client = srv.client().await;
    let deny = json!({"url": format!("https://127.0.0.1:{}/deny", hook.addr.port()), "caBundle": hook.ca_b64});
    add_validating(&client, "v", vec![webhook("named.example.com", deny.clone(), json!({
        "matchConditions": [
            {"name": "only-guarded", "expression": "object.metadata.name == 'guarded'"},
            {"name": "labelled", "expression": "has(object.metadata.labels) && object.metadata.labels['tier'] == 'gold'"},
            {"name": "creates", "expression": "request.operation == 'CREATE'"},
        ],
    }))]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // Conditions false: not called, allowed.
    cms.create(&PostParams::default(), &cm("other", json!({"tier": "gold"})))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("guarded-too", json!({})))
        .await
        .unwrap();
    assert!(
        hook.reviews.lock().unwrap().is_empty(),
        "no call while a condition is false"
    );
    // All true: called (and it denies).
    let err = cms
        .create(&PostParams::default(), &cm("guarded", json!({"tier": "gold"})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no widgets today"), "{err}");
    assert_eq!(hook.reviews.lock().unwrap().len(), 1);
    // DELETE: `request.operation` is DELETE, so not called (the object is null for a DELETE).
    cms.delete("other", &DeleteParams::default()).await.unwrap();
    assert_eq!(hook.reviews.lock().unwrap().len(), 1);

    // An expression that cannot be evaluated (no such field) follows failurePolicy.
    let broken = |policy: &str| {
        json!({
            "failurePolicy": policy,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"], "scope": "*"}],
            "matchConditions": [{"name": "bad", "expression": "object.nosuchfield == 'x'"}],
        })
    };
    add_validating(
        &client,
        "broken-fail",
        vec![webhook("fail.example.com", deny.clone(), broken("Fail"))],
    )
    .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "default");
    let secret = |n: &str| serde_json::from_value(json!({"metadata": {"name": n}})).unwrap();
    let err = secrets
        .create(&PostParams::default(), &secret("s1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("matchCondition \"bad\""), "{err}");
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("broken-fail", &DeleteParams::default())
        .await
        .unwrap();
    add_validating(
        &client,
        "broken-ignore",
        vec![webhook("ignore.example.com", deny, broken("Ignore"))],
    )
    .await;
    secrets.create(&PostParams::default(), &secret("s2")).await.unwrap();
    assert_eq!(hook.reviews.lock().unwrap().len(), 1, "never called");
}

/// The review version is the first of `admissionReviewVersions` the API server speaks, and the answer must come
/// in it: kube-apiserver (1.36 and 1.24, seen with the operand's configurations, which list `v1beta1` first)
/// sends `v1beta1` and refuses a `v1` answer with a conversion error.
#[tokio::test]
async fn a_webhook_gets_the_first_review_version_it_lists_and_must_answer_in_it() {
    let hook = spawn_hook().await;
    let srv = start().await;
    let client = srv.client().await;
    let url = |p: &str| json!({"url": format!("https://127.0.0.1:{}{p}", hook.addr.port()), "caBundle": hook.ca_b64});
    let versions = json!({"admissionReviewVersions": ["v1beta1", "v1"]});
    let mut echo = webhook("echo.example.com", url("/echo-version"), versions.clone());
    echo["objectSelector"] = json!({"matchLabels": {"hook": "echo"}});
    let mut v1 = webhook("v1-answer.example.com", url("/"), versions);
    v1["objectSelector"] = json!({"matchLabels": {"hook": "v1"}});
    add_validating(&client, "versions", vec![echo, v1]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("echo", json!({"hook": "echo"})))
        .await
        .expect("an answer in the review's version is taken");
    let sent: Vec<Value> = hook
        .reviews
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p == "/echo-version")
        .map(|(_, r)| r["apiVersion"].clone())
        .collect();
    assert_eq!(sent, vec![json!("admission.k8s.io/v1beta1")]);
    let e = api
        .create(&PostParams::default(), &cm("v1", json!({"hook": "v1"})))
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 500);
            assert_eq!(
                s.message,
                "Internal error occurred: failed calling webhook \"v1-answer.example.com\": failed to call webhook: \
                 converting (v1.AdmissionReview) to (v1beta1.AdmissionReview): unknown conversion"
            );
        }
        other => panic!("{other:?}"),
    }
}
