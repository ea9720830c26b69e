//! DELETE, DELETE collection, finalizers, garbage collection and the namespace lifecycle.

use super::read::obj_key;
use super::shared::MAX_RETRIES;
use crate::context::{crd_gr, ns_gr, ok_json, Ctx, State};
use crate::error::{ApiError, ApiResult};
use crate::render::{list_items, present, selectors};
use crate::store::{Cas, Gr};
use crate::util::{finalizers_of, meta_mut, meta_str, name_of, now_rfc3339, query_bool, rv_of};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// Garbage collection: dependents of a removed owner are deleted (background propagation) or,
/// when they have other owners or the delete asked to orphan them, lose the owner reference.
pub(crate) fn collect_garbage(st: &State, ns: &str, owner: &Value, orphan: bool) {
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

/// The garbage collector's view of a new dependent: when none of its owners exists (looked up by uid in the
/// dependent's namespace, or cluster-wide for cluster-scoped owner kinds), it is deleted; an owner found only
/// in another namespace is reported with a Warning Event `OwnerRefInvalidNamespace`. Owner kinds the server
/// does not serve are left alone (the real collector cannot resolve them either and keeps retrying).
pub(crate) fn collect_if_dangling(st: &State, gr: &Gr, obj: &Value) {
    let refs = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if refs.is_empty() {
        return;
    }
    let (ns, name) = obj_key(obj);
    let mut all_missing = true;
    let mut wrong_ns = Vec::new();
    for r in &refs {
        let api_version = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let Some(def) = st.registry.by_kind(group, version, kind) else {
            return; // unresolvable owner kind: leave it
        };
        let owner_ns = if def.namespaced { ns.as_str() } else { "" };
        let oname = r.get("name").and_then(Value::as_str).unwrap_or("");
        let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
        let found = st.store.get(&def.key(), owner_ns, oname);
        if found.as_ref().is_some_and(|o| meta_str(o, "uid") == Some(uid)) {
            all_missing = false;
        } else if def.namespaced {
            let (items, _) = st.store.list(&def.key(), None);
            if items.iter().any(|o| meta_str(o, "uid") == Some(uid)) {
                wrong_ns.push(format!(
                    "ownerRef [{api_version}/{kind}, namespace: {ns}, name: {oname}, uid: {uid}] does not exist in namespace {ns:?}"
                ));
            }
        }
    }
    if !all_missing {
        return;
    }
    for message in wrong_ns {
        let now = now_rfc3339();
        let ev_name = format!("{name}.{}", crate::util::name_suffix());
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": ev_name, "namespace": ns, "uid": crate::util::new_uid(), "creationTimestamp": now},
            "involvedObject": {"kind": obj.get("kind").cloned().unwrap_or(Value::Null), "namespace": ns, "name": name,
                "uid": meta_str(obj, "uid").unwrap_or(""), "apiVersion": obj.get("apiVersion").cloned().unwrap_or(Value::Null)},
            "reason": "OwnerRefInvalidNamespace", "message": message,
            "source": {"component": "garbage-collector-controller"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": "Warning",
            "eventTime": null, "reportingComponent": "garbage-collector-controller", "reportingInstance": "",
        });
        let _ = st.store.create(&(String::new(), "events".into()), &ns, &ev_name, event);
    }
    internal_delete(st, gr, &ns, &name);
}

/// Hooks after an object is really gone.
pub(crate) fn after_remove(st: &State, gr: &Gr, ns: &str, obj: &Value) {
    after_remove_opts(st, gr, ns, obj, false)
}

pub(crate) fn after_remove_opts(st: &State, gr: &Gr, ns: &str, obj: &Value, orphan: bool) {
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

pub(crate) fn maybe_finish_namespace(st: &State, ns: &str) {
    if let Some(nso) = st.store.get(&ns_gr(), "", ns) {
        if nso.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
            && st.store.namespace_is_empty(ns)
        {
            let _ = st.store.remove(&ns_gr(), "", ns, 0);
        }
    }
}

pub(crate) fn mark_deleting(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = meta_mut(&mut o) {
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        // as `rest.BeforeDelete`: an object with a generation gets a new one when marked for deletion
        if let Some(g) = m.get("generation").and_then(Value::as_i64).filter(|g| *g > 0) {
            m.insert("generation".into(), json!(g + 1));
        }
    }
    o
}

/// Deletes without admission (namespace cleanup). Honours finalizers.
pub(crate) fn internal_delete(st: &State, gr: &Gr, ns: &str, name: &str) {
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
pub(crate) fn delete_namespace(st: &Arc<State>, name: &str) -> ApiResult<Value> {
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

pub(crate) fn terminate_namespace(st: &State, name: &str) {
    for gr in st.store.resources_in_namespace(name) {
        let (items, _) = st.store.list(&gr, Some(name));
        for o in items {
            internal_delete(st, &gr, name, name_of(&o));
        }
    }
    maybe_finish_namespace(st, name);
    report_remaining_content(st, name);
}

/// What the namespace controller writes into a Terminating namespace whose content is held by finalizers:
/// its five `NamespaceDeletion*` / `Namespace*Remaining` conditions.
fn report_remaining_content(st: &State, name: &str) {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut finalizers: std::collections::BTreeMap<String, usize> = Default::default();
    for gr in st.store.resources_in_namespace(name) {
        let (items, _) = st.store.list(&gr, Some(name));
        if items.is_empty() {
            continue;
        }
        *counts.entry(format!("{}.{}", gr.1, gr.0)).or_default() += items.len();
        for o in &items {
            for f in finalizers_of(o) {
                *finalizers.entry(f).or_default() += 1;
            }
        }
    }
    if counts.is_empty() {
        return;
    }
    let now = now_rfc3339();
    let cond = |t: &str, status: &str, reason: &str, message: String| json!({"type": t, "status": status, "lastTransitionTime": now, "reason": reason, "message": message});
    let resources = counts
        .iter()
        .map(|(r, n)| format!("{r} has {n} resource instances"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut conditions = vec![
        cond(
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        cond(
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        cond(
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        ),
        cond(
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {resources}"),
        ),
    ];
    if !finalizers.is_empty() {
        let fins = finalizers
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect::<Vec<_>>()
            .join(", ");
        conditions.push(cond(
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            format!("Some content in the namespace has finalizers remaining: {fins}"),
        ));
    }
    for _ in 0..MAX_RETRIES {
        let Some(nso) = st.store.get(&ns_gr(), "", name) else {
            return;
        };
        let mut n = (*nso).clone();
        n["status"]["conditions"] = Value::Array(conditions.clone());
        if let Cas::Ok(_) = st.store.replace(&ns_gr(), "", name, rv_of(&nso), n) {
            return;
        }
    }
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

#[derive(Default)]
pub(crate) struct DeleteOpts {
    uid: Option<String>,
    rv: Option<String>,
    dry_run: bool,
    orphan: bool,
    /// `propagationPolicy` was given explicitly as Orphan or Foreground: the owner is first marked with the
    /// `orphan` / `foregroundDeletion` finalizer (and answered as such), then the garbage collector's work
    /// is done and it goes.
    gc_finalizer: Option<&'static str>,
}

pub(crate) fn delete_opts(ctx: &Ctx) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts {
        dry_run: ctx.dry_run(),
        orphan: ctx.q.get("propagationPolicy").is_some_and(|p| p == "Orphan") || query_bool(&ctx.q, "orphanDependents"),
        gc_finalizer: match ctx.q.get("propagationPolicy").map(String::as_str) {
            Some("Orphan") => Some("orphan"),
            Some("Foreground") => Some("foregroundDeletion"),
            _ => None,
        },
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
            o.gc_finalizer = match p {
                "Orphan" => Some("orphan"),
                "Foreground" => Some("foregroundDeletion"),
                _ => None,
            };
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

pub(crate) async fn delete_one(ctx: &mut Ctx, name: &str, opts: &DeleteOpts) -> ApiResult<Value> {
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
                    &ctx.t.def.kind,
                    name,
                    &format!("the UID in the precondition ({u}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"),
                ));
            }
        }
        if let Some(r) = &opts.rv {
            let actual = rv_of(&old).to_string();
            if *r != actual {
                return Err(ApiError::conflict(
                    &g,
                    &ctx.t.def.kind,
                    name,
                    &format!("the ResourceVersion in the precondition ({r}) does not match the ResourceVersion in record ({actual}). The object might have been modified"),
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
        } else if let Some(fin) = opts.gc_finalizer {
            let mut marked = mark_deleting(&old);
            if let Some(m) = meta_mut(&mut marked) {
                m.insert("finalizers".into(), json!([fin]));
            }
            if let Cas::Ok(o) = ctx.st.store.replace(&gr, &ns, name, rv_of(&old), marked) {
                ctx.changed = true;
                // the garbage collector: dependents deleted (foreground) or unlinked (orphan), then the owner
                // loses the finalizer and goes
                collect_garbage(&ctx.st, &ns, &o, opts.orphan);
                if let Cas::Ok(gone) = ctx.st.store.remove(&gr, &ns, name, rv_of(&o)) {
                    after_remove_opts(&ctx.st, &gr, &ns, &gone, opts.orphan);
                }
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

pub(crate) async fn delete(ctx: &mut Ctx) -> ApiResult<Response> {
    if ctx.t.sub.is_some() {
        return Err(ApiError::method_not_allowed("DELETE is not supported on subresources"));
    }
    let name = ctx.name()?;
    let opts = delete_opts(ctx)?;
    let out = delete_one(ctx, &name, &opts).await?;
    let still_there = ctx.st.store.get(&ctx.gr(), ctx.t.ns(), &name).is_some();
    let would_stay = opts.dry_run && !finalizers_of(&out).is_empty();
    let marked = opts.gc_finalizer.is_some() && meta_str(&out, "deletionTimestamp").is_some();
    if (still_there && !opts.dry_run) || would_stay || marked || ctx.t.gr() == ns_gr() {
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

pub(crate) async fn delete_collection(ctx: &mut Ctx) -> ApiResult<Response> {
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
        "metadata": {"resourceVersion": ctx.st.store.current_rv().to_string()}, "items": list_items(&ctx.t, out),
    });
    Ok(ok_json(StatusCode::OK, &body))
}
