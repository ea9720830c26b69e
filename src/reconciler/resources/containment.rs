//! Containment: whether a stored object already holds what applying ours would write, the comparison the
//! manager makes for every object of the module before it writes (docs/behaviour.md#apply). Objects field by
//! field (fields the server added, defaults and metadata, are fine), lists element by element and of the same
//! length, everything else equal. Nothing is copied.

use serde_json::Value;

/// Whether `live` holds everything `desired` says (see the module documentation).
pub fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| l.get(k).is_some_and(|lv| contains(lv, dv))),
        (Value::Array(l), Value::Array(d)) => l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains(lv, dv)),
        (l, d) => l == d,
    }
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn fields_the_server_added_are_fine_and_a_changed_or_missing_one_is_not() {
        let desired = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"ports": [{"port": 443}]}});
        let stored = json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "7"},
            "spec": {"ports": [{"port": 443, "protocol": "TCP"}], "clusterIP": "10.0.0.1"}});
        assert!(contains(&stored, &desired));
        let mut changed = stored.clone();
        changed["metadata"]["labels"]["a"] = json!("c");
        assert!(!contains(&changed, &desired));
        let mut missing = stored.clone();
        missing["metadata"]["labels"] = json!({});
        assert!(!contains(&missing, &desired));
        // Lists compare element by element: another length is a change, however the elements compare.
        let mut longer = stored.clone();
        longer["spec"]["ports"] = json!([{"port": 443}, {"port": 80}]);
        assert!(!contains(&longer, &desired));
        // ... and in their order.
        let two = json!({"spec": {"ports": [{"port": 443}, {"port": 80}]}});
        assert!(contains(&two, &two));
        let swapped = json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}});
        assert!(!contains(&swapped, &two));
    }
}
