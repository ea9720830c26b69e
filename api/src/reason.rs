//! The 30 condition reasons of reference-behaviour.md §1.3: the public status contract.

use crate::types::{ConditionStatus, State};

macro_rules! reasons {
    ($($variant:ident => $state:ident, $ready:ident;)*) => {
        /// A `Ready` condition reason. All 30 are public contract, even those the manager never emits.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason { $($variant,)* }

        impl Reason {
            /// Every reason, in the order of the reference table.
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
        }
    };
}

reasons! {
    ReconcileSucceeded => Ready, True;
    UpdateCheckSucceeded => Ready, True;
    UpdateDone => Ready, True;
    ClusterIdChanged => Processing, False;
    CredentialsNamespaceChanged => Processing, False;
    Initialized => Processing, False;
    Processing => Processing, False;
    UpdateCheck => Processing, False;
    Updated => Processing, False;
    HardDeleting => Deleting, False;
    SoftDeleting => Deleting, False;
    AnnotatingSecretFailed => Error, False;
    ChartInstallFailed => Error, False;
    ChartPathEmpty => Error, False;
    ConsistencyCheckFailed => Error, False;
    DeletionOfOrphanedResourcesFailed => Error, False;
    GettingConfigMapFailed => Error, False;
    GettingDefaultCredentialsSecretFailed => Error, False;
    GettingSapBtpServiceOperatorClusterIdSecretFailed => Error, False;
    GettingSapBtpServiceOperatorConfigMapFailed => Error, False;
    InconsistentChart => Error, False;
    InvalidSecret => Error, False;
    PreparingInstallInfoFailed => Error, False;
    ProvisioningFailed => Error, False;
    ReconcileFailed => Error, False;
    ResourceRemovalFailed => Error, False;
    StoringChartDetailsFailed => Error, False;
    MissingSecret => Warning, False;
    ServiceInstancesAndBindingsNotCleaned => Warning, False;
    WrongNamespaceOrName => Warning, False;
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
}
