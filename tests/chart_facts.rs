//! The operand's manifests built into the manager are the chart's (v0.11.10) in every fact the API server or
//! the operand acts on: held leaf by leaf against `tests/fixtures/operand-chart-facts.txt`, a summary of the
//! chart made by `scripts/chart-facts` from upstream's render (schemas, versions, printer columns, RBAC rules
//! in their order, the Deployment's pod template and annotations, Services, webhooks). Descriptions are not
//! facts: ours are our own words (`tests/module_resources.rs` checks that every field has one).

mod common;

use btp_manager::reconciler::resources::is_cluster_scoped;
use std::collections::{BTreeMap, BTreeSet};

/// Values the chart renders that the manager replaces at every apply, so the file's value is only a
/// placeholder: the ConfigMap's cluster ID (the chart's is a random one from upstream's render).
const FILLED_AT_APPLY: [(&str, &str, &str); 1] = [("ConfigMap", "sap-btp-operator-config", "/data/CLUSTER_ID")];

#[test]
fn the_built_in_operand_manifests_are_the_charts_facts() {
    let module = btp_manager::manifests::module_resources(std::path::Path::new("")).expect("the built-in manifests");
    let mut ours: BTreeMap<(String, String), Vec<(String, serde_json::Value)>> = BTreeMap::new();
    for object in &module.apply {
        let kind = object["kind"].as_str().unwrap().to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let leaves = common::chart::leaves(object, is_cluster_scoped(&kind));
        assert!(
            ours.insert((kind.clone(), name.clone()), leaves).is_none(),
            "{kind} {name} twice"
        );
    }
    let mut chart: BTreeMap<(String, String), Vec<(String, serde_json::Value)>> = BTreeMap::new();
    for (kind, name, pointer, value) in common::chart::facts() {
        chart.entry((kind, name)).or_default().push((pointer, value));
    }
    assert_eq!(
        ours.keys().collect::<BTreeSet<_>>(),
        chart.keys().collect::<BTreeSet<_>>(),
        "the objects"
    );
    let filled = |kind: &str, name: &str, pointer: &str| FILLED_AT_APPLY.contains(&(kind, name, pointer));
    let mut differences = Vec::new();
    for ((kind, name), facts) in &chart {
        let mine: BTreeMap<&String, &serde_json::Value> = ours[&(kind.clone(), name.clone())]
            .iter()
            .map(|(p, v)| (p, v))
            .collect();
        let theirs: BTreeMap<&String, &serde_json::Value> = facts.iter().map(|(p, v)| (p, v)).collect();
        for (pointer, value) in &theirs {
            match mine.get(pointer) {
                Some(v) if v == value || filled(kind, name, pointer) => {}
                Some(v) => differences.push(format!("{kind} {name} {pointer}: chart {value}, ours {v}")),
                None => differences.push(format!("{kind} {name} {pointer}: chart {value}, ours absent")),
            }
        }
        for (pointer, value) in &mine {
            if !theirs.contains_key(pointer) {
                differences.push(format!("{kind} {name} {pointer}: ours {value}, not in the chart"));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} differences from the chart:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// The summary has teeth: it names the facts the issue found missing or extra in an earlier copy.
#[test]
fn the_facts_hold_what_tells_the_chart_apart() {
    let facts = common::chart::facts();
    let has = |kind: &str, name: &str, pointer_part: &str| {
        facts
            .iter()
            .any(|(k, n, p, _)| k == kind && n == name && p.contains(pointer_part))
    };
    let instances = "serviceinstances.services.cloud.sap.com";
    let bindings = "servicebindings.services.cloud.sap.com";
    assert!(has(
        "CustomResourceDefinition",
        bindings,
        "/parametersFrom/items/required"
    ));
    assert!(has(
        "CustomResourceDefinition",
        bindings,
        "/groups/x-kubernetes-list-type"
    ));
    assert!(has("CustomResourceDefinition", instances, "/reason/pattern"));
    for extra in [
        "secretTemplate",
        "btpAccessCredentialsSecret",
        "hashedSpec",
        "forceReconcile",
    ] {
        let in_v1alpha1 = facts.iter().any(|(k, _, p, _)| {
            k == "CustomResourceDefinition" && p.starts_with("/spec/versions/1/") && p.contains(&format!("/{extra}/"))
        });
        assert!(!in_v1alpha1, "{extra} is not a v1alpha1 field of the chart");
    }
    let checksum = facts
        .iter()
        .find(|(k, _, p, _)| k == "Deployment" && p == "/spec/template/metadata/annotations/checksum~1config")
        .expect("the pod template's checksum/config");
    assert!(checksum.3.as_str().is_some_and(|c| c.len() == 64), "{checksum:?}");
}
