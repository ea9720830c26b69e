//! Structural schemas of custom resources (a CRD version's `openAPIV3Schema`), as kube-apiserver applies
//! them: pruning of unknown fields (with a warning, or a 400 under `fieldValidation=Strict`), validation
//! (`type`, `enum`, `minimum`/`maximum`, `minLength`/`maxLength`, `minItems`/`maxItems`, `required`,
//! `properties`, `additionalProperties`, `items`, `nullable`, `x-kubernetes-preserve-unknown-fields`), and
//! the checks server-side apply makes while building its typed patch. For a few built-in kinds (ConfigMap,
//! Secret) the known top-level fields are listed here so that unknown ones are dropped as on a real server.
//!
//! Not modelled: `pattern`, `format`, `oneOf`/`anyOf`/`allOf`/`not`, CEL `x-kubernetes-validations`,
//! defaults.

use serde_json::{json, Map, Value};

/// One validation failure: (field path, reason, message) as in a 422 Status's `details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub field: String,
    pub reason: &'static str,
    pub message: String,
}

impl Cause {
    pub fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

/// The top-level fields of built-in kinds whose unknown fields are dropped here (None: not modelled).
fn builtin_fields(group: &str, plural: &str) -> Option<&'static [&'static str]> {
    match (group, plural) {
        ("", "configmaps") => Some(&["apiVersion", "kind", "metadata", "data", "binaryData", "immutable"]),
        ("", "secrets") => Some(&[
            "apiVersion",
            "kind",
            "metadata",
            "data",
            "stringData",
            "type",
            "immutable",
        ]),
        _ => None,
    }
}

/// Removes the fields `schema` does not declare from `obj` (top level: `apiVersion`, `kind`, `metadata` are
/// always kept); returns their paths (`spec.bogus`).
pub fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = obj.as_object_mut() {
        let props = schema.get("properties").and_then(Value::as_object);
        let keep = preserves(schema);
        let keys: Vec<String> = m.keys().cloned().collect();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match props.and_then(|p| p.get(&k)) {
                Some(s) => {
                    if let Some(v) = m.get_mut(&k) {
                        prune_at(s, v, &k, &mut out);
                    }
                }
                None if keep => {}
                None => {
                    m.remove(&k);
                    out.push(k);
                }
            }
        }
    }
    out
}

fn prune_at(schema: &Value, v: &mut Value, path: &str, out: &mut Vec<String>) {
    if preserves(schema) && schema.get("properties").is_none() {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let keys: Vec<String> = m.keys().cloned().collect();
                for k in keys {
                    match props.get(&k) {
                        Some(s) => {
                            if let Some(x) = m.get_mut(&k) {
                                prune_at(s, x, &join(path, &k), out);
                            }
                        }
                        None if preserves(schema) => {}
                        None => {
                            m.remove(&k);
                            out.push(join(path, &k));
                        }
                    }
                }
            } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, x) in m.iter_mut() {
                    prune_at(add, x, &join(path, k), out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, x) in a.iter_mut().enumerate() {
                    prune_at(items, x, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Unknown top-level fields of a built-in kind (removed from `obj`).
pub fn prune_builtin(group: &str, plural: &str, obj: &mut Value) -> Vec<String> {
    let Some(known) = builtin_fields(group, plural) else {
        return vec![];
    };
    let Some(m) = obj.as_object_mut() else {
        return vec![];
    };
    let unknown: Vec<String> = m.keys().filter(|k| !known.contains(&k.as_str())).cloned().collect();
    for k in &unknown {
        m.remove(k);
    }
    unknown
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    match want {
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        other => type_name(v) == other,
    }
}

/// Validates `obj` (the whole object) against `schema`; the causes in the order found.
pub fn validate(schema: &Value, obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if let (Some(props), Some(m)) = (schema.get("properties").and_then(Value::as_object), obj.as_object()) {
        for (k, s) in props {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(v) = m.get(k) {
                validate_at(s, v, k, &mut out);
            }
        }
        required(schema, m, "", &mut out);
    }
    out
}

fn required(schema: &Value, m: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        if let Some(r) = r.as_str() {
            if !m.contains_key(r) {
                out.push(Cause {
                    field: join(path, r),
                    reason: "FieldValueRequired",
                    message: "Required value".into(),
                });
            }
        }
    }
}

fn validate_at(schema: &Value, v: &Value, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() && schema.get("nullable").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        if !type_ok(t, v) {
            let got = type_name(v);
            out.push(Cause {
                field: path.into(),
                reason: "FieldValueTypeInvalid",
                message: format!("Invalid value: \"{got}\": {path} in body must be of type {t}: \"{got}\""),
            });
            return;
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            let supported = e.iter().map(Value::to_string).collect::<Vec<_>>().join(", ");
            out.push(Cause {
                field: path.into(),
                reason: "FieldValueNotSupported",
                message: format!("Unsupported value: {v}: supported values: {supported}"),
            });
        }
    }
    if let Some(x) = v.as_f64() {
        let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
        let excl = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
        if let Some(min) = bound("minimum") {
            let (bad, word) = if excl("exclusiveMinimum") {
                (x <= min, "greater than")
            } else {
                (x < min, "greater than or equal to")
            };
            if bad {
                out.push(invalid(path, v, &format!("should be {word} {}", schema["minimum"])));
            }
        }
        if let Some(max) = bound("maximum") {
            let (bad, word) = if excl("exclusiveMaximum") {
                (x >= max, "less than")
            } else {
                (x > max, "less than or equal to")
            };
            if bad {
                out.push(invalid(path, v, &format!("should be {word} {}", schema["maximum"])));
            }
        }
    }
    if let Some(s) = v.as_str() {
        let n = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64).filter(|m| n > *m) {
            out.push(Cause {
                field: path.into(),
                reason: "FieldValueTooLong",
                message: format!("Too long: may not be more than {max} bytes"),
            });
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64).filter(|m| n < *m) {
            out.push(invalid(path, v, &format!("should be at least {min} chars long")));
        }
    }
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    if let Some(x) = m.get(k) {
                        validate_at(s, x, &join(path, k), out);
                    }
                }
            } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, x) in m {
                    validate_at(add, x, &join(path, k), out);
                }
            }
            required(schema, m, path, out);
        }
        Value::Array(a) => {
            if let Some(max) = schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .filter(|m| a.len() as u64 > *m)
            {
                out.push(Cause {
                    field: path.into(),
                    reason: "FieldValueTooMany",
                    message: format!("Too many: {}: must have at most {max} items", a.len()),
                });
            }
            if let Some(items) = schema.get("items") {
                for (i, x) in a.iter().enumerate() {
                    validate_at(items, x, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn invalid(path: &str, v: &Value, what: &str) -> Cause {
    Cause {
        field: path.into(),
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {v}: {path} in body {what}"),
    }
}

/// What server-side apply refuses while building its typed patch from an apply configuration (a field the
/// schema does not declare, a list given as something else): the text after `failed to create typed patch
/// object (...): `.
pub fn typed_patch_error(schema: &Value, applied: &Value) -> Option<String> {
    let m = applied.as_object()?;
    let props = schema.get("properties").and_then(Value::as_object);
    for (k, v) in m {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(k)) {
            Some(s) => {
                if let Some(e) = typed_at(s, v, &format!(".{k}")) {
                    return Some(e);
                }
            }
            None if preserves(schema) => {}
            None => return Some(format!(".{k}: field not declared in schema")),
        }
    }
    None
}

fn typed_at(schema: &Value, v: &Value, path: &str) -> Option<String> {
    if preserves(schema) && schema.get("properties").is_none() {
        return None;
    }
    let t = schema.get("type").and_then(Value::as_str).unwrap_or("");
    match (t, v) {
        ("array", Value::Array(a)) => {
            let items = schema.get("items")?;
            a.iter()
                .enumerate()
                .find_map(|(i, x)| typed_at(items, x, &format!("{path}[{i}]")))
        }
        ("array", Value::String(s)) => Some(format!("{path}: expected list, got &{{{s}}}")),
        ("array", other) if !other.is_null() => Some(format!("{path}: expected list, got {other}")),
        ("object", Value::Object(m)) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, x) in m {
                    match props.get(k) {
                        Some(s) => {
                            if let Some(e) = typed_at(s, x, &format!("{path}.{k}")) {
                                return Some(e);
                            }
                        }
                        None if preserves(schema) => {}
                        None => return Some(format!("{path}.{k}: field not declared in schema")),
                    }
                }
            }
            None
        }
        ("object", Value::String(s)) => Some(format!("{path}: expected map, got &{{{s}}}")),
        _ => None,
    }
}

/// The unknown top-level fields of a built-in kind's apply configuration, as a typed-patch error.
pub fn typed_patch_error_builtin(group: &str, plural: &str, applied: &Value) -> Option<String> {
    let known = builtin_fields(group, plural)?;
    applied
        .as_object()?
        .keys()
        .find(|k| !known.contains(&k.as_str()))
        .map(|k| format!(".{k}: field not declared in schema"))
}

/// The 422 message for `causes`: one cause inline, several in brackets.
pub fn invalid_message(qualified_kind: &str, name: &str, causes: &[Cause]) -> String {
    let parts: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    if parts.len() == 1 {
        format!("{qualified_kind} \"{name}\" is invalid: {}", parts[0])
    } else {
        format!("{qualified_kind} \"{name}\" is invalid: [{}]", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 100},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "items": {"type": "array", "items": {"type": "string"}},
            "limits": {"type": "object", "required": ["cpu"], "properties": {"cpu": {"type": "string"}}}
        }}}})
    }

    #[test]
    fn validation_reports_each_violation() {
        let obj = json!({"spec": {"size": 0, "color": "green", "items": "x", "limits": {}}});
        let causes = validate(&schema(), &obj);
        let mut fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["spec.color", "spec.items", "spec.limits.cpu", "spec.size"]);
        let message = |field: &str| causes.iter().find(|c| c.field == field).map(|c| c.message.clone());
        assert_eq!(
            message("spec.size").as_deref(),
            Some("Invalid value: 0: spec.size in body should be greater than or equal to 1")
        );
        assert_eq!(
            message("spec.color").as_deref(),
            Some("Unsupported value: \"green\": supported values: \"red\", \"blue\"")
        );
    }

    #[test]
    fn pruning_and_typed_patch() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {}, "spec": {"size": 1, "bogus": 1}});
        assert_eq!(prune(&schema(), &mut obj), ["spec.bogus"]);
        assert_eq!(obj["spec"], json!({"size": 1}));
        let applied = json!({"spec": {"items": "notalist"}});
        assert_eq!(
            typed_patch_error(&schema(), &applied).as_deref(),
            Some(".spec.items: expected list, got &{notalist}")
        );
    }
}
