//! UPDATE and PATCH (merge, JSON, strategic, server-side apply).

use super::create::create_object;
use super::delete::after_remove;
use super::shared::{
    after_write, check_apply_schema, check_body_type, check_typed_patch, crd_schema, defaults, drop_unknown_to_version,
    parse_body, prune_unknown, spec_part, strip_volatile, tracks_generation, validate_match_conditions,
    validate_schema, MAX_RETRIES,
};
use crate::context::{ok_json, Ctx, State, Target};
use crate::error::{ApiError, ApiResult};
use crate::patch::{apply_patch, PatchKind};
use crate::render::present;
use crate::store::Cas;
use crate::util::{finalizers_of, meta_mut, meta_str, name_of, now_rfc3339, query_bool, rv_of};
use axum::http::{header, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// Builds the object to store for an update of `old` with `body` (status separation,
/// immutable metadata, generation, defaults, managedFields).
pub(crate) fn prepare_update(
    st: &State,
    t: &Target,
    old: &Value,
    body: Value,
    manager: Option<&str>,
) -> ApiResult<Value> {
    let api_version = t.def.api_version(&t.version);
    let mut new = if t.status() {
        let mut n = old.clone();
        match body.get("status") {
            Some(s) => n["status"] = s.clone(),
            None => {
                if let Some(m) = n.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        // managedFields written with the status (an apply to /status records its entry there)
        if let Some(mf) = body.pointer("/metadata/managedFields") {
            n["metadata"]["managedFields"] = mf.clone();
        }
        n
    } else {
        let mut n = body;
        if t.def.has_status(&t.version) {
            if let Some(m) = n.as_object_mut() {
                match old.get("status") {
                    Some(s) => {
                        m.insert("status".into(), s.clone());
                    }
                    None => {
                        m.remove("status");
                    }
                }
            }
        }
        n
    };
    if !new.is_object() {
        return Err(ApiError::bad_request("object must be a JSON object"));
    }
    new["apiVersion"] = json!(api_version);
    new["kind"] = json!(t.def.kind);
    let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
    let body_has_mf = new.pointer("/metadata/managedFields").is_some();
    if let Some(m) = meta_mut(&mut new) {
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
            "generation",
        ] {
            match old_meta.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
        if !body_has_mf {
            if let Some(mf) = old_meta.get("managedFields") {
                m.insert("managedFields".into(), mf.clone());
            }
        }
        m.remove("selfLink");
    }
    defaults(t, &mut new)?;
    drop_unknown_to_version(st, t, &mut new);
    check_no_new_finalizers(t, old, &new)?;
    validate_schema(t, &new)?;
    validate_match_conditions(t, &new)?;
    check_immutable(t, old, &new)?;
    let with_status = !t.def.has_status(&t.version);
    if tracks_generation(&t.def)
        && (spec_part(old) != spec_part(&new) || (with_status && old.get("status") != new.get("status")))
    {
        let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        new["metadata"]["generation"] = json!(g + 1);
    }
    if let Some(mgr) = manager {
        let schema = crd_schema(t);
        crate::ssa::record_update(
            Some(old),
            &mut new,
            mgr,
            &api_version,
            t.sub.as_deref(),
            schema.as_ref(),
        );
    }
    Ok(new)
}

/// An object being deleted takes no new finalizer (422, as `ValidateObjectMetaUpdate`; the real server reports
/// the cause twice, its validation runs twice).
fn check_no_new_finalizers(t: &Target, old: &Value, new: &Value) -> ApiResult<()> {
    if meta_str(old, "deletionTimestamp").is_none() {
        return Ok(());
    }
    let before = finalizers_of(old);
    let added: Vec<String> = finalizers_of(new).into_iter().filter(|f| !before.contains(f)).collect();
    if added.is_empty() {
        return Ok(());
    }
    let list = added.iter().map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", ");
    let msg = format!(
        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
    );
    let name = name_of(new);
    let cause = json!({"reason": "FieldValueForbidden", "message": msg, "field": "metadata.finalizers"});
    let mut details = json!({"name": name, "kind": t.def.kind, "causes": [cause.clone(), cause]});
    if !t.def.group.is_empty() {
        details["group"] = json!(t.def.group);
    }
    Err(ApiError::new(
        422,
        "Invalid",
        format!(
            "{} \"{name}\" is invalid: metadata.finalizers: {msg}",
            crate::error::qualified(&t.def.group, &t.def.kind)
        ),
    )
    .with_details(details))
}

/// A Secret's `type` never changes; an immutable ConfigMap or Secret keeps its data and stays immutable.
fn check_immutable(t: &Target, old: &Value, new: &Value) -> ApiResult<()> {
    if !t.def.group.is_empty() || !matches!(t.def.plural.as_str(), "secrets" | "configmaps") || t.sub.is_some() {
        return Ok(());
    }
    let name = name_of(new);
    let invalid = |field: &str, reason: &str, msg: String| {
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {msg}", t.def.kind),
        )
        .with_details(json!({"name": name, "kind": t.def.kind, "causes": [
            {"reason": reason, "message": msg, "field": field}
        ]}))
    };
    if t.def.plural == "secrets" && old.get("type") != new.get("type") {
        let v = new.get("type").and_then(Value::as_str).unwrap_or("");
        return Err(invalid(
            "type",
            "FieldValueInvalid",
            format!("Invalid value: \"{v}\": field is immutable"),
        ));
    }
    if old.get("immutable") == Some(&json!(true)) {
        let forbidden = "Forbidden: field is immutable when `immutable` is set".to_string();
        if new.get("immutable") != Some(&json!(true)) {
            return Err(invalid("immutable", "FieldValueForbidden", forbidden));
        }
        for field in ["data", "binaryData"] {
            if old.get(field) != new.get(field) {
                return Err(invalid(field, "FieldValueForbidden", forbidden));
            }
        }
    }
    Ok(())
}

/// `PatchOptions` validation (422 `PatchOptions.meta.k8s.io "" is invalid`), as kube-apiserver does it
/// before looking at the body.
fn check_patch_options(ctx: &Ctx, kind: PatchKind) -> ApiResult<()> {
    let invalid = |field: &str, reason: &str, msg: &str| {
        ApiError::new(
            422,
            "Invalid",
            format!("PatchOptions.meta.k8s.io \"\" is invalid: {field}: {msg}"),
        )
        .with_details(json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
            {"reason": reason, "message": msg, "field": field}
        ]}))
    };
    let manager = ctx.q.get("fieldManager").map(String::as_str).unwrap_or("");
    if kind == PatchKind::Apply && manager.is_empty() {
        return Err(invalid(
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        ));
    }
    if kind != PatchKind::Apply && ctx.q.contains_key("force") {
        return Err(invalid(
            "force",
            "FieldValueForbidden",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    if manager.len() > 128 {
        let msg = if ctx.st.version == crate::config::KubeVersion::V1_24 {
            "Too long: must have at most 128 bytes"
        } else {
            "Too long: may not be more than 128 bytes"
        };
        return Err(invalid("fieldManager", "FieldValueTooLong", msg));
    }
    Ok(())
}

/// kube-apiserver 1.24 re-writes an unchanged webhook configuration on every server-side apply (only
/// `managedFields[].time` changes, the resourceVersion moves); newer versions write nothing.
fn rewrites_unchanged_apply(ctx: &Ctx) -> bool {
    let apply = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/apply-patch"));
    ctx.st.version == crate::config::KubeVersion::V1_24
        && apply
        && ctx.t.def.group == "admissionregistration.k8s.io"
        && matches!(
            ctx.t.def.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        )
}

/// 1.24 stamped an applier's managedFields entry with the time of every apply, changed or not.
fn stamp_apply_time_1_24(st: &State, mut obj: Value, manager: &str, sub: Option<&str>) -> Value {
    if st.version != crate::config::KubeVersion::V1_24 {
        return obj;
    }
    let now = now_rfc3339();
    if let Some(entries) = obj.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut) {
        for e in entries {
            let mine = e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
                && e.get("subresource").and_then(Value::as_str) == sub;
            if mine {
                e["time"] = json!(now);
            }
        }
    }
    obj
}

/// Admission + compare-and-swap. `Ok(None)` = lost a race, retry.
pub(crate) async fn commit_update(ctx: &mut Ctx, old: Arc<Value>, new: Value) -> ApiResult<Option<Value>> {
    if strip_volatile(&old) == strip_volatile(&new) && !rewrites_unchanged_apply(ctx) {
        return Ok(Some((*old).clone()));
    }
    let new = crate::admission::admit(ctx, "UPDATE", Some(new), Some(&old))
        .await?
        .unwrap_or_default();
    if ctx.dry_run() {
        return Ok(Some(new));
    }
    let gr = ctx.gr();
    let ns = ctx.t.ns().to_string();
    let name = name_of(&old).to_string();
    if meta_str(&old, "deletionTimestamp").is_some() && finalizers_of(&new).is_empty() {
        return match ctx.st.store.remove(&gr, &ns, &name, rv_of(&old)) {
            Cas::Stale => Ok(None),
            Cas::Ok(o) => {
                ctx.changed = true;
                after_remove(&ctx.st, &gr, &ns, &o);
                // the answer is the object as last written (without finalizers), at the deletion's version
                let mut out = new;
                if let (Some(m), Some(rv)) = (meta_mut(&mut out), o.pointer("/metadata/resourceVersion").cloned()) {
                    m.insert("resourceVersion".into(), rv);
                    m.remove("finalizers");
                }
                Ok(Some(out))
            }
        };
    }
    match ctx.st.store.replace(&gr, &ns, &name, rv_of(&old), new) {
        Cas::Stale => Ok(None),
        Cas::Ok(o) => {
            ctx.changed = true;
            after_write(&ctx.st, &gr, &o);
            Ok(Some((*o).clone()))
        }
    }
}

pub(crate) fn check_identity(ctx: &Ctx, obj: &Value, name: &str) -> ApiResult<()> {
    let bn = name_of(obj);
    if !bn.is_empty() && bn != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({bn}) does not match the name on the URL ({name})"
        )));
    }
    if ctx.t.def.namespaced {
        if let Some(ns) = meta_str(obj, "namespace").filter(|s| !s.is_empty()) {
            if ns != ctx.t.ns() {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
    }
    Ok(())
}

pub(crate) async fn update(ctx: &mut Ctx) -> ApiResult<Response> {
    let name = ctx.name()?;
    let mut body = parse_body(ctx)?;
    check_body_type(&ctx.t, &body)?;
    prune_unknown(ctx, &mut body)?;
    check_identity(ctx, &body, &name)?;
    if let Some(m) = meta_mut(&mut body) {
        m.insert("name".into(), json!(name));
    }
    let want_rv = meta_str(&body, "resourceVersion")
        .filter(|s| !s.is_empty())
        .map(|s| s.to_string());
    let manager = ctx.manager();
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
    // Leases and custom resources refuse an unconditional update (`AllowUnconditionalUpdate` false).
    let unconditional_ok = !(ctx.t.def.crd || (g == "coordination.k8s.io" && p == "leases"));
    if want_rv.is_none() && !unconditional_ok && ctx.st.store.get(&ctx.gr(), ctx.t.ns(), &name).is_some() {
        return Err(ApiError::invalid(
            &g,
            &p,
            &name,
            "metadata.resourceVersion",
            if ctx.st.version == crate::config::KubeVersion::V1_24 {
                "Invalid value: 0x0: must be specified for an update"
            } else {
                "Invalid value: 0: must be specified for an update"
            },
        ));
    }
    for _ in 0..MAX_RETRIES {
        let Some(old) = ctx.st.store.get(&ctx.gr(), ctx.t.ns(), &name) else {
            // Some kinds (Leases, Events) are created by a PUT of a missing object (`AllowCreateOnUpdate`).
            if ctx.t.sub.is_none() && crate::access::creates_on_update(&ctx.t) {
                if let Some(m) = meta_mut(&mut body) {
                    m.remove("resourceVersion");
                }
                match create_object(ctx, body.clone(), Some(&manager)).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    r => return r,
                }
            }
            return Err(ctx.not_found(&name));
        };
        if let Some(w) = &want_rv {
            if *w != rv_of(&old).to_string() {
                return Err(ApiError::stale(&g, &p, &name));
            }
        }
        let new = prepare_update(&ctx.st, &ctx.t, &old, body.clone(), Some(&manager))?;
        if let Some(out) = commit_update(ctx, old, new).await? {
            return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
        }
        if want_rv.is_some() {
            return Err(ApiError::stale(&g, &p, &name));
        }
    }
    Err(ApiError::stale(&g, &p, &name))
}

pub(crate) async fn patch(ctx: &mut Ctx) -> ApiResult<Response> {
    let name = ctx.name()?;
    let ct = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(kind) = PatchKind::from_content_type(ct) else {
        return Err(ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type").with_details(json!({})));
    };
    if kind == PatchKind::Strategic && ctx.t.def.crd {
        return Err(ApiError::unsupported_media(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    check_patch_options(ctx, kind)?;
    if kind == PatchKind::Apply {
        return apply(ctx, &name).await;
    }
    let manager = ctx.manager();
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
    for _ in 0..MAX_RETRIES {
        let old = ctx
            .st
            .store
            .get(&ctx.gr(), ctx.t.ns(), &name)
            .ok_or_else(|| ctx.not_found(&name))?;
        let mut doc = (*old).clone();
        apply_patch(kind, &mut doc, &ctx.body)?;
        if !doc.is_object() {
            return Err(ApiError::bad_request("patched object is not a JSON object"));
        }
        check_identity(ctx, &doc, &name)?;
        prune_unknown(ctx, &mut doc)?;
        let prv = meta_str(&doc, "resourceVersion").unwrap_or("").to_string();
        let precondition = !prv.is_empty() && prv != rv_of(&old).to_string();
        if precondition {
            return Err(ApiError::stale(&g, &p, &name));
        }
        let new = prepare_update(&ctx.st, &ctx.t, &old, doc, Some(&manager))?;
        if let Some(out) = commit_update(ctx, old, new).await? {
            return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
        }
    }
    Err(ApiError::stale(&g, &p, &name))
}

/// Server-side apply.
pub(crate) async fn apply(ctx: &mut Ctx, name: &str) -> ApiResult<Response> {
    let manager = ctx
        .q
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .cloned()
        .ok_or_else(|| ApiError::bad_request("fieldManager is required for apply requests"))?;
    let force = query_bool(&ctx.q, "force");
    let applied = parse_body(ctx)?;
    // An apply configuration must name this kind (`invalid object type: <group>/<version>, Kind=<kind>`).
    let av = applied.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let k = applied.get("kind").and_then(Value::as_str).unwrap_or("");
    if av != ctx.api_version() || k != ctx.t.def.kind {
        if ctx.st.version == crate::config::KubeVersion::V1_24 {
            // 1.24's wording for the same refusals
            if av != ctx.api_version() {
                return Err(ApiError::bad_request(format!(
                    "Incorrect version specified in apply patch. Specified patch version: {av}, expected: {}",
                    ctx.api_version()
                )));
            }
            return Err(ApiError::new(
                500,
                "",
                "failed to merge config: expected objects of the same type, but got {0x<ptr> {<nil> <nil> <nil>}} and {0x<ptr> {<nil> <nil> <nil>}}",
            ));
        }
        let gv = if av.contains('/') {
            av.to_string()
        } else {
            format!("/{av}")
        };
        return Err(ApiError::bad_request(format!("invalid object type: {gv}, Kind={k}")));
    }
    check_body_type(&ctx.t, &applied)?;
    check_identity(ctx, &applied, name)?;
    check_apply_schema(&ctx.st, &ctx.t, &applied, name)?;
    check_typed_patch(&ctx.t, &applied, name)?;
    let api_version = ctx.api_version();
    let sub = ctx.t.sub.clone();
    let has_status = ctx.t.def.has_status(&ctx.t.version);
    let schema = crd_schema(&ctx.t);
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
    for _ in 0..MAX_RETRIES {
        match ctx.st.store.get(&ctx.gr(), ctx.t.ns(), name) {
            None => {
                if ctx.t.sub.is_some() {
                    return Err(ctx.not_found(name));
                }
                let mut obj = crate::ssa::apply(
                    None,
                    &applied,
                    &manager,
                    force,
                    &api_version,
                    None,
                    has_status,
                    schema.as_ref(),
                )?;
                if let Some(m) = meta_mut(&mut obj) {
                    m.insert("name".into(), json!(name));
                }
                match create_object(ctx, obj, None).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    r => return r,
                }
            }
            Some(old) => {
                let merged = crate::ssa::apply(
                    Some(&old),
                    &applied,
                    &manager,
                    force,
                    &api_version,
                    sub.as_deref(),
                    has_status,
                    schema.as_ref(),
                )?;
                let merged = stamp_apply_time_1_24(&ctx.st, merged, &manager, sub.as_deref());
                // A resourceVersion in the configuration is a precondition (checked after field conflicts).
                if let Some(rv) = meta_str(&applied, "resourceVersion").filter(|s| !s.is_empty()) {
                    if rv != rv_of(&old).to_string() {
                        return Err(ApiError::stale(&g, &p, name));
                    }
                }
                let new = prepare_update(&ctx.st, &ctx.t, &old, merged, None)?;
                if let Some(out) = commit_update(ctx, old, new).await? {
                    return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
                }
            }
        }
    }
    Err(ApiError::stale(&g, &p, name))
}
