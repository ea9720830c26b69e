//! GET and LIST.

use crate::context::{ok_json, Ctx};
use crate::error::{ApiError, ApiResult};
use crate::render::{list_items, present, selectors, table, table_columns, wants_table};
use crate::util::{meta_str, name_of};
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde_json::{json, Value};

pub(crate) fn get(ctx: &mut Ctx) -> ApiResult<Response> {
    if ctx.t.sub.as_deref() == Some("finalize") {
        return Err(ApiError::method_not_allowed("finalize supports PUT only"));
    }
    let name = ctx.name()?;
    let obj = ctx
        .st
        .store
        .get(&ctx.gr(), ctx.t.ns(), &name)
        .ok_or_else(|| ctx.not_found(&name))?;
    if wants_table(&ctx.headers) {
        // `kubectl get <kind> <name>`: the same columns as the list.
        let meta = json!({"resourceVersion": crate::util::rv_of(&obj).to_string()});
        let table = table(&[present(&ctx.t, &obj)], meta, &table_columns(&ctx.t));
        return Ok(ok_json(StatusCode::OK, &table));
    }
    Ok(ok_json(StatusCode::OK, &present(&ctx.t, &obj)))
}

pub(crate) fn obj_key(o: &Value) -> (String, String) {
    (
        meta_str(o, "namespace").unwrap_or("").to_string(),
        name_of(o).to_string(),
    )
}

pub(crate) fn encode_continue(rv: u64, key: &(String, String)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([rv, key.0, key.1]).to_string().as_bytes())
}

pub(crate) fn decode_continue(s: &str) -> ApiResult<(u64, (String, String))> {
    let bad = || ApiError::bad_request("continue key is not valid");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get(0).and_then(Value::as_u64).ok_or_else(bad)?;
    let ns = v.get(1).and_then(Value::as_str).ok_or_else(bad)?;
    let name = v.get(2).and_then(Value::as_str).ok_or_else(bad)?;
    Ok((rv, (ns.to_string(), name.to_string())))
}

pub(crate) fn list(ctx: &mut Ctx) -> ApiResult<Response> {
    let (ls, fs) = selectors(&ctx.q)?;
    let limit: usize = match ctx.q.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        _ => 0,
    };
    let cont = match ctx.q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let (items, current) = ctx.st.store.list(&ctx.gr(), ctx.t.namespace.as_deref());
    let mut matched = items
        .iter()
        .filter(|o| cont.as_ref().is_none_or(|(_, k)| obj_key(o) > *k))
        .filter(|o| ls.matches(o) && fs.matches(o));
    let mut out = vec![];
    let mut next = None;
    let mut remaining = 0usize;
    for o in matched.by_ref() {
        if limit > 0 && out.len() == limit {
            remaining = 1 + matched.by_ref().count();
            break;
        }
        out.push(present(&ctx.t, o));
    }
    let list_rv = cont.as_ref().map(|(rv, _)| *rv).unwrap_or(current);
    if remaining > 0 {
        if let Some(last) = out.last() {
            next = Some(encode_continue(list_rv, &obj_key(last)));
        }
    }
    let mut meta = json!({ "resourceVersion": list_rv.to_string() });
    if let Some(n) = next {
        meta["continue"] = json!(n);
        // kube-apiserver counts the rest only when no selector filters it.
        if ctx.q.get("labelSelector").is_none_or(|s| s.is_empty())
            && ctx.q.get("fieldSelector").is_none_or(|s| s.is_empty())
        {
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    if wants_table(&ctx.headers) {
        let cols = table_columns(&ctx.t);
        return Ok(ok_json(StatusCode::OK, &table(&out, meta, &cols)));
    }
    let body = json!({
        "apiVersion": ctx.api_version(), "kind": ctx.t.def.list_kind,
        "metadata": meta, "items": list_items(&ctx.t, out),
    });
    Ok(ok_json(StatusCode::OK, &body))
}
