//! The state the Go BTP Manager leaves in a cluster it provisioned, built from the operand chart's facts
//! ([`super::chart`]) and from what the Go manager's code writes, never from our manifests:
//!
//! - every chart object as the chart ships it, the CRDs with a description wherever the chart has one (the
//!   positions are the chart's, `tests/fixtures/operand-chart-descriptions.txt`; the words are ours), with
//!   the three labels it adds (`app.kubernetes.io/managed-by: btp-manager`,
//!   `chart-version`, `kyma-project.io/module`; the last also on the Deployment's pod template), namespaced
//!   ones in `kyma-system`, the ConfigMap and Secret filled from the required Secret, the operand image set,
//!   `caBundle` in every webhook; created with `Create` under the field owner `btp-manager` (so
//!   `managedFields` holds `btp-manager` / `Update`, as controller-runtime's Create and Update leave it);
//! - the operand's certificate Secrets as its certificate manager makes them: RSA keys in PKCS#1 PEM (`RSA
//!   PRIVATE KEY`), empty subjects, the two DNS names it hard-codes, labelled only
//!   `app.kubernetes.io/managed-by: btp-manager`, type defaulted;
//! - the required Secret as KEB creates it, with the two annotations the Go drift detector writes after a
//!   cluster-ID change (`previous-cluster-id`) and a credentials-namespace move (`previous-credentials-namespace`);
//! - the CR with the Go manager's finalizer and its status (`Ready`, one `Ready` condition
//!   `ReconcileSucceeded` / "Module provisioning succeeded", observedGeneration 0), written by a status update.
//!
//! Not here: the network policies (the Go manager's `manager-resources`, not the chart).
#![allow(dead_code)]

use btp_api::names;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// The Go manager's field owner (`client.FieldOwner(OperatorName)`).
pub const FIELD_OWNER: &str = "btp-manager";
/// The chart version label value.
pub const CHART_VERSION: &str = "v0.11.10";
/// The cluster ID the required Secret holds, and the one before it.
pub const CLUSTER_ID: &str = "cluster-1";
pub const PREVIOUS_CLUSTER_ID: &str = "cluster-0";
/// The credentials namespace the operand Secret once was in (the annotation's value).
pub const PREVIOUS_CREDENTIALS_NAMESPACE: &str = "btp-credentials-old";

/// What the fixture made, for the test's assertions.
pub struct GoState {
    /// PEM of `ca-server-cert`'s `ca.crt` (the caBundle).
    pub ca_crt: Vec<u8>,
    /// PEM of `webhook-server-cert`'s `tls.crt`.
    pub tls_crt: Vec<u8>,
    /// (kind, namespace, name) of every chart object created.
    pub objects: Vec<(String, Option<String>, String)>,
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The PKCS#1 `RSAPrivateKey` inside a PKCS#8 `PrivateKeyInfo` for rsaEncryption, re-encoded as PEM `RSA
/// PRIVATE KEY` (the form Go's `x509.MarshalPKCS1PrivateKey` writes).
fn pkcs1_pem(pkcs8_pem: &str) -> String {
    use base64::Engine as _;
    let body: String = pkcs8_pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PKCS#8 base64");
    // A DER length at `at`: (length, bytes it took).
    let len = |at: usize| -> (usize, usize) {
        let first = der[at] as usize;
        if first < 0x80 {
            (first, 1)
        } else {
            let n = first & 0x7f;
            (
                der[at + 1..at + 1 + n].iter().fold(0, |a, b| (a << 8) | *b as usize),
                1 + n,
            )
        }
    };
    assert_eq!(der[0], 0x30, "PrivateKeyInfo is a SEQUENCE");
    let mut at = 1 + len(1).1;
    assert_eq!(&der[at..at + 3], &[0x02, 0x01, 0x00], "version 0");
    at += 3;
    const RSA_ALGORITHM: [u8; 15] = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    assert_eq!(&der[at..at + 15], &RSA_ALGORITHM, "rsaEncryption");
    at += 15;
    assert_eq!(der[at], 0x04, "the key is an OCTET STRING");
    let (n, took) = len(at + 1);
    let pkcs1 = &der[at + 1 + took..at + 1 + took + n];
    let encoded = base64::engine::general_purpose::STANDARD.encode(pkcs1);
    let mut pem = String::from("-----BEGIN RSA PRIVATE KEY-----\n");
    for chunk in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END RSA PRIVATE KEY-----\n");
    pem
}

/// The operand's CA and serving certificate as the Go manager generates them (RSA 2048 here to keep the
/// test quick; it uses `RsaKeyBits`, 4096 by default): (ca.crt, ca.key, tls.crt, tls.key) PEM.
pub fn go_certificates() -> (String, String, String, String) {
    use btp_certs::{generate_ca, generate_leaf, CaSpec, KeyAlgorithm, LeafSpec};
    let now = SystemTime::now();
    let ca = generate_ca(
        &CaSpec {
            common_name: None,
            validity: Duration::from_secs(10 * 365 * 24 * 3600),
            key: KeyAlgorithm::Rsa2048,
        },
        now,
    )
    .expect("the CA");
    let service = names::operand::WEBHOOK_SERVICE;
    let leaf = generate_leaf(
        &ca,
        &LeafSpec {
            common_name: None,
            // Hard-coded in the Go manager, whatever the chart namespace.
            dns_names: vec![format!("{service}.kyma-system.svc"), format!("{service}.kyma-system")],
            ip_addresses: vec![],
            validity: Duration::from_secs(365 * 24 * 3600),
            key: KeyAlgorithm::Rsa2048,
        },
        now,
    )
    .expect("the serving certificate");
    (
        ca.cert_pem,
        pkcs1_pem(&ca.key_pem),
        leaf.cert_pem,
        pkcs1_pem(&leaf.key_pem),
    )
}

fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// POST `object` as the Go manager's `client.Create(..., client.FieldOwner("btp-manager"))` does.
pub async fn create_as_go_manager(client: &kube::Client, object: &Value) -> DynamicObject {
    let dynamic: DynamicObject = serde_json::from_value(object.clone()).expect("a Kubernetes object");
    let params = PostParams {
        field_manager: Some(FIELD_OWNER.into()),
        ..PostParams::default()
    };
    api_for(client, object)
        .create(&params, &dynamic)
        .await
        .unwrap_or_else(|e| panic!("creating {} {}: {e}", object["kind"], object["metadata"]["name"]))
}

/// The required Secret as KEB creates it, carrying the Go drift detector's annotations.
pub fn required_secret(credentials: &Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
            "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB},
            "annotations": {
                "operator.kyma-project.io/previous-cluster-id": PREVIOUS_CLUSTER_ID,
                "operator.kyma-project.io/previous-credentials-namespace": PREVIOUS_CREDENTIALS_NAMESPACE,
            },
        },
        "type": "Opaque",
        "stringData": credentials,
    })
}

/// Build the Go manager's state in `client`'s cluster (namespace `kyma-system` and the BtpOperator CRD must
/// exist): the required Secret, the chart's objects, the certificate Secrets, the CR with its status.
/// `credentials` must hold `cluster_id` = [`CLUSTER_ID`] and no `credentials_namespace`.
pub async fn leave_go_state(client: &kube::Client, credentials: &Value, image: &str) -> GoState {
    assert_eq!(credentials["cluster_id"], CLUSTER_ID);
    // KEB's Secret; the drift detector's annotation update is an Update by `btp-manager`.
    create_as_go_manager(client, &required_secret(credentials)).await;

    let (ca_crt, ca_key, tls_crt, tls_key) = go_certificates();
    let module_labels = json!({
        names::MANAGED_BY_LABEL: names::MANAGED_BY_BTP_MANAGER,
        names::CHART_VERSION_LABEL: CHART_VERSION,
        names::MODULE_LABEL: names::MODULE_NAME,
    });
    let mut objects = Vec::new();
    for ((kind, name), mut object) in super::chart::objects_with_descriptions() {
        let cluster_scoped = btp_manager::reconciler::resources::is_cluster_scoped(&kind);
        let meta = object["metadata"].as_object_mut().expect("metadata");
        let labels = meta.entry("labels").or_insert(json!({}));
        for (k, v) in module_labels.as_object().unwrap() {
            labels[k] = v.clone();
        }
        if !cluster_scoped {
            meta.insert("namespace".into(), json!(names::KYMA_SYSTEM));
        }
        match kind.as_str() {
            "ConfigMap" if name == names::operand::CONFIGMAP => {
                let data = &mut object["data"];
                data["CLUSTER_ID"] = json!(CLUSTER_ID);
                data["MANAGEMENT_NAMESPACE"] = json!(names::KYMA_SYSTEM);
                data["RELEASE_NAMESPACE"] = json!(names::KYMA_SYSTEM);
                data["ENABLE_LIMITED_CACHE"] = json!("true");
            }
            "Secret" if name == names::operand::SECRET => {
                for (k, v) in credentials.as_object().unwrap() {
                    if k != "cluster_id" && k != names::CREDENTIALS_NAMESPACE_KEY {
                        object["data"][k] = json!(b64(v.as_str().unwrap().as_bytes()));
                    }
                }
            }
            "Deployment" => {
                object["spec"]["template"]["metadata"]["labels"][names::MODULE_LABEL] = json!(names::MODULE_NAME);
                for c in object["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap() {
                    if c["name"] == "manager" {
                        c["image"] = json!(image);
                    }
                }
            }
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                for w in object["webhooks"].as_array_mut().unwrap() {
                    w["clientConfig"]["caBundle"] = json!(b64(ca_crt.as_bytes()));
                }
            }
            _ => {}
        }
        create_as_go_manager(client, &object).await;
        let ns = (!cluster_scoped).then(|| names::KYMA_SYSTEM.to_string());
        objects.push((kind, ns, name));
    }
    for (name, data) in [
        (
            names::operand::CA_SECRET,
            json!({"ca.crt": b64(ca_crt.as_bytes()), "ca.key": b64(ca_key.as_bytes())}),
        ),
        (
            names::operand::WEBHOOK_SECRET,
            json!({"tls.crt": b64(tls_crt.as_bytes()), "tls.key": b64(tls_key.as_bytes())}),
        ),
    ] {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": names::KYMA_SYSTEM,
                         "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_BTP_MANAGER}},
            "data": data,
        });
        create_as_go_manager(client, &secret).await;
    }

    // The CR: created by its owner, the finalizer and the status written by the Go manager's Updates.
    let crs: Api<btp_api::BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let mut cr = btp_api::BtpOperator::new(names::BTP_OPERATOR_NAME);
    cr.metadata.namespace = Some(names::KYMA_SYSTEM.into());
    let created = crs.create(&PostParams::default(), &cr).await.expect("the BtpOperator");
    let go = PostParams {
        field_manager: Some(FIELD_OWNER.into()),
        ..PostParams::default()
    };
    let mut with_finalizer = created;
    with_finalizer.metadata.finalizers = Some(vec![names::FINALIZER.into()]);
    let with_finalizer = crs
        .replace(names::BTP_OPERATOR_NAME, &go, &with_finalizer)
        .await
        .expect("the finalizer");
    let mut status = serde_json::to_value(&with_finalizer).unwrap();
    status["status"] = json!({
        "state": "Ready",
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "ReconcileSucceeded",
            "message": "Module provisioning succeeded", "observedGeneration": 0,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
    });
    let status: btp_api::BtpOperator = serde_json::from_value(status).expect("a BtpOperator with its status");
    crs.replace_status(names::BTP_OPERATOR_NAME, &go, &status)
        .await
        .expect("the Go manager's status");

    GoState {
        ca_crt: ca_crt.into_bytes(),
        tls_crt: tls_crt.into_bytes(),
        objects,
    }
}
