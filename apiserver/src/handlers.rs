//! Verb handlers: get, list, create, update, patch (incl. apply), delete, deletecollection.

use crate::error::{ApiError, ApiResult};
use crate::patch::{apply_patch, parse_json_or_yaml, PatchKind};
use crate::registry::ResourceDef;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{ok_json, Query, State, Target};
use crate::store::{Cas, Gr};
use crate::util::{
    finalizers_of, is_dns1123_label, is_dns1123_subdomain, meta_mut, meta_str, name_of, now_rfc3339, query_bool, rv_of,
    LABEL_MSG, SUBDOMAIN_MSG,
};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub(crate) struct Ctx {
    pub st: Arc<State>,
    pub t: Target,
    pub q: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub changed: bool,
    pub warnings: Vec<String>,
}

const MAX_RETRIES: usize = 32;

pub(crate) fn crd_gr() -> Gr {
    ("apiextensions.k8s.io".into(), "customresourcedefinitions".into())
}
pub(crate) fn ns_gr() -> Gr {
    (String::new(), "namespaces".into())
}

impl Ctx {
    fn gr(&self) -> Gr {
        self.t.gr()
    }
    fn name(&self) -> ApiResult<String> {
        self.t
            .name
            .clone()
            .ok_or_else(|| ApiError::method_not_allowed("a resource name is required"))
    }
    pub(crate) fn dry_run(&self) -> bool {
        self.q.get("dryRun").is_some_and(|v| v == "All")
    }
    /// `fieldManager` query parameter, or a name derived from the User-Agent.
    pub(crate) fn manager(&self) -> String {
        if let Some(m) = self.q.get("fieldManager").filter(|m| !m.is_empty()) {
            return m.clone();
        }
        self.headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }
    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.t.def.group, &self.t.def.plural, name)
    }
    fn api_version(&self) -> String {
        self.t.def.api_version(&self.t.version)
    }
}

pub(crate) async fn handle(ctx: &mut Ctx, verb: &str) -> ApiResult<Response> {
    if ctx.t.def.namespaced && ctx.t.name.is_some() && ctx.t.namespace.is_none() {
        return Err(ApiError::not_found_path());
    }
    if ctx.t.sub.as_deref() == Some("scale") {
        return scale(ctx, verb).await;
    }
    match verb {
        "get" => get(ctx),
        "list" => list(ctx),
        "watch" => crate::watch::watch(ctx),
        "create" => create(ctx).await,
        "update" => update(ctx).await,
        "patch" => patch(ctx).await,
        "delete" => delete(ctx).await,
        "deletecollection" => delete_collection(ctx).await,
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}

/// The object as served at the requested version.
pub(crate) fn present(t: &Target, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(t.def.api_version(&t.version)));
        m.insert("kind".into(), json!(t.def.kind));
    }
    o
}

fn get(ctx: &mut Ctx) -> ApiResult<Response> {
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

pub(crate) fn selectors(q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    let ls = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fs = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((ls, fs))
}

fn obj_key(o: &Value) -> (String, String) {
    (
        meta_str(o, "namespace").unwrap_or("").to_string(),
        name_of(o).to_string(),
    )
}

fn encode_continue(rv: u64, key: &(String, String)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([rv, key.0, key.1]).to_string().as_bytes())
}

fn decode_continue(s: &str) -> ApiResult<(u64, (String, String))> {
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

fn list(ctx: &mut Ctx) -> ApiResult<Response> {
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
        meta["remainingItemCount"] = json!(remaining);
    }
    if wants_table(&ctx.headers) {
        let cols = table_columns(&ctx.t);
        return Ok(ok_json(StatusCode::OK, &table(&out, meta, &cols)));
    }
    let body = json!({
        "apiVersion": ctx.api_version(), "kind": ctx.t.def.list_kind,
        "metadata": meta, "items": out,
    });
    Ok(ok_json(StatusCode::OK, &body))
}

pub(crate) fn wants_table(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// Age like kubectl prints it.
fn age(ts: &str) -> String {
    let Some(secs) = crate::util::parse_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let d = (now - secs).max(0);
    match d {
        0..120 => format!("{d}s"),
        120..7200 => format!("{}m", d / 60),
        7200..172800 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86400),
    }
}

/// Evaluates a simple JSONPath (`.status.phase`, `.spec.items[0].name`) for printer columns.
fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (key, idx) = match part.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !key.is_empty() {
            cur = cur.get(key)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// The columns of `kubectl get` for a resource: a CRD's `additionalPrinterColumns`; for Deployments the
/// built-in Ready (`ready/replicas`), Up-to-date, Available and Age; none (Name and Age) otherwise.
pub(crate) fn table_columns(t: &Target) -> Vec<Value> {
    if t.def.group == "apps" && t.def.plural == "deployments" {
        return vec![
            json!({"name": "Ready", "type": "string", "description": "Number of the pod with ready state",
                   "x-btp-ratio": [".status.readyReplicas", ".spec.replicas"]}),
            json!({"name": "Up-to-date", "type": "integer", "description": "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                   "x-btp-default": 0, "jsonPath": ".status.updatedReplicas"}),
            json!({"name": "Available", "type": "integer", "description": "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                   "x-btp-default": 0, "jsonPath": ".status.availableReplicas"}),
            json!({"name": "Age", "type": "string", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
                   "x-btp-age": true}),
        ];
    }
    t.def.version(&t.version).map(|v| v.columns.clone()).unwrap_or_default()
}

/// A `meta.k8s.io/v1` Table (what `kubectl get` asks for): Name, then `columns` (see [`table_columns`])
/// if there are any, else Age.
pub(crate) fn table(items: &[Value], list_meta: Value, columns: &[Value]) -> Value {
    let name_col = json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0});
    let mut defs = vec![name_col];
    if columns.is_empty() {
        defs.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    } else {
        for c in columns {
            defs.push(json!({
                "name": c.get("name").cloned().unwrap_or(json!("")),
                "type": c.get("type").cloned().unwrap_or(json!("string")),
                "format": c.get("format").cloned().unwrap_or(json!("")),
                "description": c.get("description").cloned().unwrap_or(json!("")),
                "priority": c.get("priority").cloned().unwrap_or(json!(0)),
            }));
        }
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut meta = o.get("metadata").cloned().unwrap_or(json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.remove("managedFields");
            }
            let mut cells = vec![json!(name_of(o))];
            if columns.is_empty() {
                cells.push(json!(age(meta_str(o, "creationTimestamp").unwrap_or(""))));
            } else {
                for c in columns {
                    cells.push(cell(o, c));
                }
            }
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta},
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": defs, "rows": rows,
    })
}

fn cell(o: &Value, c: &Value) -> Value {
    let number = |path: &str| json_path(o, path).and_then(Value::as_i64).unwrap_or(0);
    if let Some([a, b]) = c.get("x-btp-ratio").and_then(Value::as_array).map(Vec::as_slice) {
        let (a, b) = (a.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
        return json!(format!("{}/{}", number(a), number(b)));
    }
    if c.get("x-btp-age").is_some() {
        return json!(age(meta_str(o, "creationTimestamp").unwrap_or("")));
    }
    let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
    json_path(o, path)
        .cloned()
        .or_else(|| c.get("x-btp-default").cloned())
        .unwrap_or(Value::Null)
}

fn parse_body(ctx: &Ctx) -> ApiResult<Value> {
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

fn check_body_type(t: &Target, obj: &Value) -> ApiResult<()> {
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

fn validate_name(def: &ResourceDef, name: &str) -> ApiResult<()> {
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
fn check_namespace(st: &State, ns: &str, resource: &str, name: &str) -> ApiResult<()> {
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

/// Kind-specific defaulting applied on every write.
fn defaults(t: &Target, obj: &mut Value) -> ApiResult<()> {
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
            let now = now_rfc3339();
            // keep transition times stable across writes so re-applying a CRD is a no-op
            let since = |t: &str| -> Value {
                obj.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(t)))
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now))
            };
            let (names_since, est_since) = (since("NamesAccepted"), since("Established"));
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
            let mut accepted =
                json!({"plural": def.plural, "singular": def.singular, "kind": def.kind, "listKind": def.list_kind});
            if !def.short_names.is_empty() {
                accepted["shortNames"] = json!(def.short_names);
            }
            if !def.categories.is_empty() {
                accepted["categories"] = json!(def.categories);
            }
            obj["status"] = json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": names_since},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": est_since},
                ],
                "acceptedNames": accepted,
                "storedVersions": storage,
            });
        }
        _ => {}
    }
    Ok(())
}

/// Whether objects of this kind carry `metadata.generation` (a real API server sets it per kind; Secrets
/// and ConfigMaps have none).
fn tracks_generation(def: &ResourceDef) -> bool {
    !(def.group.is_empty() && matches!(def.plural.as_str(), "secrets" | "configmaps"))
}

/// Everything except metadata and status (what `generation` tracks).
fn spec_part(v: &Value) -> Map<String, Value> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn strip_volatile(v: &Value) -> Value {
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

async fn create(ctx: &mut Ctx) -> ApiResult<Response> {
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
    let manager = ctx.manager();
    create_object(ctx, obj, Some(&manager)).await
}

/// Shared by POST and apply-creates. `manager` = record an Update managedFields entry.
async fn create_object(ctx: &mut Ctx, mut obj: Value, manager: Option<&str>) -> ApiResult<Response> {
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
    if let Some(mgr) = manager {
        crate::ssa::record_update(None, &mut obj, mgr, &api_version, None);
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
            Ok(ok_json(StatusCode::CREATED, &present(&ctx.t, &stored)))
        }
        Err(_) => Err(ApiError::already_exists(&def.group, &def.plural, &name)),
    }
}

/// Registers CRDs after they are written.
fn after_write(st: &State, gr: &Gr, obj: &Value) {
    if *gr == crd_gr() {
        if let Ok(def) = crate::registry::def_from_crd(obj) {
            // a CRD that stopped serving a version keeps its objects; it simply is not served
            st.registry.insert(def);
        }
    }
}

/// Garbage collection: dependents of a removed owner are deleted (background propagation) or,
/// when they have other owners or the delete asked to orphan them, lose the owner reference.
fn collect_garbage(st: &State, ns: &str, owner: &Value, orphan: bool) {
    let Some(uid) = meta_str(owner, "uid") else { return };
    let scope = if ns.is_empty() { None } else { Some(ns) };
    for (gr, dep) in st.store.dependents(uid, scope) {
        let (dns, dname) = obj_key(&dep);
        let refs = dep
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let others: Vec<Value> = refs
            .into_iter()
            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
            .collect();
        if orphan || !others.is_empty() {
            let mut d = (*dep).clone();
            if let Some(m) = meta_mut(&mut d) {
                if others.is_empty() {
                    m.remove("ownerReferences");
                } else {
                    m.insert("ownerReferences".into(), Value::Array(others));
                }
            }
            let _ = st.store.replace(&gr, &dns, &dname, rv_of(&dep), d);
        } else {
            internal_delete(st, &gr, &dns, &dname);
        }
    }
}

/// Hooks after an object is really gone.
pub(crate) fn after_remove(st: &State, gr: &Gr, ns: &str, obj: &Value) {
    after_remove_opts(st, gr, ns, obj, false)
}

fn after_remove_opts(st: &State, gr: &Gr, ns: &str, obj: &Value, orphan: bool) {
    collect_garbage(st, ns, obj, orphan);
    if *gr == crd_gr() {
        if let Ok(def) = crate::registry::def_from_crd(obj) {
            st.registry.remove(&def.group, &def.plural);
            let key = def.key();
            let (items, _) = st.store.list(&key, None);
            for o in items {
                let (ons, oname) = obj_key(&o);
                let _ = st.store.remove(&key, &ons, &oname, 0);
            }
        }
    }
    if !ns.is_empty() {
        maybe_finish_namespace(st, ns);
    }
}

fn maybe_finish_namespace(st: &State, ns: &str) {
    if let Some(nso) = st.store.get(&ns_gr(), "", ns) {
        if nso.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
            && st.store.namespace_is_empty(ns)
        {
            let _ = st.store.remove(&ns_gr(), "", ns, 0);
        }
    }
}

fn mark_deleting(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = meta_mut(&mut o) {
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    o
}

/// Deletes without admission (namespace cleanup). Honours finalizers.
fn internal_delete(st: &State, gr: &Gr, ns: &str, name: &str) {
    for _ in 0..MAX_RETRIES {
        let Some(old) = st.store.get(gr, ns, name) else {
            return;
        };
        if !finalizers_of(&old).is_empty() {
            if meta_str(&old, "deletionTimestamp").is_some() {
                return;
            }
            if let Cas::Ok(_) = st.store.replace(gr, ns, name, rv_of(&old), mark_deleting(&old)) {
                return;
            }
        } else if let Cas::Ok(o) = st.store.remove(gr, ns, name, rv_of(&old)) {
            after_remove(st, gr, ns, &o);
            return;
        }
    }
}

/// `DELETE namespace`: marks it `Terminating` and returns; the namespace controller (a task here) deletes
/// its content after `Config::namespace_termination_delay` and removes the namespace once it is empty,
/// as a real cluster does a few seconds later. Meanwhile creates in it are refused (403).
fn delete_namespace(st: &Arc<State>, name: &str) -> ApiResult<Value> {
    let mut marked = None;
    for _ in 0..MAX_RETRIES {
        let Some(old) = st.store.get(&ns_gr(), "", name) else {
            return Err(ApiError::not_found("", "namespaces", name));
        };
        if old.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
            marked = Some(old);
            break;
        }
        let mut m = mark_deleting(&old);
        m["status"] = json!({"phase": "Terminating"});
        if let Cas::Ok(o) = st.store.replace(&ns_gr(), "", name, rv_of(&old), m) {
            marked = Some(o);
            break;
        }
    }
    let marked = marked.ok_or_else(|| ApiError::internal("namespace update kept conflicting"))?;
    let (st, ns) = (st.clone(), name.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(st.namespace_termination_delay).await;
        terminate_namespace(&st, &ns);
    });
    Ok((*marked).clone())
}

fn terminate_namespace(st: &State, name: &str) {
    for gr in st.store.resources_in_namespace(name) {
        let (items, _) = st.store.list(&gr, Some(name));
        for o in items {
            internal_delete(st, &gr, name, name_of(&o));
        }
    }
    maybe_finish_namespace(st, name);
}

/// Creates a namespace directly in the store (server start).
pub(crate) fn bootstrap_namespace(st: &State, name: &str) {
    let obj = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": name, "uid": crate::util::new_uid(), "creationTimestamp": now_rfc3339(),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    });
    let _ = st.store.create(&ns_gr(), "", name, obj);
}

/// Builds the object to store for an update of `old` with `body` (status separation,
/// immutable metadata, generation, defaults, managedFields).
fn prepare_update(t: &Target, old: &Value, body: Value, manager: Option<&str>) -> ApiResult<Value> {
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
    if tracks_generation(&t.def) && spec_part(old) != spec_part(&new) {
        let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        new["metadata"]["generation"] = json!(g + 1);
    }
    if let Some(mgr) = manager {
        crate::ssa::record_update(Some(old), &mut new, mgr, &api_version, t.sub.as_deref());
    }
    Ok(new)
}

/// Admission + compare-and-swap. `Ok(None)` = lost a race, retry.
async fn commit_update(ctx: &mut Ctx, old: Arc<Value>, new: Value) -> ApiResult<Option<Value>> {
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

fn check_identity(ctx: &Ctx, obj: &Value, name: &str) -> ApiResult<()> {
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

async fn update(ctx: &mut Ctx) -> ApiResult<Response> {
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
        let old = ctx
            .st
            .store
            .get(&ctx.gr(), ctx.t.ns(), &name)
            .ok_or_else(|| ctx.not_found(&name))?;
        if let Some(w) = &want_rv {
            if *w != rv_of(&old).to_string() {
                return Err(ApiError::stale(&g, &p, &name));
            }
        }
        let new = prepare_update(&ctx.t, &old, body.clone(), Some(&manager))?;
        if let Some(out) = commit_update(ctx, old, new).await? {
            return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
        }
        if want_rv.is_some() {
            return Err(ApiError::stale(&g, &p, &name));
        }
    }
    Err(ApiError::stale(&g, &p, &name))
}

async fn patch(ctx: &mut Ctx) -> ApiResult<Response> {
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
        let new = prepare_update(&ctx.t, &old, doc, Some(&manager))?;
        if let Some(out) = commit_update(ctx, old, new).await? {
            return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
        }
    }
    Err(ApiError::stale(&g, &p, &name))
}

/// Server-side apply.
async fn apply(ctx: &mut Ctx, name: &str) -> ApiResult<Response> {
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
                let merged = crate::ssa::apply(
                    Some(&old),
                    &applied,
                    &manager,
                    force,
                    &api_version,
                    sub.as_deref(),
                    has_status,
                )?;
                let new = prepare_update(&ctx.t, &old, merged, None)?;
                if let Some(out) = commit_update(ctx, old, new).await? {
                    return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
                }
            }
        }
    }
    Err(ApiError::stale(&g, &p, name))
}

#[derive(Default)]
struct DeleteOpts {
    uid: Option<String>,
    rv: Option<String>,
    dry_run: bool,
    orphan: bool,
}

fn delete_opts(ctx: &Ctx) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts {
        dry_run: ctx.dry_run(),
        orphan: ctx.q.get("propagationPolicy").is_some_and(|p| p == "Orphan") || query_bool(&ctx.q, "orphanDependents"),
        ..Default::default()
    };
    if !ctx.body.is_empty() {
        let v: Value = serde_json::from_slice(&ctx.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        o.uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.rv = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            o.orphan = true;
        }
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            o.orphan = p == "Orphan";
            if !matches!(p, "Orphan" | "Background" | "Foreground") {
                return Err(ApiError::invalid(
                    "",
                    "DeleteOptions",
                    "",
                    "propagationPolicy",
                    &format!("Unsupported value: {p:?}"),
                ));
            }
        }
        if v.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"))
        {
            o.dry_run = true;
        }
    }
    Ok(o)
}

async fn delete_one(ctx: &mut Ctx, name: &str, opts: &DeleteOpts) -> ApiResult<Value> {
    let gr = ctx.gr();
    let ns = ctx.t.ns().to_string();
    let (g, p) = (ctx.t.def.group.clone(), ctx.t.def.plural.clone());
    let mut admitted = false;
    for _ in 0..MAX_RETRIES {
        let old = ctx.st.store.get(&gr, &ns, name).ok_or_else(|| ctx.not_found(name))?;
        if let Some(u) = &opts.uid {
            let actual = meta_str(&old, "uid").unwrap_or("");
            if u != actual {
                return Err(ApiError::conflict(
                    &g,
                    &p,
                    name,
                    &format!("Precondition failed: UID in precondition: {u}, UID in object meta: {actual}"),
                ));
            }
        }
        if let Some(r) = &opts.rv {
            let actual = rv_of(&old).to_string();
            if *r != actual {
                return Err(ApiError::conflict(
                    &g,
                    &p,
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {r}, ResourceVersion in object meta: {actual}"),
                ));
            }
        }
        if !admitted {
            crate::admission::admit(ctx, "DELETE", None, Some(&old)).await?;
            admitted = true;
        }
        if opts.dry_run {
            return Ok((*old).clone());
        }
        if gr == ns_gr() {
            let out = delete_namespace(&ctx.st, name)?;
            ctx.changed = true;
            return Ok(out);
        }
        if !finalizers_of(&old).is_empty() {
            if meta_str(&old, "deletionTimestamp").is_some() {
                return Ok((*old).clone());
            }
            if let Cas::Ok(o) = ctx.st.store.replace(&gr, &ns, name, rv_of(&old), mark_deleting(&old)) {
                ctx.changed = true;
                return Ok((*o).clone());
            }
        } else if let Cas::Ok(o) = ctx.st.store.remove(&gr, &ns, name, rv_of(&old)) {
            ctx.changed = true;
            after_remove_opts(&ctx.st, &gr, &ns, &o, opts.orphan);
            return Ok((*o).clone());
        }
    }
    Err(ApiError::stale(&g, &p, name))
}

async fn delete(ctx: &mut Ctx) -> ApiResult<Response> {
    if ctx.t.sub.is_some() {
        return Err(ApiError::method_not_allowed("DELETE is not supported on subresources"));
    }
    let name = ctx.name()?;
    let opts = delete_opts(ctx)?;
    let out = delete_one(ctx, &name, &opts).await?;
    let still_there = ctx.st.store.get(&ctx.gr(), ctx.t.ns(), &name).is_some();
    if still_there || opts.dry_run || ctx.t.gr() == ns_gr() {
        return Ok(ok_json(StatusCode::OK, &present(&ctx.t, &out)));
    }
    // like the real server: an immediate deletion answers with a Success Status
    let mut details = json!({"name": name, "kind": ctx.t.def.plural});
    if !ctx.t.def.group.is_empty() {
        details["group"] = json!(ctx.t.def.group);
    }
    if let Some(uid) = meta_str(&out, "uid") {
        details["uid"] = json!(uid);
    }
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details});
    Ok(ok_json(StatusCode::OK, &status))
}

async fn delete_collection(ctx: &mut Ctx) -> ApiResult<Response> {
    let (ls, fs) = selectors(&ctx.q)?;
    let opts = delete_opts(ctx)?;
    let (items, _) = ctx.st.store.list(&ctx.gr(), ctx.t.namespace.as_deref());
    let mut out = vec![];
    for o in items.iter().filter(|o| ls.matches(o) && fs.matches(o)) {
        let (ons, oname) = obj_key(o);
        let saved = ctx.t.namespace.clone();
        if ctx.t.def.namespaced {
            ctx.t.namespace = Some(ons);
        }
        let r = delete_one(ctx, &oname, &opts).await;
        ctx.t.namespace = saved;
        match r {
            Ok(v) => out.push(present(&ctx.t, &v)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let body = json!({
        "apiVersion": ctx.api_version(), "kind": ctx.t.def.list_kind,
        "metadata": {"resourceVersion": ctx.st.store.current_rv().to_string()}, "items": out,
    });
    Ok(ok_json(StatusCode::OK, &body))
}

/// The `autoscaling/v1` Scale view of a Deployment.
fn scale_of(obj: &Value) -> Value {
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
async fn scale(ctx: &mut Ctx, verb: &str) -> ApiResult<Response> {
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
        let new = prepare_update(&main, &old, body, Some(&manager))?;
        if let Some(out) = commit_update(ctx, old, new).await? {
            return Ok(ok_json(StatusCode::OK, &scale_of(&out)));
        }
    }
    Err(ApiError::stale(&g, &p, &name))
}
