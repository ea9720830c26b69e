//! Module resources (docs/behaviour.md#module-resources, #preparation): preparing the objects to apply, pure.
//! Loading `module-resources/` is [`crate::manifests`]'s (re-exported here).

use super::credentials::Credentials;
use base64::Engine as _;
use btp_api::names;
use serde_json::{json, Map, Value};

pub use crate::manifests::{
    module_resources as load, module_resources_from_files as from_files, LoadError, ModuleResources,
};
pub use btp_api::names::operand::{CONFIGMAP as OPERAND_CONFIGMAP, SECRET as OPERAND_SECRET};
/// Container that gets the operand image.
pub const MANAGER_CONTAINER: &str = "manager";
/// Optional sidecar that gets the `KUBE_RBAC_PROXY` image.
pub const RBAC_PROXY_CONTAINER: &str = "kube-rbac-proxy";

pub use super::kinds::is_cluster_scoped;

pub mod containment;
pub mod crd_schema;

use containment::contains;

/// What preparation needs besides the manifests.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// Operand namespace.
    pub chart_namespace: &'a str,
    /// Operand Deployment name.
    pub deployment_name: &'a str,
    /// From the required Secret.
    pub credentials: &'a Credentials,
    /// `ENABLE_LIMITED_CACHE`.
    pub enable_limited_cache: &'a str,
    /// Image for the `manager` container.
    pub image: &'a str,
    /// Image for a `kube-rbac-proxy` container, if the manifests have one.
    pub rbac_proxy_image: Option<&'a str>,
    /// PEM to inject into every operand webhook `caBundle` (None leaves the manifests' value).
    pub ca_bundle: Option<&'a [u8]>,
    /// Extra objects to apply after the manifests with the same labels (network policies).
    pub extra: &'a [Value],
    /// Objects we create that are not part of the chart (the operand's certificate Secrets): labelled
    /// managed-by and module, but without `chart-version`.
    pub unversioned: &'a [Value],
    /// The kinds as the API server serves them ([`super::kinds`]); None: the built-in table.
    pub kinds: Option<&'a super::kinds::Kinds>,
}

/// Preparation failed: the manifests do not have what the manager needs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrepareError {
    /// A mandatory object is missing.
    #[error("module resources lack the {kind} {name}")]
    Missing {
        /// Kind.
        kind: &'static str,
        /// Name.
        name: String,
    },
    /// The Deployment has no `manager` container.
    #[error("Deployment {0} has no container named manager")]
    NoManagerContainer(String),
}

fn is(obj: &Value, kind: &str, name: &str) -> bool {
    obj["kind"] == kind && obj["metadata"]["name"] == name
}

fn set_labels(target: &mut Value, labels: &[(&str, &str)]) {
    if !target.is_object() {
        return;
    }
    let meta = &mut target["metadata"];
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    for (k, v) in labels {
        meta["labels"][*k] = json!(v);
    }
}

/// The objects to apply, in order: manifests and extras, then webhook configurations last.
pub fn prepare(resources: &ModuleResources, inputs: &Inputs<'_>) -> Result<Vec<Value>, PrepareError> {
    for (kind, name) in [
        ("ConfigMap", OPERAND_CONFIGMAP),
        ("Secret", OPERAND_SECRET),
        ("Deployment", inputs.deployment_name),
    ] {
        if !resources.apply.iter().any(|o| is(o, kind, name)) {
            return Err(PrepareError::Missing {
                kind,
                name: name.to_string(),
            });
        }
    }
    let labels = [
        (names::MANAGED_BY_LABEL, names::MANAGED_BY_BTP_MANAGER),
        (names::CHART_VERSION_LABEL, resources.chart_version.as_str()),
        (names::MODULE_LABEL, names::MODULE_NAME),
    ];
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut objects = Vec::new();
    let mut webhooks = Vec::new();
    let unversioned_labels = [labels[0], labels[2]];
    let all = resources.apply.iter().chain(inputs.extra).map(|o| (o, &labels[..]));
    for (original, labels) in all.chain(inputs.unversioned.iter().map(|o| (o, &unversioned_labels[..]))) {
        let mut obj = original.clone();
        set_labels(&mut obj, labels);
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let cluster_scoped = match inputs.kinds {
            Some(kinds) => kinds.cluster_scoped(&api_version, &kind),
            None => is_cluster_scoped(&kind),
        };
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("creationTimestamp");
            if cluster_scoped {
                meta.remove("namespace");
            } else {
                meta.insert("namespace".into(), json!(inputs.chart_namespace));
            }
        }
        if is(&obj, "ConfigMap", OPERAND_CONFIGMAP) {
            if !obj["data"].is_object() {
                obj["data"] = json!({});
            }
            let ns = inputs.credentials.credentials_namespace.as_str();
            obj["data"]["CLUSTER_ID"] = json!(inputs.credentials.cluster_id);
            obj["data"]["RELEASE_NAMESPACE"] = json!(ns);
            obj["data"]["MANAGEMENT_NAMESPACE"] = json!(ns);
            obj["data"]["ENABLE_LIMITED_CACHE"] = json!(inputs.enable_limited_cache);
        }
        if is(&obj, "Secret", OPERAND_SECRET) {
            obj["metadata"]["namespace"] = json!(inputs.credentials.credentials_namespace);
            if !obj["data"].is_object() {
                obj["data"] = json!({});
            }
            for (k, v) in inputs.credentials.operand_secret_data() {
                obj["data"][k.as_str()] = json!(b64.encode(v));
            }
        }
        if is(&obj, "Deployment", inputs.deployment_name) {
            set_deployment_images(&mut obj, inputs)?;
            let template = &mut obj["spec"]["template"];
            if template.is_object() {
                set_labels(template, &[(names::MODULE_LABEL, names::MODULE_NAME)]);
            }
        }
        if kind == "ClusterRoleBinding" || kind == "RoleBinding" {
            // The operand's ServiceAccount lives in the chart namespace.
            for subject in obj["subjects"].as_array_mut().into_iter().flatten() {
                if subject["kind"] == "ServiceAccount" {
                    subject["namespace"] = json!(inputs.chart_namespace);
                }
            }
        }
        if kind == "MutatingWebhookConfiguration" || kind == "ValidatingWebhookConfiguration" {
            for hook in obj["webhooks"].as_array_mut().into_iter().flatten() {
                let Some(cc) = hook.get_mut("clientConfig").and_then(Value::as_object_mut) else {
                    continue;
                };
                // The operand's webhook Service lives in the chart namespace.
                if let Some(service) = cc.get_mut("service").and_then(Value::as_object_mut) {
                    service.insert("namespace".into(), json!(inputs.chart_namespace));
                }
                if let Some(bundle) = inputs.ca_bundle {
                    cc.insert("caBundle".into(), json!(b64.encode(bundle)));
                }
            }
            webhooks.push(obj);
        } else {
            objects.push(obj);
        }
    }
    objects.extend(webhooks);
    Ok(objects)
}

fn set_deployment_images(obj: &mut Value, inputs: &Inputs<'_>) -> Result<(), PrepareError> {
    let name = inputs.deployment_name.to_string();
    let containers = obj["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .ok_or_else(|| PrepareError::NoManagerContainer(name.clone()))?;
    let mut found = false;
    for c in containers.iter_mut().filter_map(Value::as_object_mut) {
        match c.get("name").and_then(Value::as_str) {
            Some(MANAGER_CONTAINER) => {
                c.insert("image".into(), json!(inputs.image));
                found = true;
            }
            Some(RBAC_PROXY_CONTAINER) => {
                if let Some(image) = inputs.rbac_proxy_image {
                    c.insert("image".into(), json!(image));
                }
            }
            _ => {}
        }
    }
    found.then_some(()).ok_or(PrepareError::NoManagerContainer(name))
}

/// Whether `live` already holds everything `desired` sets, so that applying `desired` would change nothing.
///
/// Server-side apply of an unchanged object writes nothing on current API servers, but Kubernetes 1.24
/// re-writes webhook configurations on every apply (only `managedFields[].time` changes, yet the
/// resourceVersion moves, and every watcher wakes up). Comparing first keeps a steady-state reconcile free
/// of writes everywhere. The comparison is containment: every field of `desired` must be in `live` with
/// an equal value (objects by key, arrays element by element with equal length); fields only `live` has
/// (defaults, status, other managers' fields) do not matter. `metadata.namespace` of a cluster-scoped
/// object is ignored (the API server drops it). `apiVersion` and `kind` are not compared: `live` was read
/// as that kind, and a real API server leaves them out of the items of a list (an object a watch store
/// holds from its initial list has neither; one from a watch event has both). A value the server normalises
/// differently (say a quantity) only costs an apply.
///
/// A CustomResourceDefinition's schemas are the exception ([`crd_schema`]): each is one atomic value for
/// server-side apply, compared by behaviour (equal without the text that changes none), so that a stored
/// schema in other words (the chart's descriptions) is not replaced by ours.
pub fn already_applied(live: &Value, desired: &Value) -> bool {
    let kind = desired.get("kind").and_then(Value::as_str).unwrap_or_default();
    let cluster_scoped = is_cluster_scoped(kind);
    // Everything but `apiVersion` and `kind` (and a cluster-scoped object's namespace), compared in place: a
    // copy of each desired object (two CRDs of thousands of schema nodes among them) cost more than the
    // comparison, on every pass.
    let Value::Object(top) = desired else {
        return contains(live, desired);
    };
    top.iter()
        .filter(|(key, _)| !matches!(key.as_str(), "apiVersion" | "kind"))
        .all(|(key, wanted)| {
            let Some(stored) = live.get(key) else {
                return false;
            };
            match (key.as_str(), wanted) {
                ("metadata", Value::Object(meta)) if cluster_scoped => meta
                    .iter()
                    .filter(|(key, _)| key.as_str() != "namespace")
                    .all(|(key, wanted)| stored.get(key).is_some_and(|stored| contains(stored, wanted))),
                ("spec", _) if kind == "CustomResourceDefinition" => crd_schema::spec_applied(stored, wanted),
                _ => contains(stored, wanted),
            }
        })
}

/// `(apiVersion, kind, namespace, name)` of an object, for API calls.
pub fn identity(obj: &Value) -> (String, String, Option<String>, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let meta: &Map<String, Value> = match obj["metadata"].as_object() {
        Some(m) => m,
        None => return (s(&obj["apiVersion"]), s(&obj["kind"]), None, String::new()),
    };
    let ns = meta.get("namespace").and_then(Value::as_str).map(str::to_string);
    (
        s(&obj["apiVersion"]),
        s(&obj["kind"]),
        ns,
        meta.get("name").map(s).unwrap_or_default(),
    )
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
