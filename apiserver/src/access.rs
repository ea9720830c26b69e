//! Authentication (bearer tokens, impersonation) and authorization of each request with [`crate::authz`]
//! over the RBAC objects in the store, at the moment of the request.

use crate::authz::{self, Rbac, Request, Rule, User};
use crate::config::KubeVersion;
use crate::context::{State, Target};
use crate::error::{ApiError, ApiResult};
use axum::http::{header, HeaderMap};
use serde_json::Value;

/// The user of the server's own token.
pub(crate) const ADMIN_USER: &str = "system:admin";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn admin() -> User {
    User {
        name: ADMIN_USER.to_string(),
        groups: vec![authz::MASTERS.to_string(), "system:authenticated".to_string()],
    }
}

/// The user a bearer token authenticates (None: no or unknown token).
fn token_user(st: &State, headers: &HeaderMap) -> Option<User> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))?
        .trim();
    if token == st.token {
        return Some(admin());
    }
    let name = st.users.read().ok()?.get(token).cloned()?;
    Some(User::new(&name))
}

fn header_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect()
}

/// Authenticates a request: its token, then `Impersonate-User` / `Impersonate-Group` (allowed when the
/// token's user may `impersonate` users/serviceaccounts and groups, as kube-apiserver's impersonation filter
/// checks). `Ok(None)`: not authenticated.
pub(crate) fn authenticate(st: &State, headers: &HeaderMap) -> ApiResult<Option<User>> {
    let Some(user) = token_user(st, headers) else {
        return Ok(None);
    };
    let imp_user = header_values(headers, "impersonate-user");
    let imp_groups = header_values(headers, "impersonate-group");
    if imp_user.is_empty() {
        if !imp_groups.is_empty() {
            return Err(ApiError::bad_request(format!(
                "requested {imp_groups:?} without impersonating a user"
            )));
        }
        return Ok(Some(user));
    }
    let name = imp_user[0].clone();
    let rbac = rbac_for(st, &user);
    let sa = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'));
    let who = match sa {
        Some((ns, sa_name)) => Request {
            verb: "impersonate".into(),
            resource: "serviceaccounts".into(),
            namespace: ns.into(),
            name: sa_name.into(),
            ..Request::default()
        },
        None => Request {
            verb: "impersonate".into(),
            resource: "users".into(),
            name: name.clone(),
            ..Request::default()
        },
    };
    check(&rbac, &user, &who, "")?;
    for g in &imp_groups {
        let r = Request {
            verb: "impersonate".into(),
            resource: "groups".into(),
            name: g.clone(),
            ..Request::default()
        };
        check(&rbac, &user, &r, "")?;
    }
    let mut groups = imp_groups;
    if groups.is_empty() {
        if let Some((ns, _)) = sa {
            groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")];
        }
    }
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(Some(User { name, groups }))
}

fn list_all(st: &State, resource: &str, kind: &str) -> Vec<Value> {
    let (items, _) = st.store.list(&(RBAC_GROUP.to_string(), resource.to_string()), None);
    items
        .into_iter()
        .map(|o| {
            let mut o = (*o).clone();
            if o.get("kind").is_none() {
                if let Some(m) = o.as_object_mut() {
                    m.insert("kind".into(), Value::String(kind.into()));
                }
            }
            o
        })
        .collect()
}

fn rbac_objects(st: &State) -> (Vec<Value>, Vec<Value>) {
    let mut roles = list_all(st, "roles", "Role");
    roles.extend(list_all(st, "clusterroles", "ClusterRole"));
    let mut bindings = list_all(st, "rolebindings", "RoleBinding");
    bindings.extend(list_all(st, "clusterrolebindings", "ClusterRoleBinding"));
    (roles, bindings)
}

fn rbac_for(st: &State, user: &User) -> Rbac {
    if user.is_master() {
        return Rbac::for_user(&[], &[], user);
    }
    let (roles, bindings) = rbac_objects(st);
    Rbac::for_user(&roles, &bindings, user)
}

/// 403 unless `rbac` allows `r`; `reason_override` (when not empty) replaces the refusal's reason (kube-apiserver
/// 1.24 sent an empty one for the create check of an apply or PUT that creates).
fn check(rbac: &Rbac, user: &User, r: &Request, reason_override: &str) -> ApiResult<()> {
    if rbac.allows(r) {
        return Ok(());
    }
    if !r.path.is_empty() {
        return Err(ApiError::forbidden(authz::forbidden_message(&user.name, r)));
    }
    let reason = if reason_override.is_empty() {
        authz::forbidden_message(&user.name, r)
    } else {
        String::new()
    };
    Err(ApiError::forbidden_for(&r.group, &r.resource, &r.name, &reason))
}

/// Authorizes a non-resource request (discovery, `/version`, ...).
pub(crate) fn authorize_path(st: &State, user: &User, verb: &str, path: &str) -> ApiResult<()> {
    if user.is_master() {
        return Ok(());
    }
    let r = Request {
        verb: verb.into(),
        path: path.into(),
        ..Request::default()
    };
    check(&rbac_for(st, user), user, &r, "")
}

/// Authorizes a request for a resource the server does not serve (a real server authorizes first).
pub(crate) fn authorize_unknown(st: &State, user: &User, rec: &crate::request::RequestRecord) -> ApiResult<()> {
    if user.is_master() || rec.resource.is_empty() {
        return Ok(());
    }
    let r = Request {
        verb: rec.verb.clone(),
        group: rec.group.clone(),
        resource: rec.resource.clone(),
        subresource: rec.subresource.clone(),
        namespace: rec.namespace.clone(),
        name: rec.name.clone(),
        path: String::new(),
    };
    check(&rbac_for(st, user), user, &r, "")
}

/// The `metadata.name` a list or watch is narrowed to by its field selector (kube-apiserver's RequestInfo
/// takes it as the request's name, so `resourceNames` apply).
fn selected_name(q: &crate::context::Query) -> Option<String> {
    let fs = q.get("fieldSelector")?;
    fs.split(',').find_map(|term| {
        let term = term.trim();
        term.strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))
            .map(str::to_string)
    })
}

/// Resources whose PUT creates a missing object (`AllowCreateOnUpdate`).
pub(crate) fn creates_on_update(t: &Target) -> bool {
    matches!(
        (t.def.group.as_str(), t.def.plural.as_str()),
        ("coordination.k8s.io", "leases") | ("", "events") | ("events.k8s.io", "events")
    )
}

/// Authorizes a resource request: the verb itself, then what a real server checks later in the handler: the
/// `create` of an apply-patch or PUT that creates the object (with its name), and the RBAC escalation check
/// on writes of Roles, ClusterRoles and their bindings.
pub(crate) fn authorize_resource(
    st: &State,
    user: &User,
    t: &Target,
    verb: &str,
    q: &crate::context::Query,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<()> {
    if user.is_master() {
        return Ok(());
    }
    let rbac = rbac_for(st, user);
    let mut r = Request {
        verb: verb.into(),
        group: t.def.group.clone(),
        resource: t.def.plural.clone(),
        subresource: t.sub.clone().unwrap_or_default(),
        namespace: t.namespace.clone().unwrap_or_default(),
        name: t.name.clone().unwrap_or_default(),
        path: String::new(),
    };
    // Namespaces are their own namespace for authorization.
    if t.def.plural == "namespaces" && t.def.group.is_empty() {
        r.namespace = r.name.clone();
    }
    if matches!(verb, "list" | "watch") && r.name.is_empty() {
        if let Some(n) = selected_name(q) {
            r.name = n;
        }
    }
    check(&rbac, user, &r, "")?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let apply = verb == "patch" && content_type.starts_with("application/apply-patch");
    let put_create = verb == "update" && creates_on_update(t);
    if (apply || put_create) && t.sub.is_none() && !r.name.is_empty() {
        let exists = st.store.get(&t.gr(), t.ns(), &r.name).is_some();
        if !exists {
            let create = Request {
                verb: "create".into(),
                ..r.clone()
            };
            let legacy = if st.version == KubeVersion::V1_24 { "legacy" } else { "" };
            check(&rbac, user, &create, legacy)?;
        }
    }
    if t.def.group == RBAC_GROUP && matches!(verb, "create" | "update" | "patch") && t.sub.is_none() {
        escalation(st, &rbac, user, t, &r, body)?;
    }
    Ok(())
}

/// kube-apiserver's RBAC escalation check (`pkg/registry/rbac/*/policybased`): a Role or ClusterRole may only
/// grant what its writer holds, unless the writer may `escalate` it; a binding may only reference a role
/// whose rules the writer holds, unless the writer may `bind` that role.
fn escalation(st: &State, rbac: &Rbac, user: &User, t: &Target, r: &Request, body: &[u8]) -> ApiResult<()> {
    let Ok(obj) = crate::patch::parse_json_or_yaml(body) else {
        return Ok(()); // the handler reports the malformed body
    };
    let name = match obj.pointer("/metadata/name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => r.name.clone(),
    };
    let refuse = |missing: &[Rule]| {
        ApiError::forbidden_for(
            &t.def.group,
            &t.def.plural,
            &name,
            &authz::escalation_message(user, missing),
        )
    };
    match t.def.plural.as_str() {
        "roles" | "clusterroles" => {
            let Some(rules) = obj.get("rules").and_then(Value::as_array) else {
                return Ok(());
            };
            let escalate = Request {
                verb: "escalate".into(),
                name: String::new(),
                ..r.clone()
            };
            if rbac.allows(&escalate) {
                return Ok(());
            }
            let rules: Vec<Rule> = rules.iter().map(Rule::from_value).collect();
            let missing = rbac.missing(&rules, &r.namespace);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(refuse(&missing))
            }
        }
        "rolebindings" | "clusterrolebindings" => {
            let Some(role_ref) = obj.get("roleRef") else {
                return Ok(());
            };
            let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
            let role_name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
            let bind = Request {
                verb: "bind".into(),
                group: RBAC_GROUP.into(),
                resource: if kind == "ClusterRole" { "clusterroles" } else { "roles" }.into(),
                subresource: String::new(),
                namespace: r.namespace.clone(),
                name: role_name.into(),
                path: String::new(),
            };
            if rbac.allows(&bind) {
                return Ok(());
            }
            let (roles, _) = rbac_objects(st);
            let Some(rules) = authz::role_rules(&roles, kind, &r.namespace, role_name) else {
                let plural = if kind == "ClusterRole" { "clusterroles" } else { "roles" };
                return Err(ApiError::not_found(RBAC_GROUP, plural, role_name));
            };
            let missing = rbac.missing(&rules, &r.namespace);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(refuse(&missing))
            }
        }
        _ => Ok(()),
    }
}

/// The default ClusterRoles of a real cluster that a user may bind or aggregate from: `cluster-admin`, and
/// `admin`, `edit`, `view` reduced to the kinds this server serves.
pub(crate) fn bootstrap_cluster_roles(st: &State) {
    let rw = [
        "create",
        "delete",
        "deletecollection",
        "patch",
        "update",
        "get",
        "list",
        "watch",
    ];
    let ro = ["get", "list", "watch"];
    let core = [
        "configmaps",
        "secrets",
        "services",
        "serviceaccounts",
        "pods",
        "endpoints",
        "events",
    ];
    let view_rules = serde_json::json!([
        {"apiGroups": [""], "resources": ["configmaps", "endpoints", "pods", "services", "serviceaccounts", "events", "namespaces", "namespaces/status", "pods/status", "services/status"], "verbs": ro},
        {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale", "deployments/status"], "verbs": ro},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ro},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ro},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ro},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ro},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": ro},
    ]);
    let edit_rules = serde_json::json!([
        {"apiGroups": [""], "resources": core, "verbs": rw},
        {"apiGroups": [""], "resources": ["namespaces", "namespaces/status", "pods/status", "services/status"], "verbs": ro},
        {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"], "verbs": rw},
        {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ro},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": rw},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": rw},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": rw},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ro},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": rw},
    ]);
    let mut admin_rules = edit_rules.clone();
    if let Some(a) = admin_rules.as_array_mut() {
        a.push(serde_json::json!({"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": rw}));
    }
    let roles = [
        (
            "cluster-admin",
            serde_json::json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        ("admin", admin_rules),
        ("edit", edit_rules),
        ("view", view_rules),
    ];
    for (name, rules) in roles {
        let obj = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {
                "name": name, "uid": crate::util::new_uid(), "creationTimestamp": crate::util::now_rfc3339(),
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
            },
            "rules": rules,
        });
        let _ = st
            .store
            .create(&(RBAC_GROUP.to_string(), "clusterroles".to_string()), "", name, obj);
    }
}

/// A SubjectAccessReview (`spec.user`, `spec.groups`, `spec.resourceAttributes` or
/// `spec.nonResourceAttributes`) answered from the RBAC objects in the store, as the RBAC authorizer answers
/// it: `status.allowed`, with a reason when allowed. Nothing is stored.
pub(crate) fn review(st: &State, review: &Value) -> Value {
    let spec = &review["spec"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let user = User {
        name: spec["user"].as_str().unwrap_or_default().to_string(),
        groups: strings(&spec["groups"]),
    };
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_string();
    let request = match (&spec["resourceAttributes"], &spec["nonResourceAttributes"]) {
        (r, _) if r.is_object() => Request {
            verb: text(r, "verb"),
            group: text(r, "group"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            namespace: text(r, "namespace"),
            name: text(r, "name"),
            path: String::new(),
        },
        (_, n) => Request {
            verb: text(n, "verb"),
            path: text(n, "path"),
            ..Request::default()
        },
    };
    let allowed = rbac_for(st, &user).allows(&request);
    let mut out = review.clone();
    out["status"] = if allowed {
        serde_json::json!({"allowed": true, "reason": "RBAC: allowed"})
    } else {
        serde_json::json!({"allowed": false})
    };
    out
}
