//! CREATE.

use super::delete::collect_if_dangling;
use super::shared::{
    admit_priority, after_write, check_body_type, check_namespace, crd_schema, defaults, drop_unknown_to_version,
    parse_body, prune_unknown, tracks_generation, validate_match_conditions, validate_name, validate_schema,
};
use crate::context::{ok_json, Ctx};
use crate::error::{ApiError, ApiResult};
use crate::render::present;
use crate::util::{meta_mut, now_rfc3339};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

pub(crate) async fn create(ctx: &mut Ctx) -> ApiResult<Response> {
    if ctx.t.name.is_some() || ctx.t.sub.is_some() {
        return Err(ApiError::method_not_allowed(
            "POST is not supported on this path; use the collection",
        ));
    }
    if ctx.t.def.namespaced && ctx.t.namespace.is_none() {
        return Err(ApiError::not_found_path());
    }
    let obj = parse_body(ctx)?;
    check_body_type(&ctx.t, &obj)?;
    if ctx.t.def.group == "authorization.k8s.io" && ctx.t.def.plural == "subjectaccessreviews" {
        return Ok(ok_json(StatusCode::CREATED, &crate::access::review(&ctx.st, &obj)));
    }
    let manager = ctx.manager();
    create_object(ctx, obj, Some(&manager)).await
}

/// Shared by POST and apply-creates. `manager` = record an Update managedFields entry.
pub(crate) async fn create_object(ctx: &mut Ctx, mut obj: Value, manager: Option<&str>) -> ApiResult<Response> {
    let def = ctx.t.def.clone();
    let ns = ctx.t.ns().to_string();
    let Some(meta) = meta_mut(&mut obj) else {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    };
    if def.namespaced {
        match meta.get("namespace").and_then(Value::as_str) {
            Some(x) if !x.is_empty() && x != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {
                meta.insert("namespace".into(), json!(ns));
            }
        }
    } else {
        meta.remove("namespace");
    }
    let mut name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if name.is_empty() {
        match meta.get("generateName").and_then(Value::as_str) {
            Some(g) if !g.is_empty() => {
                name = format!("{g}{}", crate::util::name_suffix());
                meta.insert("name".into(), json!(name));
            }
            _ => {
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ))
            }
        }
    }
    if let Some(n) = &ctx.t.name {
        if *n != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({n})"
            )));
        }
    }
    validate_name(&def, &name)?;
    if def.namespaced {
        check_namespace(&ctx.st, &ns, &def.plural, &name)?;
    }
    if def.group.is_empty() && def.plural == "pods" {
        admit_priority(&ctx.st, &mut obj, &name)?;
    }
    let api_version = ctx.api_version();
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(def.kind));
    }
    let now = now_rfc3339();
    if let Some(meta) = meta_mut(&mut obj) {
        meta.insert("uid".into(), json!(crate::util::new_uid()));
        meta.insert("creationTimestamp".into(), json!(now));
        if tracks_generation(&def) {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("resourceVersion");
        meta.remove("selfLink");
    }
    if def.has_status(&ctx.t.version) {
        if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
    }
    defaults(&ctx.t, &mut obj)?;
    drop_unknown_to_version(&ctx.st, &ctx.t, &mut obj);
    prune_unknown(ctx, &mut obj)?;
    validate_schema(&ctx.t, &obj)?;
    validate_match_conditions(&ctx.t, &obj)?;
    if let Some(mgr) = manager {
        let schema = crd_schema(&ctx.t);
        crate::ssa::record_update(None, &mut obj, mgr, &api_version, None, schema.as_ref());
    }
    let mut obj = crate::admission::admit(ctx, "CREATE", Some(obj), None)
        .await?
        .unwrap_or_default();
    if ctx.dry_run() {
        return Ok(ok_json(StatusCode::CREATED, &present(&ctx.t, &obj)));
    }
    if let Some(meta) = meta_mut(&mut obj) {
        meta.insert("name".into(), json!(name));
    }
    match ctx.st.store.create(&ctx.gr(), &ns, &name, obj) {
        Ok(stored) => {
            ctx.changed = true;
            after_write(&ctx.st, &ctx.gr(), &stored);
            if def.namespaced {
                collect_if_dangling(&ctx.st, &ctx.gr(), &stored);
            }
            Ok(ok_json(StatusCode::CREATED, &present(&ctx.t, &stored)))
        }
        Err(_) => Err(ApiError::already_exists(&def.group, &def.plural, &name)),
    }
}
