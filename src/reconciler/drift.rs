//! Credentials drift: cluster ID and credentials namespace (docs/behaviour.md#credentials-drift, #ready-state-check), as pure decisions.
//!
//! The operand (SAP BTP service operator) remembers two things the required Secret `sap-btp-manager`
//! configures: the **credentials namespace** (where its Secret `sap-btp-service-operator` lives, and its
//! `RELEASE_NAMESPACE`/`MANAGEMENT_NAMESPACE`) and the **cluster ID** (`CLUSTER_ID` in the ConfigMap
//! `<chart ns>/sap-btp-operator-config`, plus `INITIAL_CLUSTER_ID` in the Secret `sap-btp-operator-clusterid`
//! that the operand itself creates in its credentials namespace). When the required Secret changes either
//! value, re-applying the module resources is not enough: the running operand pod keeps its old environment
//! and its cluster-ID Secret, and the old operand Secret stays behind in the old namespace. This module
//! decides what to do about that; it reads nothing and writes nothing. The API layer fills an [`Observed`]
//! and carries out the returned [`Actions`] / [`Outcome`].
//!
//! # How the API layer uses it
//!
//! **Processing** (docs/behaviour.md#provisioning-steps steps 2–8):
//! 1. *Observe* (`before`): list the Secrets labelled `app.kubernetes.io/managed-by=btp-manager` named
//!    [`OPERAND_SECRET`] (their namespaces), the annotation [`PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION`] of the
//!    required Secret, the ConfigMap's [`CLUSTER_ID_CONFIGMAP_KEY`]; then, in [`operand_namespace`]`(creds,
//!    &before)`, the Secret [`CLUSTER_ID_SECRET`]; and the operand pod (see [`is_operand_pod`]). Read failures
//!    map to `GettingDefaultCredentialsSecretFailed`, `GettingSapBtpServiceOperatorConfigMapFailed` and
//!    `GettingSapBtpServiceOperatorClusterIdSecretFailed`.
//! 2. [`before_apply`]: write the annotations on the required Secret (skip a write when the annotation already
//!    holds that value; failure ⇒ `AnnotatingSecretFailed`), delete the stale cluster-ID Secret (failure ⇒
//!    `DeletionOfOrphanedResourcesFailed`), delete the not-Ready operand pod (failure ⇒ `ResourceRemovalFailed`).
//!    NotFound on a delete is success.
//! 3. Apply the module resources and wait for readiness (not this module).
//! 4. *Observe* again (`after`): the cluster-ID Secret in the **same** namespace as before
//!    (`operand_namespace(creds, &before)`), the operand Secrets, the operand pod.
//! 5. [`after_apply`]: delete what the change invalidated (failure ⇒ `ResourceRemovalFailed`).
//!
//! **Ready** (docs/behaviour.md#ready-state-check): observe (the operand Secrets, the annotation and the ConfigMap suffice) and call
//! [`ready_state_drift`] first. `Some(outcome)` ⇒ write that `Processing` status and run no re-apply in the
//! Ready flow: the Processing flow above resolves the drift (in the same pass, under the one-pass design, or
//! the next one). `None` ⇒ continue with the Ready-state re-apply.
//!
//! Everything here handles namespace names and cluster IDs only; the Go manager puts both in status messages,
//! so they are not secret. No credential value (`clientid`, `clientsecret`, ...) is read or returned.

use super::credentials::Credentials;
use super::status::Outcome;
use btp_api::Reason;

pub use super::resources::{OPERAND_CONFIGMAP, OPERAND_SECRET};

pub use btp_api::names::operand::CLUSTER_ID_SECRET;

/// The operand Secrets we created, in every namespace: labelled managed-by=btp-manager and named
/// [`OPERAND_SECRET`].
pub fn operand_secrets_selector() -> kube::api::ListParams {
    use btp_api::names::{MANAGED_BY_BTP_MANAGER, MANAGED_BY_LABEL};
    kube::api::ListParams::default()
        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_BTP_MANAGER}"))
        .fields(&format!("metadata.name={OPERAND_SECRET}"))
}
/// Key of [`CLUSTER_ID_SECRET`] holding the cluster ID the operand started with.
pub const INITIAL_CLUSTER_ID_KEY: &str = "INITIAL_CLUSTER_ID";
/// Key of the operand ConfigMap ([`OPERAND_CONFIGMAP`]) holding the cluster ID.
pub const CLUSTER_ID_CONFIGMAP_KEY: &str = "CLUSTER_ID";
/// Annotation on the required Secret remembering the operand's previous credentials namespace.
pub const PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION: &str = "operator.kyma-project.io/previous-credentials-namespace";
/// Annotation on the required Secret remembering the operand's previous cluster ID.
pub const PREVIOUS_CLUSTER_ID_ANNOTATION: &str = "operator.kyma-project.io/previous-cluster-id";
/// Label key selecting the operand pod.
pub const OPERAND_POD_LABEL: &str = "app.kubernetes.io/instance";
/// Value of [`OPERAND_POD_LABEL`] on the operand pod.
pub const OPERAND_POD_LABEL_VALUE: &str = "sap-btp-operator";
/// Name prefix of the operand pod.
pub const OPERAND_POD_NAME_PREFIX: &str = "sap-btp-operator";

/// What the API layer saw. All fields are plain data; none holds a credential value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Namespaces that hold a Secret named [`OPERAND_SECRET`] labelled
    /// `app.kubernetes.io/managed-by=btp-manager` (the "default credentials Secret"), in any order.
    pub operand_secret_namespaces: Vec<String>,
    /// The annotation [`PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION`] on the required Secret, if any.
    pub previous_credentials_namespace: Option<String>,
    /// [`CLUSTER_ID_CONFIGMAP_KEY`] of the ConfigMap `<chart ns>/`[`OPERAND_CONFIGMAP`]: `None` when the ConfigMap
    /// does not exist. A ConfigMap without the key may be reported as `Some("")`; an empty value is treated
    /// exactly like `None` ("no cluster ID recorded"), see [`ready_state_drift`] and [`before_apply`].
    pub configmap_cluster_id: Option<String>,
    /// [`INITIAL_CLUSTER_ID_KEY`] of the Secret [`CLUSTER_ID_SECRET`] in [`operand_namespace`] (computed from the
    /// *before* observation): `None` when that Secret does not exist, `Some("")` when it exists without the key
    /// or with an empty value (the Go manager then ignores its value but still deletes the Secret after the apply).
    pub clusterid_secret_value: Option<String>,
    /// The operand pod (the first pod labelled [`OPERAND_POD_LABEL`]=[`OPERAND_POD_LABEL_VALUE`] for which
    /// [`is_operand_pod`] holds): `None` when there is none. `Some(false)` exactly when its `Ready` condition has
    /// status `False`; `Some(true)` otherwise (`True`, `Unknown` or no `Ready` condition yet), because the
    /// reference deletes a pod only on an explicit `Ready=False` (a crash-looping operand).
    pub operand_pod_ready: Option<bool>,
}

/// What to change, as decided by [`before_apply`] or [`after_apply`]. `Default` is "nothing".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    /// The value the annotation [`PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION`] on the required Secret must hold
    /// (write it unless it already does). Never removed once written (docs/behaviour.md#credentials-drift).
    pub annotate_previous_credentials_namespace: Option<String>,
    /// The value the annotation [`PREVIOUS_CLUSTER_ID_ANNOTATION`] on the required Secret must hold (write it
    /// unless it already does). Never removed once written.
    pub annotate_previous_cluster_id: Option<String>,
    /// Delete the Secret [`CLUSTER_ID_SECRET`] in this namespace.
    pub delete_clusterid_secret_in: Option<String>,
    /// Delete the operand pod (the one [`Observed::operand_pod_ready`] describes).
    pub delete_operand_pod: bool,
    /// Delete the Secret [`OPERAND_SECRET`] in this (old) namespace.
    pub delete_old_operand_secret_in: Option<String>,
}

impl Actions {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == Actions::default()
    }
}

/// Whether a pod labelled [`OPERAND_POD_LABEL`]=[`OPERAND_POD_LABEL_VALUE`] is the operand pod: its name starts
/// with [`OPERAND_POD_NAME_PREFIX`] and it runs in the chart namespace (docs/behaviour.md#credentials-drift). Of several, the API layer
/// takes the first in list order, as the Go manager does.
pub fn is_operand_pod(name: &str, namespace: &str, chart_namespace: &str) -> bool {
    name.starts_with(OPERAND_POD_NAME_PREFIX) && namespace == chart_namespace
}

/// The namespace of the "default credentials Secret" (docs/behaviour.md#credentials-drift): the operand's current credentials
/// namespace as far as the cluster shows it. Among [`Observed::operand_secret_namespaces`], the remembered
/// previous namespace wins when present; otherwise the lexically lowest (byte order, as the Go manager's sort).
/// `None` when there is no operand Secret anywhere.
pub fn current_credentials_namespace(o: &Observed) -> Option<String> {
    let remembered = o
        .previous_credentials_namespace
        .as_deref()
        .filter(|p| o.operand_secret_namespaces.iter().any(|ns| ns == p));
    remembered
        .or_else(|| o.operand_secret_namespaces.iter().map(String::as_str).min())
        .map(str::to_string)
}

/// The operand's current credentials namespace, defaulting to the desired one when no operand Secret exists
/// (docs/behaviour.md#credentials-drift "initial assumption"). This is where the cluster-ID Secret is read, before *and* after the
/// apply, and where it is deleted.
pub fn operand_namespace(creds: &Credentials, o: &Observed) -> String {
    current_credentials_namespace(o).unwrap_or_else(|| creds.credentials_namespace.clone())
}

/// The ConfigMap's cluster ID when it records one (empty counts as none).
fn configmap_cluster_id(o: &Observed) -> Option<&str> {
    o.configmap_cluster_id.as_deref().filter(|v| !v.is_empty())
}

/// The cluster-ID Secret's value when it has a non-empty one.
fn clusterid_secret_value(o: &Observed) -> Option<&str> {
    o.clusterid_secret_value.as_deref().filter(|v| !v.is_empty())
}

/// The Ready-state configuration drift check (docs/behaviour.md#ready-state-check): the outcome to write, or `None` when the
/// operand still runs with what the required Secret says.
///
/// 1. Credentials namespace: when an operand Secret exists ([`current_credentials_namespace`]) and its namespace
///    differs from the desired one ⇒ `Processing / CredentialsNamespaceChanged`,
///    `credentials namespace changed from <current> to <desired>`.
/// 2. Otherwise cluster ID: when the ConfigMap records a cluster ID that differs from the required Secret's
///    `cluster_id` ⇒ `Processing / ClusterIdChanged`, `cluster ID changed from <configmap> to <desired>`.
///
/// Interpretation: the Go manager compares a *present* ConfigMap even when its `CLUSTER_ID` is missing or empty
/// (and would report "cluster ID changed from  to X"). Here an empty value means "no cluster ID recorded" and
/// is no drift: the Processing flow would delete nothing for it either (the clean-up after the apply ignores an empty ConfigMap value),
/// and the Ready-state re-apply restores the key, so the detour would only put an untrue message in the status.
/// The cluster-ID Secret is not consulted in Ready state, as in the Go manager.
pub fn ready_state_drift(creds: &Credentials, o: &Observed) -> Option<Outcome> {
    if let Some(current) = current_credentials_namespace(o) {
        if current != creds.credentials_namespace {
            return Some(Outcome::new(
                Reason::CredentialsNamespaceChanged,
                format!(
                    "credentials namespace changed from {current} to {}",
                    creds.credentials_namespace
                ),
            ));
        }
    }
    match configmap_cluster_id(o) {
        Some(current) if current != creds.cluster_id => Some(Outcome::new(
            Reason::ClusterIdChanged,
            format!("cluster ID changed from {current} to {}", creds.cluster_id),
        )),
        _ => None,
    }
}

/// What to do before the apply in Processing (docs/behaviour.md#credentials-drift).
///
/// * Credentials namespace: when the operand's current credentials namespace differs from the desired one, remember it in
///   [`Actions::annotate_previous_credentials_namespace`].
/// * ConfigMap cluster ID: when the ConfigMap records a cluster ID different from the desired one, remember the ConfigMap's
///   value in [`Actions::annotate_previous_cluster_id`].
/// * Cluster-ID Secret: when the cluster-ID Secret (in [`operand_namespace`]) has a non-empty `INITIAL_CLUSTER_ID` that
///   differs from the ConfigMap's cluster ID, the operand cannot start (it crash-loops on the mismatch):
///   remember the Secret's value in [`Actions::annotate_previous_cluster_id`] (it overrides the ConfigMap's value: the
///   reference writes both, in that order, so the Secret's value is what stays), delete that Secret, and delete
///   the operand pod only when it is not Ready (`Some(false)`); a Ready pod is left alone here.
///
/// Interpretation (the Go manager is imprecise here): when the ConfigMap does not exist or records no cluster ID,
/// the cluster-ID Secret step compares the cluster-ID Secret with the **desired** cluster ID, the value the apply is about to put in the
/// ConfigMap. The Go manager compares with an unset value (the Go reconciler's leftover field, usually empty) and
/// so deletes any such Secret; comparing with the desired ID still deletes a stale Secret (e.g. one left over
/// from an earlier installation with another cluster ID) but keeps one that already matches.
pub fn before_apply(creds: &Credentials, o: &Observed) -> Actions {
    let mut actions = Actions::default();
    let current_ns = operand_namespace(creds, o);
    if current_ns != creds.credentials_namespace {
        actions.annotate_previous_credentials_namespace = Some(current_ns.clone());
    }
    let configmap = configmap_cluster_id(o);
    if let Some(cm) = configmap.filter(|cm| *cm != creds.cluster_id) {
        actions.annotate_previous_cluster_id = Some(cm.to_string());
    }
    let expected = configmap.unwrap_or(&creds.cluster_id);
    if let Some(secret) = clusterid_secret_value(o).filter(|v| *v != expected) {
        actions.annotate_previous_cluster_id = Some(secret.to_string());
        actions.delete_clusterid_secret_in = Some(current_ns);
        actions.delete_operand_pod = o.operand_pod_ready == Some(false);
    }
    actions
}

/// Whether the apply invalidates what the operand runs with (credentials namespace or cluster ID changed,
/// judged from what was observed before the apply). When false, [`after_apply`] returns no actions whatever
/// it observes afterwards, so the API layer need not observe again.
pub fn invalidated_by_apply(creds: &Credentials, before: &Observed) -> bool {
    let namespace_changed = operand_namespace(creds, before) != creds.credentials_namespace;
    let cluster_id_changed = configmap_cluster_id(before)
        .is_some_and(|cm| cm != creds.cluster_id || cm != clusterid_secret_value(before).unwrap_or(cm));
    namespace_changed || cluster_id_changed
}

/// What to delete after a successful apply in Processing (docs/behaviour.md#cleanup-after-a-credentials-change), so the operand restarts with the
/// new environment and recreates its cluster-ID Secret.
///
/// Decided from `before` (the observation [`before_apply`] saw):
/// * credentials namespace changed := [`operand_namespace`]`(creds, before)` ≠ desired namespace;
/// * cluster ID changed := the ConfigMap recorded a cluster ID before the apply AND (it ≠ the desired cluster ID
///   OR it ≠ the cluster-ID Secret's value; a Secret without a value counts as agreeing with the ConfigMap).
///
/// Carried out on what `after` still shows:
/// * either change ⇒ delete the cluster-ID Secret in `operand_namespace(creds, before)` if
///   [`Observed::clusterid_secret_value`] of `after` is `Some` (read in that namespace), and the operand pod if
///   `after` has one (Ready or not);
/// * namespace change ⇒ also delete the old [`OPERAND_SECRET`] in the old namespace if `after` still lists it.
///
/// Never annotates. Other fields of `after` are not consulted.
pub fn after_apply(creds: &Credentials, before: &Observed, after: &Observed) -> Actions {
    let old_ns = operand_namespace(creds, before);
    let namespace_changed = old_ns != creds.credentials_namespace;
    let mut actions = Actions::default();
    if invalidated_by_apply(creds, before) {
        if after.clusterid_secret_value.is_some() {
            actions.delete_clusterid_secret_in = Some(old_ns.clone());
        }
        actions.delete_operand_pod = after.operand_pod_ready.is_some();
    }
    if namespace_changed && after.operand_secret_namespaces.contains(&old_ns) {
        actions.delete_old_operand_secret_in = Some(old_ns);
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::super::credentials::{validate, Observed as SecretObserved};
    use super::*;
    use std::collections::BTreeMap;

    const CANARY: &str = "CANARY-SECRET-VALUE";

    fn creds(cluster_id: &str, credentials_namespace: Option<&str>) -> Credentials {
        let mut data: BTreeMap<String, Vec<u8>> = [
            ("clientid", "id-CANARY"),
            ("clientsecret", CANARY),
            ("sm_url", "https://sm"),
            ("tokenurl", "https://t"),
            ("cluster_id", cluster_id),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
        if let Some(ns) = credentials_namespace {
            data.insert("credentials_namespace".into(), ns.as_bytes().to_vec());
        }
        validate(SecretObserved::Present(&data), "sap-btp-manager", "kyma-system").unwrap()
    }

    fn secrets_in(namespaces: &[&str]) -> Observed {
        Observed {
            operand_secret_namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            ..Observed::default()
        }
    }

    /// A steady installation: operand Secret in kyma-system, ConfigMap and cluster-ID Secret agree on `c-1`.
    fn steady() -> Observed {
        Observed {
            configmap_cluster_id: Some("c-1".into()),
            clusterid_secret_value: Some("c-1".into()),
            operand_pod_ready: Some(true),
            ..secrets_in(&["kyma-system"])
        }
    }

    #[test]
    fn no_operand_secret_anywhere_is_no_drift() {
        let c = creds("c-1", None);
        let o = Observed::default();
        assert_eq!(current_credentials_namespace(&o), None);
        assert_eq!(operand_namespace(&c, &o), "kyma-system");
        assert_eq!(ready_state_drift(&c, &o), None);
        assert!(before_apply(&c, &o).is_empty());
        assert!(after_apply(&c, &o, &o).is_empty());
    }

    #[test]
    fn operand_secret_in_the_desired_namespace_is_no_drift() {
        let c = creds("c-1", None);
        assert_eq!(ready_state_drift(&c, &steady()), None);
        assert!(before_apply(&c, &steady()).is_empty());
        assert!(after_apply(&c, &steady(), &steady()).is_empty());
        let c = creds("c-1", Some("custom"));
        let o = Observed {
            operand_secret_namespaces: vec!["custom".into()],
            ..steady()
        };
        assert_eq!(ready_state_drift(&c, &o), None);
        assert!(before_apply(&c, &o).is_empty());
        assert!(after_apply(&c, &o, &o).is_empty());
    }

    #[test]
    fn operand_secret_in_another_namespace_is_a_namespace_change() {
        let c = creds("c-1", Some("custom"));
        let o = steady();
        assert_eq!(
            ready_state_drift(&c, &o),
            Some(Outcome::new(
                Reason::CredentialsNamespaceChanged,
                "credentials namespace changed from kyma-system to custom"
            ))
        );
        assert_eq!(
            before_apply(&c, &o),
            Actions {
                annotate_previous_credentials_namespace: Some("kyma-system".into()),
                ..Actions::default()
            },
            "the cluster-ID Secret agrees with the ConfigMap: nothing else before the apply"
        );
        // Switching back: desired is the chart namespace again.
        let c = creds("c-1", None);
        let o = Observed {
            operand_secret_namespaces: vec!["custom".into()],
            ..steady()
        };
        let outcome = ready_state_drift(&c, &o).unwrap();
        assert_eq!(
            outcome.message,
            "credentials namespace changed from custom to kyma-system"
        );
        assert_eq!(
            before_apply(&c, &o).annotate_previous_credentials_namespace.as_deref(),
            Some("custom")
        );
    }

    #[test]
    fn namespace_drift_is_reported_before_cluster_id_drift() {
        let c = creds("c-2", Some("custom"));
        let outcome = ready_state_drift(&c, &steady()).unwrap();
        assert_eq!(outcome.reason, Reason::CredentialsNamespaceChanged);
        let a = before_apply(&c, &steady());
        assert_eq!(
            a.annotate_previous_credentials_namespace.as_deref(),
            Some("kyma-system")
        );
        assert_eq!(a.annotate_previous_cluster_id.as_deref(), Some("c-1"));
    }

    #[test]
    fn several_operand_secrets_the_remembered_one_wins_else_the_lowest() {
        let mut o = secrets_in(&["zeta", "kyma-system", "alpha"]);
        assert_eq!(current_credentials_namespace(&o).as_deref(), Some("alpha"));
        o.previous_credentials_namespace = Some("zeta".into());
        assert_eq!(current_credentials_namespace(&o).as_deref(), Some("zeta"));
        o.previous_credentials_namespace = Some("gone".into());
        assert_eq!(
            current_credentials_namespace(&o).as_deref(),
            Some("alpha"),
            "a remembered namespace without a Secret is ignored"
        );
        o.previous_credentials_namespace = Some(String::new());
        assert_eq!(current_credentials_namespace(&o).as_deref(), Some("alpha"));
        assert_eq!(
            current_credentials_namespace(&secrets_in(&["b", "B", "a"])).as_deref(),
            Some("B"),
            "byte order, as the Go manager's sort"
        );
        // The remembered one drives the drift decision.
        let c = creds("c-1", Some("alpha"));
        let o = Observed {
            previous_credentials_namespace: Some("kyma-system".into()),
            ..secrets_in(&["alpha", "kyma-system"])
        };
        assert_eq!(
            ready_state_drift(&c, &o).unwrap().message,
            "credentials namespace changed from kyma-system to alpha"
        );
    }

    #[test]
    fn configmap_cluster_id_differs_is_a_cluster_id_change() {
        let c = creds("c-2", None);
        let o = steady();
        assert_eq!(
            ready_state_drift(&c, &o),
            Some(Outcome::new(
                Reason::ClusterIdChanged,
                "cluster ID changed from c-1 to c-2"
            ))
        );
        assert_eq!(
            before_apply(&c, &o),
            Actions {
                annotate_previous_cluster_id: Some("c-1".into()),
                ..Actions::default()
            },
            "the cluster-ID Secret agrees with the ConfigMap: only the annotation"
        );
    }

    #[test]
    fn configmap_cluster_id_equal_missing_or_empty_is_no_change() {
        let c = creds("c-1", None);
        assert_eq!(ready_state_drift(&c, &steady()), None);
        for configmap_cluster_id in [None, Some(String::new())] {
            let o = Observed {
                configmap_cluster_id,
                clusterid_secret_value: None,
                ..steady()
            };
            assert_eq!(ready_state_drift(&creds("c-2", None), &o), None);
            assert!(before_apply(&creds("c-2", None), &o).is_empty());
            assert!(after_apply(&creds("c-2", None), &o, &steady()).is_empty());
        }
    }

    #[test]
    fn stale_cluster_id_secret_is_deleted_and_the_pod_only_when_not_ready() {
        let c = creds("c-1", None);
        let ready = Observed {
            clusterid_secret_value: Some("bogus".into()),
            ..steady()
        };
        assert_eq!(
            ready_state_drift(&c, &ready),
            None,
            "Ready state does not look at the cluster-ID Secret"
        );
        assert_eq!(
            before_apply(&c, &ready),
            Actions {
                annotate_previous_cluster_id: Some("bogus".into()),
                delete_clusterid_secret_in: Some("kyma-system".into()),
                delete_operand_pod: false,
                ..Actions::default()
            }
        );
        let crashing = Observed {
            operand_pod_ready: Some(false),
            ..ready.clone()
        };
        assert!(before_apply(&c, &crashing).delete_operand_pod);
        let no_pod = Observed {
            operand_pod_ready: None,
            ..ready.clone()
        };
        assert!(!before_apply(&c, &no_pod).delete_operand_pod);
        // An empty INITIAL_CLUSTER_ID is ignored.
        let empty = Observed {
            clusterid_secret_value: Some(String::new()),
            operand_pod_ready: Some(false),
            ..steady()
        };
        assert!(before_apply(&c, &empty).is_empty());
    }

    #[test]
    fn cluster_id_secret_is_read_and_deleted_in_the_current_namespace() {
        let c = creds("c-1", Some("new"));
        let o = Observed {
            operand_secret_namespaces: vec!["old".into()],
            clusterid_secret_value: Some("bogus".into()),
            ..steady()
        };
        assert_eq!(operand_namespace(&c, &o), "old");
        let a = before_apply(&c, &o);
        assert_eq!(a.annotate_previous_credentials_namespace.as_deref(), Some("old"));
        assert_eq!(a.delete_clusterid_secret_in.as_deref(), Some("old"));
    }

    #[test]
    fn cluster_id_secret_and_configmap_both_stale_the_secret_value_is_remembered() {
        let c = creds("c-3", None);
        let o = Observed {
            clusterid_secret_value: Some("c-0".into()),
            ..steady()
        };
        let a = before_apply(&c, &o);
        assert_eq!(
            a.annotate_previous_cluster_id.as_deref(),
            Some("c-0"),
            "the cluster-ID Secret step writes after the ConfigMap step"
        );
        assert_eq!(a.delete_clusterid_secret_in.as_deref(), Some("kyma-system"));
    }

    #[test]
    fn without_a_configmap_the_cluster_id_secret_is_compared_with_the_desired_id() {
        let c = creds("c-1", None);
        let leftover = Observed {
            configmap_cluster_id: None,
            clusterid_secret_value: Some("c-0".into()),
            operand_pod_ready: None,
            ..secrets_in(&[])
        };
        assert_eq!(
            before_apply(&c, &leftover),
            Actions {
                annotate_previous_cluster_id: Some("c-0".into()),
                delete_clusterid_secret_in: Some("kyma-system".into()),
                ..Actions::default()
            }
        );
        let matching = Observed {
            clusterid_secret_value: Some("c-1".into()),
            ..leftover
        };
        assert!(before_apply(&c, &matching).is_empty());
    }

    #[test]
    fn after_apply_on_a_namespace_change_deletes_the_cluster_id_secret_the_pod_and_the_old_secret() {
        let c = creds("c-1", Some("custom"));
        let before = steady();
        let after = Observed {
            operand_secret_namespaces: vec!["custom".into(), "kyma-system".into()],
            ..steady()
        };
        assert_eq!(
            after_apply(&c, &before, &after),
            Actions {
                delete_clusterid_secret_in: Some("kyma-system".into()),
                delete_operand_pod: true,
                delete_old_operand_secret_in: Some("kyma-system".into()),
                ..Actions::default()
            }
        );
        let gone = Observed {
            operand_secret_namespaces: vec!["custom".into()],
            clusterid_secret_value: None,
            operand_pod_ready: None,
            ..steady()
        };
        assert!(after_apply(&c, &before, &gone).is_empty(), "only what is still there");
        let crashing = Observed {
            operand_pod_ready: Some(false),
            ..after.clone()
        };
        assert!(after_apply(&c, &before, &crashing).delete_operand_pod, "Ready or not");
    }

    #[test]
    fn after_apply_on_a_cluster_id_change_deletes_the_cluster_id_secret_and_the_pod() {
        let c = creds("c-2", None);
        let expected = Actions {
            delete_clusterid_secret_in: Some("kyma-system".into()),
            delete_operand_pod: true,
            ..Actions::default()
        };
        assert_eq!(after_apply(&c, &steady(), &steady()), expected);
        // ConfigMap equals the desired ID but the cluster-ID Secret disagreed (the cluster-ID Secret corner case).
        let c = creds("c-1", None);
        let before = Observed {
            clusterid_secret_value: Some("bogus".into()),
            ..steady()
        };
        assert_eq!(after_apply(&c, &before, &steady()), expected);
        let without_value = Observed {
            clusterid_secret_value: Some(String::new()),
            ..steady()
        };
        assert!(
            after_apply(&c, &without_value, &steady()).is_empty(),
            "an empty INITIAL_CLUSTER_ID agrees with the ConfigMap"
        );
        let after_without_value = Observed {
            clusterid_secret_value: Some(String::new()),
            ..steady()
        };
        assert_eq!(
            after_apply(&creds("c-2", None), &steady(), &after_without_value).delete_clusterid_secret_in,
            Some("kyma-system".into()),
            "present is enough to delete"
        );
    }

    #[test]
    fn no_change_is_empty_actions_and_no_secret_value_leaks() {
        let c = creds("c-1", None);
        assert!(after_apply(&c, &steady(), &steady()).is_empty());
        let c = creds("c-2", Some("custom"));
        let o = Observed {
            clusterid_secret_value: Some("c-0".into()),
            operand_pod_ready: Some(false),
            ..steady()
        };
        let text = format!(
            "{:?} {:?} {:?}",
            ready_state_drift(&c, &o),
            before_apply(&c, &o),
            after_apply(&c, &o, &o)
        );
        assert!(!text.contains("CANARY"), "{text}");
    }
}
