//! Label selectors (string syntax and `LabelSelector` objects) and field selectors.
//!
//! A label selector's equality and set-based requirements are kube's [`Selector`] (which also reads
//! `LabelSelector` objects and matches labels); this module adds the query-string syntax, with its error
//! messages, and the numeric requirements (`key>n`, `key<n`) that only that syntax has.

use crate::util::{field_string, labels_of};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as LabelSelectorObject;
use kube::core::{Expression, Selector, SelectorExt};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One requirement of the query syntax.
#[derive(Debug, Clone, PartialEq)]
enum Req {
    /// Equality or set-based: kube's own.
    Set(Expression),
    /// `key>n`: the label is an integer greater than n.
    Gt(String, i64),
    /// `key<n`: the label is an integer less than n.
    Lt(String, i64),
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    set: Selector,
    /// (key, greater than or less than, n)
    numeric: Vec<(String, std::cmp::Ordering, i64)>,
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, String> {
        // split on commas that are not inside parentheses
        let mut parts = vec![];
        let mut depth = 0i32;
        let mut cur = String::new();
        for c in s.chars() {
            match c {
                '(' => {
                    depth += 1;
                    cur.push(c)
                }
                ')' => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(format!("unbalanced parenthesis in selector {s:?}"));
                    }
                    cur.push(c)
                }
                ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        if depth != 0 {
            return Err(format!("unbalanced parenthesis in selector {s:?}"));
        }
        parts.push(cur);
        let mut selector = LabelSelector::default();
        for p in parts {
            let p = p.trim();
            if p.is_empty() {
                if s.trim().is_empty() {
                    continue;
                }
                return Err(format!("invalid selector {s:?}: empty requirement"));
            }
            match parse_req(p)? {
                Req::Set(e) => {
                    selector.set.extend([e]);
                }
                Req::Gt(k, n) => selector.numeric.push((k, std::cmp::Ordering::Greater, n)),
                Req::Lt(k, n) => selector.numeric.push((k, std::cmp::Ordering::Less, n)),
            }
        }
        Ok(selector)
    }

    /// From a `metav1.LabelSelector` JSON object (matchLabels + matchExpressions).
    pub fn from_object(v: &Value) -> Result<Self, String> {
        if v.is_null() {
            return Ok(LabelSelector::default());
        }
        let object: LabelSelectorObject =
            serde_json::from_value(v.clone()).map_err(|e| format!("invalid label selector: {e}"))?;
        let set = Selector::try_from(object).map_err(|e| format!("invalid label selector: {e}"))?;
        Ok(LabelSelector { set, numeric: vec![] })
    }

    pub fn is_empty(&self) -> bool {
        self.set.selects_all() && self.numeric.is_empty()
    }

    pub fn matches_labels(&self, labels: &Map<String, Value>) -> bool {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        self.set.matches(&labels)
            && self.numeric.iter().all(|(k, order, n)| {
                labels
                    .get(k)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v.cmp(n) == *order)
            })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches_labels(&labels_of(obj))
    }
}

fn parse_values(s: &str) -> Result<BTreeSet<String>, String> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| format!("expected '(' values ')' but found {s:?}"))?;
    let vals: BTreeSet<String> = inner
        .split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect();
    for v in &vals {
        if !valid_value(v) {
            return Err(format!("invalid label value: {v:?}"));
        }
    }
    Ok(vals)
}

fn parse_req(p: &str) -> Result<Req, String> {
    if let Some(k) = p.strip_prefix('!') {
        let k = k.trim();
        if !valid_key(k) {
            return Err(format!("invalid label key {k:?}"));
        }
        return Ok(Req::Set(Expression::DoesNotExist(k.into())));
    }
    // set-based: key in (..) / key notin (..)
    let words: Vec<&str> = p.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let rest = words[1].trim_start();
        if let Some(v) = rest.strip_prefix("notin") {
            if valid_key(words[0]) {
                return Ok(Req::Set(Expression::NotIn(words[0].into(), parse_values(v)?)));
            }
        } else if let Some(v) = rest.strip_prefix("in") {
            if valid_key(words[0]) {
                return Ok(Req::Set(Expression::In(words[0].into(), parse_values(v)?)));
            }
        }
    }
    for (tok, kind) in [("==", 0), ("!=", 1), ("=", 0), (">", 2), ("<", 3)] {
        if let Some(i) = p.find(tok) {
            let k = p[..i].trim();
            let v = p[i + tok.len()..].trim();
            if !valid_key(k) {
                return Err(format!("invalid label key {k:?}"));
            }
            return Ok(match kind {
                0 | 1 => {
                    if !valid_value(v) {
                        return Err(format!("invalid label value: {v:?}"));
                    }
                    if kind == 0 {
                        Req::Set(Expression::Equal(k.into(), v.into()))
                    } else {
                        Req::Set(Expression::NotEqual(k.into(), v.into()))
                    }
                }
                _ => {
                    let n: i64 = v.parse().map_err(|_| format!("invalid integer value {v:?}"))?;
                    if kind == 2 {
                        Req::Gt(k.into(), n)
                    } else {
                        Req::Lt(k.into(), n)
                    }
                }
            });
        }
    }
    let k = p.trim();
    if !valid_key(k) {
        return Err(format!("invalid label key {k:?}"));
    }
    Ok(Req::Set(Expression::Exists(k.into())))
}

/// A parsed field selector (`a.b=c,d!=e`). Any dotted path is accepted.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = vec![];
        for p in s.split(',') {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some(i) = p.find("!=") {
                (&p[..i], false, &p[i + 2..])
            } else if let Some(i) = p.find("==") {
                (&p[..i], true, &p[i + 2..])
            } else if let Some(i) = p.find('=') {
                (&p[..i], true, &p[i + 1..])
            } else {
                return Err(format!("invalid field selector: {p:?}: expected key=value"));
            };
            let k = k.trim();
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
                return Err(format!("invalid field selector key: {k:?}"));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(k, eq, v)| {
            let actual = field_string(obj, k).unwrap_or_default();
            (actual == *v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn o(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_matrix() {
        let obj = o(json!({"app": "web", "tier": "fe"}));
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("app,tier", true),
            ("!app", false),
            ("!missing", true),
            ("missing", false),
            ("app=web,tier in (fe,be)", true),
            ("", true),
        ];
        for (s, want) in cases {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&obj), want, "{s}");
        }
        for bad in ["app in web", "a=(", "=x", "app in (a", "a=b c"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn numeric_requirements_and_objects() {
        let obj = o(json!({"app": "web", "replicas": "3"}));
        for (s, want) in [
            ("replicas>2", true),
            ("replicas>3", false),
            ("replicas<4", true),
            ("app>1", false),
        ] {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&obj), want, "{s}");
        }
        assert!(LabelSelector::parse("replicas>x").is_err());
        let object = |v: Value| LabelSelector::from_object(&v).unwrap().matches(&obj);
        assert!(object(json!({})));
        assert!(object(json!({"matchLabels": {"app": "web"}})));
        assert!(!object(json!({"matchLabels": {"app": "db"}})));
        assert!(object(
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]})
        ));
        assert!(object(
            json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]})
        ));
        assert!(!object(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]})));
        assert!(LabelSelector::from_object(&json!({"matchExpressions": [{"key": "a", "operator": "Near"}]})).is_err());
    }

    #[test]
    fn fields() {
        let obj = o(json!({}));
        assert!(FieldSelector::parse("metadata.name=x").unwrap().matches(&obj));
        assert!(!FieldSelector::parse("metadata.name!=x").unwrap().matches(&obj));
        assert!(FieldSelector::parse("metadata.namespace==ns,metadata.name=x")
            .unwrap()
            .matches(&obj));
        assert!(FieldSelector::parse("nope").is_err());
    }
}
