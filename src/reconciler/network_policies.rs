//! The operand's NetworkPolicies (docs/behaviour.md#network-policies, annotation: docs/behaviour.md#the-btpoperator-resource): loading them from
//! `<ManagerResourcesPath>/network-policies/` and deciding whether they are applied or removed.
//! Loading reads files; everything else is pure.
//!
//! When enabled, the policies are appended to [`super::resources::Inputs::extra`] so that
//! [`super::resources::prepare`] gives them the three standard labels and the chart namespace. When
//! disabled, the caller delete-collects NetworkPolicies in the chart namespace matching
//! [`managed_selector`]. On every reconcile the caller also deletes [`LEGACY_POLICY`] (NotFound ignored).

use super::resources::LoadError;
use btp_api::names;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Subdirectory of `ManagerResourcesPath` holding the policies.
pub const DIRECTORY: &str = "network-policies";

/// Kind of every object in [`DIRECTORY`].
pub const KIND: &str = "NetworkPolicy";

/// API version of [`KIND`].
pub const API_VERSION: &str = "networking.k8s.io/v1";

/// A policy shipped by older manager versions. It is deleted from the chart namespace on every reconcile
/// (NotFound ignored), whether policies are enabled or not (docs/behaviour.md#network-policies "Migration").
pub const LEGACY_POLICY: &str = "kyma-project.io--btp-operator-allow-to-webhook";

/// Load every NetworkPolicy from `<manager_resources_path>/network-policies/*.yaml|*.yml`.
///
/// Only top-level regular files are read, in lexical file-name order, each possibly holding several
/// documents (empty documents are skipped). Every document must be a `networking.k8s.io/v1`
/// `NetworkPolicy` with a `metadata.name`, otherwise the whole load fails with [`LoadError::Invalid`].
///
/// The directory ships with the manager, so a missing (or unreadable) directory is an error
/// ([`LoadError::Read`] naming the directory), not an empty list. A directory without YAML files yields
/// an empty list.
///
/// The empty path loads the copy built into the binary (`crate::embedded`).
pub fn load(manager_resources_path: &Path) -> Result<Vec<Value>, LoadError> {
    if crate::embedded::is_builtin(manager_resources_path) {
        return crate::embedded::network_policies();
    }
    let dir = manager_resources_path.join(DIRECTORY);
    let read_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LoadError::Read { path, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(read_error(&dir))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read_error(&dir))?;
    files.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"));
    files.sort();
    let mut policies = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(read_error(&path))?;
        parse_file(path, &text, &mut policies)?;
    }
    Ok(policies)
}

/// The policies of one file's `text`, appended to `policies`.
fn parse_file(path: PathBuf, text: &str, policies: &mut Vec<Value>) -> Result<(), LoadError> {
    let docs = serde_saphyr::from_multiple::<Value>(text).map_err(|e| LoadError::Invalid {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        if let Err(reason) = check(&doc) {
            return Err(LoadError::Invalid { path, reason });
        }
        policies.push(doc);
    }
    Ok(())
}

/// What [`load`] returns for a `network-policies/` directory holding these `(file name, text)` files (the
/// copy built into the binary, see `crate::embedded`): same file filter, order and checks.
pub fn from_files(files: &[(&str, &str)]) -> Result<Vec<Value>, LoadError> {
    let dir = Path::new(crate::embedded::MANAGER_RESOURCES).join(DIRECTORY);
    let mut files: Vec<&(&str, &str)> = files
        .iter()
        .filter(|(name, _)| Path::new(name).extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort_by_key(|(name, _)| *name);
    let mut policies = Vec::new();
    for (name, text) in files {
        parse_file(dir.join(name), text, &mut policies)?;
    }
    Ok(policies)
}

fn check(doc: &Value) -> Result<(), String> {
    if doc["kind"] != KIND || doc["apiVersion"] != API_VERSION {
        return Err(format!(
            "expected only {API_VERSION} {KIND} documents, found {} {}",
            doc["apiVersion"], doc["kind"]
        ));
    }
    match doc["metadata"]["name"].as_str() {
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(format!("a {KIND} document lacks metadata.name")),
    }
}

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
