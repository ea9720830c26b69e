//! The Kyma dashboard (Busola) extension in `deploy/dashboard/`: it parses as Busola reads it, names the
//! BtpOperator's group, version and kind, shows only fields that exist in the CRD's schema, and calls only
//! data sources it defines, of kinds that exist.

use btp_api::BtpOperator;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn extension() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/dashboard/busola-extension.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/dashboard/busola-extension.yaml");
    serde_saphyr::from_str(&text).expect("the extension is YAML")
}

/// A section of the ConfigMap (Busola reads each as YAML or JSON).
fn section(name: &str) -> Value {
    let ext = extension();
    let text = ext["data"][name]
        .as_str()
        .unwrap_or_else(|| panic!("data.{name} is there"));
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("data.{name} is YAML: {e}"))
}

/// Every `source` (and `filter`) expression of a list of widgets, recursively.
fn expressions(widgets: &Value, out: &mut Vec<String>) {
    match widgets {
        Value::Array(items) => items.iter().for_each(|w| expressions(w, out)),
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("source" | "filter", Value::String(s)) => out.push(s.clone()),
                    _ => expressions(v, out),
                }
            }
        }
        _ => {}
    }
}

/// The paths into the BtpOperator an expression reads: `spec…`/`status…`/`metadata…` chains that do not hang
/// off something else (`$dataSource().status` reads another object), with filters (`[type='Ready']`)
/// dropped.
fn cr_paths(expression: &str) -> Vec<String> {
    let bytes = expression.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || matches!(bytes[i - 1], b'.' | b'_' | b'$' | b'`'));
        let rest = &expression[i..];
        let root = ["spec", "status", "metadata"].into_iter().find(|r| {
            rest.starts_with(r) && !rest[r.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        });
        match root {
            Some(root) if boundary => {
                let mut path = root.to_string();
                let mut j = i + root.len();
                loop {
                    if expression[j..].starts_with('[') {
                        match expression[j..].find(']') {
                            Some(end) => j += end + 1,
                            None => break,
                        }
                    } else if expression[j..].starts_with('.') {
                        let name: String = expression[j + 1..]
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if name.is_empty() {
                            break;
                        }
                        path.push('.');
                        path.push_str(&name);
                        j += 1 + name.len();
                    } else {
                        break;
                    }
                }
                out.push(path);
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

/// Whether `path` (dotted, arrays stepped through) exists in the CRD's schema; `metadata` is ObjectMeta.
fn in_schema(schema: &Value, path: &str) -> bool {
    let mut parts = path.split('.');
    if path.starts_with("metadata") {
        let known = [
            "name",
            "namespace",
            "labels",
            "annotations",
            "creationTimestamp",
            "generation",
            "finalizers",
            "uid",
        ];
        return parts.nth(1).is_none_or(|field| known.contains(&field));
    }
    let mut node = schema;
    for part in parts {
        while node["type"] == "array" {
            node = &node["items"];
        }
        match node["properties"].get(part) {
            Some(next) => node = next,
            None => return false,
        }
    }
    true
}

#[test]
fn the_extension_is_a_busola_resource_extension_for_btpoperator() {
    let ext = extension();
    assert_eq!(ext["kind"], "ConfigMap");
    assert_eq!(ext["metadata"]["labels"]["busola.io/extension"], "resource");
    assert!(ext["metadata"]["labels"]["busola.io/extension-version"].is_string());
    let general = section("general");
    let crd = serde_json::to_value(BtpOperator::crd().unwrap()).unwrap();
    assert_eq!(general["resource"]["kind"], crd["spec"]["names"]["kind"]);
    assert_eq!(general["resource"]["group"], crd["spec"]["group"]);
    assert_eq!(general["resource"]["version"], crd["spec"]["versions"][0]["name"]);
    assert_eq!(general["urlPath"], crd["spec"]["names"]["plural"]);
    assert_eq!(general["scope"], "namespace");
}

#[test]
fn every_field_of_the_btpoperator_it_shows_exists_in_the_crd_schema() {
    let crd = serde_json::to_value(BtpOperator::crd().unwrap()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut all = Vec::new();
    expressions(&section("list"), &mut all);
    expressions(&section("details"), &mut all);
    let paths: BTreeSet<String> = all.iter().flat_map(|e| cr_paths(e)).collect();
    for expected in ["status.state", "status.conditions.reason", "status.conditions.message"] {
        assert!(paths.contains(expected), "the views show {expected}: {paths:?}");
    }
    let missing: Vec<&String> = paths.iter().filter(|p| !in_schema(schema, p)).collect();
    assert!(missing.is_empty(), "fields not in the BtpOperator schema: {missing:?}");
    // The check itself: a misspelt field is caught, another object's field is not taken for the CR's.
    assert!(!in_schema(schema, "status.stat"));
    assert!(!in_schema(schema, "status.conditions.reasons"));
    assert_eq!(
        cr_paths("$operandDeployment().status.availableReplicas"),
        Vec::<String>::new()
    );
    assert_eq!(
        cr_paths("status.conditions[type='Ready'].reason"),
        vec!["status.conditions.reason".to_string()]
    );
}

#[test]
fn every_data_source_it_calls_is_defined_and_of_a_known_kind() {
    let sources = section("dataSources");
    let defined: BTreeSet<String> = sources.as_object().expect("a map").keys().cloned().collect();
    let mut all = Vec::new();
    expressions(&section("list"), &mut all);
    expressions(&section("details"), &mut all);
    let called: BTreeSet<String> = all
        .iter()
        .flat_map(|e| {
            e.match_indices('$')
                .filter_map(|(i, _)| {
                    let name: String = e[i + 1..].chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
                    e[i + 1 + name.len()..].starts_with("()").then_some(name)
                })
                .collect::<Vec<_>>()
        })
        .filter(|name| !matches!(name.as_str(), "count" | "exists" | "string" | "matchEvents"))
        .collect();
    assert!(!called.is_empty());
    assert!(called.is_subset(&defined), "called {called:?}, defined {defined:?}");
    // ServiceInstances and ServiceBindings in the version the operand's CRDs serve; the rest built in.
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources/apply/crd.yml");
    let crds: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(module).unwrap()).unwrap();
    for (name, source) in sources.as_object().unwrap() {
        let r = &source["resource"];
        let (kind, group, version) = (
            r["kind"].as_str().unwrap(),
            r["group"].as_str().unwrap_or(""),
            r["version"].as_str().unwrap(),
        );
        let known = matches!(
            (kind, group, version),
            ("Deployment", "apps", "v1") | ("Secret", "", "v1")
        ) || crds.iter().any(|c| {
            c["spec"]["names"]["kind"] == kind
                && c["spec"]["group"] == group
                && c["spec"]["versions"]
                    .as_array()
                    .is_some_and(|vs| vs.iter().any(|v| v["name"] == version && v["served"] == true))
        });
        assert!(
            known,
            "data source {name}: {kind} {group}/{version} is not a kind the cluster serves"
        );
    }
}
