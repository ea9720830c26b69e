//! PATCH bodies: JSON merge patch, JSON patch and an approximation of strategic merge patch.

use crate::error::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let ct = ct.split(';').next().unwrap_or("").trim();
        match ct {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchKind::Apply),
            _ => None,
        }
    }
}

/// Parses a body as JSON, falling back to YAML.
pub fn parse_json_or_yaml(body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => Ok(v),
        Err(je) => {
            let s = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("request body is not valid UTF-8"))?;
            serde_saphyr::from_str::<Value>(s)
                .map_err(|ye| ApiError::bad_request(format!("error decoding request body: json: {je}; yaml: {ye}")))
        }
    }
}

/// Applies a non-apply patch to `doc`.
pub fn apply_patch(kind: PatchKind, doc: &mut Value, body: &[u8]) -> Result<(), ApiError> {
    match kind {
        PatchKind::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body).map_err(|e| {
                let why = if e.is_eof() {
                    "unexpected end of JSON input".to_string()
                } else if e.is_data() {
                    "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp".to_string()
                } else {
                    e.to_string()
                };
                ApiError::bad_request(format!("error decoding patch: {why}"))
            })?;
            json_patch::patch(doc, &p).map_err(|e| {
                // kube-apiserver hides the reason (a failed `test`, a missing path) behind a generic text.
                tracing::debug!(error = %e, "JSON patch could not be applied");
                ApiError::new(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                )
                .with_details(serde_json::json!({}))
            })
        }
        PatchKind::Merge => {
            let p: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            json_patch::merge(doc, &p);
            Ok(())
        }
        PatchKind::Strategic => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid strategic merge patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request("strategic merge patch must be a JSON object"));
            }
            strategic_merge(doc, &p);
            Ok(())
        }
        PatchKind::Apply => Err(ApiError::internal("apply patches are handled by ssa")),
    }
}

/// Whether every element is an object with a string `name`.
pub fn is_named_list(a: &[Value]) -> bool {
    !a.is_empty() && a.iter().all(|x| x.get("name").and_then(Value::as_str).is_some())
}

/// Strategic merge patch approximation: merge patch semantics, except that lists of objects
/// keyed by `name` merge by name (`$patch: delete` removes an item) and `$`-directives are
/// dropped.
pub fn strategic_merge(doc: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Default::default());
    }
    let Some(d) = doc.as_object_mut() else { return };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                d.remove(k);
            }
            Value::Object(_) => {
                let e = d.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(e, v);
            }
            Value::Array(items) if is_named_list(items) => {
                let e = d.entry(k.clone()).or_insert(Value::Array(vec![]));
                match e {
                    Value::Array(cur) if cur.is_empty() || is_named_list(cur) => {
                        for it in items {
                            let name = it.get("name").cloned();
                            let del = it.get("$patch").and_then(Value::as_str) == Some("delete");
                            let pos = cur.iter().position(|c| c.get("name") == name.as_ref());
                            match (pos, del) {
                                (Some(i), true) => {
                                    cur.remove(i);
                                }
                                (Some(i), false) => strategic_merge(&mut cur[i], it),
                                (None, false) => {
                                    let mut n = Value::Object(Default::default());
                                    strategic_merge(&mut n, it);
                                    cur.push(n);
                                }
                                (None, true) => {}
                            }
                        }
                    }
                    _ => *e = strip_directives(v),
                }
            }
            _ => {
                d.insert(k.clone(), strip_directives(v));
            }
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        o => o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn smp_merges_named_lists() {
        let mut d = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}});
        strategic_merge(
            &mut d,
            &json!({"spec": {"containers": [{"name": "b", "image": "3"}, {"name": "a", "$patch": "delete"}], "$setElementOrder/containers": []}}),
        );
        assert_eq!(d, json!({"spec": {"containers": [{"name": "b", "image": "3"}]}}));
    }

    #[test]
    fn yaml_body() {
        let v = parse_json_or_yaml(b"a: 1\nb:\n  - x\n").unwrap();
        assert_eq!(v, json!({"a": 1, "b": ["x"]}));
        assert!(parse_json_or_yaml(b"a: [").is_err());
    }
}
