//! Typed API errors rendered as Kubernetes `Status` objects, and the crate error type.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Errors returned by [`crate::ApiServer::start`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("certificate generation failed: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("TLS configuration failed: {0}")]
    Tls(#[from] rustls::Error),
    #[error("{0}")]
    Other(String),
}

/// An API error, rendered as a `Status` object with the matching HTTP code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

/// `resource.group` as the real server prints it in messages (`deployments.apps`).
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, resource: &str, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": resource });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }
    pub fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", qualified(group, resource), name),
        )
        .with_details(details(group, resource, name))
    }
    pub fn not_found_path() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource").with_details(json!({}))
    }
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified(group, resource), name),
        )
        .with_details(details(group, resource, name))
    }
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                qualified(group, resource),
                name,
                why
            ),
        )
        .with_details(details(group, resource, name))
    }
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    /// 422 Invalid, `<Kind> "<name>" is invalid: <field>: <msg>`.
    pub fn invalid(group: &str, kind: &str, name: &str, field: &str, msg: &str) -> Self {
        let mut d = json!({
            "name": name, "kind": kind,
            "causes": [{ "reason": "FieldValueInvalid", "message": msg, "field": field }]
        });
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {msg}", qualified(group, kind)),
        )
        .with_details(d)
    }
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }
    pub fn method_not_allowed(msg: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", msg)
    }
    pub fn gone(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn forbidden(msg: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", msg)
    }
    /// 403 Forbidden for `resource` (`name` may be empty): `<resource>[.<group>] ["<name>" ]is forbidden: <reason>`,
    /// with the details a real API server sends (`errors.NewForbidden`).
    pub fn forbidden_for(group: &str, resource: &str, name: &str, reason: &str) -> Self {
        let mut d = json!({ "kind": resource });
        if !name.is_empty() {
            d["name"] = json!(name);
        }
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        let what = if name.is_empty() {
            qualified(group, resource)
        } else {
            format!("{} \"{name}\"", qualified(group, resource))
        };
        Self::forbidden(format!("{what} is forbidden: {reason}")).with_details(d)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {}", msg.into()))
    }
    pub fn unsupported_media(msg: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", msg)
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        if self.reason.is_empty() {
            if let Some(m) = v.as_object_mut() {
                m.remove("reason");
            }
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
