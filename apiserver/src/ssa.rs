//! Server-side apply and `metadata.managedFields` tracking (FieldsV1 `f:`/`k:` notation).
//!
//! Simplifications: maps merge recursively; lists whose items are all objects with a `name`
//! field merge by `name` (`k:{"name":...}`); every other list is atomic.

use crate::error::ApiError;
use crate::patch::is_named_list;
use crate::util::now_rfc3339;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// A field path in FieldsV1 element notation, e.g. `["f:spec", "f:containers", "k:{\"name\":\"c\"}", "f:image"]`.
pub type FieldPath = Vec<String>;
pub type FieldSet = BTreeSet<FieldPath>;

const META_IGNORED: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "generateName",
];

#[derive(Debug, Clone)]
struct Entry {
    raw: Map<String, Value>,
    manager: String,
    operation: String,
    subresource: String,
    set: FieldSet,
}

/// The `k:` element of a list item merged by `keys` (`k:{"name":"c"}`).
fn key_elem(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), item.get(k).cloned().unwrap_or(Value::Null));
    }
    format!("k:{}", Value::Object(m))
}

/// The schema of field `k` below `schema` (a CRD's structural schema; None: no schema there).
fn child<'a>(schema: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    let s = schema?;
    s.get("properties")
        .and_then(|p| p.get(k))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

/// How a list merges: by the keys its schema declares (`x-kubernetes-list-type: map`), atomically when
/// the schema says nothing, and, without a schema (built-in kinds), by `name` when every item has one.
fn list_keys(schema: Option<&Value>, a: &[Value]) -> Option<Vec<String>> {
    match schema {
        Some(s) if s.get("type").is_some() || s.get("items").is_some() => {
            if s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
                let keys: Vec<String> = s
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect();
                (!keys.is_empty()).then_some(keys)
            } else {
                None
            }
        }
        _ => is_named_list(a).then(|| vec!["name".to_string()]),
    }
}

fn same_key(a: &Value, b: &Value, keys: &[String]) -> bool {
    keys.iter().all(|k| a.get(k) == b.get(k))
}

/// Leaf fields and keyed-item nodes of a value.
fn collect(v: &Value, s: Option<&Value>, path: &mut FieldPath, leaves: &mut FieldSet, nodes: &mut FieldSet) {
    let keys = match v {
        Value::Array(a) => list_keys(s, a),
        _ => None,
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                path.push(format!("f:{k}"));
                collect(c, child(s, k), path, leaves, nodes);
                path.pop();
            }
        }
        Value::Array(a) if keys.is_some() && !a.is_empty() => {
            let keys = keys.unwrap_or_default();
            let item_schema = s.and_then(|s| s.get("items"));
            for item in a {
                path.push(key_elem(item, &keys));
                nodes.insert(path.clone());
                collect(item, item_schema, path, leaves, nodes);
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                leaves.insert(path.clone());
            }
        }
    }
}

/// Which top-level parts of an object a write at `sub` covers.
fn scoped(obj: &Value, sub: Option<&str>, has_status: bool) -> Value {
    let mut out = Map::new();
    let Some(m) = obj.as_object() else {
        return Value::Object(out);
    };
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" => {
                if sub == Some("status") || !has_status {
                    out.insert(k.clone(), v.clone());
                }
            }
            "metadata" => {
                if sub == Some("status") {
                    continue;
                }
                if let Some(mm) = v.as_object() {
                    let kept: Map<String, Value> = mm
                        .iter()
                        .filter(|(k, _)| !META_IGNORED.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    if !kept.is_empty() {
                        out.insert(k.clone(), Value::Object(kept));
                    }
                }
            }
            _ => {
                if sub != Some("status") {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

fn fields(obj: &Value, schema: Option<&Value>) -> (FieldSet, FieldSet) {
    let (mut l, mut n) = (FieldSet::new(), FieldSet::new());
    collect(obj, schema, &mut vec![], &mut l, &mut n);
    (l, n)
}

/// Value at a path.
pub fn get_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for e in path {
        cur = step(cur, e)?;
    }
    Some(cur)
}

fn step<'a>(cur: &'a Value, e: &str) -> Option<&'a Value> {
    if let Some(f) = e.strip_prefix("f:") {
        cur.get(f)
    } else if let Some(k) = e.strip_prefix("k:") {
        let key: Value = serde_json::from_str(k).ok()?;
        let km = key.as_object()?;
        cur.as_array()?
            .iter()
            .find(|it| km.iter().all(|(kk, kv)| it.get(kk) == Some(kv)))
    } else {
        None
    }
}

fn remove_at(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for e in parent {
        let next = if let Some(f) = e.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = e.strip_prefix("k:") {
            let Ok(key) = serde_json::from_str::<Value>(k) else {
                return;
            };
            let Some(km) = key.as_object().cloned() else {
                return;
            };
            cur.as_array_mut()
                .and_then(|a| a.iter_mut().find(|it| km.iter().all(|(kk, kv)| it.get(kk) == Some(kv))))
        } else {
            None
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(k) = last.strip_prefix("k:") {
        let Ok(key) = serde_json::from_str::<Value>(k) else {
            return;
        };
        let Some(km) = key.as_object() else { return };
        if let Some(a) = cur.as_array_mut() {
            a.retain(|it| !km.iter().all(|(kk, kv)| it.get(kk) == Some(kv)));
        }
    }
}

/// Human readable path, `.spec.containers[name="c"].image`.
pub fn path_string(p: &[String]) -> String {
    let mut s = String::new();
    for e in p {
        if let Some(f) = e.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let inner = serde_json::from_str::<Value>(k)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .map(|m| m.iter().map(|(a, b)| format!("{a}={b}")).collect::<Vec<_>>().join(","))
                .unwrap_or_default();
            s.push_str(&format!("[{inner}]"));
        }
    }
    s
}

/// Encodes a field set as a FieldsV1 object.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for p in set {
        let mut cur = &mut root;
        for e in p {
            let Some(m) = cur.as_object_mut() else { break };
            cur = m.entry(e.clone()).or_insert_with(|| json!({}));
        }
    }
    // owned nodes with children get "."
    for p in set {
        if let Some(node) = get_node_mut(&mut root, p) {
            if let Some(m) = node.as_object_mut() {
                if !m.is_empty() {
                    m.insert(".".into(), json!({}));
                }
            }
        }
    }
    root
}

fn get_node_mut<'a>(root: &'a mut Value, p: &[String]) -> Option<&'a mut Value> {
    let mut cur = root;
    for e in p {
        cur = cur.as_object_mut()?.get_mut(e)?;
    }
    Some(cur)
}

/// Decodes a FieldsV1 object into a field set.
pub fn decode(v: &Value) -> FieldSet {
    fn walk(v: &Value, path: &mut FieldPath, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        for (k, c) in m {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            if c.as_object().is_some_and(Map::is_empty) {
                out.insert(path.clone());
            } else {
                walk(c, path, out);
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut vec![], &mut out);
    out
}

fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    let raw = e.as_object()?.clone();
                    let s = |k: &str| raw.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    Some(Entry {
                        manager: s("manager"),
                        operation: s("operation"),
                        subresource: s("subresource"),
                        set: raw.get("fieldsV1").map(decode).unwrap_or_default(),
                        raw,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write_entries(obj: &mut Value, es: Vec<Entry>) {
    let arr: Vec<Value> = es
        .into_iter()
        .filter(|e| !e.set.is_empty())
        .map(|mut e| {
            e.raw.insert("fieldsType".into(), json!("FieldsV1"));
            e.raw.insert("fieldsV1".into(), encode(&e.set));
            Value::Object(e.raw)
        })
        .collect();
    if let Some(m) = crate::util::meta_mut(obj) {
        if arr.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(arr));
        }
    }
}

fn new_entry(manager: &str, op: &str, api_version: &str, sub: Option<&str>) -> Entry {
    let mut raw = Map::new();
    raw.insert("manager".into(), json!(manager));
    raw.insert("operation".into(), json!(op));
    raw.insert("apiVersion".into(), json!(api_version));
    if let Some(s) = sub {
        raw.insert("subresource".into(), json!(s));
    }
    Entry {
        raw,
        manager: manager.into(),
        operation: op.into(),
        subresource: sub.unwrap_or("").into(),
        set: FieldSet::new(),
    }
}

fn touch(e: &mut Entry, api_version: &str) {
    e.raw.insert("time".into(), json!(now_rfc3339()));
    e.raw.insert("apiVersion".into(), json!(api_version));
}

/// Records an `Update` managedFields entry for a non-apply write: the manager takes ownership
/// of every field it changed; fields that no longer exist are dropped from all entries.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    sub: Option<&str>,
    schema: Option<&Value>,
) {
    let mut es = entries(new);
    let scope_new = scoped(new, sub, sub.is_none());
    let (l, n) = fields(&scope_new, schema);
    let empty = json!({});
    let old_v = old.unwrap_or(&empty);
    let mut changed: FieldSet = l
        .union(&n)
        .filter(|p| get_at(old_v, p) != get_at(new, p))
        .cloned()
        .collect();
    // A map the update creates is itself a member of the writer's set (the `.` entry of FieldsV1), as
    // structured-merge-diff records it for `data`, `labels`, a custom resource's `spec`/`status`, ...
    let mut created = Vec::new();
    created_maps(&scope_new, old_v, &mut vec![], &mut created);
    changed.extend(created);
    for e in es.iter_mut() {
        e.set.retain(|p| get_at(new, p).is_some());
    }
    if !changed.is_empty() {
        for e in es.iter_mut() {
            e.set.retain(|p| !changed.contains(p));
        }
        let idx = es
            .iter()
            .position(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub.unwrap_or(""));
        let idx = match idx {
            Some(i) => i,
            None => {
                es.push(new_entry(manager, "Update", api_version, sub));
                es.len() - 1
            }
        };
        es[idx].set.extend(changed);
        touch(&mut es[idx], api_version);
    }
    write_entries(new, es);
}

/// Paths of the maps in `new` (below the top level, outside `metadata` itself) that `old` does not have.
fn created_maps(new: &Value, old: &Value, path: &mut Vec<String>, out: &mut Vec<FieldPath>) {
    let Some(m) = new.as_object() else { return };
    for (k, v) in m {
        if !v.is_object() {
            continue;
        }
        path.push(format!("f:{k}"));
        let top_meta = path.len() == 1 && k == "metadata";
        if !top_meta && !path.is_empty() && get_at(old, path).is_none() {
            out.push(path.clone());
        }
        created_maps(v, old, path, out);
        path.pop();
    }
}

/// Recursive apply merge: maps merge, keyed lists merge by their keys (see [`list_keys`]), others replace.
fn merge(dst: &mut Value, src: &Value, schema: Option<&Value>) {
    match (dst.as_object_mut(), src) {
        (Some(d), Value::Object(s)) => {
            for (k, v) in s {
                let cs = child(schema, k);
                match d.get_mut(k) {
                    Some(cur) => match (cur, v) {
                        (c @ Value::Object(_), Value::Object(_)) => merge(c, v, cs),
                        (Value::Array(ca), Value::Array(va))
                            if list_keys(cs, va).is_some()
                                || (va.is_empty() && cs.is_none())
                                || (va.is_empty() && list_keys(cs, ca).is_some()) =>
                        {
                            let keys = list_keys(cs, va)
                                .or_else(|| list_keys(cs, ca))
                                .unwrap_or_else(|| vec!["name".to_string()]);
                            let item_schema = cs.and_then(|s| s.get("items"));
                            for item in va {
                                match ca.iter_mut().find(|c| same_key(c, item, &keys)) {
                                    Some(c) => merge(c, item, item_schema),
                                    None => ca.push(item.clone()),
                                }
                            }
                        }
                        (c, v) => *c = v.clone(),
                    },
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => *dst = src.clone(),
    }
}

/// Server-side apply of `applied` onto `old` (None = create). Returns the merged object with
/// updated managedFields, or a 409 Conflict listing conflicting fields and their managers.
#[allow(clippy::too_many_arguments)] // the apply request, spelled out
pub fn apply(
    old: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    sub: Option<&str>,
    has_status: bool,
    schema: Option<&Value>,
) -> Result<Value, ApiError> {
    let mut obj = old.cloned().unwrap_or_else(|| json!({}));
    let mut es = entries(&obj);
    let scope = scoped(applied, sub, has_status);
    let (leaves, nodes) = fields(&scope, schema);
    let all: FieldSet = leaves.union(&nodes).cloned().collect();
    let subr = sub.unwrap_or("");
    let mine = es
        .iter()
        .position(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subr);

    // conflicts with other managers
    let mut conflicts: Vec<(usize, FieldPath)> = vec![];
    for (i, e) in es.iter().enumerate() {
        if e.manager == manager {
            continue;
        }
        for p in e.set.intersection(&leaves) {
            if get_at(&obj, p) != get_at(&scope, p) {
                conflicts.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let n = conflicts.len();
        let mut by_mgr: Vec<(String, Vec<String>)> = vec![];
        let mut causes = vec![];
        for (i, p) in &conflicts {
            // structured-merge-diff names an applier by its name, an updater with its apiVersion.
            let m = if es[*i].operation == "Apply" {
                format!("\"{}\"", es[*i].manager)
            } else {
                format!(
                    "\"{}\" using {}",
                    es[*i].manager,
                    es[*i].raw.get("apiVersion").and_then(Value::as_str).unwrap_or("")
                )
            };
            causes.push(json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": path_string(p)}));
            match by_mgr.iter_mut().find(|(k, _)| *k == m) {
                Some((_, v)) => v.push(path_string(p)),
                None => by_mgr.push((m, vec![path_string(p)])),
            }
        }
        let body = if n == 1 {
            format!("conflict with {}: {}", by_mgr[0].0, by_mgr[0].1[0])
        } else {
            by_mgr
                .iter()
                .map(|(m, ps)| {
                    let lines: Vec<String> = ps.iter().map(|p| format!("- {p}")).collect();
                    format!("conflicts with {m}:\n{}", lines.join("\n"))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let msg = format!(
            "Apply failed with {n} conflict{}: {body}",
            if n == 1 { "" } else { "s" }
        );
        return Err(ApiError::new(409, "Conflict", msg).with_details(json!({"causes": causes})));
    }
    for (i, p) in &conflicts {
        es[*i].set.remove(p);
    }

    // fields this manager applied before and omits now are removed unless owned by others
    if let Some(mi) = mine {
        let prev = es[mi].set.clone();
        let mut removed: Vec<&FieldPath> = prev.difference(&all).collect();
        // parents first; a removed list item takes its fields with it
        removed.sort_by_key(|p| p.len());
        let mut gone: Vec<&FieldPath> = vec![];
        for p in removed {
            if gone.iter().any(|g| p.starts_with(g)) {
                continue;
            }
            let owned_elsewhere = es
                .iter()
                .enumerate()
                .any(|(i, e)| i != mi && e.set.iter().any(|q| q.starts_with(p)));
            let still_applied = all.iter().any(|q| q.starts_with(p));
            if !owned_elsewhere && !still_applied {
                remove_at(&mut obj, p);
                gone.push(p);
                // a map left empty by the removal goes too, unless someone owns it or applies it
                let mut parent = p[..p.len().saturating_sub(1)].to_vec();
                while !parent.is_empty() {
                    let empty = get_at(&obj, &parent).is_some_and(|v| v.as_object().is_some_and(Map::is_empty));
                    let owned = es.iter().enumerate().any(|(i, e)| i != mi && e.set.contains(&parent))
                        || all.iter().any(|q| q.starts_with(&parent));
                    if !empty || owned {
                        break;
                    }
                    remove_at(&mut obj, &parent);
                    parent.pop();
                }
            }
        }
    }

    // merge
    let mut src = applied.clone();
    if let Some(m) = src.as_object_mut() {
        if sub == Some("status") {
            m.retain(|k, _| k == "status");
        } else if has_status {
            m.remove("status");
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| !META_IGNORED.contains(&k.as_str()) || k == "name");
        }
    }
    merge(&mut obj, &src, schema);
    if let (Some(o), Some(a)) = (obj.as_object_mut(), applied.as_object()) {
        for k in ["apiVersion", "kind"] {
            if let Some(v) = a.get(k) {
                o.insert(k.into(), v.clone());
            }
        }
    }

    let idx = match mine {
        Some(i) => i,
        None => {
            es.push(new_entry(manager, "Apply", api_version, sub));
            es.len() - 1
        }
    };
    es[idx].set = all;
    // structured-merge-diff stamps the applier's entry with a time only when the apply changed the object
    // (a new co-owner of unchanged fields gets an entry without `time`).
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = crate::util::meta_mut(&mut v) {
            m.remove("managedFields");
        }
        v
    };
    // (the field manager compares before the status subresource's rules drop a status sent to the main
    // resource, so such a status counts as a change here)
    let status_sent = sub.is_none()
        && has_status
        && applied
            .get("status")
            .is_some_and(|s| old.and_then(|o| o.get("status")) != Some(s));
    let changed = status_sent || old.is_none_or(|o| strip(o) != strip(&obj));
    if changed {
        touch(&mut es[idx], api_version);
    } else {
        es[idx].raw.insert("apiVersion".into(), json!(api_version));
    }
    write_entries(&mut obj, es);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fieldsv1_roundtrip() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "image": "x"}], "replicas": 2}});
        let (l, n) = fields(&obj, None);
        let set: FieldSet = l.union(&n).cloned().collect();
        let enc = encode(&set);
        assert_eq!(
            enc,
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:replicas": {}, "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}}}}})
        );
        assert_eq!(decode(&enc), set);
    }

    #[test]
    fn apply_conflict_force_and_removal() {
        let a1 =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
        let o = apply(None, &a1, "m1", false, "v1", None, false, None).unwrap();
        let a2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "9"}});
        let e = apply(Some(&o), &a2, "m2", false, "v1", None, false, None).unwrap_err();
        assert_eq!(e.code, 409);
        assert!(e.message.contains("\"m1\""), "{}", e.message);
        assert!(e.message.contains(".data.a"), "{}", e.message);
        let o2 = apply(Some(&o), &a2, "m2", true, "v1", None, false, None).unwrap();
        assert_eq!(o2["data"], json!({"a": "9", "b": "2"}));
        // m1 re-applies without b: b removed (a now owned by m2 -> conflict unless same value)
        let a3 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "9"}});
        let o3 = apply(Some(&o2), &a3, "m1", false, "v1", None, false, None).unwrap();
        assert_eq!(o3["data"], json!({"a": "9"}));
        // m1 applies an empty data map: nothing else owned by m1 remains
        let a4 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"z": "1"}});
        let o4 = apply(Some(&o3), &a4, "m1", false, "v1", None, false, None).unwrap();
        let a5 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}});
        let o5 = apply(Some(&o4), &a5, "m1", false, "v1", None, false, None).unwrap();
        assert_eq!(o5["data"], json!({"a": "9"}), "{o5}");
    }
}
#[cfg(test)]
mod seq_tests {
    use super::*;
    fn cm(d: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": d})
    }
    #[test]
    fn sequence() {
        let ap = |o: Option<&Value>, d: Value, m: &str, f: bool| apply(o, &cm(d), m, f, "v1", None, false, None);
        let o = ap(None, json!({"a": "1", "b": "2"}), "alice", false).unwrap();
        let o = ap(Some(&o), json!({"b": "2"}), "bob", false).unwrap();
        let o = ap(Some(&o), json!({"a": "9", "b": "2"}), "bob", true).unwrap();
        let o = ap(Some(&o), json!({"b": "2", "c": "3"}), "alice", false).unwrap();
        let o = ap(Some(&o), json!({"b": "2"}), "alice", false).unwrap();
        let o = ap(Some(&o), json!({"a": "9"}), "bob", false).unwrap();
        let o = ap(Some(&o), json!({}), "alice", false).unwrap();
        assert_eq!(o["data"], json!({"a": "9"}), "{o:#}");
    }
}
#[cfg(test)]
mod list_tests {
    use super::*;
    fn dep(c: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": c}}}})
    }
    #[test]
    fn keyed() {
        let ap = |o: Option<&Value>, c: Value, m: &str| apply(o, &dep(c), m, false, "apps/v1", None, true, None);
        let o = ap(None, json!([{"name": "main", "image": "a:1"}]), "one").unwrap();
        let o = ap(Some(&o), json!([{"name": "side", "image": "s:1"}]), "two").unwrap();
        let o = ap(Some(&o), json!([]), "one").unwrap();
        assert_eq!(
            o["spec"]["template"]["spec"]["containers"],
            json!([{"name": "side", "image": "s:1"}]),
            "{o:#}"
        );
    }
}
