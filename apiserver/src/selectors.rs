//! Label selectors (string syntax and `LabelSelector` objects) and field selectors.

use crate::util::{field_string, labels_of};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct Req {
    key: String,
    op: Op,
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Req>,
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
        let mut reqs = vec![];
        for p in parts {
            let p = p.trim();
            if p.is_empty() {
                if s.trim().is_empty() {
                    continue;
                }
                return Err(format!("invalid selector {s:?}: empty requirement"));
            }
            reqs.push(parse_req(p)?);
        }
        Ok(LabelSelector { reqs })
    }

    /// From a `metav1.LabelSelector` JSON object (matchLabels + matchExpressions).
    pub fn from_object(v: &Value) -> Result<Self, String> {
        let mut reqs = vec![];
        if v.is_null() {
            return Ok(LabelSelector { reqs });
        }
        if let Some(ml) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in ml {
                reqs.push(Req {
                    key: k.clone(),
                    op: Op::Eq(val.as_str().unwrap_or_default().to_string()),
                });
            }
        }
        if let Some(me) = v.get("matchExpressions").and_then(Value::as_array) {
            for e in me {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or("matchExpressions[].key is required")?
                    .to_string();
                let vals: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str) {
                    Some("In") => Op::In(vals),
                    Some("NotIn") => Op::NotIn(vals),
                    Some("Exists") => Op::Exists,
                    Some("DoesNotExist") => Op::NotExists,
                    other => return Err(format!("invalid label selector operator {other:?}")),
                };
                reqs.push(Req { key, op });
            }
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches_labels(&self, labels: &Map<String, Value>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.get(&r.key).and_then(Value::as_str);
            match &r.op {
                Op::Eq(x) => v == Some(x.as_str()),
                Op::Ne(x) => v != Some(x.as_str()),
                Op::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::NotIn(xs) => v.is_none_or(|v| !xs.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Gt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
                Op::Lt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
            }
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches_labels(&labels_of(obj))
    }
}

fn parse_values(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| format!("expected '(' values ')' but found {s:?}"))?;
    let vals: Vec<String> = inner
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
        return Ok(Req {
            key: k.into(),
            op: Op::NotExists,
        });
    }
    // set-based: key in (..) / key notin (..)
    let words: Vec<&str> = p.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let rest = words[1].trim_start();
        if let Some(v) = rest.strip_prefix("notin") {
            if valid_key(words[0]) {
                return Ok(Req {
                    key: words[0].into(),
                    op: Op::NotIn(parse_values(v)?),
                });
            }
        } else if let Some(v) = rest.strip_prefix("in") {
            if valid_key(words[0]) {
                return Ok(Req {
                    key: words[0].into(),
                    op: Op::In(parse_values(v)?),
                });
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
            let op = match kind {
                0 | 1 => {
                    if !valid_value(v) {
                        return Err(format!("invalid label value: {v:?}"));
                    }
                    if kind == 0 {
                        Op::Eq(v.into())
                    } else {
                        Op::Ne(v.into())
                    }
                }
                _ => {
                    let n: i64 = v.parse().map_err(|_| format!("invalid integer value {v:?}"))?;
                    if kind == 2 {
                        Op::Gt(n)
                    } else {
                        Op::Lt(n)
                    }
                }
            };
            return Ok(Req { key: k.into(), op });
        }
    }
    let k = p.trim();
    if !valid_key(k) {
        return Err(format!("invalid label key {k:?}"));
    }
    Ok(Req {
        key: k.into(),
        op: Op::Exists,
    })
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
