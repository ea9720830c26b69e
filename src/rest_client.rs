//! The client every part of a running manager talks to the API server through ([`guard`]). It keeps two
//! rules in one place:
//!
//! - **Fencing**: a write (POST, PUT, PATCH, DELETE) is sent only while the [`Fence`] allows it; a refused
//!   write ends with [`crate::fence::Fenced`] and never leaves the process. A write that is sent is bounded
//!   by the right: the client abandons it when the right ends ([`crate::fence::RightEnded`]), and tells the
//!   API server the time that remains (`?timeout=`), so that a request it takes late is refused rather than
//!   committed. The elector's own Lease requests are exempt: they are how the right is won, and the elector
//!   bounds them itself.
//! - **Visibility**: every request sent is counted as client-go counts it,
//!   `rest_client_requests_total{code,method}` and `rest_client_request_duration_seconds{verb}`, and carries a
//!   `User-Agent` naming this replica, so that who writes what can be told from outside (docs/behaviour.md#metrics).

use crate::fence::{Fence, Fenced, RightEnded};
use futures::future::BoxFuture;
use http::{header::USER_AGENT, HeaderValue, Method, Request, Response};
use kube::client::Body;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

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

/// `uri` with `timeout=<left>` added to its query (the API server's deadline for the request, a Go duration
/// in whole milliseconds, at least 1 ms), unless it names a `timeout` already. Pure.
pub fn with_server_timeout(uri: &http::Uri, left: Duration) -> http::Uri {
    let query = uri.query().unwrap_or_default();
    if query
        .split('&')
        .any(|pair| pair == "timeout" || pair.starts_with("timeout="))
    {
        return uri.clone();
    }
    let millis = left.as_millis().max(1);
    let query = match query {
        "" => format!("timeout={millis}ms"),
        q => format!("{q}&timeout={millis}ms"),
    };
    let path_and_query = format!("{}?{query}", uri.path());
    let mut parts = uri.clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => return uri.clone(),
    }
    http::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
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
        // A write holds its admission until it is answered or abandoned (the elector waits for it before it
        // releases the Lease), and is abandoned when the right ends.
        let write = match is_write(&method) && !is_lease(request.uri().path()) {
            false => None,
            true => match self.fence.admit() {
                Some(write) => Some(write),
                None => {
                    if let Some(m) = &self.metrics {
                        m.fenced.inc();
                    }
                    tracing::debug!(%method, path = request.uri().path(), "write not sent: no valid leader Lease");
                    return Box::pin(std::future::ready(Err(kube::Error::Service(Box::new(Fenced)))));
                }
            },
        };
        let until = write.as_ref().and_then(|w| w.until);
        if let Some(until) = until {
            let left = until.saturating_duration_since(Instant::now());
            *request.uri_mut() = with_server_timeout(request.uri(), left);
        }
        request.headers_mut().insert(USER_AGENT, self.agent.clone());
        let (inner, metrics) = (self.inner.clone(), self.metrics.clone());
        Box::pin(async move {
            let started = Instant::now();
            let send = inner.send(request);
            let result = match until {
                None => send.await,
                Some(until) => match tokio::time::timeout_at(until.into(), send).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::debug!(%method, "write abandoned: the right to write ended before an answer");
                        Err(kube::Error::Service(Box::new(RightEnded)))
                    }
                },
            };
            drop(write);
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
    fn a_write_tells_the_server_the_time_its_right_has_left() {
        let left = Duration::from_millis(2_345);
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        assert_eq!(
            with_server_timeout(&uri("/api/v1/namespaces/ns/configmaps/c"), left),
            uri("/api/v1/namespaces/ns/configmaps/c?timeout=2345ms")
        );
        assert_eq!(
            with_server_timeout(
                &uri("/apis/apps/v1/namespaces/ns/deployments/d?fieldManager=m&force=true"),
                left
            ),
            uri("/apis/apps/v1/namespaces/ns/deployments/d?fieldManager=m&force=true&timeout=2345ms")
        );
        assert_eq!(
            with_server_timeout(
                &uri("https://10.0.0.1:6443/api/v1/namespaces/ns/secrets"),
                Duration::ZERO
            ),
            uri("https://10.0.0.1:6443/api/v1/namespaces/ns/secrets?timeout=1ms"),
            "never zero (the server would take it for none)"
        );
        let named = uri("/api/v1/namespaces/ns/pods?timeout=5s");
        assert_eq!(
            with_server_timeout(&named, left),
            named,
            "a timeout named already stays"
        );
        let other = uri("/api/v1/namespaces/ns/pods?timeoutSeconds=5");
        assert_eq!(
            with_server_timeout(&other, left),
            uri("/api/v1/namespaces/ns/pods?timeoutSeconds=5&timeout=2345ms")
        );
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
