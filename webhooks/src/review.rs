//! Decoding an `AdmissionReview` body and encoding the answer.
//!
//! Every malformed input maps to a [`ReviewError`] with a 4xx status and a message that says what is
//! wrong; the request `uid` is echoed whenever it can be read, even from a body that does not decode.

use crate::object::Request;
use crate::rules::Verdict;

/// The only `apiVersion` accepted (the manager's webhook configurations ask for `v1` only).
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The only `kind` accepted.
pub const KIND: &str = "AdmissionReview";
/// Largest body accepted. The API server limits objects to 1.5 MiB; a review carries object and
/// oldObject, so 3 MiB holds any legitimate request.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Why a request could not be reviewed. Each maps to an HTTP status in [`ReviewError::status`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    /// Not POST.
    #[error("method {0} is not allowed: send the AdmissionReview with POST")]
    MethodNotAllowed(String),
    /// Content type is not JSON.
    #[error("content type {0:?} is not supported: send application/json")]
    UnsupportedMediaType(String),
    /// Body larger than [`MAX_BODY_BYTES`].
    #[error("request body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body did not arrive in time.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(std::time::Duration),
    /// The body could not be read from the connection.
    #[error("could not read the request body: {0}")]
    Body(String),
    /// Not JSON at all.
    #[error("request body is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an `admission.k8s.io/v1` `AdmissionReview`.
    #[error("expected apiVersion {API_VERSION:?} and kind {KIND:?}, got apiVersion {api_version:?} and kind {kind:?}")]
    WrongType {
        /// What the body said.
        api_version: String,
        /// What the body said.
        kind: String,
    },
    /// An `AdmissionReview` without `request`.
    #[error("AdmissionReview has no request")]
    MissingRequest,
    /// `request` (or its `object`/`oldObject`) does not decode.
    #[error("AdmissionReview request does not decode: {0}")]
    BadRequest(String),
}

impl ReviewError {
    /// The HTTP status for this error.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ReviewError::MethodNotAllowed(_) => S::METHOD_NOT_ALLOWED,
            ReviewError::UnsupportedMediaType(_) => S::UNSUPPORTED_MEDIA_TYPE,
            ReviewError::TooLarge { .. } => S::PAYLOAD_TOO_LARGE,
            ReviewError::BodyTimeout(_) => S::REQUEST_TIMEOUT,
            ReviewError::Body(_) | ReviewError::NotJson(_) | ReviewError::MissingRequest => S::BAD_REQUEST,
            ReviewError::WrongType { .. } | ReviewError::BadRequest(_) => S::BAD_REQUEST,
        }
    }
}

/// A failed decode, with the `uid` if it could be read from the body.
#[derive(Debug)]
pub struct Rejected {
    /// What is wrong.
    pub error: ReviewError,
    /// The request uid, when the body was JSON with a readable `request.uid`.
    pub uid: Option<String>,
}

/// The incoming review. Our own top level (kube's `AdmissionReview` flattens `TypeMeta`, which makes
/// serde buffer the whole body before decoding it); the request inside is kube's typed one.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct IncomingReview {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<Request>,
}

/// Decode a body into an admission request.
///
/// The fast path is a single typed parse. Only when it fails is the body parsed a second time, as an
/// untyped value, to find out what exactly is wrong and to recover the `uid`.
pub fn decode(body: &[u8]) -> Result<Request, Rejected> {
    match serde_json::from_slice::<IncomingReview>(body) {
        Ok(review) => {
            let uid = review.request.as_ref().map(|r| r.uid.clone());
            if review.api_version != API_VERSION || review.kind != KIND {
                return Err(Rejected {
                    error: ReviewError::WrongType {
                        api_version: review.api_version,
                        kind: review.kind,
                    },
                    uid,
                });
            }
            review.request.ok_or(Rejected {
                error: ReviewError::MissingRequest,
                uid: None,
            })
        }
        Err(typed_error) => Err(diagnose(body, typed_error)),
    }
}

fn diagnose(body: &[u8], typed_error: serde_json::Error) -> Rejected {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Rejected {
                error: ReviewError::NotJson(e.to_string()),
                uid: None,
            }
        }
    };
    let str_at = |ptr: &str| value.pointer(ptr).and_then(|v| v.as_str()).map(str::to_owned);
    let uid = str_at("/request/uid");
    let api_version = str_at("/apiVersion").unwrap_or_default();
    let kind = str_at("/kind").unwrap_or_default();
    let error = if api_version != API_VERSION || kind != KIND {
        ReviewError::WrongType { api_version, kind }
    } else if value.get("request").is_none_or(|r| r.is_null()) {
        ReviewError::MissingRequest
    } else {
        ReviewError::BadRequest(typed_error.to_string())
    };
    Rejected { error, uid }
}

/// The answer sent back: an `admission.k8s.io/v1` `AdmissionReview` with only `response` set.
///
/// Written out here rather than with kube's `AdmissionResponse` so that `patch` is a base64 string, the
/// encoding of Go's `[]byte` that the API server documents (kube serializes it as an array of numbers).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseReview {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// The answer.
    pub response: Response,
}

/// `AdmissionReview.response`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    /// The request uid (empty when it could not be read).
    pub uid: String,
    /// The verdict.
    pub allowed: bool,
    /// Why not, when denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResponseStatus>,
    /// Base64 of the JSON patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when `patch` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Warnings for the client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The `metav1.Status` of a denial.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResponseStatus {
    /// HTTP-style code.
    pub code: u16,
    /// Machine-readable reason.
    pub reason: String,
    /// What the user sees.
    pub message: String,
}

impl ResponseReview {
    fn new(response: Response) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            response,
        }
    }
}

/// The response review for a verdict on `req`.
pub fn respond(req: &Request, verdict: Verdict) -> ResponseReview {
    use base64::Engine as _;
    let mut response = Response {
        uid: req.uid.clone(),
        allowed: verdict.denial.is_none(),
        status: None,
        patch: None,
        patch_type: None,
        warnings: verdict.warnings,
    };
    if let Some(denial) = verdict.denial {
        let reason = if denial.code == 403 { "Forbidden" } else { "Invalid" };
        response.status = Some(ResponseStatus {
            code: denial.code,
            reason: reason.into(),
            message: denial.message,
        });
    } else if !verdict.patch.is_empty() {
        // Serializing patch operations (string paths, JSON values) cannot fail.
        if let Ok(json) = serde_json::to_vec(&verdict.patch) {
            response.patch = Some(base64::engine::general_purpose::STANDARD.encode(json));
            response.patch_type = Some("JSONPatch".into());
        }
    }
    ResponseReview::new(response)
}

/// The response review for a request that could not be decoded: `allowed: false`, the error in
/// `status`, and the uid when known. Sent with the error's 4xx HTTP status.
pub fn respond_rejected(rejected: &Rejected) -> ResponseReview {
    ResponseReview::new(Response {
        uid: rejected.uid.clone().unwrap_or_default(),
        allowed: false,
        status: Some(ResponseStatus {
            code: rejected.error.status().as_u16(),
            reason: "BadRequest".into(),
            message: rejected.error.to_string(),
        }),
        patch: None,
        patch_type: None,
        warnings: Vec::new(),
    })
}
