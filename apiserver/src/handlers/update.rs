//! UPDATE and PATCH (merge, JSON, strategic, server-side apply).

#[allow(clippy::wildcard_imports)]
use super::*;

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
    if tracks_generation(&t.def) && spec_part(old) != spec_part(&new) {
        let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        new["metadata"]["generation"] = json!(g + 1);
    }
    if let Some(mgr) = manager {
        crate::ssa::record_update(Some(old), &mut new, mgr, &api_version, t.sub.as_deref());
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

/// Admission + compare-and-swap. `Ok(None)` = lost a race, retry.
pub(crate) async fn commit_update(ctx: &mut Ctx, old: Arc<Value>, new: Value) -> ApiResult<Option<Value>> {
    if strip_volatile(&old) == strip_volatile(&new) {
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
                Ok(Some((*o).clone()))
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
    check_identity(ctx, &body, &name)?;
    if let Some(m) = meta_mut(&mut body) {
        m.insert("name".into(), json!(name));
    }
    let want_rv = meta_str(&body, "resourceVersion")
        .filter(|s| !s.is_empty())
        .map(|s| s.to_string());
    let manager = ctx.manager();
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
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
    let kind = PatchKind::from_content_type(ct).ok_or_else(|| {
        ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
        ))
    })?;
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
    for k in ["apiVersion", "kind"] {
        if applied.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "{k} must be set in an apply configuration"
            )));
        }
    }
    check_body_type(&ctx.t, &applied)?;
    check_identity(ctx, &applied, name)?;
    check_apply_schema(&ctx.st, &ctx.t, &applied, name)?;
    let api_version = ctx.api_version();
    let sub = ctx.t.sub.clone();
    let has_status = ctx.t.def.has_status(&ctx.t.version);
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
    for _ in 0..MAX_RETRIES {
        match ctx.st.store.get(&ctx.gr(), ctx.t.ns(), name) {
            None => {
                if ctx.t.sub.is_some() {
                    return Err(ctx.not_found(name));
                }
                let mut obj = crate::ssa::apply(None, &applied, &manager, force, &api_version, None, has_status)?;
                if let Some(m) = meta_mut(&mut obj) {
                    m.insert("name".into(), json!(name));
                }
                match create_object(ctx, obj, None).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    r => return r,
                }
            }
            Some(old) => {
                // A resourceVersion in the configuration is a precondition.
                if let Some(rv) = meta_str(&applied, "resourceVersion").filter(|s| !s.is_empty()) {
                    if rv != rv_of(&old).to_string() {
                        return Err(ApiError::stale(&g, &p, name));
                    }
                }
                let merged = crate::ssa::apply(
                    Some(&old),
                    &applied,
                    &manager,
                    force,
                    &api_version,
                    sub.as_deref(),
                    has_status,
                )?;
                let new = prepare_update(&ctx.st, &ctx.t, &old, merged, None)?;
                if let Some(out) = commit_update(ctx, old, new).await? {
                    return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
                }
            }
        }
    }
    Err(ApiError::stale(&g, &p, name))
}
