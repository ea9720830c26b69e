//! The `BtpOperator` custom resource (docs/behaviour.md#the-btpoperator-resource).

use crate::names;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A `BtpOperator` (`operator.kyma-project.io/v1alpha1`).
///
/// Written by hand instead of with `#[derive(CustomResource)]` for one reason: a CR applied without
/// `spec` (the usual case, the spec is empty) must deserialize, and the derive makes `spec` a required
/// field. The CRD is still generated from these types ([`BtpOperator::crd`]) with the same schema
/// settings the derive uses.
#[derive(Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BtpOperator {
    /// Standard object metadata.
    #[schemars(skip)]
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Empty.
    #[serde(default)]
    pub spec: BtpOperatorSpec,
    /// Written by the manager only.
    #[serde(default)]
    pub status: Option<BtpOperatorStatus>,
}

/// `spec` is an empty object: all behaviour is driven by metadata and by other cluster objects.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("nullable" = true))]
pub struct BtpOperatorSpec {}

impl BtpOperator {
    /// A CR with the given name and an empty spec.
    pub fn new(name: &str) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Self::default()
        }
    }
}

impl Serialize for BtpOperator {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut obj = ser.serialize_struct("BtpOperator", 4 + usize::from(self.status.is_some()))?;
        obj.serialize_field("apiVersion", &format!("{}/{}", names::GROUP, names::VERSION))?;
        obj.serialize_field("kind", names::KIND)?;
        obj.serialize_field("metadata", &self.metadata)?;
        obj.serialize_field("spec", &self.spec)?;
        if let Some(status) = &self.status {
            obj.serialize_field("status", status)?;
        }
        obj.end()
    }
}

impl Resource for BtpOperator {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        names::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        names::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        names::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        names::PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl kube::core::object::HasSpec for BtpOperator {
    type Spec = BtpOperatorSpec;
    fn spec(&self) -> &BtpOperatorSpec {
        &self.spec
    }
    fn spec_mut(&mut self) -> &mut BtpOperatorSpec {
        &mut self.spec
    }
}

impl kube::core::object::HasStatus for BtpOperator {
    type Status = BtpOperatorStatus;
    fn status(&self) -> Option<&BtpOperatorStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<BtpOperatorStatus> {
        &mut self.status
    }
}

impl BtpOperator {
    /// The `CustomResourceDefinition`, with the schema generated from these types (the settings
    /// `#[derive(CustomResource)]` uses: OpenAPI v3, inlined, structural, nullable options).
    pub fn crd() -> Result<CustomResourceDefinition, serde_json::Error> {
        let generator = schemars::generate::SchemaSettings::openapi3()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .with_transform(schemars::transform::AddNullable::default())
            .with_transform(kube::core::schema::StructuralSchemaRewriter)
            .with_transform(kube::core::schema::OptionalEnum)
            .into_generator();
        let mut schema = serde_json::to_value(generator.into_root_schema_for::<Self>())?;
        if let Some(obj) = schema.as_object_mut() {
            obj.insert(
                "description".into(),
                "BtpOperator is the Schema for the btpoperators API".into(),
            );
            obj.remove("title");
            obj.remove("required");
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", names::PLURAL, names::GROUP)},
            "spec": {
                "group": names::GROUP,
                "names": {
                    "categories": ["kyma-modules", "kyma-btp-operator"],
                    "kind": names::KIND,
                    "listKind": format!("{}List", names::KIND),
                    "plural": names::PLURAL,
                    "singular": "btpoperator"
                },
                "scope": "Namespaced",
                "versions": [{
                    "name": names::VERSION,
                    "served": true,
                    "storage": true,
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Credentials", "type": "string",
                         "jsonPath": ".status.conditions[?(@.type==\"CredentialsValid\")].reason"}
                    ],
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}}
                }]
            }
        }))
    }
}

/// The observed state of a `BtpOperator`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BtpOperatorStatus {
    /// One of `Processing`, `Deleting`, `Ready`, `Error`, `Warning`.
    pub state: State,
    /// `Ready` (the state's condition) and `CredentialsValid` (whether the credentials Secret's token
    /// endpoint issues a token).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// `.status.state`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum State {
    /// Installing or re-checking the operand.
    #[default]
    Processing,
    /// Deprovisioning.
    Deleting,
    /// The operand is installed and available.
    Ready,
    /// Something failed; the reason says what.
    Error,
    /// The manager cannot proceed until the user acts; the reason says what.
    Warning,
}

impl State {
    /// The string written to `.status.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Processing => "Processing",
            State::Deleting => "Deleting",
            State::Ready => "Ready",
            State::Error => "Error",
            State::Warning => "Warning",
        }
    }
}

/// `True`, `False` or `Unknown`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known.
    Unknown,
}

/// A standard Kubernetes `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type: `Ready` or `CredentialsValid`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase reason (`Ready`: one of the 30 in [`crate::Reason`]; `CredentialsValid`: one of
    /// [`crate::CredentialsReason`]).
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    )]
    pub reason: String,
    /// Human-readable message; never holds a secret value.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
    /// RFC 3339 time of the last status flip.
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
    /// The CR generation this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_has_the_reference_shape() {
        let crd = BtpOperator::crd().unwrap();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("btpoperators.operator.kyma-project.io")
        );
        let spec = &crd.spec;
        assert_eq!(spec.group, "operator.kyma-project.io");
        assert_eq!(spec.scope, "Namespaced");
        assert_eq!(spec.names.kind, "BtpOperator");
        assert_eq!(spec.names.list_kind.as_deref(), Some("BtpOperatorList"));
        assert_eq!(spec.names.plural, "btpoperators");
        assert_eq!(spec.names.singular.as_deref(), Some("btpoperator"));
        assert_eq!(spec.names.short_names, None);
        assert_eq!(
            spec.names.categories.as_deref(),
            Some(&["kyma-modules".to_string(), "kyma-btp-operator".to_string()][..])
        );
        assert_eq!(spec.versions.len(), 1);
        let v = &spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.served && v.storage);
        assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        assert!(v.subresources.as_ref().and_then(|s| s.scale.as_ref()).is_none());
        let cols = v.additional_printer_columns.as_ref().unwrap();
        assert_eq!(cols.len(), 2);
        assert_eq!(cols[0].name, "State");
        assert_eq!(cols[0].json_path, ".status.state");
        assert_eq!(cols[1].name, "Credentials");
        assert_eq!(
            cols[1].json_path,
            r#".status.conditions[?(@.type=="CredentialsValid")].reason"#
        );
        let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
        let props = &schema["openAPIV3Schema"]["properties"];
        assert_eq!(props["spec"]["nullable"], true);
        assert!(
            schema["openAPIV3Schema"].get("required").is_none(),
            "spec must be optional: {schema}"
        );
        assert_eq!(props["status"]["required"], serde_json::json!(["state"]));
        assert_eq!(
            props["status"]["properties"]["state"]["enum"].as_array().unwrap().len(),
            5
        );
    }

    #[test]
    fn a_cr_without_spec_or_status_deserializes() {
        let cr: BtpOperator = serde_json::from_value(serde_json::json!({
            "apiVersion": "operator.kyma-project.io/v1alpha1",
            "kind": "BtpOperator",
            "metadata": {"name": "btpoperator", "namespace": "kyma-system"}
        }))
        .unwrap();
        assert_eq!(cr.metadata.name.as_deref(), Some("btpoperator"));
        assert_eq!(cr.spec, BtpOperatorSpec {});
        assert!(cr.status.is_none());
        let json = serde_json::to_value(&cr).unwrap();
        assert_eq!(json["apiVersion"], "operator.kyma-project.io/v1alpha1");
        assert_eq!(json["kind"], "BtpOperator");
        assert_eq!(json["spec"], serde_json::json!({}));
        assert!(json.get("status").is_none());
    }

    #[test]
    fn status_serializes_like_the_original() {
        let status = BtpOperatorStatus {
            state: State::Ready,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ConditionStatus::True,
                reason: "ReconcileSucceeded".into(),
                message: "Module provisioning succeeded".into(),
                last_transition_time: "2026-01-01T00:00:00Z".into(),
                observed_generation: Some(1),
            }],
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["state"], "Ready");
        assert_eq!(json["conditions"][0]["type"], "Ready");
        assert_eq!(json["conditions"][0]["status"], "True");
        assert_eq!(json["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(json["conditions"][0]["observedGeneration"], 1);
        let back: BtpOperatorStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back, status);
    }
}
