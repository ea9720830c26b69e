//! Operational endpoints: `/metrics` (Prometheus text) and `/healthz`, `/readyz`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Readiness: true once the webhook server serves with a certificate.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Mark ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
    /// Whether ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// `/metrics`.
pub fn metrics_router(registry: Arc<Mutex<Registry>>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(registry)
}

async fn metrics(State(registry): State<Arc<Mutex<Registry>>>) -> impl IntoResponse {
    let mut body = String::new();
    let encoded = match registry.lock() {
        Ok(registry) => prometheus_client::encoding::text::encode(&mut body, &registry),
        Err(poisoned) => prometheus_client::encoding::text::encode(&mut body, &poisoned.into_inner()),
    };
    match encoded {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string(),
        ),
    }
}

/// `/healthz` (always ok while the process serves) and `/readyz` (ok once [`Readiness`] is set).
pub fn health_router(ready: Readiness) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let ready = ready.clone();
            async move {
                if ready.get() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "webhook server not serving yet")
                }
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn get(router: Router, path: &str) -> (u16, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        server.abort();
        let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, response)
    }

    #[tokio::test]
    async fn readiness_follows_the_flag_and_liveness_is_always_ok() {
        let ready = Readiness::default();
        assert_eq!(get(health_router(ready.clone()), "/healthz").await.0, 200);
        assert_eq!(get(health_router(ready.clone()), "/readyz").await.0, 503);
        ready.set(true);
        assert_eq!(get(health_router(ready), "/readyz").await.0, 200);
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_text_format() {
        let mut registry = Registry::default();
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        registry.register("btpmanager_test_events", "test", counter.clone());
        counter.inc();
        let (status, body) = get(metrics_router(Arc::new(Mutex::new(registry))), "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("btpmanager_test_events_total 1"), "{body}");
    }
}
