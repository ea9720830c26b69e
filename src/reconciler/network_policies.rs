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
