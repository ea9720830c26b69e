//! The admission rules (docs/behaviour.md#admission-webhooks), as pure functions.
//!
//! Nothing here talks to the network: the handler gathers what a rule needs (the request and, for one
//! rule, counts of ServiceInstances/ServiceBindings) and translates the [`Verdict`] into an
//! `AdmissionReview` response. Messages name keys, names and namespaces, never a secret value.

use crate::object::{AdmittedObject, Request};
use base64::Engine as _;
use btp_api::names;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use kube::core::admission::Operation;
use serde_json::{Map, Value};

/// Where the rules look for the objects they guard. Mirrors the manager's `--chart-namespace` and
/// `--secret-name`; the BtpOperator name and namespace are constants (docs/behaviour.md#reconcile-dispatch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesConfig {
    /// Namespace of the required credentials Secret.
    pub secret_namespace: String,
    /// Name of the required credentials Secret.
    pub secret_name: String,
}

impl Default for RulesConfig {
    fn default() -> Self {
        Self {
            secret_namespace: names::KYMA_SYSTEM.into(),
            secret_name: names::REQUIRED_SECRET_NAME.into(),
        }
    }
}

/// What a webhook answers.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Verdict {
    /// `None` = allowed; `Some` = denied with this HTTP-style code and message.
    pub denial: Option<Denial>,
    /// Warnings returned to the client (shown by kubectl), allowed or not.
    pub warnings: Vec<String>,
    /// JSON patch operations (mutating webhook only); empty = no patch.
    pub patch: Vec<PatchOperation>,
}

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// HTTP status code put in the response `status.code`.
    pub code: u16,
    /// The message the user sees after `admission webhook "…" denied the request:`.
    pub message: String,
}

impl Verdict {
    /// Allow without warnings or patch.
    pub fn allow() -> Self {
        Self::default()
    }

    /// Deny with a code and a message.
    pub fn deny(code: u16, message: impl Into<String>) -> Self {
        Self {
            denial: Some(Denial {
                code,
                message: message.into(),
            }),
            ..Self::default()
        }
    }

    /// Whether the request is allowed.
    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }

    fn with_warning(mut self, warning: Option<String>) -> Self {
        self.warnings.extend(warning);
        self
    }
}

/// What kind of object a request is about, as far as the rules care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A `BtpOperator` (any name).
    BtpOperator,
    /// The required credentials Secret.
    RequiredSecret,
    /// Anything else: allowed untouched.
    Other,
}

/// Classify a request.
pub fn subject(req: &Request, config: &RulesConfig) -> Subject {
    if req.kind.group == names::GROUP && req.kind.kind == names::KIND {
        Subject::BtpOperator
    } else if req.kind.group.is_empty()
        && req.kind.kind == "Secret"
        && req.namespace.as_deref() == Some(config.secret_namespace.as_str())
        && req.name == config.secret_name
    {
        Subject::RequiredSecret
    } else {
        Subject::Other
    }
}

/// ServiceInstances and ServiceBindings present in the cluster, or why they could not be counted.
pub type ServiceCountResult = Result<ServiceCounts, String>;

/// Counts of the operand's custom resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ServiceCounts {
    /// ServiceInstances in all namespaces.
    pub instances: usize,
    /// ServiceBindings in all namespaces.
    pub bindings: usize,
}

fn is_valid_btp_operator(namespace: Option<&str>, name: &str) -> bool {
    namespace == Some(names::KYMA_SYSTEM) && name == names::BTP_OPERATOR_NAME
}

/// Whether [`validate`] needs ServiceInstance/ServiceBinding counts for this request: a DELETE of the
/// valid CR that is not labelled `force-delete: "true"`. The handler fetches counts only then.
pub fn needs_service_counts(req: &Request, config: &RulesConfig) -> bool {
    subject(req, config) == Subject::BtpOperator
        && req.operation == Operation::Delete
        && is_valid_btp_operator(req.namespace.as_deref(), &req.name)
        && !force_delete(req.old_object.as_ref())
}

fn force_delete(obj: Option<&AdmittedObject>) -> bool {
    obj.and_then(|o| o.metadata.labels.as_ref())
        .and_then(|l| l.get(names::FORCE_DELETE_LABEL))
        .is_some_and(|v| v == "true")
}

/// The validating webhook. `counts` is consulted only when [`needs_service_counts`] is true.
pub fn validate(req: &Request, config: &RulesConfig, counts: Option<&ServiceCountResult>) -> Verdict {
    match subject(req, config) {
        Subject::BtpOperator => validate_btp_operator(req, config, counts),
        Subject::RequiredSecret => validate_secret(req, config),
        Subject::Other => Verdict::allow(),
    }
}

fn validate_btp_operator(req: &Request, config: &RulesConfig, counts: Option<&ServiceCountResult>) -> Verdict {
    match req.operation {
        Operation::Create => {
            let namespace = req.namespace.as_deref().unwrap_or("");
            if is_valid_btp_operator(req.namespace.as_deref(), &req.name) {
                return Verdict::allow();
            }
            let given_name = if req.name.is_empty() {
                let generate = req
                    .object
                    .as_ref()
                    .and_then(|o| o.metadata.generate_name.as_deref())
                    .unwrap_or("");
                format!("a generated name ({generate}…)")
            } else {
                format!("{:?}", req.name)
            };
            Verdict::deny(
                403,
                format!(
                    "BtpOperator must be named {:?} in namespace {:?}, but this one is named {given_name} in \
                     namespace {namespace:?}. Only {}/{} is reconciled; create it with that name and namespace.",
                    names::BTP_OPERATOR_NAME,
                    names::KYMA_SYSTEM,
                    names::KYMA_SYSTEM,
                    names::BTP_OPERATOR_NAME,
                ),
            )
        }
        Operation::Delete if needs_service_counts(req, config) => {
            let warning = match counts {
                Some(Ok(c)) if c.instances + c.bindings > 0 => Some(format!(
                    "{}/{} stays in deletion (Warning/ServiceInstancesAndBindingsNotCleaned) while {} \
                     ServiceInstance(s) and {} ServiceBinding(s) exist; the SAP BTP service operator keeps running \
                     meanwhile, and BTP Manager removes it as soon as the last one is gone. To have BTP Manager \
                     delete them (and their resources in SAP BTP), label the BtpOperator {}=true",
                    names::KYMA_SYSTEM,
                    names::BTP_OPERATOR_NAME,
                    c.instances,
                    c.bindings,
                    names::FORCE_DELETE_LABEL,
                )),
                Some(Ok(_)) => None,
                Some(Err(why)) => Some(format!(
                    "could not count ServiceInstances and ServiceBindings ({why}); if any exist, the deletion waits \
                     until they are gone, unless the BtpOperator is labelled {}=true",
                    names::FORCE_DELETE_LABEL,
                )),
                None => None,
            };
            Verdict::allow().with_warning(warning)
        }
        _ => Verdict::allow(),
    }
}

/// A value of the required Secret, read from `stringData` (wins, as in the API server) or `data`.
enum SecretValue {
    Missing,
    Present(Vec<u8>),
    NotBase64,
}

fn secret_value(obj: &AdmittedObject, key: &str) -> SecretValue {
    if let Some(v) = obj.string_data.as_ref().and_then(|d| d.get(key)) {
        return match v.as_str() {
            Some(s) => SecretValue::Present(s.as_bytes().to_vec()),
            None => SecretValue::NotBase64,
        };
    }
    match obj.data.as_ref().and_then(|d| d.get(key)) {
        None | Some(Value::Null) => SecretValue::Missing,
        Some(Value::String(s)) => match base64::engine::general_purpose::STANDARD.decode(s) {
            Ok(bytes) => SecretValue::Present(bytes),
            Err(_) => SecretValue::NotBase64,
        },
        Some(_) => SecretValue::NotBase64,
    }
}

/// Whether a Secret value counts as empty (only whitespace). Shared with the reconciler, which enforces
/// the same rules when the webhook was not called.
pub fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| b.is_ascii_whitespace()) || std::str::from_utf8(bytes).is_ok_and(|s| s.trim().is_empty())
}

/// Whether `value` is an absolute `https` URL with a host.
pub fn is_https_url(value: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(value) else {
        return false;
    };
    match s.trim().parse::<http::Uri>() {
        Ok(uri) => uri.scheme_str() == Some("https") && uri.host().is_some_and(|h| !h.is_empty()),
        Err(_) => false,
    }
}

/// What is wrong with one required key of the credentials Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyProblem {
    Missing,
    Empty,
    NotBase64,
    NotHttps,
}

/// The problem of every required key, in [`names::REQUIRED_SECRET_KEYS`] order (`None` = valid).
fn key_problems(obj: &AdmittedObject) -> Vec<(&'static str, Option<KeyProblem>)> {
    names::REQUIRED_SECRET_KEYS
        .iter()
        .map(|&key| {
            let problem = match secret_value(obj, key) {
                SecretValue::Missing => Some(KeyProblem::Missing),
                SecretValue::NotBase64 => Some(KeyProblem::NotBase64),
                SecretValue::Present(v) if is_blank(&v) => Some(KeyProblem::Empty),
                SecretValue::Present(v) if names::URL_SECRET_KEYS.contains(&key) && !is_https_url(&v) => {
                    Some(KeyProblem::NotHttps)
                }
                SecretValue::Present(_) => None,
            };
            (key, problem)
        })
        .collect()
}

/// The problems of `keys`, as message fragments naming keys only (never a value).
fn describe(keys: &[(&'static str, KeyProblem)]) -> String {
    let of = |kind: KeyProblem| -> Vec<&str> { keys.iter().filter(|(_, p)| *p == kind).map(|(k, _)| *k).collect() };
    let mut problems = Vec::new();
    let missing = of(KeyProblem::Missing);
    if !missing.is_empty() {
        problems.push(format!("missing key(s): {}", missing.join(", ")));
    }
    let empty = of(KeyProblem::Empty);
    if !empty.is_empty() {
        problems.push(format!("empty value(s) for key(s): {}", empty.join(", ")));
    }
    let not_base64 = of(KeyProblem::NotBase64);
    if !not_base64.is_empty() {
        problems.push(format!(
            "value(s) that are not valid base64 strings for key(s): {}",
            not_base64.join(", ")
        ));
    }
    let not_https = of(KeyProblem::NotHttps);
    if !not_https.is_empty() {
        problems.push(format!(
            "key(s) {} must hold an https URL (for example https://service-manager.example.com)",
            not_https.join(", ")
        ));
    }
    problems.join("; ")
}

/// The credentials Secret rule, ratcheting on UPDATE (docs/behaviour.md#admission-webhooks): a CREATE is
/// refused for any invalid key; an UPDATE only for keys it makes invalid that were valid in `oldObject`.
/// Keys that were invalid before and still are pass with a warning naming them.
fn validate_secret(req: &Request, config: &RulesConfig) -> Verdict {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Verdict::allow();
    }
    let Some(obj) = req.object.as_ref() else {
        return Verdict::deny(400, "the admission request carries no Secret object");
    };
    let secret = format!("Secret {}/{}", config.secret_namespace, config.secret_name);
    let label_warning = (!names::visible_to_manager(obj.metadata.labels.as_ref())).then(|| {
        format!(
            "{secret} has no label {}={}: BTP Manager ignores it until it is labelled",
            names::MANAGED_BY_LABEL,
            names::MANAGED_BY_KEB
        )
    });
    // Only an UPDATE with the object as it was can ratchet; without it every key counts as valid before.
    let before = match (&req.operation, req.old_object.as_ref()) {
        (Operation::Update, Some(old)) => Some(key_problems(old)),
        _ => None,
    };
    let (mut worse, mut kept) = (Vec::new(), Vec::new());
    for (i, (key, problem)) in key_problems(obj).into_iter().enumerate() {
        let Some(problem) = problem else { continue };
        let was_invalid = before
            .as_ref()
            .is_some_and(|b| b.get(i).is_some_and(|(_, p)| p.is_some()));
        if was_invalid {
            kept.push((key, problem));
        } else {
            worse.push((key, problem));
        }
    }
    let kept_warning = (!kept.is_empty()).then(|| {
        format!(
            "{secret} is still invalid: {}. This update leaves those keys as invalid as they were, so it is allowed; \
             BTP Manager reports InvalidSecret until they are fixed.",
            describe(&kept),
        )
    });
    if worse.is_empty() {
        return Verdict::allow().with_warning(label_warning).with_warning(kept_warning);
    }
    let was_valid = if before.is_some() {
        " (valid before this update)"
    } else {
        ""
    };
    Verdict::deny(
        422,
        format!(
            "{secret} is invalid: {}{was_valid}. It needs the keys {}, each with a non-empty value.",
            describe(&worse),
            names::REQUIRED_SECRET_KEYS.join(", ")
        ),
    )
    .with_warning(label_warning)
    .with_warning(kept_warning)
}

/// The mutating webhook. Idempotent: applied to its own output it returns no patch.
pub fn mutate(req: &Request, config: &RulesConfig) -> Verdict {
    let patch = match (subject(req, config), &req.operation, req.object.as_ref()) {
        (Subject::BtpOperator, Operation::Create, Some(obj))
            if is_valid_btp_operator(req.namespace.as_deref(), &req.name) && !is_ignored(obj) =>
        {
            add_finalizer(obj)
        }
        (Subject::RequiredSecret, Operation::Create | Operation::Update, Some(obj)) => trim_secret_values(obj),
        _ => vec![],
    };
    Verdict {
        patch,
        ..Verdict::allow()
    }
}

/// `operator.kyma-project.io/operation: ignore`: the manager treats the CR as if it did not exist, so it gets
/// no finalizer either.
fn is_ignored(obj: &AdmittedObject) -> bool {
    obj.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::OPERATION_ANNOTATION))
        .is_some_and(|v| v == "ignore")
}

fn add_finalizer(obj: &AdmittedObject) -> Vec<PatchOperation> {
    match obj.metadata.finalizers.as_ref() {
        Some(f) if f.iter().any(|f| f == names::FINALIZER) => vec![],
        Some(_) => vec![PatchOperation::Add(AddOperation {
            path: pointer(&["metadata", "finalizers", "-"]),
            value: Value::String(names::FINALIZER.into()),
        })],
        None => vec![PatchOperation::Add(AddOperation {
            path: pointer(&["metadata", "finalizers"]),
            value: Value::Array(vec![Value::String(names::FINALIZER.into())]),
        })],
    }
}

/// A Secret value without leading/trailing whitespace (what the mutating webhook stores).
pub fn trim_bytes(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.trim().as_bytes(),
        Err(_) => bytes.trim_ascii(),
    }
}

fn trim_secret_values(obj: &AdmittedObject) -> Vec<PatchOperation> {
    let b64 = &base64::engine::general_purpose::STANDARD;
    let mut ops = Vec::new();
    let empty = Map::new();
    let data = obj.data.as_ref().unwrap_or(&empty);
    let string_data = obj.string_data.as_ref().unwrap_or(&empty);
    for key in names::REQUIRED_SECRET_KEYS {
        if let Some(encoded) = data.get(key).and_then(Value::as_str) {
            if let Ok(raw) = b64.decode(encoded) {
                let trimmed = trim_bytes(&raw);
                if trimmed.len() != raw.len() {
                    ops.push(PatchOperation::Replace(ReplaceOperation {
                        path: pointer(&["data", key]),
                        value: Value::String(b64.encode(trimmed)),
                    }));
                }
            }
        }
        if let Some(plain) = string_data.get(key).and_then(Value::as_str) {
            let trimmed = plain.trim();
            if trimmed.len() != plain.len() {
                ops.push(PatchOperation::Replace(ReplaceOperation {
                    path: pointer(&["stringData", key]),
                    value: Value::String(trimmed.into()),
                }));
            }
        }
    }
    ops
}

fn pointer(segments: &[&str]) -> json_patch::jsonptr::PointerBuf {
    json_patch::jsonptr::PointerBuf::from_tokens(segments.iter().copied())
}

#[cfg(test)]
mod tests;
