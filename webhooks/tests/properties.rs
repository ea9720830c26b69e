//! Property tests (issue 12, part 2) of AdmissionReview decoding and both webhooks: arbitrary bytes and
//! JSON-shaped reviews never panic, a denied review never carries a patch, no Secret value appears in any
//! message or warning, and a patch of the mutating webhook yields an object the validating webhook allows
//! and that needs no further patch.
//!
//! `PROPTEST_CASES` sets the number of cases per property (default here: 64; e.g.
//! `PROPTEST_CASES=5000 cargo test -p btp-webhooks --test properties` for a longer run).

use base64::Engine as _;
use btp_webhooks::handlers::{router, FixedServiceCounter, WebhookState};
use btp_webhooks::review::{self, ResponseReview};
use btp_webhooks::rules::{self, RulesConfig, ServiceCounts};
use http_body_util::BodyExt as _;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt as _;

const KEYS: [&str; 5] = ["clientid", "clientsecret", "sm_url", "tokenurl", "cluster_id"];
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The number of cases unless `PROPTEST_CASES` says otherwise (proptest reads it for the default config).
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// POST `body` to `path` through the real router (no network): status and decoded response review.
fn post(path: &str, body: Vec<u8>, counts: Result<ServiceCounts, String>) -> (u16, Option<ResponseReview>) {
    let app = router(WebhookState::new(
        RulesConfig::default(),
        Arc::new(FixedServiceCounter(counts)),
    ));
    let request = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("request");
    runtime().block_on(async move {
        let response = app.oneshot(request).await.expect("infallible");
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).ok())
    })
}

/// Every string a client sees, except the patch (which carries trimmed values by design).
fn visible_strings(review: &ResponseReview) -> Vec<String> {
    let mut out = review.response.warnings.clone();
    if let Some(status) = &review.response.status {
        out.push(status.message.clone());
        out.push(status.reason.clone());
    }
    out
}

/// Any JSON value, a few levels deep.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value that is mostly the expected one and sometimes anything.
fn mostly(expected: Value) -> impl Strategy<Value = Value> {
    prop_oneof![3 => Just(expected), 1 => arb_json()]
}

/// JSON shaped like an AdmissionReview, each field plausible or arbitrary.
fn arb_review() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        Just(json!({"group": "operator.kyma-project.io", "version": "v1alpha1", "kind": "BtpOperator"})),
        Just(json!({"group": "", "version": "v1", "kind": "Secret"})),
        arb_json(),
    ];
    let operation = prop_oneof![
        Just(json!("CREATE")),
        Just(json!("UPDATE")),
        Just(json!("DELETE")),
        Just(json!("CONNECT")),
        arb_json()
    ];
    let name = prop_oneof![Just(json!("btpoperator")), Just(json!("sap-btp-manager")), arb_json()];
    let namespace = prop_oneof![Just(json!("kyma-system")), Just(json!("default")), arb_json()];
    let object = prop_oneof![
        Just(Value::Null),
        (arb_json(), arb_json(), arb_json()).prop_map(|(meta, data, string_data)| json!({
            "metadata": meta, "data": data, "stringData": string_data
        })),
        arb_json(),
    ];
    (
        mostly(json!("admission.k8s.io/v1")),
        mostly(json!("AdmissionReview")),
        mostly(json!("uid-1")),
        kind,
        operation,
        name,
        namespace,
        object.clone(),
        object,
        any::<bool>(),
    )
        .prop_map(
            |(api_version, kind_field, uid, kind, operation, name, namespace, object, old_object, drop_request)| {
                let request = json!({
                    "uid": uid, "kind": kind, "resource": {"group": "", "version": "v1", "resource": "x"},
                    "operation": operation, "name": name, "namespace": namespace,
                    "userInfo": {}, "object": object, "oldObject": old_object, "dryRun": false
                });
                let mut review = json!({"apiVersion": api_version, "kind": kind_field, "request": request});
                if drop_request {
                    review.as_object_mut().expect("object").remove("request");
                }
                review
            },
        )
}

/// A canary that must never show up in a message: random, so no fixed string can hide it.
fn canary() -> impl Strategy<Value = String> {
    "[A-Za-z0-9]{8}".prop_map(|s| format!("CANARY{s}"))
}

/// How one key of the generated Secret is written.
#[derive(Clone, Debug)]
enum Entry {
    Missing,
    /// In `data`, base64 of the value.
    Data(String),
    /// In `stringData`.
    StringData(String),
    /// In `data`, not valid base64 (still containing the canary).
    NotBase64(String),
}

fn arb_secret_value(canary: String) -> impl Strategy<Value = String> {
    let ws = "[ \t\n\r]{0,3}";
    (
        ws,
        prop_oneof![Just(String::new()), Just("https://".to_string()), "[ -~]{0,6}"],
        ws,
        ".{0,4}",
    )
        .prop_map(move |(lead, prefix, trail, tail)| format!("{lead}{prefix}{}{tail}{trail}", canary))
}

fn arb_entry(canary: String) -> impl Strategy<Value = Entry> {
    prop_oneof![
        1 => Just(Entry::Missing),
        3 => arb_secret_value(canary.clone()).prop_map(Entry::Data),
        3 => arb_secret_value(canary.clone()).prop_map(Entry::StringData),
        1 => arb_secret_value(canary).prop_map(|v| Entry::NotBase64(format!("!{v}"))),
    ]
}

fn secret_object(entries: &[(&str, Entry)], labelled: bool) -> Value {
    let (mut data, mut string_data) = (Map::new(), Map::new());
    for (key, entry) in entries {
        match entry {
            Entry::Missing => {}
            Entry::Data(v) => {
                data.insert((*key).into(), json!(B64.encode(v)));
            }
            Entry::StringData(v) => {
                string_data.insert((*key).into(), json!(v));
            }
            Entry::NotBase64(v) => {
                data.insert((*key).into(), json!(v));
            }
        }
    }
    let mut metadata = json!({"name": "sap-btp-manager", "namespace": "kyma-system"});
    if labelled {
        metadata["labels"] = json!({"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"});
    }
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": data, "stringData": string_data})
}

fn admission(kind: Value, operation: &str, namespace: &str, name: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "uid-p", "kind": kind, "resource": {"group": "", "version": "v1", "resource": "x"},
            "operation": operation, "name": name, "namespace": namespace, "userInfo": {},
            "object": object, "oldObject": null, "dryRun": false
        }
    })
}

fn secret_review(operation: &str, object: Value) -> Value {
    admission(
        json!({"group": "", "version": "v1", "kind": "Secret"}),
        operation,
        "kyma-system",
        "sap-btp-manager",
        object,
    )
}

fn btp_operator_review(object: Value) -> Value {
    admission(
        json!({"group": "operator.kyma-project.io", "version": "v1alpha1", "kind": "BtpOperator"}),
        "CREATE",
        "kyma-system",
        "btpoperator",
        object,
    )
}

fn decode(review: &Value) -> btp_webhooks::object::Request {
    review::decode(review.to_string().as_bytes()).expect("a well-formed review decodes")
}

/// Apply the mutating webhook's patch to `review`'s object; returns the patched review and whether
/// there was a patch.
fn mutate_and_apply(review: &Value) -> (Value, bool) {
    let verdict = rules::mutate(&decode(review), &RulesConfig::default());
    assert!(verdict.allowed(), "the mutating webhook denied");
    let response = review::respond(&decode(review), verdict.clone());
    let mut patched = review.clone();
    let Some(encoded) = response.response.patch else {
        assert!(verdict.patch.is_empty());
        return (patched, false);
    };
    assert_eq!(response.response.patch_type.as_deref(), Some("JSONPatch"));
    let bytes = B64.decode(encoded).expect("patch is base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch is a JSON patch");
    json_patch::patch(&mut patched["request"]["object"], &patch).expect("patch applies to the object");
    (patched, true)
}

fn key_strategy() -> impl Strategy<Value = Vec<(&'static str, Entry)>> {
    canary().prop_flat_map(|c| {
        (
            arb_entry(c.clone()),
            arb_entry(c.clone()),
            arb_entry(c.clone()),
            arb_entry(c.clone()),
            arb_entry(c),
        )
            .prop_map(|(a, b, c, d, e)| KEYS.into_iter().zip([a, b, c, d, e]).collect())
    })
}

fn entry_value(entry: &Entry) -> Option<&str> {
    match entry {
        Entry::Missing => None,
        Entry::Data(v) | Entry::StringData(v) | Entry::NotBase64(v) => Some(v),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_and_get_a_4xx(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = review::decode(&body);
        for path in ["/validate", "/mutate"] {
            let (status, reply) = post(path, body.clone(), Ok(ServiceCounts::default()));
            // Random bytes are (almost) never a valid review; whatever the answer, it is well-formed.
            let reply = reply.expect("the answer is an AdmissionReview");
            prop_assert!(status == 200 || (400..500).contains(&status), "status {status}");
            if !reply.response.allowed {
                prop_assert!(reply.response.patch.is_none());
            }
        }
    }

    #[test]
    fn arbitrary_reviews_never_panic_and_denials_carry_no_patch(
        review in arb_review(),
        counts in prop_oneof![
            (0usize..5, 0usize..5).prop_map(|(instances, bindings)| Ok(ServiceCounts { instances, bindings })),
            Just(Err("unreachable".to_string())),
        ],
    ) {
        let body = review.to_string().into_bytes();
        if let Ok(req) = review::decode(&body) {
            let config = RulesConfig::default();
            for verdict in [rules::validate(&req, &config, Some(&counts)), rules::mutate(&req, &config)] {
                let response = review::respond(&req, verdict.clone());
                prop_assert_eq!(response.response.allowed, verdict.allowed());
                if !verdict.allowed() {
                    prop_assert!(response.response.patch.is_none());
                }
            }
        }
        for path in ["/validate", "/mutate"] {
            let (status, reply) = post(path, body.clone(), counts.clone());
            let reply = reply.expect("the answer is an AdmissionReview");
            prop_assert!(status == 200 || (400..500).contains(&status), "status {status}");
            if !reply.response.allowed {
                prop_assert!(reply.response.patch.is_none(), "a denial with a patch: {reply:?}");
            }
            if status != 200 {
                prop_assert!(!reply.response.allowed);
            }
        }
    }

    #[test]
    fn no_secret_value_appears_in_any_message_or_warning(
        entries in key_strategy(),
        labelled in any::<bool>(),
        operation in prop_oneof![Just("CREATE"), Just("UPDATE")],
    ) {
        let object = secret_object(&entries, labelled);
        let review = secret_review(operation, object);
        let body = review.to_string().into_bytes();
        let mut seen = Vec::new();
        for path in ["/validate", "/mutate"] {
            let (status, reply) = post(path, body.clone(), Ok(ServiceCounts::default()));
            prop_assert_eq!(status, 200);
            let reply = reply.expect("review");
            if !reply.response.allowed {
                prop_assert!(reply.response.patch.is_none());
            }
            seen.extend(visible_strings(&reply));
        }
        let req = decode(&review);
        let verdict = rules::validate(&req, &RulesConfig::default(), None);
        seen.extend(verdict.warnings.iter().cloned());
        seen.extend(verdict.denial.iter().map(|d| d.message.clone()));
        for (key, entry) in &entries {
            let Some(value) = entry_value(entry) else { continue };
            let canary_start = value.find("CANARY").expect("canary in value");
            let canary = &value[canary_start..canary_start + 14];
            let encoded = B64.encode(value);
            for text in &seen {
                prop_assert!(!text.contains(canary), "value of {key} in {text:?}");
                prop_assert!(!text.contains(&encoded), "base64 value of {key} in {text:?}");
            }
        }
    }

    #[test]
    fn the_secret_patch_yields_an_allowed_secret_and_is_idempotent(
        values in (
            "[A-Za-z0-9_.-]{1,12}",
            "[!-~]{1,16}",
            "[a-z]{1,10}(\\.[a-z]{2,5}){0,2}",
            "[a-z]{1,10}(/[a-z]{1,5}){0,2}",
            "[a-z0-9-]{1,16}",
        ),
        padding in prop::collection::vec(
            (
                prop::collection::vec(prop_oneof![Just(' '), Just('\t'), Just('\n'), Just('\r'), Just('\u{a0}')], 0..3),
                prop::collection::vec(prop_oneof![Just(' '), Just('\t'), Just('\n'), Just('\r'), Just('\u{2003}')], 0..3),
                any::<bool>(),
            ),
            5,
        ),
        labelled in any::<bool>(),
        operation in prop_oneof![Just("CREATE"), Just("UPDATE")],
    ) {
        let (id, secret, sm_host, token_path, cluster) = values;
        let clean = [
            id,
            secret,
            format!("https://{sm_host}"),
            format!("https://auth.example.com/{token_path}"),
            cluster,
        ];
        let entries: Vec<(&str, Entry)> = KEYS
            .iter()
            .zip(clean.iter())
            .zip(padding.iter())
            .map(|((key, value), (lead, trail, in_data))| {
                let padded: String = lead.iter().chain(value.chars().collect::<Vec<_>>().iter()).chain(trail.iter()).collect();
                (*key, if *in_data { Entry::Data(padded) } else { Entry::StringData(padded) })
            })
            .collect();
        let review = secret_review(operation, secret_object(&entries, labelled));
        let (patched, had_patch) = mutate_and_apply(&review);
        let padded_anywhere = padding.iter().any(|(l, t, _)| !l.is_empty() || !t.is_empty());
        prop_assert_eq!(had_patch, padded_anywhere);
        let req = decode(&patched);
        let verdict = rules::validate(&req, &RulesConfig::default(), None);
        prop_assert!(verdict.allowed(), "patched Secret denied: {:?}", verdict.denial);
        // The patched values are exactly the clean ones.
        let object = &patched["request"]["object"];
        for (key, value) in KEYS.iter().zip(clean.iter()) {
            let stored = match object["stringData"].get(*key) {
                Some(v) => v.as_str().expect("string").to_string(),
                None => String::from_utf8(B64.decode(object["data"][*key].as_str().expect("data")).expect("b64")).expect("utf8"),
            };
            prop_assert_eq!(&stored, value);
        }
        let (_, again) = mutate_and_apply(&patched);
        prop_assert!(!again, "mutating the patched Secret patched again");
    }

    #[test]
    fn the_btp_operator_patch_adds_the_finalizer_and_is_idempotent(
        finalizers in prop::option::of(prop::collection::vec(
            prop_oneof![Just("operator.kyma-project.io/btp-manager".to_string()), "[a-z./-]{1,20}"],
            0..4,
        )),
        ignored in any::<bool>(),
        labels in prop::option::of(prop::collection::btree_map("[a-z]{1,6}", "[a-z]{0,6}", 0..3)),
    ) {
        let mut metadata = json!({"name": "btpoperator", "namespace": "kyma-system"});
        if let Some(f) = &finalizers {
            metadata["finalizers"] = json!(f);
        }
        if ignored {
            metadata["annotations"] = json!({"operator.kyma-project.io/operation": "ignore"});
        }
        if let Some(l) = &labels {
            metadata["labels"] = json!(l);
        }
        let review = btp_operator_review(json!({
            "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator", "metadata": metadata
        }));
        let (patched, had_patch) = mutate_and_apply(&review);
        let finalizer = json!("operator.kyma-project.io/btp-manager");
        let had_finalizer = finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == "operator.kyma-project.io/btp-manager"));
        prop_assert_eq!(had_patch, !ignored && !had_finalizer);
        let after = patched["request"]["object"]["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
        prop_assert_eq!(after.contains(&finalizer), !ignored || had_finalizer);
        // Nothing else of the list changed: the old finalizers stay, in order, first.
        let before = finalizers.unwrap_or_default();
        prop_assert_eq!(&after[..before.len()], &before.iter().map(|f| json!(f)).collect::<Vec<_>>()[..]);
        let verdict = rules::validate(&decode(&patched), &RulesConfig::default(), None);
        prop_assert!(verdict.allowed());
        let (_, again) = mutate_and_apply(&patched);
        prop_assert!(!again, "mutating the patched BtpOperator patched again");
    }
}
