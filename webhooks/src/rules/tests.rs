use super::*;
use serde_json::json;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn request(
    kind: (&str, &str, &str),
    operation: &str,
    namespace: &str,
    name: &str,
    object: Value,
    old_object: Value,
) -> Request {
    let (group, version, kind) = kind;
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": "x"},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": old_object,
            "dryRun": false
        }
    });
    crate::review::decode(&serde_json::to_vec(&review).unwrap()).unwrap()
}

const BTP: (&str, &str, &str) = ("operator.kyma-project.io", "v1alpha1", "BtpOperator");
const SECRET: (&str, &str, &str) = ("", "v1", "Secret");

fn cr(namespace: &str, name: &str, labels: Value, finalizers: Value) -> Value {
    let mut meta = json!({"name": name, "namespace": namespace, "labels": labels});
    if !finalizers.is_null() {
        meta["finalizers"] = finalizers;
    }
    json!({"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator", "metadata": meta})
}

fn create_cr(namespace: &str, name: &str) -> Request {
    request(
        BTP,
        "CREATE",
        namespace,
        name,
        cr(namespace, name, json!({}), Value::Null),
        Value::Null,
    )
}

fn delete_cr(labels: Value) -> Request {
    let old = cr("kyma-system", "btpoperator", labels, Value::Null);
    request(BTP, "DELETE", "kyma-system", "btpoperator", Value::Null, old)
}

fn full_data() -> Value {
    json!({
        "clientid": b64("id"),
        "clientsecret": b64("s3cr3t-value"),
        "sm_url": b64("https://sm.example.com"),
        "tokenurl": b64("https://auth.example.com"),
        "cluster_id": b64("cluster-1"),
    })
}

fn secret_obj(name: &str, data: Value, string_data: Value, labelled: bool) -> Value {
    let labels = if labelled {
        json!({"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"})
    } else {
        json!({})
    };
    let mut obj = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "kyma-system", "labels": labels}, "type": "Opaque"});
    if !data.is_null() {
        obj["data"] = data;
    }
    if !string_data.is_null() {
        obj["stringData"] = string_data;
    }
    obj
}

fn secret_req(op: &str, data: Value, string_data: Value, labelled: bool) -> Request {
    let obj = secret_obj("sap-btp-manager", data, string_data, labelled);
    request(SECRET, op, "kyma-system", "sap-btp-manager", obj, Value::Null)
}

fn cfg() -> RulesConfig {
    RulesConfig::default()
}

fn message(v: &Verdict) -> &str {
    &v.denial.as_ref().expect("denied").message
}

// --- BtpOperator name rule -------------------------------------------------------------------

#[test]
fn valid_cr_create_is_allowed() {
    let v = validate(&create_cr("kyma-system", "btpoperator"), &cfg(), None);
    assert!(v.allowed());
    assert!(v.warnings.is_empty());
}

#[test]
fn wrong_name_is_denied_with_expected_and_given_names() {
    let v = validate(&create_cr("kyma-system", "btpoperator-test"), &cfg(), None);
    let m = message(&v);
    assert_eq!(v.denial.as_ref().unwrap().code, 403);
    assert!(m.contains("\"btpoperator\"") && m.contains("\"kyma-system\""), "{m}");
    assert!(m.contains("\"btpoperator-test\""), "{m}");
}

#[test]
fn wrong_namespace_is_denied_naming_the_namespace() {
    let v = validate(&create_cr("default", "btpoperator"), &cfg(), None);
    let m = message(&v);
    assert!(m.contains("namespace \"default\""), "{m}");
    assert!(m.contains("kyma-system/btpoperator"), "{m}");
}

#[test]
fn generated_name_is_denied_and_named() {
    let mut obj = cr("kyma-system", "", json!({}), Value::Null);
    obj["metadata"].as_object_mut().unwrap().remove("name");
    obj["metadata"]["generateName"] = json!("btp-");
    let req = request(BTP, "CREATE", "kyma-system", "", obj, Value::Null);
    let v = validate(&req, &cfg(), None);
    assert!(message(&v).contains("generated name (btp-"), "{}", message(&v));
}

#[test]
fn updates_of_any_cr_are_allowed() {
    let obj = cr("default", "other", json!({}), Value::Null);
    let req = request(BTP, "UPDATE", "default", "other", obj.clone(), obj);
    assert!(validate(&req, &cfg(), None).allowed());
}

// --- BtpOperator DELETE warning --------------------------------------------------------------

#[test]
fn delete_of_valid_cr_with_services_warns_with_counts_and_label() {
    let req = delete_cr(json!({}));
    assert!(needs_service_counts(&req, &cfg()));
    let counts = Ok(ServiceCounts {
        instances: 2,
        bindings: 1,
    });
    let v = validate(&req, &cfg(), Some(&counts));
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1);
    let w = &v.warnings[0];
    assert!(
        w.contains("2 ServiceInstance(s)") && w.contains("1 ServiceBinding(s)"),
        "{w}"
    );
    assert!(w.contains("force-delete=true"), "{w}");
    assert!(
        w.contains("keeps running") && w.contains("as soon as the last one is gone"),
        "{w}"
    );
}

#[test]
fn delete_without_services_has_no_warning() {
    let counts = Ok(ServiceCounts::default());
    let v = validate(&delete_cr(json!({})), &cfg(), Some(&counts));
    assert!(v.allowed() && v.warnings.is_empty());
}

#[test]
fn delete_with_force_delete_needs_no_counts() {
    assert!(!needs_service_counts(
        &delete_cr(json!({"force-delete": "true"})),
        &cfg()
    ));
    // Any other value does not count as force-delete.
    assert!(needs_service_counts(
        &delete_cr(json!({"force-delete": "TRUE"})),
        &cfg()
    ));
    let v = validate(&delete_cr(json!({"force-delete": "true"})), &cfg(), None);
    assert!(v.allowed() && v.warnings.is_empty());
}

#[test]
fn delete_of_misnamed_cr_needs_no_counts() {
    let old = cr("kyma-system", "btpoperator-test", json!({}), Value::Null);
    let req = request(BTP, "DELETE", "kyma-system", "btpoperator-test", Value::Null, old);
    assert!(!needs_service_counts(&req, &cfg()));
    assert_eq!(validate(&req, &cfg(), None), Verdict::allow());
}

#[test]
fn delete_when_counting_fails_is_allowed_with_a_warning() {
    let counts = Err("listing serviceinstances: connection refused".to_string());
    let v = validate(&delete_cr(json!({})), &cfg(), Some(&counts));
    assert!(v.allowed());
    assert!(v.warnings[0].contains("could not count") && v.warnings[0].contains("connection refused"));
}

// --- Required Secret ---------------------------------------------------------------------------

#[test]
fn complete_labelled_secret_is_allowed_without_warning() {
    let v = validate(&secret_req("CREATE", full_data(), Value::Null, true), &cfg(), None);
    assert_eq!(v, Verdict::allow());
}

#[test]
fn btp_manager_label_value_also_counts_as_labelled() {
    let mut obj = secret_obj("sap-btp-manager", full_data(), Value::Null, false);
    obj["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "btp-manager"});
    let req = request(SECRET, "CREATE", "kyma-system", "sap-btp-manager", obj, Value::Null);
    assert_eq!(validate(&req, &cfg(), None), Verdict::allow());
}

#[test]
fn unlabelled_complete_secret_is_allowed_with_a_warning() {
    let v = validate(&secret_req("UPDATE", full_data(), Value::Null, false), &cfg(), None);
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1);
    assert!(
        v.warnings[0].contains("app.kubernetes.io/managed-by=kcp-kyma-environment-broker"),
        "{:?}",
        v.warnings
    );
}

#[test]
fn missing_and_empty_keys_are_listed_without_values() {
    let mut data = full_data();
    let d = data.as_object_mut().unwrap();
    d.remove("tokenurl");
    d.remove("cluster_id");
    d.insert("clientsecret".into(), json!(""));
    let v = validate(&secret_req("CREATE", data, Value::Null, true), &cfg(), None);
    assert_eq!(v.denial.as_ref().unwrap().code, 422);
    let m = message(&v);
    assert!(m.contains("missing key(s): tokenurl, cluster_id"), "{m}");
    assert!(m.contains("empty value(s) for key(s): clientsecret"), "{m}");
    assert!(
        !m.contains("sm.example.com") && !m.contains(&b64("id")),
        "a value leaked: {m}"
    );
}

#[test]
fn whitespace_only_value_counts_as_empty() {
    let mut data = full_data();
    data["clientid"] = json!(b64(" \n\t "));
    let v = validate(&secret_req("CREATE", data, Value::Null, true), &cfg(), None);
    assert!(
        message(&v).contains("empty value(s) for key(s): clientid"),
        "{}",
        message(&v)
    );
}

#[test]
fn secret_with_no_data_at_all_lists_all_five_keys() {
    let v = validate(&secret_req("CREATE", Value::Null, Value::Null, true), &cfg(), None);
    assert!(message(&v).contains("missing key(s): clientid, clientsecret, sm_url, tokenurl, cluster_id"));
}

#[test]
fn string_data_counts_and_wins_over_data() {
    let mut data = full_data();
    data.as_object_mut().unwrap().remove("clientsecret");
    let sd = json!({"clientsecret": "from-string-data", "sm_url": "http://plain.example.com"});
    let v = validate(&secret_req("CREATE", data, sd, true), &cfg(), None);
    let m = message(&v);
    assert!(!m.contains("missing key"), "stringData value not seen: {m}");
    assert!(m.contains("key(s) sm_url must hold an https URL"), "{m}");
    assert!(!m.contains("plain.example.com"), "a value leaked: {m}");
}

#[test]
fn urls_must_be_https_with_a_host() {
    for bad in [
        "http://sm.example.com",
        "sm.example.com",
        "https://",
        "not a url",
        "ftp://x",
    ] {
        let mut data = full_data();
        data["tokenurl"] = json!(b64(bad));
        let v = validate(&secret_req("CREATE", data, Value::Null, true), &cfg(), None);
        assert!(
            message(&v).contains("tokenurl must hold an https URL"),
            "{bad}: {:?}",
            v
        );
        if bad != "https://" {
            assert!(!message(&v).contains(bad), "value leaked for {bad}");
        }
    }
    let mut data = full_data();
    data["sm_url"] = json!(b64("https://sm.eu10.hana.ondemand.com/path?x=1\n"));
    assert!(validate(&secret_req("CREATE", data, Value::Null, true), &cfg(), None).allowed());
}

#[test]
fn invalid_base64_is_reported_by_key() {
    let mut data = full_data();
    data["clientid"] = json!("%%%not-base64");
    let v = validate(&secret_req("CREATE", data, Value::Null, true), &cfg(), None);
    assert!(
        message(&v).contains("not valid base64 strings for key(s): clientid"),
        "{}",
        message(&v)
    );
    let mut data = full_data();
    data["clientid"] = json!(42);
    let v = validate(&secret_req("CREATE", data, Value::Null, true), &cfg(), None);
    assert!(message(&v).contains("clientid"));
}

#[test]
fn missing_key_in_unlabelled_secret_denies_and_warns() {
    let mut data = full_data();
    data.as_object_mut().unwrap().remove("clientid");
    let v = validate(&secret_req("CREATE", data, Value::Null, false), &cfg(), None);
    assert!(!v.allowed());
    assert_eq!(v.warnings.len(), 1);
}

// --- Ratcheting UPDATEs of the required Secret ---------------------------------------------------

fn update(old_data: Value, new_data: Value, labelled: bool) -> Request {
    let old = secret_obj("sap-btp-manager", old_data, Value::Null, false);
    let new = secret_obj("sap-btp-manager", new_data, Value::Null, labelled);
    request(SECRET, "UPDATE", "kyma-system", "sap-btp-manager", new, old)
}

fn incomplete() -> Value {
    let mut data = full_data();
    let d = data.as_object_mut().unwrap();
    d.remove("tokenurl");
    d.insert("clientsecret".into(), json!(""));
    d.insert("sm_url".into(), json!(b64("http://sm.example.com")));
    data
}

#[test]
fn update_leaving_invalid_keys_as_they_were_is_allowed_with_a_warning_naming_them() {
    let v = validate(&update(incomplete(), incomplete(), true), &cfg(), None);
    assert!(v.allowed(), "{v:?}");
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    let w = &v.warnings[0];
    assert!(w.contains("missing key(s): tokenurl"), "{w}");
    assert!(w.contains("empty value(s) for key(s): clientsecret"), "{w}");
    assert!(w.contains("key(s) sm_url must hold an https URL"), "{w}");
    assert!(
        !w.contains("sm.example.com") && !w.contains("cluster-1"),
        "a value leaked: {w}"
    );
}

#[test]
fn update_fixing_one_key_warns_only_about_the_rest() {
    let mut fixed = incomplete();
    fixed["clientsecret"] = json!(b64("now-set"));
    let v = validate(&update(incomplete(), fixed, true), &cfg(), None);
    assert!(v.allowed(), "{v:?}");
    assert!(!v.warnings[0].contains("clientsecret"), "{:?}", v.warnings);
    assert!(v.warnings[0].contains("tokenurl"), "{:?}", v.warnings);
}

#[test]
fn update_changing_an_invalid_key_to_another_invalid_value_is_not_worse() {
    // Missing before, empty now: still one invalid key, not a newly broken one.
    let mut changed = incomplete();
    changed["tokenurl"] = json!("");
    let v = validate(&update(incomplete(), changed, true), &cfg(), None);
    assert!(v.allowed(), "{v:?}");
    assert!(
        v.warnings[0].contains("empty value(s) for key(s): clientsecret, tokenurl"),
        "{:?}",
        v.warnings
    );
}

#[test]
fn update_breaking_a_valid_key_is_refused_for_that_key_only() {
    for (key, value, expected) in [
        ("clientid", Value::Null, "missing key(s): clientid"),
        ("cluster_id", json!(b64("  ")), "empty value(s) for key(s): cluster_id"),
        ("cluster_id", json!(""), "empty value(s) for key(s): cluster_id"),
    ] {
        let mut worse = incomplete();
        if value.is_null() {
            worse.as_object_mut().unwrap().remove(key);
        } else {
            worse[key] = value;
        }
        let v = validate(&update(incomplete(), worse, true), &cfg(), None);
        let m = message(&v);
        assert_eq!(v.denial.as_ref().unwrap().code, 422);
        assert!(
            m.contains(expected) && m.contains("valid before this update"),
            "{key}: {m}"
        );
        let problems = m.split(". It needs").next().unwrap();
        assert!(
            !problems.contains("tokenurl") && !problems.contains("clientsecret"),
            "{key}: old problems in the denial: {m}"
        );
        assert!(v.warnings[0].contains("tokenurl"), "{key}: {:?}", v.warnings);
    }
}

#[test]
fn update_turning_a_valid_url_into_plain_http_is_refused() {
    let mut worse = full_data();
    worse["tokenurl"] = json!(b64("http://auth.example.com"));
    let v = validate(&update(full_data(), worse, true), &cfg(), None);
    assert!(message(&v).contains("key(s) tokenurl must hold an https URL"), "{v:?}");
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
}

#[test]
fn create_and_update_without_old_object_are_not_ratcheted() {
    let v = validate(&secret_req("CREATE", incomplete(), Value::Null, true), &cfg(), None);
    assert!(!v.allowed());
    assert!(message(&v).contains("missing key(s): tokenurl"), "{}", message(&v));
    let v = validate(&secret_req("UPDATE", incomplete(), Value::Null, true), &cfg(), None);
    assert!(
        !v.allowed(),
        "an UPDATE without oldObject has nothing to ratchet against"
    );
}

#[test]
fn ratcheted_update_of_an_unlabelled_secret_carries_both_warnings() {
    let v = validate(&update(incomplete(), incomplete(), false), &cfg(), None);
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 2, "{:?}", v.warnings);
}

#[test]
fn secret_delete_and_other_secrets_are_allowed() {
    let req = request(
        SECRET,
        "DELETE",
        "kyma-system",
        "sap-btp-manager",
        Value::Null,
        secret_obj("sap-btp-manager", json!({}), Value::Null, true),
    );
    assert_eq!(validate(&req, &cfg(), None), Verdict::allow());
    let other = request(
        SECRET,
        "CREATE",
        "kyma-system",
        "other",
        secret_obj("other", json!({}), Value::Null, false),
        Value::Null,
    );
    assert_eq!(validate(&other, &cfg(), None), Verdict::allow());
    assert_eq!(mutate(&other, &cfg()), Verdict::allow());
    let elsewhere = request(
        SECRET,
        "CREATE",
        "default",
        "sap-btp-manager",
        secret_obj("sap-btp-manager", json!({}), Value::Null, false),
        Value::Null,
    );
    assert_eq!(validate(&elsewhere, &cfg(), None), Verdict::allow());
}

#[test]
fn configured_secret_name_and_namespace_are_honoured() {
    let config = RulesConfig {
        secret_namespace: "kyma-system".into(),
        secret_name: "custom".into(),
    };
    let req = request(
        SECRET,
        "CREATE",
        "kyma-system",
        "custom",
        secret_obj("custom", json!({}), Value::Null, true),
        Value::Null,
    );
    assert!(!validate(&req, &config, None).allowed());
    let default_name = secret_req("CREATE", json!({}), Value::Null, true);
    assert!(validate(&default_name, &config, None).allowed());
}

#[test]
fn kinds_we_do_not_own_are_untouched() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sap-btp-manager", "namespace": "kyma-system"}});
    let req = request(
        ("", "v1", "ConfigMap"),
        "CREATE",
        "kyma-system",
        "sap-btp-manager",
        cm,
        Value::Null,
    );
    assert_eq!(validate(&req, &cfg(), None), Verdict::allow());
    assert_eq!(mutate(&req, &cfg()), Verdict::allow());
}

// --- Mutating ---------------------------------------------------------------------------------

fn apply(obj: &Value, v: &Verdict) -> Value {
    let mut out = obj.clone();
    json_patch::patch(&mut out, &v.patch).unwrap();
    out
}

#[test]
fn finalizer_is_added_to_valid_cr_on_create_only() {
    let req = create_cr("kyma-system", "btpoperator");
    let v = mutate(&req, &cfg());
    assert!(v.allowed());
    let patched = apply(&cr("kyma-system", "btpoperator", json!({}), Value::Null), &v);
    assert_eq!(patched["metadata"]["finalizers"], json!([names::FINALIZER]));

    for (ns, name) in [("kyma-system", "btpoperator-test"), ("default", "btpoperator")] {
        assert_eq!(mutate(&create_cr(ns, name), &cfg()), Verdict::allow(), "{ns}/{name}");
    }
    let obj = cr("kyma-system", "btpoperator", json!({}), Value::Null);
    let update = request(BTP, "UPDATE", "kyma-system", "btpoperator", obj.clone(), obj);
    assert!(mutate(&update, &cfg()).patch.is_empty());
}

#[test]
fn an_ignored_cr_gets_no_finalizer() {
    let mut obj = cr("kyma-system", "btpoperator", json!({}), Value::Null);
    obj["metadata"]["annotations"] = json!({(names::OPERATION_ANNOTATION): "ignore"});
    let req = request(BTP, "CREATE", "kyma-system", "btpoperator", obj.clone(), Value::Null);
    assert!(mutate(&req, &cfg()).patch.is_empty());
    obj["metadata"]["annotations"] = json!({(names::OPERATION_ANNOTATION): "reconcile"});
    let req = request(BTP, "CREATE", "kyma-system", "btpoperator", obj, Value::Null);
    assert_eq!(mutate(&req, &cfg()).patch.len(), 1, "only ignore skips the finalizer");
}

#[test]
fn finalizer_is_appended_to_existing_finalizers_and_idempotent() {
    let obj = cr("kyma-system", "btpoperator", json!({}), json!(["other/finalizer"]));
    let req = request(BTP, "CREATE", "kyma-system", "btpoperator", obj.clone(), Value::Null);
    let patched = apply(&obj, &mutate(&req, &cfg()));
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["other/finalizer", names::FINALIZER])
    );
    // Reinvocation on the patched object: nothing more to do.
    let again = request(BTP, "CREATE", "kyma-system", "btpoperator", patched, Value::Null);
    assert!(mutate(&again, &cfg()).patch.is_empty());
}

#[test]
fn secret_values_are_trimmed_touching_only_changed_keys() {
    let mut data = full_data();
    data["clientid"] = json!(b64("id\n"));
    data["sm_url"] = json!(b64("  https://sm.example.com \r\n"));
    data["extra"] = json!(b64("keep me \n"));
    let obj = secret_obj(
        "sap-btp-manager",
        data,
        json!({"tokenurl": " https://auth.example.com\n"}),
        true,
    );
    let req = request(
        SECRET,
        "CREATE",
        "kyma-system",
        "sap-btp-manager",
        obj.clone(),
        Value::Null,
    );
    let v = mutate(&req, &cfg());
    let paths: Vec<String> = v
        .patch
        .iter()
        .map(|op| serde_json::to_value(op).unwrap()["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paths, ["/data/clientid", "/data/sm_url", "/stringData/tokenurl"]);
    let patched = apply(&obj, &v);
    assert_eq!(patched["data"]["clientid"], json!(b64("id")));
    assert_eq!(patched["data"]["sm_url"], json!(b64("https://sm.example.com")));
    assert_eq!(
        patched["data"]["extra"],
        json!(b64("keep me \n")),
        "only the five required keys are trimmed"
    );
    assert_eq!(patched["stringData"]["tokenurl"], json!("https://auth.example.com"));
    // Idempotent.
    let again = request(SECRET, "UPDATE", "kyma-system", "sap-btp-manager", patched, Value::Null);
    assert!(mutate(&again, &cfg()).patch.is_empty());
}

#[test]
fn clean_secret_gets_no_patch_and_garbage_values_are_left_for_validation() {
    assert!(mutate(&secret_req("CREATE", full_data(), Value::Null, true), &cfg())
        .patch
        .is_empty());
    let mut data = full_data();
    data["clientid"] = json!("%%%");
    data["clientsecret"] = json!(7);
    assert!(mutate(&secret_req("CREATE", data, Value::Null, true), &cfg())
        .patch
        .is_empty());
}

#[test]
fn non_utf8_values_are_trimmed_of_ascii_whitespace() {
    let raw = [0xff, 0xfe, b'\n'];
    let mut data = full_data();
    data["clientsecret"] = json!(base64::engine::general_purpose::STANDARD.encode(raw));
    let v = mutate(&secret_req("CREATE", data.clone(), Value::Null, true), &cfg());
    let patched = apply(&secret_obj("sap-btp-manager", data, Value::Null, true), &v);
    assert_eq!(
        patched["data"]["clientsecret"],
        json!(base64::engine::general_purpose::STANDARD.encode([0xff, 0xfe]))
    );
}

#[test]
fn secret_delete_is_not_mutated() {
    let req = request(
        SECRET,
        "DELETE",
        "kyma-system",
        "sap-btp-manager",
        Value::Null,
        secret_obj("sap-btp-manager", full_data(), Value::Null, true),
    );
    assert_eq!(mutate(&req, &cfg()), Verdict::allow());
}
