//! Names, labels, annotations and keys (docs/behaviour.md; compatible with the Go BTP Manager).

/// The only namespace in which a `BtpOperator` is reconciled.
pub const KYMA_SYSTEM: &str = "kyma-system";
/// The only `BtpOperator` name that is reconciled.
pub const BTP_OPERATOR_NAME: &str = "btpoperator";
/// API group of the `BtpOperator` kind.
pub const GROUP: &str = "operator.kyma-project.io";
/// Version of the `BtpOperator` kind.
pub const VERSION: &str = "v1alpha1";
/// Kind name.
pub const KIND: &str = "BtpOperator";
/// Plural resource name.
pub const PLURAL: &str = "btpoperators";

/// Finalizer the manager puts on the valid CR; removed only at the end of deprovisioning.
pub const FINALIZER: &str = "operator.kyma-project.io/btp-manager";
/// Label whose value `"true"` (exactly) makes deprovisioning delete ServiceInstances/Bindings.
pub const FORCE_DELETE_LABEL: &str = "force-delete";
/// Annotation `reconcile` (force a reconcile) or `ignore` (leave the CR alone).
pub const OPERATION_ANNOTATION: &str = "operator.kyma-project.io/operation";
/// Annotation that disables the operand's network policies (case-insensitive `true`).
pub const DISABLE_NETWORK_POLICIES_ANNOTATION: &str = "operator.kyma-project.io/btp-operator-disable-network-policies";

/// Default name of the required credentials Secret (in the chart namespace).
pub const REQUIRED_SECRET_NAME: &str = "sap-btp-manager";
/// Keys that the required Secret must hold, each non-empty.
pub const REQUIRED_SECRET_KEYS: [&str; 5] = ["clientid", "clientsecret", "sm_url", "tokenurl", "cluster_id"];
/// Keys of the required Secret that must be `https` URLs.
pub const URL_SECRET_KEYS: [&str; 2] = ["sm_url", "tokenurl"];
/// Optional key naming a custom credentials namespace.
pub const CREDENTIALS_NAMESPACE_KEY: &str = "credentials_namespace";

/// `app.kubernetes.io/managed-by`.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on everything the manager creates.
pub const MANAGED_BY_BTP_MANAGER: &str = "btp-manager";
/// Value of [`MANAGED_BY_LABEL`] put on the required Secret by the Kyma Environment Broker.
pub const MANAGED_BY_KEB: &str = "kcp-kyma-environment-broker";
/// Values of [`MANAGED_BY_LABEL`] that make the required Secret and the config ConfigMap visible to the manager.
pub const MANAGED_BY_VISIBLE: [&str; 2] = [MANAGED_BY_BTP_MANAGER, MANAGED_BY_KEB];
/// Whether `labels` make an object visible to the manager: [`MANAGED_BY_LABEL`] with a value in
/// [`MANAGED_BY_VISIBLE`] (docs/behaviour.md#visibility-of-secrets-and-configmaps). Used for the required Secret
/// by the webhooks and the reconciler.
pub fn visible_to_manager(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| MANAGED_BY_VISIBLE.contains(&v.as_str()))
}

/// `kyma-project.io/module`.
pub const MODULE_LABEL: &str = "kyma-project.io/module";
/// Value of [`MODULE_LABEL`].
pub const MODULE_NAME: &str = "btp-operator";
/// Chart version label on module resources.
pub const CHART_VERSION_LABEL: &str = "chart-version";

/// Field manager used for every server-side apply.
pub const FIELD_MANAGER: &str = "btp-manager";

/// Operand (SAP BTP service operator) API group for ServiceInstances and ServiceBindings.
pub const SERVICES_GROUP: &str = "services.cloud.sap.com";
/// Operand API version served for ServiceInstances and ServiceBindings.
pub const SERVICES_VERSION: &str = "v1";
/// Plural of ServiceInstance.
pub const SERVICE_INSTANCES: &str = "serviceinstances";
/// Plural of ServiceBinding.
pub const SERVICE_BINDINGS: &str = "servicebindings";

/// The manager's own admission webhook configurations and Service (deploy/).
pub mod webhook {
    /// Name of the manager's ValidatingWebhookConfiguration.
    pub const VALIDATING_CONFIGURATION: &str = "btp-manager-validating-webhook-configuration";
    /// Name of the manager's MutatingWebhookConfiguration.
    pub const MUTATING_CONFIGURATION: &str = "btp-manager-mutating-webhook-configuration";
    /// The Service in front of the manager's webhook listener.
    pub const SERVICE_NAME: &str = "btp-manager-webhook-service";
    /// Secret holding the manager's own webhook CA and serving certificate.
    pub const CERT_SECRET_NAME: &str = "btp-manager-webhook-cert";
    /// Path of the validating endpoint.
    pub const VALIDATE_PATH: &str = "/validate";
    /// Path of the mutating endpoint.
    pub const MUTATE_PATH: &str = "/mutate";
    /// Port the webhook server listens on.
    pub const PORT: u16 = 9443;
}
