//! How objects are served: at the requested version, filtered by selectors, or as the `meta.k8s.io/v1`
//! Tables `kubectl get` asks for.

use crate::context::{Query, Target};
use crate::error::{ApiError, ApiResult};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::util::{meta_str, name_of};
use axum::http::{header, HeaderMap};
use serde_json::{json, Value};

/// The object as served at the requested version.
pub(crate) fn present(t: &Target, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(t.def.api_version(&t.version)));
        m.insert("kind".into(), json!(t.def.kind));
    }
    o
}

/// The items of a list as kube-apiserver writes them: a built-in kind's items carry no `apiVersion` and `kind`
/// (the list names them), a custom resource's do (they are stored as they were sent). Corpus case
/// `list-items-type-meta`.
pub(crate) fn list_items(t: &Target, items: Vec<Value>) -> Vec<Value> {
    if t.def.crd {
        return items;
    }
    items
        .into_iter()
        .map(|mut o| {
            if let Some(m) = o.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            o
        })
        .collect()
}

pub(crate) fn selectors(q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    let ls = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fs = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((ls, fs))
}

pub(crate) fn wants_table(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// Age like kubectl prints it.
pub(crate) fn age(ts: &str) -> String {
    let Some(secs) = crate::util::parse_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let d = (jiff::Timestamp::now().as_second() - secs).max(0);
    match d {
        0..120 => format!("{d}s"),
        120..7200 => format!("{}m", d / 60),
        7200..172800 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86400),
    }
}

/// Evaluates a simple JSONPath (`.status.phase`, `.spec.items[0].name`, and a filter on a field's value as
/// printer columns use it, `.status.conditions[?(@.type=="Ready")].reason`: the first match) for printer columns.
pub(crate) fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path_parts(path.trim_start_matches('.')) {
        let (key, selector) = match part.split_once('[') {
            Some((k, rest)) => (k, Some(rest.strip_suffix(']').unwrap_or(rest))),
            None => (part, None),
        };
        if !key.is_empty() {
            cur = cur.get(key)?;
        }
        match selector {
            None => {}
            Some(filter) if filter.starts_with("?(@.") => {
                let (field, wanted) = filter.strip_prefix("?(@.")?.strip_suffix(')')?.split_once("==")?;
                let wanted = wanted.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|item| item.get(field.trim()).and_then(Value::as_str) == Some(wanted))?;
            }
            Some(index) => cur = cur.get(index.parse::<usize>().ok()?)?,
        }
    }
    Some(cur)
}

/// The dot-separated parts of a JSONPath, a dot inside brackets kept in its part.
fn path_parts(path: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in path.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                parts.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&path[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
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

pub(crate) fn cell(o: &Value, c: &Value) -> Value {
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

#[cfg(test)]
mod json_path_tests {
    use super::*;

    #[test]
    fn printer_column_paths_with_indexes_and_filters() {
        let o = json!({"status": {"state": "Ready", "conditions": [
            {"type": "Ready", "reason": "ReconcileSucceeded"},
            {"type": "CredentialsValid", "reason": "TokenIssued"}
        ]}});
        assert_eq!(json_path(&o, ".status.state"), Some(&json!("Ready")));
        assert_eq!(
            json_path(&o, ".status.conditions[0].reason"),
            Some(&json!("ReconcileSucceeded"))
        );
        assert_eq!(
            json_path(&o, r#".status.conditions[?(@.type=="CredentialsValid")].reason"#),
            Some(&json!("TokenIssued"))
        );
        assert_eq!(json_path(&o, r#".status.conditions[?(@.type=="Other")].reason"#), None);
        assert_eq!(json_path(&o, ".status.missing"), None);
    }
}
