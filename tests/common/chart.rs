//! The operand chart's facts (`tests/fixtures/operand-chart-facts.txt`, made by `scripts/chart-facts` from the
//! chart as upstream renders it): read as leaves, and rebuilt into objects as the chart would create them.
//! Built from the chart, never from our manifests, so that holding ours against them proves something.
#![allow(dead_code)]

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One leaf: kind, name, JSON pointer, value.
pub type Fact = (String, String, String, Value);

/// Every fact of the fixture, in file order.
pub fn facts() -> Vec<Fact> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/operand-chart-facts.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.splitn(4, ' ');
            let mut next = || parts.next().unwrap_or_else(|| panic!("a fact line: {l}")).to_string();
            let (kind, name, pointer, value) = (next(), next(), next(), next());
            let value = serde_json::from_str(&value).unwrap_or_else(|e| panic!("{l}: {e}"));
            (kind, name, pointer, value)
        })
        .collect()
}

/// Where the chart has a string `description` (`tests/fixtures/operand-chart-descriptions.txt`): kind, name,
/// JSON pointer. Positions only: the chart's prose is not ours to copy.
pub fn description_positions() -> Vec<(String, String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/operand-chart-descriptions.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let mut next = || {
                parts
                    .next()
                    .unwrap_or_else(|| panic!("a position line: {l}"))
                    .to_string()
            };
            (next(), next(), next())
        })
        .collect()
}

/// The chart's objects as the chart ships them: [`objects`] with a description wherever the chart has one,
/// in words of the tests' own (what the chart says there is not a fact anything acts on).
pub fn objects_with_descriptions() -> BTreeMap<(String, String), Value> {
    let mut objects = objects();
    for (n, (kind, name, pointer)) in description_positions().into_iter().enumerate() {
        let object = objects
            .get_mut(&(kind.clone(), name.clone()))
            .unwrap_or_else(|| panic!("a description of {kind} {name}, which the facts do not have"));
        let segments: Vec<String> = pointer
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        let words = format!("What the chart says about this field ({n}), in other words than ours.");
        set(object, &segments, Value::String(words));
    }
    objects
}

/// The leaves of `object` as the facts write them: string `description`s, `metadata.creationTimestamp` and
/// the namespace of a cluster-scoped object left out (see `scripts/chart-facts`).
pub fn leaves(object: &Value, cluster_scoped: bool) -> Vec<(String, Value)> {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("creationTimestamp");
        if cluster_scoped {
            meta.remove("namespace");
        }
    }
    let mut out = Vec::new();
    walk(&object, String::new(), &mut out);
    out
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn walk(node: &Value, at: String, out: &mut Vec<(String, Value)>) {
    match node {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                if k == "description" && v.is_string() {
                    continue;
                }
                walk(v, format!("{at}/{}", escape(k)), out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, v) in a.iter().enumerate() {
                walk(v, format!("{at}/{i}"), out);
            }
        }
        leaf => out.push((at, leaf.clone())),
    }
}

/// The chart's objects rebuilt from the facts, by (kind, name), in the facts' order.
pub fn objects() -> BTreeMap<(String, String), Value> {
    let mut objects: BTreeMap<(String, String), Value> = BTreeMap::new();
    for (kind, name, pointer, value) in facts() {
        let object = objects.entry((kind, name)).or_insert(Value::Null);
        let segments: Vec<String> = pointer
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        set(object, &segments, value);
    }
    objects
}

fn set(node: &mut Value, path: &[String], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        *node = value;
        return;
    };
    match first.parse::<usize>() {
        Ok(i) => {
            if node.is_null() {
                *node = Value::Array(Vec::new());
            }
            let array = node.as_array_mut().expect("an array where the facts index one");
            while array.len() <= i {
                array.push(Value::Null);
            }
            set(&mut array[i], rest, value);
        }
        Err(_) => {
            if node.is_null() {
                *node = Value::Object(Map::new());
            }
            let map = node.as_object_mut().expect("an object where the facts name a key");
            set(map.entry(first.clone()).or_insert(Value::Null), rest, value);
        }
    }
}
