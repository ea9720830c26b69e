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
/// The `BtpOperator` CRD's name.
pub const CRD_NAME: &str = "btpoperators.operator.kyma-project.io";
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
/// `app.kubernetes.io/part-of`, on the manager's own objects.
pub const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
/// Value of [`PART_OF_LABEL`] on the manager's own objects.
pub const PART_OF_BTP_MANAGER: &str = "btp-manager";

/// Labels of the manager's own objects (its Deployment, RBAC, Services, webhook configurations and
/// certificate Secret): [`PART_OF_LABEL`] and [`MODULE_LABEL`]. Deliberately **not**
/// `managed-by=btp-manager`: that label together with [`MODULE_LABEL`] marks what the manager installs for
/// the operand, and deprovisioning removes everything so marked.
pub fn manager_labels() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([
        (PART_OF_LABEL.to_string(), PART_OF_BTP_MANAGER.to_string()),
        (MODULE_LABEL.to_string(), MODULE_NAME.to_string()),
    ])
}

/// Whether `labels` mark an object the manager installed for the operand (both
/// `managed-by=btp-manager` and `kyma-project.io/module=btp-operator`): deprovisioning removes it.
pub fn is_module_resource(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels.is_some_and(|l| {
        l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_BTP_MANAGER)
            && l.get(MODULE_LABEL).map(String::as_str) == Some(MODULE_NAME)
    })
}

/// Label selector of [`is_module_resource`]: everything the manager installed for the operand.
pub fn module_resource_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_BTP_MANAGER},{MODULE_LABEL}={MODULE_NAME}")
}

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

/// The operand's objects (the SAP BTP service operator) that the manager names, in one place.
pub mod operand {
    /// The operand Deployment (the default of `--deployment-name`).
    pub const DEPLOYMENT: &str = "sap-btp-operator-controller-manager";
    /// The operand's ConfigMap (`CLUSTER_ID`, namespaces, `ENABLE_LIMITED_CACHE`).
    pub const CONFIGMAP: &str = "sap-btp-operator-config";
    /// The operand's credentials Secret (in the credentials namespace).
    pub const SECRET: &str = "sap-btp-service-operator";
    /// The Secret the operand creates to remember its cluster ID.
    pub const CLUSTER_ID_SECRET: &str = "sap-btp-operator-clusterid";
    /// Secret holding the CA of the operand's webhooks.
    pub const CA_SECRET: &str = "ca-server-cert";
    /// Secret holding the operand's webhook serving certificate.
    pub const WEBHOOK_SECRET: &str = "webhook-server-cert";
    /// The operand's webhook Service; the serving certificate's DNS names derive from it.
    pub const WEBHOOK_SERVICE: &str = "sap-btp-operator-webhook-service";
    /// The operand's MutatingWebhookConfiguration.
    pub const MUTATING_WEBHOOK_CONFIGURATION: &str = "sap-btp-operator-mutating-webhook-configuration";
    /// The operand's ValidatingWebhookConfiguration.
    pub const VALIDATING_WEBHOOK_CONFIGURATION: &str = "sap-btp-operator-validating-webhook-configuration";
}

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
