//! axum handlers: translate HTTP to [`crate::rules`] and back. No decisions are made here.

pub use crate::endpoint::Webhook;
use crate::metrics::{Verdict as MetricVerdict, WebhookMetrics};
use crate::review::{self, Rejected, ReviewError, MAX_BODY_BYTES};
use crate::rules::{self, RulesConfig, ServiceCountResult, ServiceCounts, Verdict};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use btp_api::names;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument as _;

/// Counts ServiceInstances and ServiceBindings for the DELETE warning.
pub trait ServiceCounter: Send + Sync + 'static {
    /// Count both kinds in all namespaces. A missing CRD counts as zero.
    fn count(&self) -> BoxFuture<'_, ServiceCountResult>;
}

/// Counts through the Kubernetes API (metadata-only lists).
#[derive(Clone)]
pub struct KubeServiceCounter {
    client: kube::Client,
}

impl KubeServiceCounter {
    /// Count with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn count_kind(&self, plural: &str, kind: &str) -> Result<usize, String> {
        use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
        let gvk = GroupVersionKind::gvk(names::SERVICES_GROUP, names::SERVICES_VERSION, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) => Ok(list.items.len()),
            // The operand's CRDs are not installed: there is nothing to count.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(0),
            Err(e) => Err(format!("listing {plural}: {e}")),
        }
    }
}

impl ServiceCounter for KubeServiceCounter {
    fn count(&self) -> BoxFuture<'_, ServiceCountResult> {
        Box::pin(async move {
            let (instances, bindings) = tokio::try_join!(
                self.count_kind(names::SERVICE_INSTANCES, "ServiceInstance"),
                self.count_kind(names::SERVICE_BINDINGS, "ServiceBinding"),
            )?;
            Ok(ServiceCounts { instances, bindings })
        })
    }
}

/// A fixed answer, for runs without an API server (benchmarks, unit tests of the HTTP layer).
#[derive(Clone, Debug)]
pub struct FixedServiceCounter(pub ServiceCountResult);

impl ServiceCounter for FixedServiceCounter {
    fn count(&self) -> BoxFuture<'_, ServiceCountResult> {
        let answer = self.0.clone();
        Box::pin(async move { answer })
    }
}

/// Everything the handlers need.
#[derive(Clone)]
pub struct WebhookState {
    config: Arc<RulesConfig>,
    counter: Arc<dyn ServiceCounter>,
    metrics: Option<WebhookMetrics>,
    count_timeout: Duration,
    body_timeout: Duration,
}

impl WebhookState {
    /// State with the given rules configuration and counter, without metrics.
    pub fn new(config: RulesConfig, counter: Arc<dyn ServiceCounter>) -> Self {
        Self {
            config: Arc::new(config),
            counter,
            metrics: None,
            count_timeout: Duration::from_secs(3),
            body_timeout: DEFAULT_BODY_TIMEOUT,
        }
    }

    /// Record request durations into `metrics`.
    pub fn with_metrics(mut self, metrics: WebhookMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Give up counting ServiceInstances/Bindings after `timeout` (kept below the webhook timeout).
    pub fn with_count_timeout(mut self, timeout: Duration) -> Self {
        self.count_timeout = timeout;
        self
    }

    /// Answer 408 to a request whose body has not fully arrived within `timeout` of the handler starting
    /// to read it (a client trickling its body; the header read timeout covers only the head).
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }
}

/// Default of [`WebhookState::with_body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The router: `/validate`, `/mutate`, `/healthz`.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route(
            names::webhook::VALIDATE_PATH,
            // The whole request by value: the method/headers extractors would clone the header map.
            any(|State(s): State<WebhookState>, req: axum::extract::Request| handle(s, Webhook::Validate, req)),
        )
        .route(
            names::webhook::MUTATE_PATH,
            // The whole request by value: the method/headers extractors would clone the header map.
            any(|State(s): State<WebhookState>, req: axum::extract::Request| handle(s, Webhook::Mutate, req)),
        )
        .route("/healthz", get(|| async { "ok" }))
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such endpoint: use /validate or /mutate") })
        .with_state(state)
}

fn json_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message, "code": status.as_u16() });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn json_response(status: StatusCode, review: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(review) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("encoding the response: {e}"),
        ),
    }
}

async fn read_body(method: &Method, headers: &HeaderMap, body: Body, timeout: Duration) -> Result<Bytes, ReviewError> {
    if method != Method::POST {
        return Err(ReviewError::MethodNotAllowed(method.to_string()));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_json = content_type
        .as_deref()
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ReviewError::UnsupportedMediaType(
            content_type.unwrap_or_else(|| "(none)".into()),
        ));
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES) {
        return Err(ReviewError::TooLarge { limit: MAX_BODY_BYTES });
    }
    let read = tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY_BYTES))
        .await
        .map_err(|_| ReviewError::BodyTimeout(timeout))?;
    read.map_err(|e| {
        // to_bytes reports an exceeded limit as an error whose source chain holds LengthLimitError.
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
            || e.to_string().contains("length limit")
        {
            ReviewError::TooLarge { limit: MAX_BODY_BYTES }
        } else {
            ReviewError::Body(e.to_string())
        }
    })
}

async fn handle(state: WebhookState, webhook: Webhook, req: axum::extract::Request) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let (response, verdict) = match read_body(&parts.method, &parts.headers, body, state.body_timeout).await {
        Err(error) => reject(webhook, Rejected { error, uid: None }),
        Ok(bytes) => match review::decode(&bytes) {
            Err(rejected) => reject(webhook, rejected),
            Ok(req) => {
                let span = tracing::info_span!(
                    "admission",
                    webhook = webhook.as_str(),
                    uid = %req.uid,
                    kind = %req.kind.kind,
                    namespace = req.namespace.as_deref().unwrap_or(""),
                    name = %req.name,
                    operation = ?req.operation,
                    dry_run = req.dry_run,
                );
                async {
                    let verdict = decide(&state, webhook, &req).await;
                    let label = MetricVerdict::of(&verdict);
                    match &verdict.denial {
                        Some(d) => tracing::info!(code = d.code, message = %d.message, "denied"),
                        None => tracing::debug!(
                            patched = !verdict.patch.is_empty(),
                            warnings = verdict.warnings.len(),
                            "allowed"
                        ),
                    }
                    (json_response(StatusCode::OK, &review::respond(&req, verdict)), label)
                }
                .instrument(span)
                .await
            }
        },
    };
    if let Some(metrics) = &state.metrics {
        metrics.observe(webhook, verdict, started.elapsed());
    }
    response
}

fn reject(webhook: Webhook, rejected: Rejected) -> (Response, MetricVerdict) {
    tracing::info!(webhook = webhook.as_str(), uid = rejected.uid.as_deref().unwrap_or(""), error = %rejected.error, "bad admission request");
    (
        json_response(rejected.error.status(), &review::respond_rejected(&rejected)),
        MetricVerdict::bad_request,
    )
}

async fn decide(state: &WebhookState, webhook: Webhook, req: &crate::object::Request) -> Verdict {
    match webhook {
        Webhook::Mutate => rules::mutate(req, &state.config),
        Webhook::Validate => {
            let counts = if rules::needs_service_counts(req, &state.config) {
                Some(
                    match tokio::time::timeout(state.count_timeout, state.counter.count()).await {
                        Ok(result) => result,
                        Err(_) => Err(format!("timed out after {:?}", state.count_timeout)),
                    },
                )
            } else {
                None
            };
            rules::validate(req, &state.config, counts.as_ref())
        }
    }
}
