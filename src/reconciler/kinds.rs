//! Which API resource each module-resource kind is (docs/behaviour.md#module-resources "Kinds"): its resource
//! name (plural) and whether it is namespaced, from the API server's discovery, cached for the term
//! ([`super::Context::kinds`]). A kind the API server does not serve yet is taken from a CustomResourceDefinition
//! the same manifests install; a kind found in neither is an error naming the kind and where it came from.
//! Without an entry (before anything was resolved, in pure tests) the built-in table of scopes
//! ([`CLUSTER_SCOPED_KINDS`]) and kube's pluralisation answer, as for the shipped manifests.

use kube::api::{ApiResource, GroupVersionKind};
use serde_json::Value;
use std::collections::HashMap;

/// Kinds that are cluster-scoped (applied through cluster-scoped endpoints, without a namespace).
pub const CLUSTER_SCOPED_KINDS: [&str; 7] = [
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "Namespace",
    "PriorityClass",
];

/// Whether objects of `kind` are cluster-scoped.
pub fn is_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED_KINDS.contains(&kind)
}

/// A kind as the API serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindInfo {
    /// The resource name in URLs (`poddisruptionbudgets`).
    pub plural: String,
    /// Whether objects of the kind live in a namespace.
    pub namespaced: bool,
}

/// `(apiVersion, kind)` → what the API server serves for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kinds(HashMap<(String, String), KindInfo>);

/// A kind that neither discovery nor the manifests' CRDs know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the API server serves no kind {kind} in {api_version} (from {source_name}), and no CustomResourceDefinition of the manifests defines it")]
pub struct UnknownKind {
    /// The kind.
    pub kind: String,
    /// Its apiVersion.
    pub api_version: String,
    /// Where it came from: the manifest file, or what the manager adds.
    pub source_name: String,
}

impl Kinds {
    /// What is known of `api_version` `kind`.
    pub fn get(&self, api_version: &str, kind: &str) -> Option<&KindInfo> {
        self.0.get(&(api_version.to_string(), kind.to_string()))
    }

    /// Record `info` for `api_version` `kind`.
    pub fn insert(&mut self, api_version: &str, kind: &str, info: KindInfo) {
        self.0.insert((api_version.to_string(), kind.to_string()), info);
    }

    /// Whether objects of `kind` are cluster-scoped: as discovered, else the built-in table.
    pub fn cluster_scoped(&self, api_version: &str, kind: &str) -> bool {
        match self.get(api_version, kind) {
            Some(info) => !info.namespaced,
            None => is_cluster_scoped(kind),
        }
    }

    /// The API resource of `api_version` `kind`: as discovered, else kube's pluralisation.
    pub fn api_resource(&self, api_version: &str, kind: &str) -> ApiResource {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match self.get(api_version, kind) {
            Some(info) => ApiResource::from_gvk_with_plural(&gvk, &info.plural),
            None => ApiResource::from_gvk(&gvk),
        }
    }
}

/// The kinds a discovery answer for `api_version` lists (subresources left out). Pure.
pub fn from_discovery(
    api_version: &str,
    list: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
) -> Kinds {
    let mut kinds = Kinds::default();
    for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
        kinds.insert(
            api_version,
            &r.kind,
            KindInfo {
                plural: r.name.clone(),
                namespaced: r.namespaced,
            },
        );
    }
    kinds
}

/// The kinds the CustomResourceDefinitions among `objects` define (every served version). Pure.
pub fn from_crds(objects: &[Value]) -> Kinds {
    let mut kinds = Kinds::default();
    for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
        let spec = &crd["spec"];
        let (Some(group), Some(kind), Some(plural)) = (
            spec["group"].as_str(),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            continue;
        };
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        for version in spec["versions"].as_array().into_iter().flatten() {
            if let Some(v) = version["name"].as_str() {
                let info = KindInfo {
                    plural: plural.to_string(),
                    namespaced,
                };
                kinds.insert(&format!("{group}/{v}"), kind, info);
            }
        }
    }
    kinds
}

/// Why resolving kinds failed.
#[derive(Debug, thiserror::Error)]
pub enum KindsError {
    /// A kind nobody knows.
    #[error(transparent)]
    Unknown(#[from] UnknownKind),
    /// Discovery failed (not a 404: that is "not served").
    #[error("discovery of {api_version}: {source}")]
    Discovery {
        /// The apiVersion asked for.
        api_version: String,
        /// The error.
        source: kube::Error,
    },
}

/// Resolve every `(apiVersion, kind, source)` of `wanted` into `known` (the term's cache): one discovery
/// request per apiVersion not yet known, then the manifests' CRDs (`objects`) for what the API server does
/// not serve yet. Returns the resolved kinds. `tolerate_unknown`: a kind nobody knows is left out (a removal
/// has nothing of it to delete) instead of being an error.
pub async fn resolve(
    client: &kube::Client,
    known: &Kinds,
    wanted: &[(String, String, String)],
    objects: &[Value],
    tolerate_unknown: bool,
) -> Result<Kinds, KindsError> {
    let mut kinds = known.clone();
    // Every apiVersion not yet known, asked at once: one round trip for all of them, not one each.
    let mut unknown: Vec<&String> = wanted
        .iter()
        .filter(|(api_version, kind, _)| kinds.get(api_version, kind).is_none())
        .map(|(api_version, _, _)| api_version)
        .collect();
    unknown.sort();
    unknown.dedup();
    let answers = futures::future::join_all(unknown.iter().map(|api_version| async move {
        if api_version.contains('/') {
            super::cluster::retry::retrying(|| client.list_api_group_resources(api_version)).await
        } else {
            super::cluster::retry::retrying(|| client.list_core_api_resources(api_version)).await
        }
    }))
    .await;
    for (api_version, answer) in unknown.into_iter().zip(answers) {
        match answer {
            Ok(list) => kinds.0.extend(from_discovery(api_version, &list).0),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(KindsError::Discovery {
                    api_version: api_version.clone(),
                    source,
                })
            }
        }
    }
    let defined = from_crds(objects);
    for (api_version, kind, source) in wanted {
        if kinds.get(api_version, kind).is_some() {
            continue;
        }
        match defined.get(api_version, kind) {
            Some(info) => kinds.insert(api_version, kind, info.clone()),
            None if tolerate_unknown => {}
            None => {
                return Err(UnknownKind {
                    kind: kind.clone(),
                    api_version: api_version.clone(),
                    source_name: source.clone(),
                }
                .into())
            }
        }
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn discovery_gives_plural_and_scope_and_skips_subresources() {
        let list: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList = serde_json::from_value(json!({
            "groupVersion": "policy/v1",
            "resources": [
                {"name": "poddisruptionbudgets", "singularName": "poddisruptionbudget", "namespaced": true,
                 "kind": "PodDisruptionBudget", "verbs": ["get"]},
                {"name": "poddisruptionbudgets/status", "singularName": "", "namespaced": true,
                 "kind": "PodDisruptionBudget", "verbs": ["get"]},
            ]
        }))
        .unwrap();
        let kinds = from_discovery("policy/v1", &list);
        assert_eq!(
            kinds.get("policy/v1", "PodDisruptionBudget"),
            Some(&KindInfo {
                plural: "poddisruptionbudgets".into(),
                namespaced: true
            })
        );
        assert_eq!(
            kinds.api_resource("policy/v1", "PodDisruptionBudget").plural,
            "poddisruptionbudgets"
        );
    }

    #[test]
    fn crds_define_their_kinds_for_every_version() {
        let crd = json!({"kind": "CustomResourceDefinition", "spec": {
            "group": "example.com", "scope": "Cluster",
            "names": {"kind": "Octopus", "plural": "octopodes"},
            "versions": [{"name": "v1"}, {"name": "v2"}]}});
        let kinds = from_crds(&[crd]);
        for v in ["example.com/v1", "example.com/v2"] {
            assert!(kinds.cluster_scoped(v, "Octopus"));
            assert_eq!(kinds.api_resource(v, "Octopus").plural, "octopodes");
        }
    }

    #[test]
    fn without_an_entry_the_table_and_pluralisation_answer() {
        let kinds = Kinds::default();
        assert!(kinds.cluster_scoped("rbac.authorization.k8s.io/v1", "ClusterRole"));
        assert!(!kinds.cluster_scoped("v1", "ConfigMap"));
        assert_eq!(kinds.api_resource("v1", "ConfigMap").plural, "configmaps");
        let mut known = Kinds::default();
        known.insert(
            "example.com/v1",
            "ConfigMap",
            KindInfo {
                plural: "cms".into(),
                namespaced: false,
            },
        );
        assert!(known.cluster_scoped("example.com/v1", "ConfigMap"), "per apiVersion");
        assert!(!known.cluster_scoped("v1", "ConfigMap"));
    }

    #[test]
    fn an_unknown_kind_names_the_kind_and_its_file() {
        let e = UnknownKind {
            kind: "Widget".into(),
            api_version: "example.com/v1".into(),
            source_name: "module-resources/apply/widget.yaml".into(),
        };
        let m = e.to_string();
        assert!(
            m.contains("Widget") && m.contains("example.com/v1") && m.contains("widget.yaml"),
            "{m}"
        );
    }
}
