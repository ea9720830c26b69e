//! The client every part of a running manager talks to the API server through ([`guard`]). It keeps two
//! rules in one place:
//!
//! - **Fencing**: a write (POST, PUT, PATCH, DELETE) is sent only while the [`Fence`] allows it; a refused
//!   write ends with [`crate::fence::Fenced`] and never leaves the process. The elector's own Lease
//!   requests are exempt: they are how the right is won.
//! - **Visibility**: every request sent is counted as client-go counts it,
//!   `rest_client_requests_total{code,method}` and `rest_client_request_duration_seconds{verb}`, and carries a
//!   `User-Agent` naming this replica, so that who writes what can be told from outside (docs/behaviour.md#metrics).

use crate::fence::{Fence, Fenced};
use futures::future::BoxFuture;
use http::{header::USER_AGENT, HeaderValue, Method, Request, Response};
use kube::client::Body;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::task::{Context, Poll};
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabel {
    verb: String,
}

/// The request metrics of one manager.
#[derive(Clone)]
pub struct RestMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<VerbLabel, Histogram>,
    fenced: Counter,
}

impl RestMetrics {
    /// Register the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
            }),
            fenced: Counter::default(),
        };
        registry.register(
            "rest_client_requests",
            "Requests sent to the API server, by HTTP status code and method (client-go's name)",
            metrics.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Time until the API server's response headers, by HTTP method (client-go's name)",
            metrics.duration.clone(),
        );
        registry.register(
            "btpmanager_fenced_writes",
            "Writes not sent because this replica held no valid leader Lease (docs/behaviour.md#leader-election)",
            metrics.fenced.clone(),
        );
        metrics
    }

    fn observe(&self, method: &Method, code: String, started: Instant) {
        self.requests
            .get_or_create(&RequestLabels {
                code,
                method: method.as_str().to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&VerbLabel {
                verb: method.as_str().to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Whether a request changes the cluster (what the fence holds back).
pub fn is_write(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
}

/// Whether a request is one of the elector's: a Lease in `coordination.k8s.io`.
fn is_lease(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/") && path.split('/').any(|segment| segment == "leases")
}

/// `client` with the fence, the request metrics and `agent` as the `User-Agent` of every request.
pub fn guard(client: kube::Client, fence: Fence, metrics: Option<RestMetrics>, agent: &str) -> kube::Client {
    let agent = HeaderValue::from_str(agent).unwrap_or_else(|_| HeaderValue::from_static("btp-manager"));
    let namespace = client.default_namespace().to_string();
    kube::Client::new(
        Guarded {
            inner: client,
            fence,
            metrics,
            agent,
        },
        namespace,
    )
}

#[derive(Clone)]
struct Guarded {
    inner: kube::Client,
    fence: Fence,
    metrics: Option<RestMetrics>,
    agent: HeaderValue,
}

impl tower::Service<Request<Body>> for Guarded {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let method = request.method().clone();
        if is_write(&method) && !is_lease(request.uri().path()) && !self.fence.valid() {
            if let Some(m) = &self.metrics {
                m.fenced.inc();
            }
            tracing::debug!(%method, path = request.uri().path(), "write not sent: no valid leader Lease");
            return Box::pin(std::future::ready(Err(kube::Error::Service(Box::new(Fenced)))));
        }
        request.headers_mut().insert(USER_AGENT, self.agent.clone());
        let (inner, metrics) = (self.inner.clone(), self.metrics.clone());
        Box::pin(async move {
            let started = Instant::now();
            let result = inner.send(request).await;
            if let Some(m) = metrics {
                let code = match &result {
                    Ok(response) => response.status().as_u16().to_string(),
                    // What the API server answered when kube turned it into an error; else no answer at all.
                    Err(kube::Error::Api(status)) => status.code.to_string(),
                    Err(_) => "<error>".to_string(),
                };
                m.observe(&method, code, started);
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_the_changing_methods() {
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_write(&m), "{m}");
        }
        for m in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!is_write(&m), "{m}");
        }
    }

    #[test]
    fn only_lease_paths_are_the_electors() {
        assert!(is_lease(
            "/apis/coordination.k8s.io/v1/namespaces/kyma-system/leases/ec023d38.kyma-project.io"
        ));
        assert!(is_lease("/apis/coordination.k8s.io/v1/namespaces/kyma-system/leases"));
        assert!(!is_lease("/api/v1/namespaces/kyma-system/secrets/leases"));
        assert!(!is_lease("/apis/apps/v1/namespaces/leases/deployments/x"));
    }
}
