//! module-resources/ holds the operand's manifests (SAP BTP service operator, chart 0.11.10). The manager
//! applies them after preparing them (labels, namespace, image, credentials, caBundle); these tests pin the
//! objects and the facts the manager and the operand rely on.

/// (kind, name, [(webhook, path, operations, failure policy)]).
type ExpectedConfiguration<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str, &'a [&'a str], &'a str)]);

use base64::Engine as _;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn resources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources")
}

/// Top-level `.yml`/`.yaml` files of `dir`, in lexical order (the manager's loading order).
fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("yml" | "yaml")))
        .collect();
    files.sort();
    files
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Every object of module-resources/apply as (file name, object), in loading order.
fn apply_objects() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for path in manifest_files(&resources().join("apply")) {
        let text = std::fs::read_to_string(&path).unwrap();
        let docs = serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            out.push((file_name(&path), doc));
        }
    }
    out
}

fn find<'a>(objects: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in module-resources/apply"))
}

/// (file, apiVersion, kind, name, namespaced) of the 14 operand objects, in loading order.
const OBJECTS: &[(&str, &str, &str, &str, bool)] = &[
    ("configmap.yml", "v1", "ConfigMap", "sap-btp-operator-config", true),
    (
        "crd.yml",
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "servicebindings.services.cloud.sap.com",
        false,
    ),
    (
        "crd.yml",
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "serviceinstances.services.cloud.sap.com",
        false,
    ),
    (
        "deployment.yml",
        "apps/v1",
        "Deployment",
        "sap-btp-operator-controller-manager",
        true,
    ),
    (
        "rbac.yml",
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "sap-btp-operator-manager-role",
        false,
    ),
    (
        "rbac.yml",
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "sap-btp-operator-manager-rolebinding",
        false,
    ),
    (
        "rbac.yml",
        "rbac.authorization.k8s.io/v1",
        "Role",
        "sap-btp-operator-leader-election-role",
        true,
    ),
    (
        "rbac.yml",
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "sap-btp-operator-leader-election-rolebinding",
        true,
    ),
    ("secret.yml", "v1", "Secret", "sap-btp-service-operator", true),
    ("service.yml", "v1", "Service", "sap-btp-operator-webhook-service", true),
    (
        "service.yml",
        "v1",
        "Service",
        "sap-btp-operator-controller-manager-metrics-service",
        true,
    ),
    ("service_account.yaml", "v1", "ServiceAccount", "sap-btp-operator", true),
    (
        "webhook.yml",
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        "sap-btp-operator-mutating-webhook-configuration",
        false,
    ),
    (
        "webhook.yml",
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "sap-btp-operator-validating-webhook-configuration",
        false,
    ),
];

const WEBHOOK_SERVICE: &str = "sap-btp-operator-webhook-service";

#[test]
fn apply_holds_exactly_the_fourteen_operand_objects() {
    let objects = apply_objects();
    let got: Vec<(String, String, String, String)> = objects
        .iter()
        .map(|(file, o)| {
            for field in [&o["apiVersion"], &o["kind"], &o["metadata"]["name"]] {
                assert!(
                    field.is_string(),
                    "{file}: object without apiVersion/kind/metadata.name: {o}"
                );
            }
            (
                file.clone(),
                o["apiVersion"].as_str().unwrap().to_owned(),
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String, String, String)> = OBJECTS
        .iter()
        .map(|(f, v, k, n, _)| (f.to_string(), v.to_string(), k.to_string(), n.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn namespaced_objects_are_in_kyma_system_and_cluster_scoped_ones_have_none() {
    let objects = apply_objects();
    for (_, _, kind, name, namespaced) in OBJECTS {
        let o = find(&objects, kind, name);
        let ns = &o["metadata"]["namespace"];
        if *namespaced {
            assert_eq!(ns, "kyma-system", "{kind} {name}");
        } else {
            assert!(ns.is_null(), "cluster-scoped {kind} {name} has namespace {ns}");
        }
        assert!(
            o["metadata"]["creationTimestamp"].is_null(),
            "{kind} {name}: no creationTimestamp in the manifests"
        );
    }
}

/// The manager decodes every document into its typed Kubernetes object; the manifests must fit those types
/// (quantities and ConfigMap values as strings, Secret data as base64, ...).
#[test]
fn every_object_decodes_into_its_typed_kubernetes_api() {
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    fn typed<T: serde::de::DeserializeOwned>(o: &Value) -> Result<(), serde_json::Error> {
        serde_json::from_value::<T>(o.clone()).map(|_| ())
    }

    for (file, o) in apply_objects() {
        let result = match o["kind"].as_str().unwrap() {
            "ConfigMap" => typed::<ConfigMap>(&o),
            "CustomResourceDefinition" => typed::<CustomResourceDefinition>(&o),
            "Deployment" => typed::<Deployment>(&o),
            "ClusterRole" => typed::<ClusterRole>(&o),
            "ClusterRoleBinding" => typed::<ClusterRoleBinding>(&o),
            "Role" => typed::<Role>(&o),
            "RoleBinding" => typed::<RoleBinding>(&o),
            "Secret" => typed::<Secret>(&o),
            "Service" => typed::<Service>(&o),
            "ServiceAccount" => typed::<ServiceAccount>(&o),
            "MutatingWebhookConfiguration" => typed::<MutatingWebhookConfiguration>(&o),
            "ValidatingWebhookConfiguration" => typed::<ValidatingWebhookConfiguration>(&o),
            other => panic!("{file}: unexpected kind {other}"),
        };
        result.unwrap_or_else(|e| panic!("{file}: {} {}: {e}", o["kind"], o["metadata"]["name"]));
    }
}

#[test]
fn deployment_runs_container_manager_with_a_blank_image_and_the_webhook_cert() {
    let objects = apply_objects();
    let d = find(&objects, "Deployment", "sap-btp-operator-controller-manager");
    let selector = serde_json::json!({
        "app.kubernetes.io/instance": "sap-btp-operator",
        "app.kubernetes.io/name": "sap-btp-operator",
        "control-plane": "controller-manager",
    });
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["selector"]["matchLabels"], selector);
    let template = &d["spec"]["template"];
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(&template["metadata"]["labels"][k], v, "pod label {k}");
    }
    assert_eq!(template["metadata"]["labels"]["sidecar.istio.io/inject"], "false");
    assert_eq!(template["metadata"]["annotations"]["sidecar.istio.io/inject"], "false");
    assert!(template["metadata"]["annotations"]["checksum/config"].is_string());

    let pod = &template["spec"];
    assert_eq!(pod["serviceAccountName"], "sap-btp-operator");
    assert_eq!(pod["priorityClassName"], "btp-manager-kyma-priority");
    assert_eq!(pod["terminationGracePeriodSeconds"], 10);
    assert_eq!(pod["securityContext"]["runAsUser"], 10001);
    assert_eq!(pod["securityContext"]["runAsGroup"], 30001);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(
        containers.len(),
        1,
        "only the operand container (no kube-rbac-proxy in 0.11.10)"
    );
    let c = &containers[0];
    assert_eq!(c["name"], "manager");
    assert_eq!(
        c["image"], "",
        "the image comes from SAP_BTP_SERVICE_OPERATOR at apply time"
    );
    assert_eq!(c["command"], serde_json::json!(["/manager"]));
    assert_eq!(c["args"], serde_json::json!(["--logger_use_dev_mode=true"]));
    let env: Vec<(&str, &str)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
        .collect();
    assert_eq!(
        env,
        [("APP_VERSION", "v0.11.10"), ("GODEBUG", "fips140=only,tlsmlkem=0")]
    );
    assert_eq!(
        c["envFrom"],
        serde_json::json!([
            {"configMapRef": {"name": "sap-btp-operator-config"}},
            {"secretRef": {"name": "sap-btp-operator-clusterid", "optional": true}},
        ])
    );
    let ports: Vec<(&str, i64)> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_i64().unwrap()))
        .collect();
    assert_eq!(ports, [("webhook-server", 9443), ("metrics", 8080)]);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], 8081);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], 8081);
    assert_eq!(c["resources"]["limits"]["cpu"], "1");
    assert_eq!(c["resources"]["limits"]["memory"], "500Mi");
    assert_eq!(c["resources"]["requests"]["cpu"], "10m");
    assert_eq!(c["resources"]["requests"]["memory"], "20Mi");
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));

    assert_eq!(
        c["volumeMounts"],
        serde_json::json!([{"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs", "readOnly": true}])
    );
    assert_eq!(
        pod["volumes"],
        serde_json::json!([{"name": "cert", "secret": {"secretName": "webhook-server-cert", "defaultMode": 420}}])
    );
}

#[test]
fn services_select_the_operand_pod_by_named_ports() {
    let objects = apply_objects();
    let deployment = find(&objects, "Deployment", "sap-btp-operator-controller-manager");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (name, port, target) in [
        (WEBHOOK_SERVICE, 443, "webhook-server"),
        ("sap-btp-operator-controller-manager-metrics-service", 8080, "metrics"),
    ] {
        let svc = find(&objects, "Service", name);
        let selector = svc["spec"]["selector"].as_object().unwrap();
        assert_eq!(selector.len(), 3, "{name}");
        for (k, v) in selector {
            assert_eq!(&pod_labels[k], v, "{name} selects pod label {k}");
        }
        let ports = svc["spec"]["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 1, "{name}");
        assert_eq!(ports[0]["port"], port, "{name}");
        assert_eq!(ports[0]["targetPort"], target, "{name}");
    }
}

#[test]
fn webhook_configurations_point_at_the_webhook_service_with_the_documented_paths() {
    let objects = apply_objects();
    let expected: [ExpectedConfiguration; 2] = [
        (
            "MutatingWebhookConfiguration",
            "sap-btp-operator-mutating-webhook-configuration",
            &[
                (
                    "mservicebinding.kb.io",
                    "/mutate-services-cloud-sap-com-v1-servicebinding",
                    &["CREATE", "UPDATE"],
                    "servicebindings",
                ),
                (
                    "mserviceinstance.kb.io",
                    "/mutate-services-cloud-sap-com-v1-serviceinstance",
                    &["CREATE", "UPDATE"],
                    "serviceinstances",
                ),
            ],
        ),
        (
            "ValidatingWebhookConfiguration",
            "sap-btp-operator-validating-webhook-configuration",
            &[
                (
                    "vservicebinding.kb.io",
                    "/validate-services-cloud-sap-com-v1-servicebinding",
                    &["CREATE", "UPDATE"],
                    "servicebindings",
                ),
                (
                    "vserviceinstance.kb.io",
                    "/validate-services-cloud-sap-com-v1-serviceinstance",
                    &["DELETE", "UPDATE", "CREATE"],
                    "serviceinstances",
                ),
            ],
        ),
    ];
    for (kind, name, hooks) in expected {
        let config = find(&objects, kind, name);
        let webhooks = config["webhooks"].as_array().unwrap();
        assert_eq!(webhooks.len(), hooks.len(), "{name}");
        for (w, (hook, path, operations, resource)) in webhooks.iter().zip(hooks) {
            assert_eq!(w["name"], *hook, "{name}");
            let service = &w["clientConfig"]["service"];
            assert_eq!(service["name"], WEBHOOK_SERVICE, "{hook}");
            assert_eq!(service["namespace"], "kyma-system", "{hook}");
            // No port: the API server defaults it to 443, the webhook Service's port.
            assert!(service["port"].is_null(), "{hook}");
            assert_eq!(service["path"], *path, "{hook}");
            assert!(
                w["clientConfig"]["caBundle"].is_null(),
                "{hook}: caBundle is injected by the manager"
            );
            assert_eq!(w["failurePolicy"], "Fail", "{hook}");
            assert_eq!(w["sideEffects"], "None", "{hook}");
            assert_eq!(
                w["admissionReviewVersions"],
                serde_json::json!(["v1beta1", "v1"]),
                "{hook}"
            );
            assert_eq!(
                w["rules"],
                serde_json::json!([{
                    "apiGroups": ["services.cloud.sap.com"],
                    "apiVersions": ["v1"],
                    "operations": operations,
                    "resources": [resource],
                }]),
                "{hook}"
            );
        }
    }
    // The webhook Service exists and the operand container serves the target port.
    find(&objects, "Service", WEBHOOK_SERVICE);
}

/// A structural schema (apiextensions.k8s.io/v1) specifies a type for every node, unless the node
/// preserves unknown fields or is int-or-string; `properties` go with `type: object`, `items` with
/// `type: array`, and `properties` and `additionalProperties` are exclusive.
fn check_structural(node: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(schema) = node.as_object() else {
        errors.push(format!("{path}: not a schema object"));
        return;
    };
    let ty = schema.get("type").and_then(Value::as_str);
    let flag = |k: &str| schema.get(k) == Some(&Value::Bool(true));
    if ty.is_none() && !flag("x-kubernetes-preserve-unknown-fields") && !flag("x-kubernetes-int-or-string") {
        errors.push(format!("{path}: no type"));
    }
    for combinator in ["allOf", "anyOf", "oneOf", "not"] {
        if schema.contains_key(combinator) {
            errors.push(format!("{path}: unexpected {combinator}"));
        }
    }
    if let Some(properties) = schema.get("properties") {
        if ty != Some("object") {
            errors.push(format!("{path}: properties without type object"));
        }
        if schema.contains_key("additionalProperties") {
            errors.push(format!("{path}: both properties and additionalProperties"));
        }
        let properties = properties.as_object().unwrap();
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !properties.contains_key(required.as_str().unwrap_or_default()) {
                errors.push(format!("{path}: required {required} is not a property"));
            }
        }
        for (name, child) in properties {
            check_structural(child, &format!("{path}.{name}"), errors);
        }
    }
    if let Some(items) = schema.get("items") {
        if ty != Some("array") {
            errors.push(format!("{path}: items without type array"));
        }
        check_structural(items, &format!("{path}[]"), errors);
    } else if ty == Some("array") {
        errors.push(format!("{path}: array without items"));
    }
    if let Some(additional) = schema.get("additionalProperties") {
        if additional.is_object() {
            check_structural(additional, &format!("{path}{{*}}"), errors);
        }
    }
}

fn crd_versions<'a>(objects: &'a [(String, Value)], name: &str) -> (&'a Value, &'a Vec<Value>) {
    let crd = find(objects, "CustomResourceDefinition", name);
    (crd, crd["spec"]["versions"].as_array().unwrap())
}

#[test]
fn crds_serve_v1_as_storage_and_v1alpha1_with_structural_schemas() {
    let objects = apply_objects();
    for (name, kind, plural) in [
        (
            "servicebindings.services.cloud.sap.com",
            "ServiceBinding",
            "servicebindings",
        ),
        (
            "serviceinstances.services.cloud.sap.com",
            "ServiceInstance",
            "serviceinstances",
        ),
    ] {
        let (crd, versions) = crd_versions(&objects, name);
        assert_eq!(crd["spec"]["group"], "services.cloud.sap.com");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["plural"], plural);
        assert_ne!(
            crd["spec"]["conversion"]["strategy"], "Webhook",
            "{name}: no conversion webhook"
        );
        let flags: Vec<(&str, bool, bool)> = versions
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap(),
                    v["served"].as_bool().unwrap(),
                    v["storage"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(flags, [("v1", true, true), ("v1alpha1", true, false)], "{name}");
        for v in versions {
            let at = format!("{name} {}", v["name"].as_str().unwrap());
            assert_eq!(
                v["subresources"]["status"],
                serde_json::json!({}),
                "{at}: status subresource"
            );
            let schema = &v["schema"]["openAPIV3Schema"];
            assert_eq!(schema["type"], "object", "{at}");
            assert_eq!(
                schema["properties"]["metadata"],
                serde_json::json!({"type": "object"}),
                "{at}"
            );
            let mut errors = Vec::new();
            check_structural(schema, &at, &mut errors);
            assert!(errors.is_empty(), "not structural:\n{}", errors.join("\n"));
        }
    }
}

/// Every field of `node` (its properties, and the objects an array holds), below `path`, without a description.
fn undescribed(node: &Value, path: &str, out: &mut Vec<String>) {
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        let at = format!("{path}.{name}");
        // `metadata` is the API server's ObjectMeta: a CRD may say nothing about it but its type.
        if path.is_empty() && name == "metadata" {
            continue;
        }
        if child["description"]
            .as_str()
            .is_none_or(|d| d.split_whitespace().count() < 3)
        {
            out.push(at.clone());
        }
        undescribed(child, &at, out);
    }
    for nested in [&node["items"], &node["additionalProperties"]] {
        if nested["properties"].is_object() {
            if !nested["description"].is_string() {
                out.push(format!("{path}[]"));
            }
            undescribed(nested, &format!("{path}[]"), out);
        }
    }
}

/// A fresh install's operand CRDs explain every field (`kubectl explain serviceinstances.spec`), in our own
/// words (docs/behaviour.md#apply: a cluster whose CRDs have the chart's words keeps them).
#[test]
fn every_field_of_the_operand_crds_is_explained() {
    let objects = apply_objects();
    for name in [
        "servicebindings.services.cloud.sap.com",
        "serviceinstances.services.cloud.sap.com",
    ] {
        let (_, versions) = crd_versions(&objects, name);
        for v in versions {
            let schema = &v["schema"]["openAPIV3Schema"];
            let at = format!("{name} {}", v["name"].as_str().unwrap());
            assert!(schema["description"].is_string(), "{at}: the kind itself");
            let mut missing = Vec::new();
            undescribed(schema, "", &mut missing);
            assert!(missing.is_empty(), "{at}: fields without a description: {missing:?}");
        }
    }
}

fn columns(version: &Value) -> Vec<(&str, &str, i64)> {
    version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["jsonPath"].as_str().unwrap(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn service_instance_crd_has_the_documented_api_shape() {
    let objects = apply_objects();
    let (_, versions) = crd_versions(&objects, "serviceinstances.services.cloud.sap.com");
    let v1 = &versions[0];
    assert_eq!(
        columns(v1),
        [
            ("Offering", ".spec.serviceOfferingName", 0),
            ("Plan", ".spec.servicePlanName", 0),
            ("shared", ".spec.shared", 0),
            ("dataCenter", ".spec.dataCenter", 0),
            ("Status", ".status.conditions[0].reason", 0),
            ("Ready", ".status.ready", 0),
            ("Age", ".metadata.creationTimestamp", 0),
            ("ID", ".status.instanceID", 1),
            ("Message", ".status.conditions[0].message", 1),
        ]
    );
    let root = &v1["schema"]["openAPIV3Schema"]["properties"];
    let spec = &root["spec"];
    assert_eq!(
        spec["required"],
        serde_json::json!(["serviceOfferingName", "servicePlanName"])
    );
    let p = &spec["properties"];
    assert_eq!(p["serviceOfferingName"]["minLength"], 1);
    assert_eq!(p["servicePlanName"]["minLength"], 1);
    for (field, ty) in [
        ("servicePlanID", "string"),
        ("externalName", "string"),
        ("parameters", "object"),
        ("parametersFrom", "array"),
        ("watchParametersFromChanges", "boolean"),
        ("customTags", "array"),
        ("userInfo", "object"),
        ("shared", "boolean"),
        ("dataCenter", "string"),
        ("btpAccessCredentialsSecret", "string"),
    ] {
        assert_eq!(p[field]["type"], ty, "spec.{field}");
    }
    assert_eq!(p["parameters"]["x-kubernetes-preserve-unknown-fields"], true);
    let secret_key_ref = &p["parametersFrom"]["items"]["properties"]["secretKeyRef"];
    assert_eq!(secret_key_ref["properties"]["name"]["type"], "string");
    assert_eq!(secret_key_ref["properties"]["key"]["type"], "string");
    for field in ["username", "uid", "groups", "extra"] {
        assert!(p["userInfo"]["properties"][field].is_object(), "userInfo.{field}");
    }

    let status = &root["status"];
    assert_eq!(status["required"], serde_json::json!(["conditions"]));
    for field in [
        "conditions",
        "instanceID",
        "operationURL",
        "operationType",
        "observedGeneration",
        "ready",
        "tags",
        "subaccountID",
        "hashedSpec",
        "forceReconcile",
    ] {
        assert!(status["properties"][field].is_object(), "status.{field}");
    }
    assert_eq!(status["properties"]["ready"]["type"], "string");
    assert_condition_items(&status["properties"]["conditions"]);
}

#[test]
fn service_binding_crd_has_the_documented_api_shape() {
    let objects = apply_objects();
    let (_, versions) = crd_versions(&objects, "servicebindings.services.cloud.sap.com");
    let v1 = &versions[0];
    assert_eq!(
        columns(v1),
        [
            ("Instance", ".spec.serviceInstanceName", 0),
            ("Status", ".status.conditions[0].reason", 0),
            ("Ready", ".status.ready", 0),
            ("Age", ".metadata.creationTimestamp", 0),
            ("ID", ".status.bindingID", 1),
            ("Message", ".status.conditions[0].message", 1),
        ]
    );
    let root = &v1["schema"]["openAPIV3Schema"]["properties"];
    let spec = &root["spec"];
    assert_eq!(spec["required"], serde_json::json!(["serviceInstanceName"]));
    let p = &spec["properties"];
    assert_eq!(p["serviceInstanceName"]["minLength"], 1);
    assert_eq!(p["externalName"]["maxLength"], 100);
    for field in [
        "serviceInstanceNamespace",
        "secretName",
        "secretKey",
        "secretRootKey",
        "secretTemplate",
    ] {
        assert_eq!(p[field]["type"], "string", "spec.{field}");
    }
    assert_eq!(p["parameters"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(p["parametersFrom"]["type"], "array");
    assert_eq!(p["userInfo"]["type"], "object");
    let rotation = &p["credentialsRotationPolicy"];
    assert_eq!(rotation["required"], serde_json::json!(["enabled"]));
    assert_eq!(rotation["properties"]["enabled"]["type"], "boolean");
    assert_eq!(rotation["properties"]["rotationFrequency"]["type"], "string");
    assert_eq!(rotation["properties"]["rotatedBindingTTL"]["type"], "string");

    let status = &root["status"];
    assert_eq!(status["required"], serde_json::json!(["conditions"]));
    for field in [
        "conditions",
        "instanceID",
        "bindingID",
        "operationURL",
        "operationType",
        "ready",
        "observedGeneration",
        "lastCredentialsRotationTime",
        "asyncBindFailed",
        "subaccountID",
    ] {
        assert!(status["properties"][field].is_object(), "status.{field}");
    }
    assert_condition_items(&status["properties"]["conditions"]);
}

fn assert_condition_items(conditions: &Value) {
    assert_eq!(conditions["type"], "array");
    let item = &conditions["items"];
    assert_eq!(
        item["required"],
        serde_json::json!(["lastTransitionTime", "message", "reason", "status", "type"])
    );
    assert_eq!(
        item["properties"]["status"]["enum"],
        serde_json::json!(["True", "False", "Unknown"])
    );
    assert_eq!(item["properties"]["lastTransitionTime"]["format"], "date-time");
}

#[test]
fn configmap_and_secret_carry_the_documented_keys() {
    let objects = apply_objects();
    let operand_label = "services.cloud.sap.com/managed-by-sap-btp-operator";

    let cm = find(&objects, "ConfigMap", "sap-btp-operator-config");
    assert_eq!(cm["metadata"]["labels"][operand_label], "true");
    let mut keys: Vec<&String> = cm["data"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "ALLOW_CLUSTER_ACCESS",
            "CLUSTER_ID",
            "ENABLE_LIMITED_CACHE",
            "MANAGEMENT_NAMESPACE",
            "RELEASE_NAMESPACE"
        ]
    );
    assert_eq!(cm["data"]["ALLOW_CLUSTER_ACCESS"], "true");

    let secret = find(&objects, "Secret", "sap-btp-service-operator");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["metadata"]["labels"][operand_label], "true");
    let data = secret["data"].as_object().unwrap();
    let mut keys: Vec<&String> = data.keys().collect();
    keys.sort();
    assert_eq!(keys, ["clientid", "sm_url", "tokenurl", "tokenurlsuffix"]);
    let decoded = |k: &str| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data[k].as_str().unwrap())
            .unwrap_or_else(|e| panic!("Secret data {k} is not base64: {e}"));
        String::from_utf8(bytes).unwrap()
    };
    assert_eq!(decoded("tokenurl"), "");
    assert_eq!(decoded("tokenurlsuffix"), "/oauth/token");
    decoded("clientid");
    decoded("sm_url");
}

#[test]
fn rbac_grants_the_documented_rules_to_the_operand_service_account() {
    let objects = apply_objects();
    let all = ["create", "delete", "get", "list", "patch", "update", "watch"];
    // What the rules grant, as (group, resource, verb); their order and grouping are the chart's
    // (tests/chart_facts.rs).
    let grants = |rules: &Value| {
        let mut set = std::collections::BTreeSet::new();
        for rule in rules.as_array().unwrap() {
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        set.insert((g.to_string(), r.to_string(), v.to_string()));
                    }
                }
            }
        }
        set
    };
    let cluster_role = find(&objects, "ClusterRole", "sap-btp-operator-manager-role");
    assert_eq!(
        grants(&cluster_role["rules"]),
        grants(&serde_json::json!([
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "list", "update"]},
            {"apiGroups": [""], "resources": ["events", "secrets"], "verbs": all},
            {"apiGroups": ["services.cloud.sap.com"], "resources": ["servicebindings", "serviceinstances"], "verbs": all},
            {
                "apiGroups": ["services.cloud.sap.com"],
                "resources": ["servicebindings/status", "serviceinstances/status"],
                "verbs": ["get", "patch", "update"],
            },
        ]))
    );
    let role = find(&objects, "Role", "sap-btp-operator-leader-election-role");
    assert_eq!(
        grants(&role["rules"]),
        grants(&serde_json::json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": all},
            {"apiGroups": [""], "resources": ["configmaps/status"], "verbs": ["get", "patch", "update"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ]))
    );
    let subject =
        serde_json::json!([{"kind": "ServiceAccount", "name": "sap-btp-operator", "namespace": "kyma-system"}]);
    for (kind, name, role_kind, role_name) in [
        (
            "ClusterRoleBinding",
            "sap-btp-operator-manager-rolebinding",
            "ClusterRole",
            "sap-btp-operator-manager-role",
        ),
        (
            "RoleBinding",
            "sap-btp-operator-leader-election-rolebinding",
            "Role",
            "sap-btp-operator-leader-election-role",
        ),
    ] {
        let binding = find(&objects, kind, name);
        assert_eq!(binding["subjects"], subject, "{name}");
        assert_eq!(binding["roleRef"]["kind"], role_kind, "{name}");
        assert_eq!(binding["roleRef"]["name"], role_name, "{name}");
        assert_eq!(binding["roleRef"]["apiGroup"], "rbac.authorization.k8s.io", "{name}");
    }
    find(&objects, "ServiceAccount", "sap-btp-operator");
}

/// Collects every `labels` / `matchLabels` map in an object.
fn label_maps<'a>(node: &'a Value, out: &mut Vec<&'a serde_json::Map<String, Value>>) {
    match node {
        Value::Object(map) => {
            for (k, v) in map {
                if let (true, Some(labels)) = (k == "labels" || k == "matchLabels", v.as_object()) {
                    out.push(labels);
                }
                label_maps(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| label_maps(v, out)),
        _ => {}
    }
}

#[test]
fn no_manifest_hard_codes_the_labels_the_manager_adds() {
    for path in manifest_files(&resources().join("apply")) {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("app.kubernetes.io/managed-by"),
            "{}: app.kubernetes.io/managed-by is added by the manager",
            path.display()
        );
    }
    for (file, o) in apply_objects() {
        let mut maps = Vec::new();
        label_maps(&o, &mut maps);
        for labels in maps {
            for key in [
                "app.kubernetes.io/managed-by",
                "chart-version",
                "kyma-project.io/module",
            ] {
                assert!(
                    !labels.contains_key(key),
                    "{file}: {} {} has label {key}",
                    o["kind"],
                    o["metadata"]["name"]
                );
            }
        }
    }
}

#[test]
fn chart_version_and_delete_directory() {
    let version = std::fs::read_to_string(resources().join("chart-version")).unwrap();
    assert_eq!(version, "v0.11.10\n");
    let delete = resources().join("delete");
    assert!(delete.is_dir(), "module-resources/delete must exist");
    // Whatever delete/ lists must be loadable objects naming what to delete.
    for path in manifest_files(&delete) {
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_saphyr::from_multiple::<Value>(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .into_iter()
            .filter(|d| !d.is_null())
        {
            assert!(
                doc["apiVersion"].is_string() && doc["kind"].is_string() && doc["metadata"]["name"].is_string(),
                "{}: {doc}",
                path.display()
            );
        }
    }
}
