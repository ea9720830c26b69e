//! The write helpers the verb handlers share: body decoding, names and namespaces, schema validation,
//! pruning and defaults, generation tracking, and what follows a write.

use crate::context::{crd_gr, ns_gr, Ctx, State, Target};
use crate::error::{ApiError, ApiResult};
use crate::patch::parse_json_or_yaml;
use crate::registry::ResourceDef;
use crate::store::Gr;
use crate::util::{
    is_dns1123_label, is_dns1123_subdomain, meta_mut, name_of, now_rfc3339, rv_of, LABEL_MSG, SUBDOMAIN_MSG,
};
use axum::http::header;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub(crate) const MAX_RETRIES: usize = 32;

pub(crate) fn parse_body(ctx: &Ctx) -> ApiResult<Value> {
    let ct = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime == "application/vnd.kubernetes.protobuf" {
        return crate::proto::decode(&ctx.body).map_err(ApiError::unsupported_media);
    }
    if !(mime.is_empty() || mime.contains("json") || mime.contains("yaml") || mime == "*/*") {
        return Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {mime:?})"
        )));
    }
    if ctx.body.is_empty() {
        return Err(ApiError::bad_request("request body is empty"));
    }
    let v = parse_json_or_yaml(&ctx.body)?;
    if !v.is_object() {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    }
    Ok(v)
}

pub(crate) fn check_body_type(t: &Target, obj: &Value) -> ApiResult<()> {
    let expected = t.def.api_version(&t.version);
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        if av != expected {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({expected})"
            )));
        }
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str) {
        if k != t.def.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                t.def.kind
            )));
        }
    }
    Ok(())
}

pub(crate) fn validate_name(def: &ResourceDef, name: &str) -> ApiResult<()> {
    let label = matches!(def.plural.as_str(), "namespaces" | "services");
    let ok = if label {
        is_dns1123_label(name)
    } else {
        is_dns1123_subdomain(name)
    };
    if ok {
        return Ok(());
    }
    Err(ApiError::invalid(
        &def.group,
        &def.kind,
        name,
        "metadata.name",
        &format!(
            "Invalid value: \"{name}\": {}",
            if label { LABEL_MSG } else { SUBDOMAIN_MSG }
        ),
    ))
}

/// 404 if the namespace does not exist, 403 if it is terminating.
/// (As kube-apiserver's NamespaceLifecycle admission: reason Forbidden, cause NamespaceTerminating.)
pub(crate) fn check_namespace(st: &State, ns: &str, resource: &str, name: &str) -> ApiResult<()> {
    let nso = st
        .store
        .get(&ns_gr(), "", ns)
        .ok_or_else(|| ApiError::not_found("", "namespaces", ns))?;
    if nso.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
        return Err(ApiError::forbidden(format!(
            "{resource} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"
        ))
        .with_details(json!({"name": name, "kind": resource, "causes": [{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {ns} is being terminated"),
            "field": "metadata.namespace",
        }]})));
    }
    Ok(())
}

/// kube-apiserver's Priority admission plugin on a Pod's creation: the PriorityClass `spec.priorityClassName`
/// names must exist (else 403 Forbidden, before anything is stored), and its value and preemption policy become
/// `spec.priority` and `spec.preemptionPolicy`; a Pod without a class gets priority 0 (a cluster's global
/// default class is not played). Corpus case `pod-priority-class-missing`.
pub(crate) fn admit_priority(st: &State, pod: &mut Value, name: &str) -> ApiResult<()> {
    let class = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    let (priority, policy) = match class {
        None => (json!(0), json!("PreemptLowerPriority")),
        Some(class) => {
            let gr = ("scheduling.k8s.io".to_string(), "priorityclasses".to_string());
            let found = st.store.get(&gr, "", &class).ok_or_else(|| {
                ApiError::forbidden_for(
                    "",
                    "pods",
                    name,
                    &format!("no PriorityClass with name {class} was found"),
                )
            })?;
            (
                found.get("value").cloned().unwrap_or(json!(0)),
                found
                    .get("preemptionPolicy")
                    .cloned()
                    .unwrap_or(json!("PreemptLowerPriority")),
            )
        }
    };
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("priority".into(), priority);
        spec.entry("preemptionPolicy").or_insert(policy);
    }
    Ok(())
}

/// Kind-specific defaulting applied on every write.
/// The defaults kube-apiserver gives a webhook of an admission webhook configuration (`admissionregistration/v1`
/// `SetDefaults_*`).
fn webhook_defaults(wh: &mut Value, mutating: bool) {
    let Some(m) = wh.as_object_mut() else { return };
    m.entry("failurePolicy").or_insert_with(|| json!("Fail"));
    m.entry("matchPolicy").or_insert_with(|| json!("Equivalent"));
    m.entry("namespaceSelector").or_insert_with(|| json!({}));
    m.entry("objectSelector").or_insert_with(|| json!({}));
    m.entry("timeoutSeconds").or_insert_with(|| json!(10));
    if mutating {
        m.entry("reinvocationPolicy").or_insert_with(|| json!("Never"));
    }
    if let Some(svc) = m
        .get_mut("clientConfig")
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        svc.entry("port").or_insert_with(|| json!(443));
    }
    for rule in m.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(r) = rule.as_object_mut() {
            r.entry("scope").or_insert_with(|| json!("*"));
        }
    }
}

/// The schema of the request's CRD version, if any.
pub(crate) fn crd_schema(t: &Target) -> Option<Value> {
    t.def.version(&t.version).and_then(|v| v.schema.clone())
}

/// Drops the fields the kind's schema does not declare, as kube-apiserver's decoder does: with a warning
/// `unknown field "<path>"`, or a 400 under `fieldValidation=Strict` (1.24 drops them silently and ignores
/// the parameter).
pub(crate) fn prune_unknown(ctx: &mut Ctx, obj: &mut Value) -> ApiResult<()> {
    let pruned = match crd_schema(&ctx.t) {
        Some(s) => crate::schema::prune(&s, obj),
        None => crate::schema::prune_builtin(&ctx.t.def.group, &ctx.t.def.plural, obj),
    };
    if pruned.is_empty() || ctx.st.version == crate::config::KubeVersion::V1_24 {
        return Ok(());
    }
    let unknown: Vec<String> = pruned.iter().map(|p| format!("unknown field \"{p}\"")).collect();
    match ctx.q.get("fieldValidation").map(String::as_str) {
        Some("Strict") => {
            let kind = &ctx.t.def.kind;
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
                ctx.t.version,
                unknown.join(", ")
            )))
        }
        Some("Ignore") => Ok(()),
        _ => {
            ctx.warnings.extend(unknown);
            Ok(())
        }
    }
}

/// Validates a custom resource against its schema: 422 with one cause per violation.
pub(crate) fn validate_schema(t: &Target, obj: &Value) -> ApiResult<()> {
    let Some(schema) = crd_schema(t) else {
        return Ok(());
    };
    let causes = crate::schema::validate(&schema, obj);
    if causes.is_empty() {
        return Ok(());
    }
    let name = name_of(obj);
    let qualified = crate::error::qualified(&t.def.group, &t.def.kind);
    let mut details = json!({"name": name, "kind": t.def.kind,
        "causes": causes.iter().map(crate::schema::Cause::to_json).collect::<Vec<_>>()});
    if !t.def.group.is_empty() {
        details["group"] = json!(t.def.group);
    }
    Err(ApiError::new(
        422,
        "Invalid",
        crate::schema::invalid_message(&qualified, name, &causes),
    )
    .with_details(details))
}

/// Server-side apply's typed-patch check: 500 `failed to create typed patch object (<ns>/<name>; <group>/<version>,
/// Kind=<kind>): <what>` for a field the schema does not declare or a value of the wrong shape.
pub(crate) fn check_typed_patch(t: &Target, applied: &Value, name: &str) -> ApiResult<()> {
    let err = match crd_schema(t) {
        Some(s) => crate::schema::typed_patch_error(&s, applied),
        None => crate::schema::typed_patch_error_builtin(&t.def.group, &t.def.plural, applied),
    };
    match err {
        None => Ok(()),
        Some(e) => Err(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({}/{name}; {}/{}, Kind={}): {e}",
                t.ns(),
                t.def.group,
                t.version,
                t.def.kind
            ),
        )),
    }
}

/// Fields an older Kubernetes version does not know are dropped on write (as its decoder does): on 1.24,
/// webhooks' `matchConditions`.
pub(crate) fn drop_unknown_to_version(st: &State, t: &Target, obj: &mut Value) {
    let webhook_cfg = t.def.group == "admissionregistration.k8s.io"
        && matches!(
            t.def.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        );
    if webhook_cfg && !st.version.has_match_conditions() {
        for wh in obj
            .get_mut("webhooks")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(m) = wh.as_object_mut() {
                m.remove("matchConditions");
            }
        }
    }
}

/// A webhook's `matchConditions` must compile (422 `webhooks[i].matchConditions[j].expression: Invalid
/// value: "<expr>": compilation failed: <error>`, the parser's text as cel-go words it).
pub(crate) fn validate_match_conditions(t: &Target, obj: &Value) -> ApiResult<()> {
    let webhook_cfg = t.def.group == "admissionregistration.k8s.io"
        && matches!(
            t.def.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        );
    if !webhook_cfg {
        return Ok(());
    }
    let mut causes = Vec::new();
    for (i, wh) in obj
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, mc) in wh
            .get("matchConditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let expr = mc.get("expression").and_then(Value::as_str).unwrap_or("");
            if let Err(e) = cel::Program::compile(expr) {
                // the same ANTLR grammar as cel-go; cel-go indents the source excerpt by one space
                let e = e.to_string().replace("\n|", "\n |");
                causes.push(crate::schema::Cause {
                    field: format!("webhooks[{i}].matchConditions[{j}].expression"),
                    reason: "FieldValueInvalid",
                    message: format!("Invalid value: {expr:?}: compilation failed: {e}"),
                });
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = name_of(obj);
    let qualified = crate::error::qualified(&t.def.group, &t.def.kind);
    Err(ApiError::new(
        422,
        "Invalid",
        crate::schema::invalid_message(&qualified, name, &causes),
    )
    .with_details(json!({
        "name": name, "group": t.def.group, "kind": t.def.kind,
        "causes": causes.iter().map(crate::schema::Cause::to_json).collect::<Vec<_>>(),
    })))
}

/// Server-side apply on a version that does not know a field the configuration sets: 500, as kube-apiserver
/// 1.24 answers (`failed to create typed patch object (...): ...: field not declared in schema`).
pub(crate) fn check_apply_schema(st: &State, t: &Target, applied: &Value, name: &str) -> ApiResult<()> {
    let webhook_cfg = t.def.group == "admissionregistration.k8s.io"
        && matches!(
            t.def.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        );
    if !webhook_cfg || st.version.has_match_conditions() {
        return Ok(());
    }
    for wh in applied.get("webhooks").and_then(Value::as_array).into_iter().flatten() {
        if wh.get("matchConditions").is_some() {
            let wname = wh.get("name").and_then(Value::as_str).unwrap_or("");
            return Err(ApiError::new(500, "", format!(
                "failed to create typed patch object ({}/{name}; {}, Kind={}): .webhooks[name=\"{wname}\"].matchConditions: field not declared in schema",
                t.ns(),
                t.def.api_version(&t.version),
                t.def.kind
            )));
        }
    }
    Ok(())
}

pub(crate) fn defaults(t: &Target, obj: &mut Value) -> ApiResult<()> {
    let name = name_of(obj).to_string();
    match (t.def.group.as_str(), t.def.plural.as_str()) {
        ("", "namespaces") => {
            if let Some(m) = meta_mut(obj) {
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            if obj.pointer("/status/phase").is_none() {
                obj["status"] = json!({"phase": "Active"});
            }
            if !obj.get("spec").is_some_and(Value::is_object) {
                obj["spec"] = json!({});
            }
            if obj.pointer("/spec/finalizers").is_none() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
        }
        ("", "secrets") => {
            if let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
                if let Some(sd) = sd.as_object() {
                    if !obj.get("data").is_some_and(Value::is_object) {
                        obj["data"] = json!({});
                    }
                    for (k, v) in sd {
                        let s = v.as_str().unwrap_or_default();
                        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(s));
                    }
                }
            }
            if obj.get("type").is_none() {
                obj["type"] = json!("Opaque");
            }
        }
        ("admissionregistration.k8s.io", p @ ("validatingwebhookconfigurations" | "mutatingwebhookconfigurations")) => {
            let mutating = p == "mutatingwebhookconfigurations";
            for wh in obj
                .get_mut("webhooks")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                webhook_defaults(wh, mutating);
            }
            for (i, wh) in obj
                .get("webhooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let cc = wh.get("clientConfig");
                let has = |k: &str| cc.and_then(|c| c.get(k)).is_some_and(|v| !v.is_null());
                if has("url") == has("service") {
                    let field = format!("webhooks[{i}].clientConfig");
                    let msg = "Required value: exactly one of url or service is required";
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        format!("{}.{} \"{name}\" is invalid: {field}: {msg}", t.def.kind, t.def.group),
                    )
                    .with_details(
                        json!({"name": name, "group": t.def.group, "kind": t.def.kind, "causes": [
                            {"reason": "FieldValueRequired", "message": msg, "field": field}
                        ]}),
                    ));
                }
            }
        }
        ("events.k8s.io", "events") => {
            if let Some(m) = obj.as_object_mut() {
                m.entry("deprecatedSource").or_insert_with(|| json!({}));
                m.entry("deprecatedFirstTimestamp").or_insert(Value::Null);
                m.entry("deprecatedLastTimestamp").or_insert(Value::Null);
            }
        }
        ("apps", "deployments") => {
            if !obj.get("spec").is_some_and(Value::is_object) {
                obj["spec"] = json!({});
            }
            if obj.pointer("/spec/replicas").is_none() {
                obj["spec"]["replicas"] = json!(1);
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let def = crate::registry::def_from_crd(obj)
                .map_err(|e| ApiError::invalid(&t.def.group, &t.def.kind, &name, "spec", &e))?;
            let storage: Vec<Value> = obj
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                        .filter_map(|v| v.get("name").cloned())
                        .collect()
                })
                .unwrap_or_default();
            if crd_established(obj) {
                // keep transition times stable across writes so re-applying a CRD is a no-op
                let since = |t: &str| -> Option<Value> {
                    obj.pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(t)))
                        .and_then(|c| c.get("lastTransitionTime").cloned())
                };
                let (names_since, est_since) = (since("NamesAccepted"), since("Established"));
                obj["status"] = established_status(&def, names_since, est_since, storage);
            } else {
                // Just created (or written again before it was established): as a real server stores it until
                // its controllers accept the names ([`after_write`] establishes it later).
                obj["status"] = json!({
                    "conditions": null,
                    "acceptedNames": {"plural": "", "kind": ""},
                    "storedVersions": storage,
                });
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether objects of this kind carry `metadata.generation` (a real API server sets it per kind; Secrets
/// and ConfigMaps have none).
pub(crate) fn tracks_generation(def: &ResourceDef) -> bool {
    !(def.group.is_empty() && matches!(def.plural.as_str(), "secrets" | "configmaps" | "namespaces"))
}

/// Everything except metadata and status (what `generation` tracks).
pub(crate) fn spec_part(v: &Value) -> Map<String, Value> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn strip_volatile(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        // ownership changes count, timestamps do not
        if let Some(mf) = m.get_mut("managedFields").and_then(Value::as_array_mut) {
            for e in mf.iter_mut().filter_map(Value::as_object_mut) {
                e.remove("time");
            }
        }
    }
    v
}

/// `metadata.uid` of an object ("" when it has none).
fn uid_of(obj: &Value) -> String {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Whether a CRD has the condition `Established` true.
pub(crate) fn crd_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Established")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// The status of an established CRD: its names accepted, `Established` (each condition since the time given,
/// else now), as kube-apiserver's naming and establishing controllers write it.
fn established_status(
    def: &ResourceDef,
    names_since: Option<Value>,
    est_since: Option<Value>,
    storage: Vec<Value>,
) -> Value {
    let now = now_rfc3339();
    let mut accepted =
        json!({"plural": def.plural, "singular": def.singular, "kind": def.kind, "listKind": def.list_kind});
    if !def.short_names.is_empty() {
        accepted["shortNames"] = json!(def.short_names);
    }
    if !def.categories.is_empty() {
        accepted["categories"] = json!(def.categories);
    }
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": names_since.unwrap_or_else(|| json!(now))},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": est_since.unwrap_or_else(|| json!(now))},
        ],
        "acceptedNames": accepted,
        "storedVersions": storage,
    })
}

/// Registers CRDs after they are written: an established one is served at once; a new one only once
/// established, `crd_establish_delay` later, as a real server's controllers do it.
pub(crate) fn after_write(st: &Arc<State>, gr: &Gr, obj: &Value) {
    if *gr != crd_gr() {
        return;
    }
    if crd_established(obj) {
        if let Ok(def) = crate::registry::def_from_crd(obj) {
            // a CRD that stopped serving a version keeps its objects; it simply is not served
            st.registry.insert(def);
        }
        return;
    }
    let (st, name, uid) = (st.clone(), name_of(obj).to_string(), uid_of(obj));
    tokio::spawn(async move {
        tokio::time::sleep(st.crd_establish_delay).await;
        establish_crd(&st, &name, &uid);
    });
}

/// Establish CRD `name` if it is still the one with `uid` and not yet established: its status written (a new
/// resourceVersion, a watch event), then its resource served.
fn establish_crd(st: &State, name: &str, uid: &str) {
    loop {
        let Some(current) = st.store.get(&crd_gr(), "", name) else {
            return;
        };
        if uid_of(&current) != uid || crd_established(&current) {
            return;
        }
        let Ok(def) = crate::registry::def_from_crd(&current) else {
            return;
        };
        let mut next = (*current).clone();
        let storage = next
            .pointer("/status/storedVersions")
            .cloned()
            .unwrap_or_else(|| json!([]));
        let storage = storage.as_array().cloned().unwrap_or_default();
        next["status"] = established_status(&def, None, None, storage);
        if let crate::store::Cas::Ok(_) = st.store.replace(&crd_gr(), "", name, rv_of(&current), next) {
            st.registry.insert(def);
            return;
        }
    }
}
