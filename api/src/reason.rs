//! The 30 condition reasons (docs/behaviour.md#states-and-reasons, docs/status-reasons.md): the public status
//! contract, each with what it means and what a user should do about it.

use crate::types::{ConditionStatus, State};

macro_rules! reasons {
    ($($variant:ident => $state:ident, $ready:ident, $emitted:literal, $meaning:expr, $action:expr;)*) => {
        /// A `Ready` condition reason. All 30 are public contract, even those the manager never emits.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason { $($variant,)* }

        impl Reason {
            /// Every reason, in the order of the Go manager's table.
            pub const ALL: [Reason; 30] = [$(Reason::$variant,)*];

            /// The CamelCase string written to `.status.conditions[].reason`.
            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$variant => stringify!($variant),)* }
            }

            /// The state this reason documents.
            pub fn state(self) -> State {
                match self { $(Reason::$variant => State::$state,)* }
            }

            /// The `Ready` condition status that goes with this reason (True only for the Ready reasons).
            pub fn condition_status(self) -> ConditionStatus {
                match self { $(Reason::$variant => ConditionStatus::$ready,)* }
            }

            /// Whether this manager ever writes the reason (the others are kept because the Go manager
            /// defined them, and clusters may still carry them).
            pub fn emitted(self) -> bool {
                match self { $(Reason::$variant => $emitted,)* }
            }

            /// What the reason means, for users (docs/status-reasons.md).
            pub fn meaning(self) -> &'static str {
                match self { $(Reason::$variant => $meaning,)* }
            }

            /// What a user should do about it (docs/status-reasons.md).
            pub fn what_to_do(self) -> &'static str {
                match self { $(Reason::$variant => $action,)* }
            }
        }
    };
}

const LEGACY: &str = "Nothing: this manager never writes it (the Go manager defined it); a CR carrying it from the Go \
                      manager keeps it until its state next changes.";

reasons! {
    ReconcileSucceeded => Ready, True, true,
        "The operand is installed, every module resource is applied and the operand Deployment is Available.",
        "Nothing.";
    UpdateCheckSucceeded => Ready, True, false,
        "Legacy: an update check of the Go manager found nothing to do.",
        LEGACY;
    UpdateDone => Ready, True, false,
        "Legacy: an update of the Go manager finished.",
        LEGACY;
    ClusterIdChanged => Processing, False, true,
        "`cluster_id` in the credentials Secret differs from the one the operand runs with. The manager updates \
         the operand ConfigMap, removes the operand's stale cluster-ID Secret and restarts the operand in the \
         same pass.",
        "Nothing: the CR moves on to Ready. If it stays here, read the CR's Events and the manager's logs.";
    CredentialsNamespaceChanged => Processing, False, true,
        "`credentials_namespace` in the credentials Secret changed. The manager moves the operand Secret to the new \
         namespace and removes the old one in the same pass.",
        "Nothing: the CR moves on to Ready. The new namespace must exist.";
    Initialized => Processing, False, true,
        "A new `kyma-system/btpoperator` was accepted; provisioning starts.",
        "Nothing.";
    Processing => Processing, False, false,
        "Legacy: the Go manager's state after deprovisioning.",
        LEGACY;
    UpdateCheck => Processing, False, false,
        "Legacy: the Go manager checked for an update.",
        LEGACY;
    Updated => Processing, False, true,
        "Provisioning runs again after `Ready`, `Warning` or `Error` (something changed: the Secret, the CR, the \
         operand) and waits for the operand Deployment to become available; the message names the Deployment.",
        "Nothing, unless it lasts: then look at the operand Deployment (see `ProvisioningFailed`).";
    HardDeleting => Deleting, False, true,
        "The CR is being deleted. With `force-delete: \"true\"` the manager deletes every ServiceBinding, then every \
         ServiceInstance, and waits (at most `HardDeleteTimeout`, 20 minutes) for the operand to remove them from \
         SAP BTP; then it removes every module resource it created and its finalizer.",
        "Wait. `kubectl get servicebindings,serviceinstances -A` shows what is left.";
    SoftDeleting => Deleting, False, true,
        "Hard deletion failed or timed out. The manager removes the operand Deployment and its webhooks, strips the \
         finalizers of the remaining ServiceBindings and ServiceInstances (and deletes the bindings' Secrets), then \
         removes the module resources and its finalizer. Instances may remain in SAP BTP.",
        "Wait; afterwards remove leftovers in SAP BTP (the subaccount's instances and bindings) if needed.";
    AnnotatingSecretFailed => Error, False, true,
        "The manager could not record the previous cluster ID or credentials namespace as an annotation on the \
         credentials Secret.",
        "Read the message: usually RBAC (update on Secrets in the chart namespace) or a webhook or policy refusing \
         the update. The manager retries with backoff; fixing it, or any change to the CR or Secret, retries at once.";
    ChartInstallFailed => Error, False, false,
        "Legacy: the Go manager's chart installation failed.",
        LEGACY;
    ChartPathEmpty => Error, False, false,
        "Legacy: the Go manager had no chart path.",
        LEGACY;
    ConsistencyCheckFailed => Error, False, false,
        "Legacy: the Go manager's consistency check failed.",
        LEGACY;
    DeletionOfOrphanedResourcesFailed => Error, False, true,
        "After a cluster ID change, the operand's stale cluster-ID Secret (`sap-btp-operator-clusterid`) could not \
         be deleted.",
        "Read the message (often RBAC: delete on Secrets). Deleting that Secret yourself also unblocks it; the \
         operand recreates it.";
    GettingConfigMapFailed => Error, False, false,
        "Legacy: the Go manager could not read a ConfigMap.",
        LEGACY;
    GettingDefaultCredentialsSecretFailed => Error, False, true,
        "Listing the operand's credentials Secrets (`sap-btp-service-operator`) failed.",
        "Read the message: an API server or RBAC problem (list on Secrets in all namespaces). The manager retries \
         with backoff.";
    GettingSapBtpServiceOperatorClusterIdSecretFailed => Error, False, true,
        "Reading the operand's cluster-ID Secret (`sap-btp-operator-clusterid`) failed.",
        "Read the message: an API server or RBAC problem. The manager retries with backoff.";
    GettingSapBtpServiceOperatorConfigMapFailed => Error, False, true,
        "Reading the operand ConfigMap (`sap-btp-operator-config`) failed.",
        "Read the message: an API server or RBAC problem. The manager retries with backoff.";
    InconsistentChart => Error, False, false,
        "Legacy: the Go manager found an inconsistent chart.",
        LEGACY;
    InvalidSecret => Error, False, true,
        "The credentials Secret lacks one of `clientid`, `clientsecret`, `sm_url`, `tokenurl`, `cluster_id`, has \
         or an empty value. The message names the keys, never a value. (A failed read of the Secret is not this \
         reason: the pass fails and is retried with backoff, and the status stays as it was.)",
        "Fix the Secret (`kubectl edit secret sap-btp-manager -n kyma-system`); the CR reacts at once.";
    PreparingInstallInfoFailed => Error, False, false,
        "Legacy: the Go manager could not prepare its install information.",
        LEGACY;
    ProvisioningFailed => Error, False, true,
        "Installing the operand failed: a module resource could not be prepared, applied or deleted, or the operand \
         Deployment did not become Available within `ReadyTimeout` (5 minutes). The message holds the error; when \
         it is the API server's (a call failed), the manager retries with backoff.",
        "Read the message. For a timeout, look at the operand Deployment (`kubectl describe deployment \
         sap-btp-operator-controller-manager -n kyma-system`: image pull, scheduling, its pods' logs). A change to \
         the Deployment, the Secret or the CR retries.";
    ReconcileFailed => Error, False, true,
        "As `ProvisioningFailed`, but while `Ready`: re-applying the module resources or waiting for the operand \
         failed. When the API server failed a call (the message names it), the manager retries with backoff.",
        "As for `ProvisioningFailed`.";
    ResourceRemovalFailed => Error, False, true,
        "Removing resources failed: the module resources or finalizers during deletion, or the objects a credentials \
         change made stale.",
        "Read the message (often RBAC, or a webhook refusing deletes). The manager retries with backoff.";
    StoringChartDetailsFailed => Error, False, false,
        "Legacy: the Go manager could not store chart details.",
        LEGACY;
    MissingSecret => Warning, False, true,
        "The credentials Secret `kyma-system/sap-btp-manager` does not exist, or exists without the label \
         `app.kubernetes.io/managed-by: kcp-kyma-environment-broker` (or `btp-manager`), without which the manager \
         does not see it.",
        "Create the Secret with the five keys and the label, or add the label: `kubectl label secret \
         sap-btp-manager -n kyma-system app.kubernetes.io/managed-by=kcp-kyma-environment-broker`.";
    ServiceInstancesAndBindingsNotCleaned => Warning, False, true,
        "The CR is being deleted, but ServiceInstances or ServiceBindings exist and the CR lacks the label \
         `force-delete: \"true\"`. The message gives the counts; the operand keeps running.",
        "Delete the instances and bindings (deletion continues within seconds after the last one is gone), or let \
         the manager delete them: `kubectl label btpoperator btpoperator -n kyma-system force-delete=true`.";
    WrongNamespaceOrName => Warning, False, true,
        "This BtpOperator is not `kyma-system/btpoperator`. It is ignored: no finalizer, nothing installed. (The \
         validating webhook normally refuses such a CR when it is created.)",
        "Delete it and create `kyma-system/btpoperator`.";
}

/// `docs/status-reasons.md`: every reason with its state, `Ready` condition status, meaning and what to do,
/// generated from the table above (`btp-manager status-reasons`; a test fails when the checked-in file
/// differs).
pub fn status_reasons_markdown() -> String {
    let mut out = String::from(
        "# Status reasons\n\n\
         <!-- Generated by `cargo run -q -- status-reasons > docs/status-reasons.md` from api/src/reason.rs; \
         do not edit by hand. -->\n\n\
         The `BtpOperator` status has a `state` and a condition of type `Ready`, whose `reason` is one of the 30 \
         below (the Go BTP Manager's set, kept as a public contract), and a condition of type `CredentialsValid` \
         ([below](#credentialsvalid)). `kubectl get btpoperators -A` shows the state; \
         `kubectl describe btpoperator btpoperator -n kyma-system` shows the reason, its message and the Events \
         the manager recorded on every state change. See also [troubleshooting](troubleshooting.md) and \
         [the behaviour contract](behaviour.md#states-and-reasons).\n\n\
         | Reason | State | Ready | Meaning | What to do |\n\
         |---|---|---|---|---|\n",
    );
    for reason in Reason::ALL {
        let ready = match reason.condition_status() {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        };
        let legacy = if reason.emitted() { "" } else { " (legacy)" };
        out.push_str(&format!(
            "| `{}`{legacy} | {} | {ready} | {} | {} |\n",
            reason.as_str(),
            reason.state().as_str(),
            reason.meaning(),
            reason.what_to_do()
        ));
    }
    out.push_str(
        "\n\"(legacy)\": defined by the Go manager, never written by this one. `Ready` is the status of the `Ready` \
         condition: `True` only in state `Ready`.\n\n",
    );
    out.push_str(&crate::credentials::credentials_reasons_markdown());
    out
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Reason {
    type Err = UnknownReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

/// A string that is not one of the 30 reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownReason(pub String);

impl std::fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown condition reason {:?}", self.0)
    }
}

impl std::error::Error for UnknownReason {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn thirty_distinct_reasons_round_trip() {
        let names: HashSet<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), 30);
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>().unwrap(), r);
        }
        assert!("NotAReason".parse::<Reason>().is_err());
    }

    #[test]
    fn only_ready_reasons_have_a_true_condition() {
        for r in Reason::ALL {
            assert_eq!(
                r.condition_status() == ConditionStatus::True,
                r.state() == State::Ready,
                "{r}"
            );
        }
        assert_eq!(Reason::WrongNamespaceOrName.state(), State::Warning);
        assert_eq!(Reason::InvalidSecret.state(), State::Error);
        assert_eq!(Reason::SoftDeleting.state(), State::Deleting);
        assert_eq!(Reason::Updated.state(), State::Processing);
    }

    #[test]
    fn every_reason_is_explained_in_the_generated_doc() {
        let doc = status_reasons_markdown();
        for r in Reason::ALL {
            assert!(!r.meaning().is_empty() && !r.what_to_do().is_empty(), "{r}");
            assert!(
                !r.meaning().contains('|') && !r.what_to_do().contains('|'),
                "{r}: breaks the table"
            );
            assert!(doc.contains(&format!("| `{r}`")), "{r}");
        }
        assert_eq!(Reason::ALL.iter().filter(|r| !r.emitted()).count(), 11);
        assert!(doc.contains("| `MissingSecret` | Warning | False |"), "{doc}");
    }
}
