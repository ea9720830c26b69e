//! Where `doctor` looks: the manager's namespace and ServiceAccount.

/// Where to look.
#[derive(Clone, Debug)]
pub struct Target {
    /// The manager's namespace (its Deployment, Lease, certificate Secret; the chart namespace too).
    pub namespace: String,
    /// The manager's ServiceAccount.
    pub service_account: String,
}

impl Default for Target {
    fn default() -> Self {
        Self {
            namespace: btp_api::names::KYMA_SYSTEM.into(),
            service_account: "btp-manager-controller-manager".into(),
        }
    }
}
