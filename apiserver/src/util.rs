//! Small helpers: time formatting, random identifiers, name validation, JSON access.

use serde_json::{Map, Value};

/// Current time as RFC 3339 with second precision, e.g. `2024-05-01T12:00:00Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(jiff::Timestamp::now().as_second())
}

/// Formats unix seconds as RFC 3339 (UTC), e.g. `2024-05-01T12:00:00Z` (the Unix epoch if out of range).
pub fn format_rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Parses RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`) into unix seconds (the fraction dropped).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    s.parse::<jiff::Timestamp>().ok().map(jiff::Timestamp::as_second)
}

/// Random bytes from the OS (falls back to fastrand if the OS source fails).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if getrandom::fill(&mut b).is_err() {
        for x in b.iter_mut() {
            *x = fastrand::u8(..);
        }
    }
    b
}

/// A random RFC 4122 version-4 UUID string.
pub fn new_uid() -> String {
    let mut b = random_bytes::<16>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A random 32-byte hex token.
pub fn new_token() -> String {
    random_bytes::<32>().iter().map(|x| format!("{x:02x}")).collect()
}

/// The 5-character suffix the real server appends for `generateName`.
pub fn name_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| ALPHA[fastrand::usize(..ALPHA.len())] as char).collect()
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 chars.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 chars.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

pub const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
pub const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// `obj.metadata` as a mutable map, creating it if needed (returns None if obj is not a map).
pub fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = obj.as_object_mut()?;
    let m = o.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut()
}

pub fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(key)?.as_str()
}

pub fn name_of(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Labels of an object as string pairs.
pub fn labels_of(obj: &Value) -> Map<String, Value> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.as_object())
        .cloned()
        .unwrap_or_default()
}

pub fn finalizers_of(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(|f| f.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Parses a query string into (key, value) pairs (last one wins).
pub fn parse_query(q: Option<&str>) -> std::collections::HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// A Go duration as `time.ParseDuration` reads it (`1500ms`, `2s`, `1m30s`, `0.5s`); None when it is not
/// one or is negative. Pure.
pub fn parse_go_duration(text: &str) -> Option<std::time::Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut seconds = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_end);
        let value: f64 = number.parse().ok()?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        seconds += value * scale;
        rest = tail;
    }
    std::time::Duration::try_from_secs_f64(seconds).ok()
}

pub fn query_bool(q: &std::collections::HashMap<String, String>, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true") | Some("1"))
}

/// Looks up a dotted path (`metadata.name`, `spec.nodeName`) in a JSON object as a string.
pub fn field_string(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for p in path.split('.') {
        cur = cur.get(p)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn go_durations() {
        use std::time::Duration;
        assert_eq!(parse_go_duration("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "5", "-1s", "1x", "s", "1.2.3s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }
    #[test]
    fn rfc3339() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("2024-03-01T01:59:59.5+02:00"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("garbage"), None);
    }
    #[test]
    fn names() {
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("Bad_Name"));
        assert!(!is_dns1123_label("a.b"));
        assert_eq!(new_uid().len(), 36);
    }
}
