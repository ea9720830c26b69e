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

use super::containment::contains;
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

/// Whether any schema node of `schema` carries text (as `without_text(schema) != *schema`, without building
/// the copy: a pass compares both operand CRDs, thousands of schema nodes, every time).
pub fn has_text(schema: &Value) -> bool {
    let Value::Object(node) = schema else {
        return false;
    };
    node.iter().any(|(key, value)| {
        let key = key.as_str();
        if TEXT.contains(&key) {
            true
        } else if SCHEMA_MAPS.contains(&key) {
            matches!(value, Value::Object(entries) if entries.values().any(has_text))
        } else if SCHEMAS.contains(&key) || SCHEMA_LISTS.contains(&key) {
            match value {
                Value::Array(schemas) => schemas.iter().any(has_text),
                other => has_text(other),
            }
        } else {
            false
        }
    })
}

/// Whether `a` and `b` are equal once the text of their schema nodes is left out (as
/// `without_text(a) == without_text(b)`, without building either).
pub fn equal_without_text(a: &Value, b: &Value) -> bool {
    let (Value::Object(a), Value::Object(b)) = (a, b) else {
        return a == b;
    };
    let behaviour = |node: &'_ Map<String, Value>| node.iter().filter(|(key, _)| !TEXT.contains(&key.as_str())).count();
    behaviour(a) == behaviour(b)
        && a.iter()
            .filter(|(key, _)| !TEXT.contains(&key.as_str()))
            .all(|(key, x)| {
                let Some(y) = b.get(key) else {
                    return false;
                };
                let key = key.as_str();
                if SCHEMA_MAPS.contains(&key) {
                    match (x, y) {
                        (Value::Object(x), Value::Object(y)) => {
                            x.len() == y.len()
                                && x.iter()
                                    .all(|(name, s)| y.get(name).is_some_and(|t| equal_without_text(s, t)))
                        }
                        (x, y) => x == y,
                    }
                } else if SCHEMAS.contains(&key) || SCHEMA_LISTS.contains(&key) {
                    match (x, y) {
                        (Value::Array(x), Value::Array(y)) => {
                            x.len() == y.len() && x.iter().zip(y).all(|(s, t)| equal_without_text(s, t))
                        }
                        (Value::Array(_), _) | (_, Value::Array(_)) => false,
                        (x, y) => equal_without_text(x, y),
                    }
                } else {
                    x == y
                }
            })
}

/// Whether the stored `live` schema behaves as `desired` and applying `desired` would not add text where
/// there is none (see the module documentation).
pub fn schema_applied(live: &Value, desired: &Value) -> bool {
    if !equal_without_text(live, desired) {
        return false;
    }
    has_text(live) || !has_text(desired)
}

/// Whether the stored CRD's `spec` already is what applying ours (`desired`) would make it: every version's
/// `schema.openAPIV3Schema` by behaviour ([`schema_applied`], paired by version name), everything else by
/// [`contains`], the comparison the manager makes for every object. Nothing is copied.
pub fn spec_applied(stored: &Value, desired: &Value) -> bool {
    let (Value::Object(stored), Value::Object(desired)) = (stored, desired) else {
        return contains(stored, desired);
    };
    desired.iter().all(|(key, wanted)| {
        let Some(stored) = stored.get(key) else {
            return false;
        };
        match (key.as_str(), stored, wanted) {
            ("versions", Value::Array(stored), Value::Array(wanted)) => versions_applied(stored, wanted),
            _ => contains(stored, wanted),
        }
    })
}

/// `spec.versions` of a CRD: index by index by `contains` leaving out `schema.openAPIV3Schema`, and each of our
/// schemas against the stored version of the same name.
fn versions_applied(stored: &[Value], wanted: &[Value]) -> bool {
    fn schema(version: &Value) -> Option<&Value> {
        version.get("schema").and_then(|s| s.get("openAPIV3Schema"))
    }
    let rest_applied = stored.len() == wanted.len()
        && stored.iter().zip(wanted).all(|(stored, wanted)| {
            let (Value::Object(stored), Value::Object(wanted)) = (stored, wanted) else {
                return contains(stored, wanted);
            };
            wanted.iter().all(|(key, wanted)| {
                let Some(stored) = stored.get(key) else {
                    return false;
                };
                match (key.as_str(), stored, wanted) {
                    ("schema", Value::Object(stored), Value::Object(wanted)) => wanted
                        .iter()
                        .filter(|(key, _)| key.as_str() != "openAPIV3Schema")
                        .all(|(key, wanted)| stored.get(key).is_some_and(|stored| contains(stored, wanted))),
                    _ => contains(stored, wanted),
                }
            })
        });
    rest_applied
        && wanted.iter().all(|version| {
            let Some(ours) = schema(version) else {
                return true;
            };
            let name = version.get("name");
            stored
                .iter()
                .find(|v| v.get("name") == name)
                .and_then(schema)
                .is_some_and(|theirs| schema_applied(theirs, ours))
        })
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

    /// A whole CRD: its spec by [`spec_applied`], the rest by containment (as `already_applied` has it).
    fn crd_applied(live: &Value, desired: &Value) -> bool {
        desired
            .as_object()
            .unwrap()
            .iter()
            .all(|(key, wanted)| match key.as_str() {
                "spec" => spec_applied(&live["spec"], wanted),
                _ => live.get(key).is_some_and(|stored| contains(stored, wanted)),
            })
    }

    #[test]
    fn a_crd_compares_each_versions_schema_by_behaviour_and_the_rest_by_containment() {
        let ours = crd(&[("v1", schema(Some("ours"))), ("v1alpha1", schema(Some("ours")))]);
        let chart = crd(&[("v1", schema(Some("chart"))), ("v1alpha1", schema(Some("chart")))]);
        assert!(crd_applied(&chart, &ours));
        // The rest still counts: another served flag is a change.
        let mut unserved = chart.clone();
        unserved["spec"]["versions"][1]["served"] = json!(false);
        assert!(!crd_applied(&unserved, &ours));
        // A version whose schema behaves otherwise is a change.
        let changed = crd(&[("v1", schema(Some("chart"))), ("v1alpha1", json!({"type": "object"}))]);
        assert!(!crd_applied(&changed, &ours));
        // A version we have that is not stored is a change.
        let one = crd(&[("v1", schema(Some("chart")))]);
        assert!(!crd_applied(&one, &ours));
    }

    /// The walks that build nothing answer as the copies they replace, on the operand's real schemas and on
    /// changed copies of them.
    #[test]
    fn the_walks_answer_as_the_stripped_copies_do() {
        let chart = include_str!("../../../module-resources/apply/crd.yml");
        let crds: Vec<Value> = serde_saphyr::from_multiple(chart).unwrap();
        let schemas: Vec<Value> = crds
            .iter()
            .flat_map(|crd| crd["spec"]["versions"].as_array().unwrap().clone())
            .map(|v| v["schema"]["openAPIV3Schema"].clone())
            .collect();
        assert!(schemas.len() >= 2 && schemas.iter().all(Value::is_object));
        let mut variants = Vec::new();
        for schema in &schemas {
            variants.push(schema.clone());
            variants.push(without_text(schema));
            let mut reworded = schema.clone();
            reworded["description"] = json!("other words");
            variants.push(reworded);
            let mut retyped = schema.clone();
            retyped["properties"]["spec"]["type"] = json!("string");
            variants.push(retyped);
            let mut wider = schema.clone();
            wider["properties"]["spec"]["properties"]["extra"] = json!({"type": "string", "description": "d"});
            variants.push(wider);
            let mut named = schema.clone();
            named["properties"]["spec"]["properties"]["description"] = json!({"type": "string"});
            variants.push(named);
        }
        for a in &variants {
            assert_eq!(has_text(a), without_text(a) != *a);
            for b in &variants {
                assert_eq!(equal_without_text(a, b), without_text(a) == without_text(b));
            }
        }
    }
}
