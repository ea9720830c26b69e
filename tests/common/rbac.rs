//! A small, pure Kubernetes RBAC evaluator: the Roles and ClusterRoles bound to one ServiceAccount, whether
//! they allow a request, whether they hold every permission of a role the subject creates (the API
//! server's escalation check), and which of their rules nothing used.
//!
//! What it models (as kube-apiserver's RBAC authorizer does): a ClusterRoleBinding grants its ClusterRole
//! everywhere; a RoleBinding grants its Role or ClusterRole in the binding's namespace only; a rule matches
//! on `apiGroups`, `resources` (`res`, `res/sub`, `*`, `*/sub`), `verbs`, `resourceNames` (only for
//! requests that name an object), `nonResourceURLs` (exact or `prefix*`). Discovery (`/api`, `/apis`,
//! `/version`, ...) is granted to every authenticated user by the default `system:discovery` role.
//! Not modelled: aggregation, `escalate` on roles the subject does not hold.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeSet;

/// One request to authorize.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests.
    pub namespace: String,
    /// Empty when the request names no object (list, watch, create, deletecollection).
    pub name: String,
    /// Set for non-resource requests (`/metrics`, `/version`).
    pub path: String,
}

impl Request {
    /// A resource request (`resource` may carry its subresource: `deployments/status`); `name` and
    /// `namespace` empty where it names none.
    pub fn new(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        Self {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: namespace.into(),
            name: name.into(),
            path: String::new(),
        }
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.path.is_empty() {
            return write!(f, "{} {}", self.verb, self.path);
        }
        let res = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {res} (group {group})", self.verb)?;
        if !self.namespace.is_empty() {
            write!(f, " in namespace {}", self.namespace)?;
        }
        if !self.name.is_empty() {
            write!(f, " named {}", self.name)?;
        }
        Ok(())
    }
}

/// One policy rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

impl Rule {
    pub fn from_value(v: &Value) -> Self {
        Self {
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            verbs: strings(v, "verbs"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    fn has(list: &[String], value: &str) -> bool {
        list.iter().any(|x| x == "*" || x == value)
    }

    /// Whether this rule allows `r`.
    pub fn allows(&self, r: &Request) -> bool {
        if !Self::has(&self.verbs, &r.verb) {
            return false;
        }
        if !r.path.is_empty() {
            return self
                .non_resource_urls
                .iter()
                .any(|u| u == &r.path || u.strip_suffix('*').is_some_and(|p| r.path.starts_with(p)));
        }
        if !Self::has(&self.api_groups, &r.group) {
            return false;
        }
        let resource_ok = self.resources.iter().any(|res| {
            if res == "*" {
                return true;
            }
            match res.split_once('/') {
                None => r.subresource.is_empty() && res == &r.resource,
                Some((base, sub)) => {
                    !r.subresource.is_empty() && (base == "*" || base == r.resource) && sub == r.subresource
                }
            }
        });
        resource_ok && (self.resource_names.is_empty() || (!r.name.is_empty() && self.resource_names.contains(&r.name)))
    }

    /// Every (verb, group, resource) this rule grants (non-resource rules as (verb, "", url)).
    pub fn triples(&self) -> Vec<Triple> {
        let mut out = Vec::new();
        for verb in &self.verbs {
            for url in &self.non_resource_urls {
                out.push(Triple::new(verb, "", url));
            }
            for group in &self.api_groups {
                for res in &self.resources {
                    out.push(Triple::new(verb, group, res));
                }
            }
        }
        out
    }
}

/// A permission in its smallest unit: verb, API group, resource (`res` or `res/sub`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Triple {
    pub verb: String,
    pub group: String,
    pub resource: String,
}

impl Triple {
    pub fn new(verb: &str, group: &str, resource: &str) -> Self {
        Self {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// As a request (for checking that a subject holds it), in `namespace` ("" = cluster-wide).
    fn request(&self, namespace: &str) -> Request {
        let (resource, sub) = self.resource.split_once('/').unwrap_or((&self.resource, ""));
        let non_resource = self.resource.starts_with('/');
        Request {
            verb: self.verb.clone(),
            group: self.group.clone(),
            resource: if non_resource { String::new() } else { resource.into() },
            subresource: if non_resource { String::new() } else { sub.into() },
            namespace: namespace.into(),
            name: String::new(),
            path: if non_resource {
                self.resource.clone()
            } else {
                String::new()
            },
        }
    }
}

impl std::fmt::Display for Triple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { "\"\"" } else { &self.group };
        write!(f, "{:<16} {:<30} {}", self.verb, group, self.resource)
    }
}

/// A rule granted through a binding.
#[derive(Clone, Debug)]
pub struct Grant {
    /// `ClusterRole/name` or `Role/namespace/name`.
    pub role: String,
    /// Where it applies: None everywhere (ClusterRoleBinding), Some(ns) in that namespace only.
    pub namespace: Option<String>,
    pub rule: Rule,
}

impl Grant {
    fn allows(&self, r: &Request) -> bool {
        // A namespace-scoped grant never covers cluster-scoped requests or other namespaces.
        self.namespace.as_ref().is_none_or(|ns| *ns == r.namespace) && self.rule.allows(r)
    }
}

/// The permissions of one subject.
#[derive(Clone, Debug, Default)]
pub struct Rbac {
    pub grants: Vec<Grant>,
}

/// Paths every authenticated user may GET (default ClusterRoles `system:discovery`,
/// `system:public-info-viewer`, `system:basic-user`).
pub fn is_discovery(path: &str) -> bool {
    ["/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

fn subject_matches(subject: &Value, namespace: &str, name: &str) -> bool {
    subject.get("kind").and_then(Value::as_str) == Some("ServiceAccount")
        && subject.get("name").and_then(Value::as_str) == Some(name)
        && subject.get("namespace").and_then(Value::as_str) == Some(namespace)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Rbac {
    /// The grants of ServiceAccount `namespace/name` among `objects` (Roles, ClusterRoles and bindings).
    pub fn for_service_account(objects: &[Value], namespace: &str, name: &str) -> Self {
        let find_role = |kind: &str, role_ns: &str, role_name: &str| {
            objects.iter().find(|o| {
                str_at(o, &["kind"]) == kind
                    && str_at(o, &["metadata", "name"]) == role_name
                    && (kind == "ClusterRole" || str_at(o, &["metadata", "namespace"]) == role_ns)
            })
        };
        let mut grants = Vec::new();
        for binding in objects {
            let kind = str_at(binding, &["kind"]);
            if kind != "ClusterRoleBinding" && kind != "RoleBinding" {
                continue;
            }
            let bound = binding
                .get("subjects")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|s| subject_matches(s, namespace, name)));
            if !bound {
                continue;
            }
            let binding_ns = str_at(binding, &["metadata", "namespace"]);
            let role_kind = str_at(binding, &["roleRef", "kind"]);
            let role_name = str_at(binding, &["roleRef", "name"]);
            let Some(role) = find_role(role_kind, binding_ns, role_name) else {
                continue;
            };
            let label = if role_kind == "ClusterRole" {
                format!("ClusterRole/{role_name}")
            } else {
                format!("Role/{binding_ns}/{role_name}")
            };
            let scope = (kind == "RoleBinding").then(|| binding_ns.to_string());
            for rule in role.get("rules").and_then(Value::as_array).into_iter().flatten() {
                grants.push(Grant {
                    role: label.clone(),
                    namespace: scope.clone(),
                    rule: Rule::from_value(rule),
                });
            }
        }
        Self { grants }
    }

    /// The index of the grant that allows `r`: the narrowest one (a namespaced grant before a cluster-wide
    /// one), so that a cluster-wide permission only the namespaced grant needs shows up as unused.
    pub fn allowing(&self, r: &Request) -> Option<usize> {
        let namespaced = self.grants.iter().position(|g| g.namespace.is_some() && g.allows(r));
        namespaced.or_else(|| self.grants.iter().position(|g| g.allows(r)))
    }

    /// The permissions of a role the subject writes that it does not hold itself, in `namespace` ("" for
    /// a ClusterRole): what the API server's escalation check refuses without `escalate`. Each permission
    /// found is reported to `used` with the grant that covers it.
    pub fn missing_for_role(&self, role: &Value, namespace: &str, mut used: impl FnMut(usize, &Triple)) -> Vec<Triple> {
        let mut missing = Vec::new();
        for rule in role.get("rules").and_then(Value::as_array).into_iter().flatten() {
            let rule = Rule::from_value(rule);
            let names = if rule.resource_names.is_empty() {
                vec![String::new()]
            } else {
                rule.resource_names.clone()
            };
            for triple in rule.triples() {
                for name in &names {
                    let mut request = triple.request(namespace);
                    request.name = name.clone();
                    match self.allowing(&request) {
                        Some(i) => used(i, &triple),
                        None => missing.push(triple.clone()),
                    }
                }
            }
        }
        missing
    }

    /// Every (grant, permission) pair, for the "unused" report.
    pub fn all_triples(&self) -> BTreeSet<(usize, Triple)> {
        self.grants
            .iter()
            .enumerate()
            .flat_map(|(i, g)| g.rule.triples().into_iter().map(move |t| (i, t)))
            .collect()
    }

    /// The permission of grant `i` that `r` used (the grant's own spelling of the resource).
    pub fn used_triple(&self, i: usize, r: &Request) -> Triple {
        let g = &self.grants[i];
        let verb = if g.rule.verbs.iter().any(|v| v == &r.verb) {
            r.verb.as_str()
        } else {
            "*"
        };
        if !r.path.is_empty() {
            return Triple::new(verb, "", &r.path);
        }
        let group = if g.rule.api_groups.iter().any(|x| x == &r.group) {
            r.group.as_str()
        } else {
            "*"
        };
        let full = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        let resource = if g.rule.resources.contains(&full) {
            full
        } else {
            "*".into()
        };
        Triple::new(verb, group, &resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Request {
        Request::new(verb, group, resource, namespace, name)
    }

    fn objects() -> Vec<Value> {
        vec![
            json!({"kind": "ClusterRole", "metadata": {"name": "cluster"}, "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]},
                {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["update"], "resourceNames": ["one"]},
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                   "roleRef": {"kind": "ClusterRole", "name": "cluster"},
                   "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]}),
            json!({"kind": "Role", "metadata": {"name": "le", "namespace": "ns"}, "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["patch"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "le", "namespace": "ns"},
                   "roleRef": {"kind": "Role", "name": "le"},
                   "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]}),
            // Bound to someone else: grants nothing to sa.
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "other"},
                   "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
                   "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "elsewhere"}]}),
            json!({"kind": "ClusterRole", "metadata": {"name": "cluster-admin"}, "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        ]
    }

    #[test]
    fn verbs_groups_resources_subresources_and_scopes() {
        let rbac = Rbac::for_service_account(&objects(), "ns", "sa");
        assert!(rbac.allowing(&request("get", "", "secrets", "x", "s")).is_some());
        assert!(rbac.allowing(&request("list", "", "secrets", "", "")).is_some());
        assert!(
            rbac.allowing(&request("watch", "", "secrets", "x", "")).is_none(),
            "verb not granted"
        );
        assert!(
            rbac.allowing(&request("get", "apps", "secrets", "x", "s")).is_none(),
            "wrong group"
        );
        assert!(
            rbac.allowing(&request("patch", "apps", "deployments", "x", "d"))
                .is_none(),
            "status only"
        );
        assert!(rbac
            .allowing(&request("patch", "apps", "deployments/status", "x", "d"))
            .is_some());
        assert!(rbac
            .allowing(&request("update", "", "configmaps", "x", "one"))
            .is_some());
        assert!(
            rbac.allowing(&request("update", "", "configmaps", "x", "two"))
                .is_none(),
            "resourceNames"
        );
        assert!(rbac
            .allowing(&request("patch", "coordination.k8s.io", "leases", "ns", "l"))
            .is_some());
        assert!(
            rbac.allowing(&request("patch", "coordination.k8s.io", "leases", "other", "l"))
                .is_none(),
            "a RoleBinding grants in its namespace only"
        );
        assert!(
            rbac.allowing(&request("delete", "", "pods", "x", "p")).is_none(),
            "not someone else's grants"
        );
        let metrics = Request {
            path: "/metrics".into(),
            ..request("get", "", "", "", "")
        };
        assert!(rbac.allowing(&metrics).is_some());
    }

    #[test]
    fn escalation_needs_every_permission_of_the_role_written() {
        let rbac = Rbac::for_service_account(&objects(), "ns", "sa");
        let within = json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
        assert!(rbac.missing_for_role(&within, "", |_, _| {}).is_empty());
        let beyond = json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "delete"]}]});
        assert_eq!(
            rbac.missing_for_role(&beyond, "", |_, _| {}),
            vec![Triple::new("delete", "", "secrets")]
        );
    }
}
