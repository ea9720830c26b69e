//! Every AdmissionReview recorded from a real kube-apiserver (`tests/fixtures/admission`), sent over TLS
//! with HTTP/1.1 and with HTTP/2, gets the verdict, warnings and patch docs/behaviour.md#admission-webhooks implies.

mod common;

use base64::Engine as _;
use btp_webhooks::client::Protocol;
use common::*;
use serde_json::{json, Value};

/// What a fixture must get back.
struct Expect {
    allowed: bool,
    /// Substrings of the denial message.
    message: &'static [&'static str],
    /// Substrings, one per expected warning.
    warnings: &'static [&'static str],
    /// The expected JSON patch, if any.
    patch: Option<Value>,
}

const UNLABELLED: &str = "has no label app.kubernetes.io/managed-by=kcp-kyma-environment-broker";
const ALLOW: Expect = Expect {
    allowed: true,
    message: &[],
    warnings: &[],
    patch: None,
};

fn expectation(number: &str) -> Expect {
    match number {
        "001" => Expect {
            patch: Some(
                json!([{"op": "add", "path": "/metadata/finalizers", "value": ["operator.kyma-project.io/btp-manager"]}]),
            ),
            ..ALLOW
        },
        "004" => Expect {
            allowed: false,
            message: &["\"btpoperator-test\"", "\"btpoperator\"", "\"kyma-system\""],
            ..ALLOW
        },
        "006" => Expect {
            allowed: false,
            message: &["namespace \"default\"", "kyma-system/btpoperator"],
            ..ALLOW
        },
        // Dry run: the same verdict as a real create of a misnamed CR.
        "018" => Expect {
            allowed: false,
            message: &["\"btpoperator-dry\""],
            ..ALLOW
        },
        "030" => Expect {
            allowed: false,
            message: &[
                "missing key(s): tokenurl, cluster_id",
                "empty value(s) for key(s): clientsecret",
            ],
            warnings: &[UNLABELLED],
            patch: None,
        },
        // Labelled now, but still incomplete: the UPDATE leaves the keys as invalid as they were (ratcheting).
        "032" => Expect {
            warnings: &[
                "is still invalid: missing key(s): tokenurl, cluster_id; empty value(s) for key(s): clientsecret",
            ],
            ..ALLOW
        },
        // clientid read from a file with a trailing newline: trimmed.
        "035" => Expect {
            patch: Some(
                json!([{"op": "replace", "path": "/data/clientid", "value": base64::engine::general_purpose::STANDARD.encode("dummy-client-id")}]),
            ),
            ..ALLOW
        },
        "036" => Expect {
            warnings: &[UNLABELLED],
            ..ALLOW
        },
        // 042 deletes the valid CR, but it carries force-delete=true: no warning although the test
        // server counts ServiceInstances (see `delete_without_force_delete_warns` below).
        _ => ALLOW,
    }
}

async fn run_all(protocol: Protocol) {
    let server = TestServer::start().await;
    let mut conn = server.connect(protocol).await;
    let mut files: Vec<_> = std::fs::read_dir(fixtures_dir())
        .expect("webhooks/tests/fixtures/admission holds the recorded AdmissionReviews")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 42, "fixture count");
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let fixture: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let path = fixture["path"].as_str().unwrap();
        let endpoint = match path {
            "/mutating" => "/mutate",
            "/validating" => "/validate",
            other => panic!("{name}: unexpected path {other}"),
        };
        let body = serde_json::to_vec(&fixture["review"]).unwrap();
        let reply = conn
            .post_json(endpoint, body)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reply.status, 200, "{name}");
        let expected_version = match protocol {
            Protocol::Http1 => http::Version::HTTP_11,
            Protocol::Http2 => http::Version::HTTP_2,
        };
        assert_eq!(reply.version, expected_version, "{name}");
        let review: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{name}");
        assert_eq!(review["kind"], "AdmissionReview", "{name}");
        let response = &review["response"];
        assert_eq!(
            response["uid"], fixture["review"]["request"]["uid"],
            "{name}: uid echoed"
        );

        let expect = expectation(&name[..3]);
        assert_eq!(response["allowed"], expect.allowed, "{name}: {response}");
        let message = response["status"]["message"].as_str().unwrap_or("");
        for part in expect.message {
            assert!(message.contains(part), "{name}: message {message:?} lacks {part:?}");
        }
        if !expect.allowed {
            // No credential value ever appears in a message.
            for secret_value in [
                "dummy-client-secret-value",
                "dummy-client-id",
                "service-manager.example.com",
            ] {
                assert!(!message.contains(secret_value), "{name}: value leaked: {message}");
            }
        }
        let warnings: Vec<&str> = response["warnings"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if expect.warnings.is_empty() {
            assert!(warnings.is_empty(), "{name}: unexpected warnings {warnings:?}");
        } else {
            assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
            for part in expect.warnings {
                assert!(
                    warnings[0].contains(part),
                    "{name}: warning {:?} lacks {part:?}",
                    warnings[0]
                );
            }
        }
        match expect.patch {
            None => assert!(response.get("patch").is_none(), "{name}: unexpected patch {response}"),
            Some(expected) => {
                assert_eq!(response["patchType"], "JSONPatch", "{name}");
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(response["patch"].as_str().unwrap())
                    .unwrap();
                let patch: Value = serde_json::from_slice(&raw).unwrap();
                assert_eq!(patch, expected, "{name}");
                // The patch applies to the recorded object.
                let mut object = fixture["review"]["request"]["object"].clone();
                let ops: json_patch::Patch = serde_json::from_value(patch).unwrap();
                json_patch::patch(&mut object, &ops).unwrap_or_else(|e| panic!("{name}: patch does not apply: {e}"));
            }
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn recorded_reviews_over_http1() {
    run_all(Protocol::Http1).await;
}

#[tokio::test]
async fn recorded_reviews_over_http2() {
    run_all(Protocol::Http2).await;
}

/// The recorded DELETE of the valid CR (042) without its `force-delete` label: the warning names the
/// counts and the label that unblocks deletion.
#[tokio::test]
async fn delete_without_force_delete_warns() {
    let server = TestServer::start().await;
    let mut conn = server.connect(Protocol::Http2).await;
    let file = fixtures_dir().join("042-validating-btpoperator-delete-kyma-system-btpoperator.json");
    let mut fixture: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    fixture["review"]["request"]["oldObject"]["metadata"]["labels"] = json!({});
    let reply = conn
        .post_json("/validate", serde_json::to_vec(&fixture["review"]).unwrap())
        .await
        .unwrap();
    let review: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(review["response"]["allowed"], true);
    let warning = review["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("2 ServiceInstance(s) and 1 ServiceBinding(s)"),
        "{warning}"
    );
    assert!(warning.contains("force-delete=true"), "{warning}");
    server.shutdown().await;
}

/// The ratcheting cases derived from recorded UPDATEs (`tests/fixtures/ratcheting`, each file says what was
/// changed and what it must get): refused only for what the UPDATE makes worse.
#[tokio::test]
async fn ratcheting_updates_of_the_secret() {
    let server = TestServer::start().await;
    let mut conn = server.connect(Protocol::Http2).await;
    let dir = fixtures_dir().parent().unwrap().join("ratcheting");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("webhooks/tests/fixtures/ratcheting holds the derived reviews")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "fixture count");
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let fixture: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(fixture["review"]["request"]["operation"], "UPDATE", "{name}");
        let reply = conn
            .post_json("/validate", serde_json::to_vec(&fixture["review"]).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let review: Value = serde_json::from_slice(&reply.body).unwrap();
        let response = &review["response"];
        let expect = &fixture["expect"];
        assert_eq!(response["allowed"], expect["allowed"], "{name}: {response}");
        let message = response["status"]["message"].as_str().unwrap_or("");
        for part in expect["message"].as_array().unwrap() {
            let part = part.as_str().unwrap();
            assert!(message.contains(part), "{name}: message {message:?} lacks {part:?}");
        }
        let warnings: Vec<&str> = response["warnings"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let expected: Vec<&str> = expect["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if expected.is_empty() {
            assert!(warnings.is_empty(), "{name}: unexpected warnings {warnings:?}");
        } else {
            assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
            for part in expected {
                assert!(
                    warnings[0].contains(part),
                    "{name}: warning {:?} lacks {part:?}",
                    warnings[0]
                );
            }
        }
        for leaked in [
            "dummy-client-secret-value",
            "dummy-client-id",
            "service-manager-2",
            "auth.example.com",
        ] {
            assert!(
                !message.contains(leaked) && !warnings.iter().any(|w| w.contains(leaked)),
                "{name}: value leaked"
            );
        }
    }
    server.shutdown().await;
}
