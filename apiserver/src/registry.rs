//! Resource registry: built-in resources, CRD-registered resources and discovery documents.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// One served version of a resource.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionDef {
    pub name: String,
    pub has_status: bool,
    /// CRD `additionalPrinterColumns` (raw), used for `kubectl get` tables.
    pub columns: Vec<Value>,
    /// A CRD version's `schema.openAPIV3Schema` (validation, pruning, list types; see `crate::schema`).
    pub schema: Option<Value>,
}

/// A resource type (version independent; objects are stored once per group+resource).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub versions: Vec<VersionDef>,
    /// Defined by a CustomResourceDefinition.
    pub crd: bool,
}

impl ResourceDef {
    pub fn version(&self, v: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|x| x.name == v)
    }
    pub fn has_status(&self, v: &str) -> bool {
        self.version(v).map(|x| x.has_status).unwrap_or(false)
    }
    pub fn api_version(&self, v: &str) -> String {
        if self.group.is_empty() {
            v.to_string()
        } else {
            format!("{}/{}", self.group, v)
        }
    }
    /// Only Deployments have a `scale` subresource here.
    pub fn has_scale(&self) -> bool {
        self.group == "apps" && self.plural == "deployments"
    }
    pub fn key(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }
}

pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceDef {
    ResourceDef {
        group: group.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: vec![],
        versions: vec![VersionDef {
            name: version.into(),
            has_status: status,
            columns: vec![],
            schema: None,
        }],
        crd: false,
    }
}

pub fn builtins() -> Vec<ResourceDef> {
    let mut v = builtin_list();
    for d in v.iter_mut() {
        if matches!(d.plural.as_str(), "pods" | "services" | "deployments") {
            d.categories = vec!["all".into()];
        }
        // `kubectl get events`: type, reason, object and message, not just names.
        if d.group.is_empty() && d.plural == crate::events::PLURAL {
            for v in d.versions.iter_mut() {
                v.columns = crate::events::core_columns();
            }
        }
    }
    v
}

fn builtin_list() -> Vec<ResourceDef> {
    vec![
        builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true),
        builtin("", "v1", "secrets", "Secret", true, &[], false),
        builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
        builtin("", "v1", "services", "Service", true, &["svc"], true),
        builtin("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"], false),
        builtin("", "v1", "events", "Event", true, &["ev"], false),
        builtin("", "v1", "pods", "Pod", true, &["po"], true),
        builtin("", "v1", "endpoints", "Endpoints", true, &["ep"], false),
        builtin("apps", "v1", "deployments", "Deployment", true, &["deploy"], true),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            false,
        ),
        builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", true, &[], false),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            false,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
            false,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
        ),
        builtin("coordination.k8s.io", "v1", "leases", "Lease", true, &[], false),
        builtin(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
            false,
        ),
        builtin("events.k8s.io", "v1", "events", "Event", true, &["ev"], false),
        // `default/kubernetes`'s slices name the API server's endpoint port (the network policies follow it).
        builtin(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
            &[],
            false,
        ),
        // Create only: answered from RBAC, never stored (`access::review`).
        builtin(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            &[],
            false,
        ),
        // `deploy/` ships one (at least one manager serving the webhooks through voluntary disruptions).
        builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            true,
        ),
        // `deploy/` ships one (the manager's and the operand's Pods' priority).
        builtin(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
            &["pc"],
            false,
        ),
    ]
}

/// Thread-safe registry keyed by (group, plural).
#[derive(Default)]
pub struct Registry {
    defs: RwLock<BTreeMap<(String, String), Arc<ResourceDef>>>,
}

impl Registry {
    pub fn new() -> Self {
        let r = Registry::default();
        for d in builtins() {
            r.insert(d);
        }
        r
    }

    pub fn insert(&self, d: ResourceDef) {
        if let Ok(mut m) = self.defs.write() {
            m.insert(d.key(), Arc::new(d));
        }
    }

    pub fn remove(&self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs.write().ok()?.remove(&(group.to_string(), plural.to_string()))
    }

    pub fn get(&self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .read()
            .ok()?
            .get(&(group.to_string(), plural.to_string()))
            .cloned()
    }

    /// Resource served at group/version/plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.get(group, plural).filter(|d| d.version(version).is_some())
    }

    /// Resource for a group/version/kind.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        self.all()
            .into_iter()
            .find(|d| d.group == group && d.kind == kind && d.version(version).is_some())
    }

    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.defs
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// group -> ordered versions (preferred first).
    fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut g: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in self.all() {
            let e = g.entry(d.group.clone()).or_default();
            for v in &d.versions {
                if !e.contains(&v.name) {
                    e.push(v.name.clone());
                }
            }
        }
        for vs in g.values_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        g
    }

    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .filter(|(g, _)| !g.is_empty())
            .map(|(g, vs)| group_doc(&g, &vs))
            .collect();
        json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
    }

    pub fn api_group(&self, group: &str) -> Option<Value> {
        let vs = self.groups().remove(group)?;
        let mut d = group_doc(group, &vs);
        d["kind"] = json!("APIGroup");
        d["apiVersion"] = json!("v1");
        Some(d)
    }

    pub fn api_resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let mut resources = vec![];
        for d in self.all() {
            if d.group != group {
                continue;
            }
            let Some(v) = d.version(version) else {
                continue;
            };
            let mut r = json!({
                "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
                "kind": d.kind, "verbs": VERBS,
            });
            if !d.short_names.is_empty() {
                r["shortNames"] = json!(d.short_names);
            }
            if !d.categories.is_empty() {
                r["categories"] = json!(d.categories);
            }
            resources.push(r);
            if v.has_status {
                resources.push(json!({
                    "name": format!("{}/status", d.plural), "singularName": "",
                    "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get", "patch", "update"],
                }));
            }
            if d.has_scale() {
                resources.push(json!({
                    "name": format!("{}/scale", d.plural), "singularName": "",
                    "namespaced": d.namespaced, "group": "autoscaling", "version": "v1",
                    "kind": "Scale", "verbs": ["get", "patch", "update"],
                }));
            }
        }
        if resources.is_empty() {
            return None;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources,
        }))
    }
}

impl Registry {
    /// `/openapi/v3` root: one entry per group/version.
    pub fn openapi_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for (g, vs) in self.groups() {
            for v in vs {
                let p = if g.is_empty() {
                    format!("api/{v}")
                } else {
                    format!("apis/{g}/{v}")
                };
                paths.insert(
                    p.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", self.all().len())}),
                );
            }
        }
        json!({ "paths": paths })
    }

    /// A minimal OpenAPI v3 document for one group/version: only PATCH operations with their
    /// `x-kubernetes-group-version-kind` and the `fieldValidation` parameter (no schemas). This
    /// tells kubectl that the server validates fields, so it skips client-side validation.
    pub fn openapi_gv(&self, group: &str, version: &str) -> Option<Value> {
        let mut paths = serde_json::Map::new();
        for d in self.all() {
            if d.group != group || d.version(version).is_none() {
                continue;
            }
            let base = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            let p = if d.namespaced {
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
            } else {
                format!("{base}/{}/{{name}}", d.plural)
            };
            paths.insert(
                p,
                json!({"patch": {
                    "operationId": format!("patch{}", d.kind),
                    "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": d.kind},
                    "x-kubernetes-action": "patch",
                    "parameters": [
                        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
                    ],
                    "responses": {"200": {"description": "OK"}},
                }}),
            );
        }
        if paths.is_empty() {
            return None;
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0-btp-apiserver"},
            "paths": paths,
            "components": {"schemas": {}},
        }))
    }
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v }))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": vs, "preferredVersion": preferred })
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major: u32 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (stage, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<u32>() {
        Ok(n) => (stage, major, n),
        Err(_) => (0, 0, 0),
    }
}

/// Builds a ResourceDef from a CRD object; returns an error message on invalid specs.
pub fn def_from_crd(crd: &Value) -> Result<ResourceDef, String> {
    let spec = crd.get("spec").ok_or("spec is required")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("spec.group is required")?;
    let names = spec.get("names").ok_or("spec.names is required")?;
    let s = |k: &str| names.get(k).and_then(Value::as_str).map(str::to_string);
    let plural = s("plural").ok_or("spec.names.plural is required")?;
    let kind = s("kind").ok_or("spec.names.kind is required")?;
    let singular = s("singular").unwrap_or_else(|| kind.to_lowercase());
    let list_kind = s("listKind").unwrap_or_else(|| format!("{kind}List"));
    let strs = |k: &str| -> Vec<String> {
        names
            .get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err("spec.scope: Unsupported value: must be Namespaced or Cluster".into()),
    };
    let name = crd
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let mut versions = vec![];
    for v in spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("spec.versions is required")?
    {
        let vname = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or("spec.versions[].name is required")?;
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let has_status = v.get("subresources").and_then(|s| s.get("status")).is_some();
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        versions.push(VersionDef {
            name: vname.into(),
            has_status,
            columns,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
        });
    }
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
    Ok(ResourceDef {
        group: group.into(),
        plural,
        singular,
        kind,
        list_kind,
        namespaced,
        short_names: strs("shortNames"),
        categories: strs("categories"),
        versions,
        crd: true,
    })
}
