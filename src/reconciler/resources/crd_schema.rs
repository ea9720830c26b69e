//! Whether a stored CustomResourceDefinition already is what the manager would apply (docs/behaviour.md#apply),
//! pure. A version's `schema.openAPIV3Schema` is one atomic value for server-side apply: applying ours replaces
//! the stored schema whole, whoever owns its fields. So it is not compared by containment like the rest of an
//! object (a stored schema with more in it would count as applied) but by behaviour: equal once the text that
//! changes no behaviour is left out of both (`description`, `title`, `example`, `externalDocs` of every schema
//! node; see [`TEXT`]). A schema that differs from ours only in its words is therefore applied already, and a
//! cluster the Go manager set up keeps the chart's descriptions.
//!
//! One exception: a stored schema with no text at all where ours has some (what an older version of this
//! manager wrote, or a schema stripped of its words) is rewritten: nothing is lost, and `kubectl explain`
//! explains the fields from then on.
//!
//! The walk knows JSON Schema's shape: it strips the text keywords of schema nodes only (the root, every
//! `properties`, `patternProperties`, `definitions` and `dependencies` entry, `items`, `additionalProperties`,
//! `additionalItems`, `allOf`, `anyOf`, `oneOf`, `not`), never inside `default`, `enum` or `example` values,
//! and never a property that happens to be called `description`.

use serde_json::{Map, Value};

/// The keywords of a schema node that only say something to people (apiextensions' `JSONSchemaProps`).
pub const TEXT: [&str; 4] = ["description", "title", "example", "externalDocs"];

/// Keywords whose value is a map from a name to a schema.
const SCHEMA_MAPS: [&str; 4] = ["properties", "patternProperties", "definitions", "dependencies"];
/// Keywords whose value is a schema (or, for some, a boolean or a list of schemas).
const SCHEMAS: [&str; 4] = ["items", "additionalProperties", "additionalItems", "not"];
/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// `schema` without its text keywords, at every schema node.
pub fn without_text(schema: &Value) -> Value {
    let Value::Object(node) = schema else {
        // `additionalProperties: true`, a `dependencies` list of names: no schema node.
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in node {
        if TEXT.contains(&key.as_str()) {
            continue;
        }
        let value = if SCHEMA_MAPS.contains(&key.as_str()) {
            match value {
                Value::Object(entries) => Value::Object(
                    entries
                        .iter()
                        .map(|(name, s)| (name.clone(), without_text(s)))
                        .collect(),
                ),
                other => other.clone(),
            }
        } else if SCHEMAS.contains(&key.as_str()) || SCHEMA_LISTS.contains(&key.as_str()) {
            match value {
                Value::Array(schemas) => Value::Array(schemas.iter().map(without_text).collect()),
                other => without_text(other),
            }
        } else {
            value.clone()
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// Whether any schema node of `schema` carries text.
pub fn has_text(schema: &Value) -> bool {
    // Stripping the text changes the schema exactly when there was some.
    without_text(schema) != *schema
}

/// Whether the stored `live` schema behaves as `desired` and applying `desired` would not add text where
/// there is none (see the module documentation).
pub fn schema_applied(live: &Value, desired: &Value) -> bool {
    if without_text(live) != without_text(desired) {
        return false;
    }
    has_text(live) || !has_text(desired)
}

/// Whether the stored CRD `live` already is what applying `desired` would make it, given `rest`, the
/// containment check the manager uses for every object, which sees both without their schemas.
pub fn crd_applied(live: &Value, desired: &Value, rest: impl Fn(&Value, &Value) -> bool) -> bool {
    let (mut live, mut desired) = (live.clone(), desired.clone());
    let live_versions = take_schemas(&mut live);
    let desired_versions = take_schemas(&mut desired);
    let schemas_applied = desired_versions.iter().all(|(name, wanted)| {
        let stored = live_versions.iter().find(|(n, _)| n == name).map(|(_, s)| s);
        match (stored, wanted) {
            (_, None) => true,
            (Some(Some(stored)), Some(wanted)) => schema_applied(stored, wanted),
            _ => false,
        }
    });
    schemas_applied && rest(&live, &desired)
}

/// Take every version's `schema.openAPIV3Schema` out of `crd`: (version name, the schema if it had one).
fn take_schemas(crd: &mut Value) -> Vec<(Option<String>, Option<Value>)> {
    let Some(versions) = crd.pointer_mut("/spec/versions").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    versions
        .iter_mut()
        .map(|version| {
            let name = version["name"].as_str().map(str::to_string);
            let schema = version
                .get_mut("schema")
                .and_then(Value::as_object_mut)
                .and_then(|s| s.remove("openAPIV3Schema"));
            (name, schema)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(description: Option<&str>) -> Value {
        let mut s = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 100},
                    // A field called `description` is a field, not text.
                    "description": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                    "extra": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                    "choice": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
                    "defaulted": {"type": "object", "default": {"description": "data, not text"}},
                }},
            },
        });
        if let Some(d) = description {
            s["description"] = json!(d);
            s["properties"]["spec"]["description"] = json!(d);
            s["properties"]["spec"]["properties"]["name"]["description"] = json!(d);
            s["properties"]["spec"]["properties"]["name"]["title"] = json!(d);
            s["properties"]["spec"]["properties"]["items"]["items"]["properties"]["k"]["description"] = json!(d);
            s["properties"]["spec"]["properties"]["extra"]["additionalProperties"]["description"] = json!(d);
            s["properties"]["spec"]["properties"]["choice"]["anyOf"][0]["description"] = json!(d);
        }
        s
    }

    #[test]
    fn text_is_stripped_from_schema_nodes_only() {
        let stripped = without_text(&schema(Some("words")));
        assert_eq!(stripped, schema(None));
        let spec = &stripped["properties"]["spec"]["properties"];
        assert_eq!(
            spec["description"],
            json!({"type": "string"}),
            "a field named description stays"
        );
        assert_eq!(
            spec["defaulted"]["default"],
            json!({"description": "data, not text"}),
            "a default value is data"
        );
        assert!(has_text(&schema(Some("words"))));
        assert!(!has_text(&schema(None)));
    }

    #[test]
    fn a_schema_that_differs_only_in_words_is_applied() {
        assert!(schema_applied(
            &schema(Some("the chart's words")),
            &schema(Some("ours"))
        ));
        assert!(schema_applied(&schema(Some("the chart's words")), &schema(None)));
        assert!(schema_applied(&schema(None), &schema(None)));
    }

    #[test]
    fn a_schema_without_any_words_gets_ours() {
        assert!(!schema_applied(&schema(None), &schema(Some("ours"))));
    }

    #[test]
    fn a_schema_that_behaves_otherwise_is_not_applied_whatever_its_words() {
        let mut wider = schema(Some("ours"));
        wider["properties"]["spec"]["properties"]["name"]["maxLength"] = json!(200);
        assert!(!schema_applied(&wider, &schema(Some("ours"))));
        // A stored schema with more in it is not applied either: ours would replace it whole.
        let mut more = schema(Some("ours"));
        more["properties"]["spec"]["properties"]["other"] = json!({"type": "string"});
        assert!(!schema_applied(&more, &schema(Some("ours"))));
        let mut fewer = schema(Some("ours"));
        fewer["properties"]["spec"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("name");
        assert!(!schema_applied(&fewer, &schema(Some("ours"))));
    }

    fn crd(schemas: &[(&str, Value)]) -> Value {
        let versions: Vec<Value> = schemas
            .iter()
            .map(|(name, s)| json!({"name": name, "served": true, "schema": {"openAPIV3Schema": s}}))
            .collect();
        json!({"metadata": {"name": "things.example.com"}, "spec": {"group": "example.com", "versions": versions}})
    }

    fn contained(live: &Value, desired: &Value) -> bool {
        match (live, desired) {
            (Value::Object(l), Value::Object(d)) => {
                d.iter().all(|(k, dv)| l.get(k).is_some_and(|lv| contained(lv, dv)))
            }
            (Value::Array(l), Value::Array(d)) => {
                l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contained(lv, dv))
            }
            (l, d) => l == d,
        }
    }

    #[test]
    fn a_crd_compares_each_versions_schema_by_behaviour_and_the_rest_by_containment() {
        let ours = crd(&[("v1", schema(Some("ours"))), ("v1alpha1", schema(Some("ours")))]);
        let chart = crd(&[("v1", schema(Some("chart"))), ("v1alpha1", schema(Some("chart")))]);
        assert!(crd_applied(&chart, &ours, contained));
        // The rest still counts: another served flag is a change.
        let mut unserved = chart.clone();
        unserved["spec"]["versions"][1]["served"] = json!(false);
        assert!(!crd_applied(&unserved, &ours, contained));
        // A version whose schema behaves otherwise is a change.
        let changed = crd(&[("v1", schema(Some("chart"))), ("v1alpha1", json!({"type": "object"}))]);
        assert!(!crd_applied(&changed, &ours, contained));
        // A version we have that is not stored is a change.
        let one = crd(&[("v1", schema(Some("chart")))]);
        assert!(!crd_applied(&one, &ours, contained));
    }
}
