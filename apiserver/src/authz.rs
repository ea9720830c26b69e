//! RBAC authorization, as kube-apiserver's RBAC authorizer does it (`plugin/pkg/auth/authorizer/rbac/`), over
//! the Roles, ClusterRoles and bindings in the server's own store (so a change takes effect at the next
//! request).
//!
//! Public API (small on purpose): [`User`] (who asks), [`Request`] (what is asked), [`Rule`] (one policy
//! rule), [`Rbac`] (the rules granted to one user, built with [`Rbac::for_user`] from RBAC objects) with
//! [`Rbac::allows`] and [`Rbac::missing`] (the escalation check), and [`forbidden_message`] (the real refusal
//! text).
//!
//! What it models: a ClusterRoleBinding grants its ClusterRole everywhere; a RoleBinding grants its Role or
//! ClusterRole in the binding's namespace only; subjects `User`, `Group` and `ServiceAccount`; a rule matches
//! on `apiGroups`, `resources` (`res`, `res/sub`, `*`, `*/sub`), `verbs`, `resourceNames` (only for requests
//! that name an object), `nonResourceURLs` (exact or `prefix*`). Every authenticated user may read discovery
//! (the default `system:discovery`, `system:basic-user` and `system:public-info-viewer` roles); members of
//! `system:masters` may do anything. Not modelled: ClusterRole aggregation.

use serde_json::Value;

/// The group whose members are authorized for everything (the admin token's user is in it).
pub const MASTERS: &str = "system:masters";

/// An authenticated user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// A user with the groups a real API server gives it: a ServiceAccount's
    /// (`system:serviceaccount:<ns>:<name>`) are `system:serviceaccounts`, `system:serviceaccounts:<ns>`
    /// and `system:authenticated`; anyone else's `system:authenticated`.
    pub fn new(name: &str) -> Self {
        let mut groups = Vec::new();
        if let Some(rest) = name.strip_prefix("system:serviceaccount:") {
            if let Some((ns, _)) = rest.split_once(':') {
                groups.push("system:serviceaccounts".to_string());
                groups.push(format!("system:serviceaccounts:{ns}"));
            }
        }
        groups.push("system:authenticated".to_string());
        User {
            name: name.to_string(),
            groups,
        }
    }

    /// Whether the user bypasses authorization (`system:masters`).
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// One request to authorize (the attributes kube-apiserver's authorizers see).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests.
    pub namespace: String,
    /// Empty when the request names no object (list, watch, create by POST, deletecollection).
    pub name: String,
    /// Set for non-resource requests (`/version`, `/apis`, ...); then the resource fields are empty.
    pub path: String,
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

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

impl Rule {
    /// A rule from its JSON form (`rules[]` of a Role or ClusterRole).
    pub fn from_value(v: &Value) -> Self {
        Self {
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            verbs: strings(v, "verbs"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// Whether this rule allows `r`.
    pub fn allows(&self, r: &Request) -> bool {
        if !has(&self.verbs, &r.verb) {
            return false;
        }
        if !r.path.is_empty() {
            return self
                .non_resource_urls
                .iter()
                .any(|u| u == "*" || u == &r.path || u.strip_suffix('*').is_some_and(|p| r.path.starts_with(p)));
        }
        if !has(&self.api_groups, &r.group) {
            return false;
        }
        let resource_ok = self.resources.iter().any(|res| {
            if res == "*" {
                return true;
            }
            match res.split_once('/') {
                None => r.subresource.is_empty() && res == &r.resource,
                Some((base, sub)) => {
                    !r.subresource.is_empty()
                        && (base == "*" || base == r.resource)
                        && (sub == "*" || sub == r.subresource)
                }
            }
        });
        resource_ok && (self.resource_names.is_empty() || (!r.name.is_empty() && self.resource_names.contains(&r.name)))
    }

    /// As kube-apiserver prints a rule in an escalation refusal (`rbacv1helpers.CompactString`).
    pub fn compact_string(&self) -> String {
        let q = |l: &[String]| format!("[{}]", l.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "));
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() {
            parts.push(format!("APIGroups:{}", q(&self.api_groups)));
        }
        if !self.resources.is_empty() {
            parts.push(format!("Resources:{}", q(&self.resources)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!("NonResourceURLs:{}", q(&self.non_resource_urls)));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!("ResourceNames:{}", q(&self.resource_names)));
        }
        if !self.verbs.is_empty() {
            parts.push(format!("Verbs:{}", q(&self.verbs)));
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// A rule granted through a binding: where it applies (None: everywhere, from a ClusterRoleBinding).
#[derive(Clone, Debug)]
struct Grant {
    namespace: Option<String>,
    rule: Rule,
}

impl Grant {
    fn allows(&self, r: &Request) -> bool {
        // A namespaced grant covers requests in its namespace only (never cluster-scoped ones).
        self.namespace.as_ref().is_none_or(|ns| *ns == r.namespace) && self.rule.allows(r)
    }
}

/// The rules granted to one user.
#[derive(Clone, Debug, Default)]
pub struct Rbac {
    master: bool,
    grants: Vec<Grant>,
}

/// Paths every authenticated user may GET (default ClusterRoles `system:discovery`,
/// `system:public-info-viewer`, `system:basic-user`).
pub fn is_discovery(path: &str) -> bool {
    ["/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn subject_matches(subject: &Value, binding_ns: &str, user: &User) -> bool {
    let name = str_at(subject, &["name"]);
    match str_at(subject, &["kind"]) {
        "User" => name == user.name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = match str_at(subject, &["namespace"]) {
                "" => binding_ns,
                ns => ns,
            };
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// Whether `o` is of `kind`; objects read from the store may lack `kind`, so `fallback` names the kind of
/// the list they came from.
fn kind_of<'a>(o: &'a Value, fallback: &'a str) -> &'a str {
    match str_at(o, &["kind"]) {
        "" => fallback,
        k => k,
    }
}

impl Rbac {
    /// The rules granted to `user` by `bindings` (RoleBindings and ClusterRoleBindings), whose roles are
    /// looked up in `roles` (Roles and ClusterRoles). Objects must carry `kind`.
    pub fn for_user(roles: &[Value], bindings: &[Value], user: &User) -> Self {
        let mut grants = Vec::new();
        for binding in bindings {
            let kind = kind_of(binding, "");
            if kind != "ClusterRoleBinding" && kind != "RoleBinding" {
                continue;
            }
            let binding_ns = str_at(binding, &["metadata", "namespace"]);
            let bound = binding
                .get("subjects")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|s| subject_matches(s, binding_ns, user)));
            if !bound {
                continue;
            }
            let role_kind = str_at(binding, &["roleRef", "kind"]);
            let role_name = str_at(binding, &["roleRef", "name"]);
            // A ClusterRoleBinding can only reference a ClusterRole.
            if kind == "ClusterRoleBinding" && role_kind != "ClusterRole" {
                continue;
            }
            let Some(role) = find_role(roles, role_kind, binding_ns, role_name) else {
                continue;
            };
            let namespace = (kind == "RoleBinding").then(|| binding_ns.to_string());
            for rule in role.get("rules").and_then(Value::as_array).into_iter().flatten() {
                grants.push(Grant {
                    namespace: namespace.clone(),
                    rule: Rule::from_value(rule),
                });
            }
        }
        Rbac {
            master: user.is_master(),
            grants,
        }
    }

    /// Whether the user may do `r`.
    pub fn allows(&self, r: &Request) -> bool {
        if self.master {
            return true;
        }
        if !r.path.is_empty() && r.verb == "get" && is_discovery(&r.path) {
            return true;
        }
        // system:basic-user
        if r.group == "authorization.k8s.io"
            && r.verb == "create"
            && matches!(
                r.resource.as_str(),
                "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            )
        {
            return true;
        }
        self.grants.iter().any(|g| g.allows(r))
    }

    /// The escalation check for a role the user creates or binds: the parts of `rules` the user does not
    /// hold in `namespace` ("" = cluster-wide), compacted and sorted as kube-apiserver prints them.
    pub fn missing(&self, rules: &[Rule], namespace: &str) -> Vec<Rule> {
        if self.master {
            return vec![];
        }
        // Break every rule down into one (group, resource, name, verb) each, keep the uncovered ones.
        let mut missing: Vec<Rule> = Vec::new();
        for rule in rules {
            for verb in &rule.verbs {
                for url in &rule.non_resource_urls {
                    let r = Request {
                        verb: verb.clone(),
                        path: url.clone(),
                        ..Request::default()
                    };
                    if !self.grants.iter().any(|g| g.namespace.is_none() && g.rule.allows(&r)) {
                        push_compact(
                            &mut missing,
                            Rule {
                                non_resource_urls: vec![url.clone()],
                                verbs: vec![verb.clone()],
                                ..Rule::default()
                            },
                        );
                    }
                }
                for group in &rule.api_groups {
                    for res in &rule.resources {
                        let names: Vec<Option<&String>> = if rule.resource_names.is_empty() {
                            vec![None]
                        } else {
                            rule.resource_names.iter().map(Some).collect()
                        };
                        for name in names {
                            if !self.covers(verb, group, res, name, namespace) {
                                push_compact(
                                    &mut missing,
                                    Rule {
                                        api_groups: vec![group.clone()],
                                        resources: vec![res.clone()],
                                        resource_names: name.into_iter().cloned().collect(),
                                        verbs: vec![verb.clone()],
                                        non_resource_urls: vec![],
                                    },
                                );
                            }
                        }
                    }
                }
            }
        }
        missing.sort_by_key(Rule::compact_string);
        missing
    }

    /// Whether some grant holds (verb, group, resource[, name]) in `namespace`, as a rule (wildcards in the
    /// servant rule must be matched by wildcards in the owner's).
    fn covers(&self, verb: &str, group: &str, res: &str, name: Option<&String>, namespace: &str) -> bool {
        self.grants.iter().any(|g| {
            if let Some(ns) = &g.namespace {
                if namespace.is_empty() || ns != namespace {
                    return false;
                }
            }
            let r = &g.rule;
            let verb_ok = r.verbs.iter().any(|v| v == "*" || v == verb);
            let group_ok = r.api_groups.iter().any(|x| x == "*" || x == group);
            let res_ok = r.resources.iter().any(|x| {
                x == "*"
                    || x == res
                    || match (x.split_once('/'), res.split_once('/')) {
                        (Some(("*", xs)), Some((_, rs))) => xs == rs,
                        (Some((xb, "*")), Some((rb, _))) => xb == rb,
                        _ => false,
                    }
            });
            let name_ok = r.resource_names.is_empty() || name.is_some_and(|n| r.resource_names.contains(n));
            verb_ok && group_ok && res_ok && name_ok
        })
    }
}

/// Adds a one-verb rule to `rules`, merging it into a rule with the same groups, resources and names
/// (`rbacv1helpers.CompactRules`).
fn push_compact(rules: &mut Vec<Rule>, rule: Rule) {
    if let Some(r) = rules.iter_mut().find(|r| {
        r.api_groups == rule.api_groups
            && r.resources == rule.resources
            && r.resource_names == rule.resource_names
            && r.non_resource_urls == rule.non_resource_urls
    }) {
        for v in rule.verbs {
            if !r.verbs.contains(&v) {
                r.verbs.push(v);
            }
        }
        return;
    }
    rules.push(rule);
}

/// The Role or ClusterRole a binding references.
fn find_role<'a>(roles: &'a [Value], kind: &str, namespace: &str, name: &str) -> Option<&'a Value> {
    roles.iter().find(|o| {
        kind_of(o, "") == kind
            && str_at(o, &["metadata", "name"]) == name
            && (kind == "ClusterRole" || str_at(o, &["metadata", "namespace"]) == namespace)
    })
}

/// The rules of the role a binding's `roleRef` names (None if it does not exist).
pub fn role_rules(roles: &[Value], role_kind: &str, namespace: &str, name: &str) -> Option<Vec<Rule>> {
    let role = find_role(roles, role_kind, namespace, name)?;
    Some(
        role.get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(Rule::from_value)
            .collect(),
    )
}

/// The text of a refusal (`responsewriters.forbiddenMessage`): `User "u" cannot <verb> resource "<res>[/<sub>]"
/// in API group "<group>" in the namespace "<ns>"` (or `at the cluster scope`), or `User "u" cannot <verb>
/// path "<path>"`.
pub fn forbidden_message(user: &str, r: &Request) -> String {
    if !r.path.is_empty() {
        return format!("User {user:?} cannot {} path {:?}", r.verb, r.path);
    }
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    if r.namespace.is_empty() {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            r.verb, r.group
        )
    } else {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            r.verb, r.group, r.namespace
        )
    }
}

/// The escalation refusal's reason (`validation.ConfirmNoEscalation`).
pub fn escalation_message(user: &User, missing: &[Rule]) -> String {
    let groups = user
        .groups
        .iter()
        .map(|g| format!("{g:?}"))
        .collect::<Vec<_>>()
        .join(" ");
    let rules = missing.iter().map(Rule::compact_string).collect::<Vec<_>>().join("\n");
    format!(
        "user {:?} (groups=[{groups}]) is attempting to grant RBAC permissions not currently held:\n{rules}",
        user.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn role_binding_grants_in_its_namespace_only() {
        let roles = vec![json!({"kind": "Role", "metadata": {"name": "r", "namespace": "a"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})];
        let bindings = vec![
            json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "a"},
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "a"}]}),
        ];
        let rbac = Rbac::for_user(&roles, &bindings, &User::new("system:serviceaccount:a:sa"));
        let mut r = Request {
            verb: "get".into(),
            resource: "configmaps".into(),
            namespace: "a".into(),
            name: "x".into(),
            ..Request::default()
        };
        assert!(rbac.allows(&r));
        r.namespace = "b".into();
        assert!(!rbac.allows(&r));
        assert_eq!(
            forbidden_message("u", &r),
            r#"User "u" cannot get resource "configmaps" in API group "" in the namespace "b""#
        );
    }

    #[test]
    fn escalation_lists_missing_rules() {
        let rbac = Rbac::default();
        let missing = rbac.missing(
            &[Rule::from_value(
                &json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}),
            )],
            "a",
        );
        assert_eq!(missing.len(), 1);
        assert_eq!(
            missing[0].compact_string(),
            r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}"#
        );
    }
}
