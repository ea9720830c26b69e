//! The object inside an admission request, decoded for speed.
//!
//! The rules read a handful of fields: name, namespace, generateName, labels, finalizers, and a Secret's
//! `data`/`stringData`. Decoding into kube's `DynamicObject` costs twice what the whole server costs,
//! because it (and kube's `AdmissionReview`) use `#[serde(flatten)]`, which buffers the entire body into
//! an intermediate tree first. [`AdmittedObject`] decodes exactly those fields and skips the rest
//! (managedFields, annotations, spec, status) without allocating. It plugs into kube's typed
//! `AdmissionRequest<T>`, so the request itself keeps kube's types.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// An admission request as the rules see it.
pub type Request = kube::core::admission::AdmissionRequest<AdmittedObject>;

/// The fields of an admitted object that the rules read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedObject {
    /// Only `name`, `namespace`, `generateName`, `labels`, `finalizers` and, of the annotations,
    /// `operator.kyma-project.io/operation` are filled in.
    #[serde(default, deserialize_with = "lean_metadata")]
    pub metadata: ObjectMeta,
    /// A Secret's `data` (base64 values); values are kept as JSON so that a malformed one is reported,
    /// not a decode failure of the whole request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<String, Value>>,
    /// A Secret's `stringData` (plain values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_data: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMetadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    annotations: OperationAnnotation,
}

/// Of the annotations, only `operator.kyma-project.io/operation` (the rules need nothing else; others, such
/// as kubectl's last-applied-configuration, can be large and are skipped without allocating).
#[derive(Default)]
struct OperationAnnotation(Option<String>);

impl<'de> Deserialize<'de> for OperationAnnotation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = OperationAnnotation;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(OperationAnnotation(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == btp_api::names::OPERATION_ANNOTATION {
                        found = Some(map.next_value::<String>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(OperationAnnotation(found))
            }
        }
        d.deserialize_any(Visit)
    }
}

fn lean_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<LeanMetadata>::deserialize(d)?;
    Ok(m.map(|m| ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        generate_name: m.generate_name,
        labels: m.labels,
        finalizers: m.finalizers,
        annotations: m
            .annotations
            .0
            .map(|v| BTreeMap::from([(btp_api::names::OPERATION_ANNOTATION.to_string(), v)])),
        ..ObjectMeta::default()
    })
    .unwrap_or_default())
}

/// Required by kube's `AdmissionRequest<T: Resource>`. The kind of the object is taken from the request
/// (`request.kind`), never from here, so the static type information is left empty.
impl kube::Resource for AdmittedObject {
    type DynamicType = ();
    type Scope = kube::core::DynamicResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_the_rules_read_and_skips_the_rest() {
        let obj: AdmittedObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "n", "namespace": "ns", "generateName": "g-", "labels": {"a": "b"}, "finalizers": ["f"],
                "annotations": {"x": "y"}, "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {}}}],
                "creationTimestamp": null
            },
            "data": {"k": "dg=="}, "stringData": {"s": "v"}, "type": "Opaque", "spec": {"deep": [1, 2, {"x": null}]}
        }))
        .unwrap();
        assert_eq!(obj.metadata.name.as_deref(), Some("n"));
        assert_eq!(obj.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(obj.metadata.generate_name.as_deref(), Some("g-"));
        assert_eq!(obj.metadata.labels.as_ref().unwrap()["a"], "b");
        assert_eq!(obj.metadata.finalizers.as_deref(), Some(&["f".to_string()][..]));
        assert!(obj.metadata.annotations.is_none() && obj.metadata.managed_fields.is_none());
        assert_eq!(obj.data.as_ref().unwrap()["k"], "dg==");
        assert_eq!(obj.string_data.as_ref().unwrap()["s"], "v");
    }

    #[test]
    fn null_and_missing_metadata_are_empty() {
        let a: AdmittedObject = serde_json::from_value(serde_json::json!({"metadata": null})).unwrap();
        let b: AdmittedObject = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(a, AdmittedObject::default());
        assert_eq!(b, AdmittedObject::default());
    }
}
