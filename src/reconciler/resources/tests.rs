use super::*;
use crate::reconciler::credentials::{validate, Observed};
use std::collections::BTreeMap;

fn manifests() -> ModuleResources {
    let docs = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sap-btp-operator-config", "namespace": "kyma-system", "creationTimestamp": null},
         "data": {"ALLOW_CLUSTER_ACCESS": "true", "CLUSTER_ID": ""}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sap-btp-service-operator", "namespace": "kyma-system",
         "labels": {"services.cloud.sap.com/managed-by-sap-btp-operator": "true"}},
         "data": {"tokenurlsuffix": "L29hdXRoL3Rva2Vu", "clientid": ""}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "serviceinstances.services.cloud.sap.com", "namespace": "kyma-system"}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "v"},
         "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "s", "namespace": "kyma-system"}}}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sap-btp-operator-controller-manager", "namespace": "kyma-system"},
         "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "manager", "image": ""}, {"name": "kube-rbac-proxy", "image": ""}]}}}}
    ]);
    ModuleResources {
        apply: docs.as_array().unwrap().clone(),
        delete: vec![],
        chart_version: "0.11.10".into(),
        sources: Default::default(),
    }
}

fn credentials(ns: Option<&str>) -> Credentials {
    let mut data: BTreeMap<String, Vec<u8>> = [
        ("clientid", "id"),
        ("clientsecret", "pw"),
        ("sm_url", "https://sm"),
        ("tokenurl", "https://t"),
        ("cluster_id", "c-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    if let Some(ns) = ns {
        data.insert("credentials_namespace".into(), ns.as_bytes().to_vec());
    }
    validate(Observed::Present(&data), "sap-btp-manager", "btp-ns").unwrap()
}

fn inputs<'a>(c: &'a Credentials, bundle: Option<&'a [u8]>) -> Inputs<'a> {
    Inputs {
        chart_namespace: "btp-ns",
        deployment_name: "sap-btp-operator-controller-manager",
        credentials: c,
        enable_limited_cache: "false",
        image: "registry/operator:v1",
        rbac_proxy_image: Some("registry/proxy:v2"),
        ca_bundle: bundle,
        extra: &[],
        unversioned: &[],
        kinds: None,
    }
}

fn find<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter().find(|o| o["kind"] == kind).unwrap()
}

#[test]
fn labels_namespaces_and_order() {
    let c = credentials(None);
    let objs = prepare(&manifests(), &inputs(&c, None)).unwrap();
    assert_eq!(objs.len(), 5);
    assert_eq!(
        objs.last().unwrap()["kind"],
        "ValidatingWebhookConfiguration",
        "webhooks last"
    );
    for o in &objs {
        let l = &o["metadata"]["labels"];
        assert_eq!(l["app.kubernetes.io/managed-by"], "btp-manager");
        assert_eq!(l["chart-version"], "0.11.10");
        assert_eq!(l["kyma-project.io/module"], "btp-operator");
        assert!(o["metadata"].get("creationTimestamp").is_none());
        let cluster = is_cluster_scoped(o["kind"].as_str().unwrap());
        assert_eq!(o["metadata"].get("namespace").is_none(), cluster, "{}", o["kind"]);
    }
    assert_eq!(find(&objs, "ConfigMap")["metadata"]["namespace"], "btp-ns");
    assert_eq!(
        find(&objs, "Deployment")["spec"]["template"]["metadata"]["labels"]["kyma-project.io/module"],
        "btp-operator"
    );
    assert_eq!(
        find(&objs, "Deployment")["spec"]["template"]["metadata"]["labels"]["app"],
        "x"
    );
    assert_eq!(
        find(&objs, "Secret")["metadata"]["labels"]["services.cloud.sap.com/managed-by-sap-btp-operator"],
        "true"
    );
}

#[test]
fn credentials_and_config_are_mapped() {
    let c = credentials(Some("creds"));
    let objs = prepare(&manifests(), &inputs(&c, None)).unwrap();
    let cm = &find(&objs, "ConfigMap")["data"];
    assert_eq!(cm["CLUSTER_ID"], "c-1");
    assert_eq!(cm["RELEASE_NAMESPACE"], "creds");
    assert_eq!(cm["MANAGEMENT_NAMESPACE"], "creds");
    assert_eq!(cm["ENABLE_LIMITED_CACHE"], "false");
    assert_eq!(cm["ALLOW_CLUSTER_ACCESS"], "true");
    let secret = find(&objs, "Secret");
    assert_eq!(secret["metadata"]["namespace"], "creds");
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(secret["data"]["clientsecret"], b64.encode("pw"));
    assert_eq!(
        secret["data"]["tokenurlsuffix"], "L29hdXRoL3Rva2Vu",
        "manifest keys not overridden stay"
    );
    assert!(secret["data"].get("cluster_id").is_none() && secret["data"].get("credentials_namespace").is_none());
}

#[test]
fn images_and_ca_bundle() {
    let c = credentials(None);
    let objs = prepare(&manifests(), &inputs(&c, Some(b"PEM"))).unwrap();
    let containers = &find(&objs, "Deployment")["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "registry/operator:v1");
    assert_eq!(containers[1]["image"], "registry/proxy:v2");
    let hook = &find(&objs, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"];
    assert_eq!(
        hook["caBundle"],
        base64::engine::general_purpose::STANDARD.encode("PEM")
    );
    assert_eq!(
        hook["service"]["namespace"], "btp-ns",
        "the webhook Service is in the chart namespace"
    );
}

#[test]
fn missing_mandatory_objects_and_containers_are_errors() {
    let c = credentials(None);
    let mut m = manifests();
    m.apply.retain(|o| o["kind"] != "Secret");
    assert_eq!(
        prepare(&m, &inputs(&c, None)).unwrap_err(),
        PrepareError::Missing {
            kind: "Secret",
            name: "sap-btp-service-operator".into()
        }
    );
    let mut m = manifests();
    m.apply[4]["spec"]["template"]["spec"]["containers"] = json!([{"name": "other"}]);
    assert!(matches!(
        prepare(&m, &inputs(&c, None)),
        Err(PrepareError::NoManagerContainer(_))
    ));
}

#[test]
fn loading_reads_yaml_files_in_order_and_rejects_garbage() {
    let dir = std::env::temp_dir().join(format!("btp-mr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("apply")).unwrap();
    std::fs::create_dir_all(dir.join("delete")).unwrap();
    std::fs::write(dir.join("chart-version"), "1.2.3\n").unwrap();
    std::fs::write(
        dir.join("apply/b.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n---\n",
    )
    .unwrap();
    std::fs::write(dir.join("apply/a.yml"), "apiVersion: v1\nkind: Secret\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: a2\n").unwrap();
    std::fs::write(dir.join("apply/notes.txt"), "ignored").unwrap();
    let loaded = load(&dir).unwrap();
    let order: Vec<&str> = loaded
        .apply
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["a", "a2", "b"]);
    assert!(loaded.delete.is_empty());
    assert_eq!(loaded.chart_version, "1.2.3");
    std::fs::write(dir.join("delete/x.yaml"), "kind: ConfigMap\n").unwrap();
    assert!(matches!(load(&dir), Err(LoadError::Invalid { .. })));
    std::fs::write(dir.join("delete/x.yaml"), "{ not: yaml: at all").unwrap();
    assert!(load(&dir).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unversioned_objects_get_the_managed_labels_without_chart_version() {
    let c = credentials(None);
    let cert = [json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca-server-cert"}, "data": {}})];
    let objs = prepare(
        &manifests(),
        &Inputs {
            unversioned: &cert,
            kinds: None,
            ..inputs(&c, None)
        },
    )
    .unwrap();
    let secret = objs.iter().find(|o| o["metadata"]["name"] == "ca-server-cert").unwrap();
    let labels = &secret["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/managed-by"], "btp-manager");
    assert_eq!(labels["kyma-project.io/module"], "btp-operator");
    assert!(labels.get("chart-version").is_none());
    assert_eq!(secret["metadata"]["namespace"], "btp-ns");
}

#[test]
fn an_object_is_already_applied_when_the_live_one_contains_every_desired_field() {
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns", "labels": {"a": "1"}},
        "data": {"k": "v"}});
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns", "labels": {"a": "1", "other": "x"}, "resourceVersion": "7",
                     "managedFields": []},
        "data": {"k": "v"}});
    assert!(super::already_applied(&live, &desired));
    let mut edited = live.clone();
    edited["data"]["k"] = json!("changed by hand");
    assert!(
        !super::already_applied(&edited, &desired),
        "an edited field is re-applied"
    );
    let mut missing = live.clone();
    missing["metadata"]["labels"].as_object_mut().unwrap().remove("a");
    assert!(
        !super::already_applied(&missing, &desired),
        "a removed label is re-applied"
    );

    // Arrays compare element by element (defaults the server adds inside elements are fine).
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"ports": [{"port": 443}]}});
    let l = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"ports": [{"port": 443, "protocol": "TCP"}]}});
    assert!(super::already_applied(&l, &d));
    let two = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"ports": [{"port": 443}, {"port": 80}]}});
    assert!(!super::already_applied(&two, &d), "a different length is a change");

    // The namespace the preparation puts on cluster-scoped objects is not on the live object.
    let d = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "w", "namespace": "kyma-system"},
        "webhooks": [{"name": "a", "clientConfig": {"caBundle": "Q0E="}}]});
    let l = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "w", "resourceVersion": "3"},
        "webhooks": [{"name": "a", "clientConfig": {"caBundle": "Q0E="}, "timeoutSeconds": 10}]});
    assert!(super::already_applied(&l, &d));
    let mut wiped = l.clone();
    wiped["webhooks"][0]["clientConfig"]["caBundle"] = json!("");
    assert!(!super::already_applied(&wiped, &d), "a wiped caBundle is put back");
}

/// A real API server lists built-in objects without `apiVersion` and `kind` (the list carries them): an
/// object a watch store holds from its initial list is the same object (seen on kube-apiserver 1.36: every
/// operand object was re-applied on the first pass after a takeover).
#[test]
fn an_object_listed_without_apiversion_and_kind_is_already_applied() {
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}});
    let listed = json!({"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7"}, "data": {"k": "v"}});
    assert!(super::already_applied(&listed, &desired));
    let mut edited = listed.clone();
    edited["data"]["k"] = json!("changed by hand");
    assert!(!super::already_applied(&edited, &desired));
}
