//! The operand's NetworkPolicies (docs/behaviour.md#network-policies, annotation: docs/behaviour.md#the-btpoperator-resource): deciding
//! whether they are applied or removed, pure. Loading them from `<ManagerResourcesPath>/network-policies/`
//! is [`crate::manifests`]'s (re-exported here).
//!
//! When enabled, the policies are appended to [`super::resources::Inputs::extra`] so that
//! [`super::resources::prepare`] gives them the three standard labels and the chart namespace. When
//! disabled, the caller delete-collects NetworkPolicies in the chart namespace matching
//! [`managed_selector`]. On every reconcile the caller also deletes [`LEGACY_POLICY`] (NotFound ignored).

use btp_api::names;
use serde_json::Value;
use std::collections::BTreeMap;

pub use crate::manifests::{
    network_policies as load, network_policies_from_files as from_files, LoadError,
    NETWORK_POLICIES_DIRECTORY as DIRECTORY, NETWORK_POLICY_API_VERSION as API_VERSION, NETWORK_POLICY_KIND as KIND,
};

/// A policy shipped by older manager versions. It is deleted from the chart namespace on every reconcile
/// (NotFound ignored), whether policies are enabled or not (docs/behaviour.md#network-policies "Migration").
pub const LEGACY_POLICY: &str = "kyma-project.io--btp-operator-allow-to-webhook";

/// Whether the policies are installed, from the `BtpOperator` CR's annotations: `false` iff
/// [`names::DISABLE_NETWORK_POLICIES_ANNOTATION`] is `"true"` case-insensitively; anything else
/// (absent, `"false"`, `"random"`, empty) leaves them enabled.
pub fn enabled(annotations: &BTreeMap<String, String>) -> bool {
    !annotations
        .get(names::DISABLE_NETWORK_POLICIES_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// What to do with the policies in this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Enabled: append these objects to [`super::resources::Inputs::extra`] (they are then prepared and
    /// applied with the module resources).
    Apply(Vec<Value>),
    /// Disabled: delete-collect NetworkPolicies in the chart namespace matching [`managed_selector`].
    Remove,
}

/// The plan for the loaded `policies` given [`enabled`].
pub fn plan(policies: &[Value], enabled: bool) -> Plan {
    if enabled {
        Plan::Apply(policies.to_vec())
    } else {
        Plan::Remove
    }
}

/// The policy that lets the manager and the operand reach the API server; [`render`] adds the endpoint
/// ports to it.
pub const API_SERVER_POLICY: &str = "kyma-project.io--btp-operator-allow-to-apiserver";

/// Namespace and label selector of the `kubernetes` Service's EndpointSlices (the API server's endpoints).
pub const API_SERVER_SLICES_NAMESPACE: &str = "default";
/// See [`API_SERVER_SLICES_NAMESPACE`].
pub const API_SERVER_SLICES_SELECTOR: &str = "kubernetes.io/service-name=kubernetes";

/// The port the `kubernetes` Service listens on, which the shipped policy already allows.
pub const SERVICE_PORT: u16 = 443;

/// The TCP ports the `default/kubernetes` EndpointSlices name (a port without protocol is TCP), sorted,
/// without [`SERVICE_PORT`] (allowed anyway). Pure.
pub fn api_server_ports<'a>(
    slices: impl IntoIterator<Item = &'a k8s_openapi::api::discovery::v1::EndpointSlice>,
) -> std::collections::BTreeSet<u16> {
    slices
        .into_iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| p.port.and_then(|n| u16::try_from(n).ok()))
        .filter(|&n| n != 0 && n != SERVICE_PORT)
        .collect()
}

/// The policies as applied in a cluster whose API server endpoints listen on `ports` (see
/// [`api_server_ports`]): [`API_SERVER_POLICY`] gets one more egress rule, TCP to those ports anywhere; the
/// others are as loaded. No ports, or no such policy: unchanged. Pure.
pub fn render(policies: &[Value], ports: &std::collections::BTreeSet<u16>) -> Vec<Value> {
    let mut out = policies.to_vec();
    if ports.is_empty() {
        return out;
    }
    let rule = serde_json::json!({
        "ports": ports.iter().map(|p| serde_json::json!({"protocol": "TCP", "port": p})).collect::<Vec<_>>()
    });
    for policy in out.iter_mut().filter(|p| p["metadata"]["name"] == API_SERVER_POLICY) {
        if let Some(egress) = policy.pointer_mut("/spec/egress").and_then(Value::as_array_mut) {
            egress.push(rule.clone());
        }
    }
    out
}

/// Label selector for deleting the manager's own NetworkPolicies (when disabled and on deprovisioning).
///
/// The Go manager selects only `app.kubernetes.io/managed-by=btp-manager` (so unlabelled policies are
/// untouched); this project narrows deletion of managed objects to carry both that label and
/// `kyma-project.io/module=btp-operator`, both of which preparation puts on every policy.
pub fn managed_selector() -> String {
    names::module_resource_selector()
}

#[cfg(test)]
mod tests;
