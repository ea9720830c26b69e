//! Minimal decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`)
//! for the few kinds that `kubectl create <kind>` sends as protobuf: Namespace, ConfigMap,
//! Secret and ServiceAccount. Responses are always JSON (client-go decodes by Content-Type).

use base64::Engine;
use serde_json::{json, Map, Value};

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    Msg(&'static [Field]),
    MapStrStr,
    MapStrBytes,
    RepStr,
    RepMsg(&'static [Field]),
    Time,
}

type Field = (u32, &'static str, Kind);

const OWNER_REF: &[Field] = &[
    (1, "kind", Kind::Str),
    (3, "name", Kind::Str),
    (4, "uid", Kind::Str),
    (5, "apiVersion", Kind::Str),
    (6, "controller", Kind::Bool),
    (7, "blockOwnerDeletion", Kind::Bool),
];

const OBJECT_META: &[Field] = &[
    (1, "name", Kind::Str),
    (2, "generateName", Kind::Str),
    (3, "namespace", Kind::Str),
    (5, "uid", Kind::Str),
    (6, "resourceVersion", Kind::Str),
    (7, "generation", Kind::Int),
    (8, "creationTimestamp", Kind::Time),
    (11, "labels", Kind::MapStrStr),
    (12, "annotations", Kind::MapStrStr),
    (13, "ownerReferences", Kind::RepMsg(OWNER_REF)),
    (14, "finalizers", Kind::RepStr),
];

const NAMESPACE: &[Field] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "spec", Kind::Msg(&[(1, "finalizers", Kind::RepStr)])),
];

const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "data", Kind::MapStrStr),
    (3, "binaryData", Kind::MapStrBytes),
    (4, "immutable", Kind::Bool),
];

const SECRET: &[Field] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "data", Kind::MapStrBytes),
    (3, "type", Kind::Str),
    (4, "stringData", Kind::MapStrStr),
    (5, "immutable", Kind::Bool),
];

const NAME_REF: &[Field] = &[(1, "name", Kind::Str)];

const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (3, "imagePullSecrets", Kind::RepMsg(NAME_REF)),
    (4, "automountServiceAccountToken", Kind::Bool),
];

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or("truncated varint")?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

fn wire_fields(b: &[u8]) -> Result<Vec<(u32, Wire<'_>)>, String> {
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let num = (key >> 3) as u32;
        match key & 7 {
            0 => out.push((num, Wire::Varint(varint(b, &mut i)?))),
            2 => {
                let len = varint(b, &mut i)? as usize;
                let end = i.checked_add(len).filter(|e| *e <= b.len()).ok_or("truncated field")?;
                out.push((num, Wire::Bytes(&b[i..end])));
                i = end;
            }
            1 => i += 8,
            5 => i += 4,
            t => return Err(format!("unsupported wire type {t}")),
        }
        if i > b.len() {
            return Err("truncated field".into());
        }
    }
    Ok(out)
}

fn string(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8 string".to_string())
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), String> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    for (n, w) in wire_fields(b)? {
        if let Wire::Bytes(x) = w {
            match n {
                1 => k = string(x)?,
                2 if bytes_value => v = json!(base64::engine::general_purpose::STANDARD.encode(x)),
                2 => v = json!(string(x)?),
                _ => {}
            }
        }
    }
    Ok((k, v))
}

fn message(b: &[u8], schema: &[Field]) -> Result<Value, String> {
    let mut out = Map::new();
    for (num, w) in wire_fields(b)? {
        let Some((_, name, kind)) = schema.iter().find(|(n, _, _)| *n == num) else {
            continue;
        };
        let name = name.to_string();
        match (kind, w) {
            (Kind::Str, Wire::Bytes(x)) => {
                out.insert(name, json!(string(x)?));
            }
            (Kind::Int, Wire::Varint(v)) => {
                out.insert(name, json!(v as i64));
            }
            (Kind::Bool, Wire::Varint(v)) => {
                out.insert(name, json!(v != 0));
            }
            (Kind::Msg(s), Wire::Bytes(x)) => {
                out.insert(name, message(x, s)?);
            }
            (Kind::MapStrStr | Kind::MapStrBytes, Wire::Bytes(x)) => {
                let (k, v) = map_entry(x, matches!(kind, Kind::MapStrBytes))?;
                if let Some(m) = out.entry(name).or_insert_with(|| json!({})).as_object_mut() {
                    m.insert(k, v);
                }
            }
            (Kind::RepStr, Wire::Bytes(x)) => {
                let s = string(x)?;
                if let Some(a) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
                    a.push(json!(s));
                }
            }
            (Kind::RepMsg(s), Wire::Bytes(x)) => {
                let m = message(x, s)?;
                if let Some(a) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
                    a.push(m);
                }
            }
            (Kind::Time, Wire::Bytes(x)) => {
                let mut secs = 0i64;
                for (n, w) in wire_fields(x)? {
                    if let (1, Wire::Varint(v)) = (n, w) {
                        secs = v as i64;
                    }
                }
                if secs != 0 {
                    out.insert(name, json!(crate::util::format_rfc3339(secs)));
                }
            }
            _ => return Err(format!("unexpected wire type for field {name}")),
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a `k8s\0`-prefixed protobuf body into JSON.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let b = body
        .strip_prefix(b"k8s\0")
        .ok_or("protobuf body without the k8s magic prefix")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, w) in wire_fields(b)? {
        match (n, w) {
            (1, Wire::Bytes(tm)) => {
                for (tn, tw) in wire_fields(tm)? {
                    match (tn, tw) {
                        (1, Wire::Bytes(x)) => api_version = string(x)?,
                        (2, Wire::Bytes(x)) => kind = string(x)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        _ => {
            return Err(format!(
                "protobuf request bodies are only supported for v1 Namespace, ConfigMap, Secret and ServiceAccount (got {api_version} {kind}); use JSON"
            ))
        }
    };
    let mut obj = message(raw, schema)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn configmap() {
        let meta = field(1, b"cm");
        let entry = [field(1, b"k"), field(2, b"v")].concat();
        let raw = [field(1, &meta), field(2, &entry)].concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm), field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}})
        );
        assert!(decode(b"k8s\0\x0a\xff").is_err());
        assert!(decode(b"nope").is_err());
    }
}
