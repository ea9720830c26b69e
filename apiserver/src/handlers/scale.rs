//! The Deployment `scale` subresource.

use super::shared::{parse_body, MAX_RETRIES};
use super::update::{commit_update, prepare_update};
use crate::context::{ok_json, Ctx};
use crate::error::{ApiError, ApiResult};
use crate::patch::{apply_patch, PatchKind};
use crate::util::{meta_str, rv_of};
use axum::http::{header, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

/// The `autoscaling/v1` Scale view of a Deployment.
pub(crate) fn scale_of(obj: &Value) -> Value {
    let mut meta = json!({});
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = obj.get("metadata").and_then(|m| m.get(k)) {
            meta[k] = v.clone();
        }
    }
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

/// GET/PUT/PATCH on `deployments/<name>/scale`.
pub(crate) async fn scale(ctx: &mut Ctx, verb: &str) -> ApiResult<Response> {
    let name = ctx.name()?;
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
    if !matches!(verb, "get" | "update" | "patch") {
        return Err(ApiError::method_not_allowed(
            "the scale subresource supports get, update and patch",
        ));
    }
    let manager = ctx.manager();
    let mut main = ctx.t.clone();
    main.sub = None;
    for _ in 0..MAX_RETRIES {
        let old = ctx
            .st
            .store
            .get(&ctx.gr(), ctx.t.ns(), &name)
            .ok_or_else(|| ctx.not_found(&name))?;
        let current = scale_of(&old);
        if verb == "get" {
            return Ok(ok_json(StatusCode::OK, &current));
        }
        let wanted = if verb == "update" {
            parse_body(ctx)?
        } else {
            let ct = ctx
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(ct)
                .filter(|k| *k != PatchKind::Apply)
                .ok_or_else(|| ApiError::unsupported_media(format!("unsupported patch type {ct:?}")))?;
            let mut doc = current.clone();
            apply_patch(kind, &mut doc, &ctx.body)?;
            doc
        };
        let want_rv = meta_str(&wanted, "resourceVersion").unwrap_or("");
        if !want_rv.is_empty() && want_rv != rv_of(&old).to_string() {
            return Err(ApiError::stale(&g, &p, &name));
        }
        let replicas = wanted
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .ok_or_else(|| ApiError::invalid("autoscaling", "Scale", &name, "spec.replicas", "Required value"))?;
        let mut body = (*old).clone();
        body["spec"]["replicas"] = json!(replicas);
        let new = prepare_update(&ctx.st, &main, &old, body, Some(&manager))?;
        if let Some(out) = commit_update(ctx, old, new).await? {
            return Ok(ok_json(StatusCode::OK, &scale_of(&out)));
        }
    }
    Err(ApiError::stale(&g, &p, &name))
}
