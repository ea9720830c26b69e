//! Events are one resource in two API groups, as on a real cluster: every `events.k8s.io/v1` Event is also
//! a core/v1 Event (same namespace, name and uid) that can be listed, read and watched under `/api/v1`
//! (`kubectl get events`, and `kubectl describe`, which lists core Events with field selectors on
//! `involvedObject.*`).
//!
//! The store calls [`after_store_write`] after each write (the server gives it that hook); after a write of an
//! `events.k8s.io` Event it brings the core view of that Event in line with the current `events.k8s.io`
//! object (created, updated or removed). Fields map the
//! way the API server converts them: `note` → `message`, `regarding` → `involvedObject`,
//! `reportingController` → `reportingComponent` and `source.component`, `deprecatedCount` / `series.count`
//! → `count`, `deprecatedFirstTimestamp` / `eventTime` → `firstTimestamp`, `deprecatedLastTimestamp` /
//! `series.lastObservedTime` / `eventTime` → `lastTimestamp`; `type`, `reason`, `action`, `related`,
//! `reportingInstance`, `eventTime` and `series` are kept. Core Events written directly stay core-only.

use crate::store::{Cas, Gr, Store};
use crate::util::{format_rfc3339, parse_rfc3339, rv_of};
use serde_json::{json, Map, Value};

/// The `events.k8s.io` group.
pub const GROUP: &str = "events.k8s.io";
/// The plural of Events in both groups.
pub const PLURAL: &str = "events";

fn core_gr() -> Gr {
    (String::new(), PLURAL.into())
}

fn events_gr() -> Gr {
    (GROUP.into(), PLURAL.into())
}

/// Whether a write to `gr` needs [`after_write`].
fn is_events_v1(gr: &Gr) -> bool {
    gr.0 == GROUP && gr.1 == PLURAL
}

/// The store's hook after every write (see [`Store::after_write`]): events.k8s.io Events are also core/v1
/// Events.
pub(crate) fn after_store_write(store: &Store, gr: &Gr, ns: &str, name: &str) {
    if is_events_v1(gr) {
        after_write(store, ns, name);
    }
}

/// Make the core/v1 Event `ns/name` agree with the `events.k8s.io` Event `ns/name` (called by the store,
/// outside its lock, after every write of an `events.k8s.io` Event). Reads the current object rather than
/// the written one, so concurrent writes converge on the last.
pub fn after_write(store: &Store, ns: &str, name: &str) {
    let (core, events) = (core_gr(), events_gr());
    // A few rounds: each one loses only to a concurrent write of the same Event.
    for _ in 0..8 {
        let source = store.get(&events, ns, name);
        let current = store.get(&core, ns, name);
        let done = match (source, current) {
            (None, None) => true,
            (None, Some(current)) => matches!(store.remove(&core, ns, name, rv_of(&current)), Cas::Ok(_)),
            (Some(source), None) => store.create(&core, ns, name, to_core(&source)).is_ok(),
            (Some(source), Some(current)) => {
                let want = to_core(&source);
                same_except_version(&want, &current)
                    || matches!(store.replace(&core, ns, name, rv_of(&current), want), Cas::Ok(_))
            }
        };
        if done {
            return;
        }
    }
}

fn same_except_version(want: &Value, current: &Value) -> bool {
    let mut current = current.clone();
    if let Some(meta) = current.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    *want == current
}

/// `MicroTime` or `Time` text as a `Time` (second precision), as core Events carry it.
fn seconds(time: Option<&Value>) -> Option<Value> {
    let text = time?.as_str()?;
    parse_rfc3339(text).map(|s| json!(format_rfc3339(s)))
}

fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null() && *v != &json!("") && *v != &json!({}))
}

/// The core/v1 view of an `events.k8s.io/v1` Event.
pub fn to_core(event: &Value) -> Value {
    let get = |key: &str| present(event.get(key));
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    let mut meta = event.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        for key in ["resourceVersion", "managedFields", "generation"] {
            m.remove(key);
        }
    }
    out.insert("metadata".into(), meta);
    out.insert(
        "involvedObject".into(),
        get("regarding").cloned().unwrap_or_else(|| json!({})),
    );
    for (from, to) in [
        ("note", "message"),
        ("reason", "reason"),
        ("type", "type"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("eventTime", "eventTime"),
        ("series", "series"),
    ] {
        if let Some(v) = get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    let mut source = get("deprecatedSource").cloned().unwrap_or_else(|| json!({}));
    if present(source.get("component")).is_none() {
        if let (Some(component), Some(s)) = (get("reportingController"), source.as_object_mut()) {
            s.insert("component".into(), component.clone());
        }
    }
    if present(Some(&source)).is_some() {
        out.insert("source".into(), source);
    }
    let series = get("series");
    let count = get("deprecatedCount")
        .and_then(Value::as_i64)
        .filter(|c| *c > 0)
        .or_else(|| series.and_then(|s| s.get("count")).and_then(Value::as_i64))
        .unwrap_or(1);
    out.insert("count".into(), json!(count));
    let first = seconds(get("deprecatedFirstTimestamp")).or_else(|| seconds(get("eventTime")));
    let last = seconds(get("deprecatedLastTimestamp"))
        .or_else(|| seconds(series.and_then(|s| s.get("lastObservedTime"))))
        .or_else(|| first.clone());
    if let Some(first) = first {
        out.insert("firstTimestamp".into(), first);
    }
    if let Some(last) = last {
        out.insert("lastTimestamp".into(), last);
    }
    Value::Object(out)
}

/// Printer columns for core Events in `kubectl get events` (after Name).
pub fn core_columns() -> Vec<Value> {
    [
        ("Type", ".type"),
        ("Reason", ".reason"),
        ("Object", ".involvedObject.name"),
        ("Message", ".message"),
    ]
    .into_iter()
    .map(|(name, path)| json!({"name": name, "type": "string", "jsonPath": path}))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "btpoperator.1", "namespace": "kyma-system", "uid": "u1",
                         "resourceVersion": "7", "creationTimestamp": "2026-11-23T02:19:58Z"},
            "eventTime": "2026-11-23T02:19:58.207657Z",
            "note": "Ready: Module provisioning succeeded", "reason": "ReconcileSucceeded",
            "type": "Normal", "action": "Reconcile",
            "regarding": {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
                          "name": "btpoperator", "namespace": "kyma-system", "uid": "cr"},
            "reportingController": "btp-manager", "reportingInstance": "btp-manager-1"
        })
    }

    #[test]
    fn an_events_v1_event_maps_to_core_fields() {
        let core = to_core(&recorded());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["kind"], "Event");
        assert_eq!(core["metadata"]["uid"], "u1");
        assert!(core["metadata"].get("resourceVersion").is_none());
        assert_eq!(core["message"], "Ready: Module provisioning succeeded");
        assert_eq!(core["involvedObject"]["kind"], "BtpOperator");
        assert_eq!(core["involvedObject"]["uid"], "cr");
        assert_eq!(core["source"]["component"], "btp-manager");
        assert_eq!(core["reportingComponent"], "btp-manager");
        assert_eq!(core["reportingInstance"], "btp-manager-1");
        assert_eq!(core["count"], 1);
        assert_eq!(core["firstTimestamp"], "2026-11-23T02:19:58Z");
        assert_eq!(core["lastTimestamp"], "2026-11-23T02:19:58Z");
        assert_eq!(
            (core["type"].clone(), core["reason"].clone()),
            (json!("Normal"), json!("ReconcileSucceeded"))
        );
        assert_eq!(core["action"], "Reconcile");
    }

    #[test]
    fn series_and_deprecated_fields_win() {
        let mut event = recorded();
        event["series"] = json!({"count": 4, "lastObservedTime": "2026-11-23T03:00:00.5Z"});
        let core = to_core(&event);
        assert_eq!(core["count"], 4);
        assert_eq!(core["lastTimestamp"], "2026-11-23T03:00:00Z");
        event["deprecatedCount"] = json!(9);
        event["deprecatedFirstTimestamp"] = json!("2026-01-01T00:00:00Z");
        event["deprecatedLastTimestamp"] = json!("2026-01-02T00:00:00Z");
        event["deprecatedSource"] = json!({"component": "kubelet", "host": "node-1"});
        let core = to_core(&event);
        assert_eq!(core["count"], 9);
        assert_eq!(core["firstTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(core["lastTimestamp"], "2026-01-02T00:00:00Z");
        assert_eq!(core["source"], json!({"component": "kubelet", "host": "node-1"}));
    }

    #[test]
    fn the_store_keeps_the_core_view_in_step() {
        let store = Store::new(100).after_write(after_store_write);
        let (core, events) = (core_gr(), events_gr());
        let written = store
            .create(&events, "kyma-system", "btpoperator.1", recorded())
            .unwrap();
        let view = store
            .get(&core, "kyma-system", "btpoperator.1")
            .expect("core view created");
        assert_eq!(view["message"], "Ready: Module provisioning succeeded");
        let mut next = (*written).clone();
        next["series"] = json!({"count": 2, "lastObservedTime": "2026-11-23T02:20:00.000001Z"});
        assert!(matches!(
            store.replace(&events, "kyma-system", "btpoperator.1", rv_of(&written), next),
            Cas::Ok(_)
        ));
        let view = store.get(&core, "kyma-system", "btpoperator.1").unwrap();
        assert_eq!(view["count"], 2);
        let rv = rv_of(&store.get(&events, "kyma-system", "btpoperator.1").unwrap());
        assert!(matches!(
            store.remove(&events, "kyma-system", "btpoperator.1", rv),
            Cas::Ok(_)
        ));
        assert!(store.get(&core, "kyma-system", "btpoperator.1").is_none());
        // Core Events written directly stay core-only.
        store
            .create(&core, "default", "direct", json!({"metadata": {"name": "direct"}}))
            .unwrap();
        assert!(store.get(&events, "default", "direct").is_none());
    }
}
