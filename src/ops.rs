//! Operational endpoints: `/metrics` (Prometheus text) and `/healthz`, `/readyz`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Readiness (docs/behaviour.md#health-and-readiness): the manager has started and is not shutting down, and
/// admission through it works (the webhook server serves the certificate that the registered caBundle
/// trusts).
#[derive(Clone, Default)]
pub struct Readiness {
    serving: Arc<AtomicBool>,
    admission: Arc<AtomicBool>,
}

impl Readiness {
    /// Mark started (or shutting down).
    pub fn set(&self, ready: bool) {
        self.serving.store(ready, Ordering::Release);
    }
    /// Whether the served certificate is the one the registered caBundle trusts.
    pub fn set_admission(&self, works: bool) {
        self.admission.store(works, Ordering::Release);
    }
    /// Whether ready.
    pub fn get(&self) -> bool {
        self.why_not().is_none()
    }
    /// What keeps it from being ready.
    pub fn why_not(&self) -> Option<&'static str> {
        if !self.serving.load(Ordering::Acquire) {
            Some("not started, or shutting down")
        } else if !self.admission.load(Ordering::Acquire) {
            Some("the webhook server does not serve a certificate that the registered caBundle trusts yet")
        } else {
            None
        }
    }
}

/// Liveness (docs/behaviour.md#health-and-readiness): the tasks a manager lives by have not ended. Answered by the
/// process itself, never by the API server: a probe that failed during an API outage would restart every
/// replica at once.
#[derive(Clone, Default)]
pub struct Liveness {
    tasks: Arc<std::sync::Mutex<Vec<(&'static str, Alive)>>>,
}

/// Whether one watched task still runs.
type Alive = Arc<dyn Fn() -> bool + Send + Sync>;

impl Liveness {
    /// Watch a task: `alive` answers whether it still runs.
    pub fn watch(&self, name: &'static str, alive: impl Fn() -> bool + Send + Sync + 'static) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.push((name, Arc::new(alive)));
        }
    }
    /// The first watched task that has ended.
    pub fn dead(&self) -> Option<&'static str> {
        let tasks = self.tasks.lock().map(|t| t.clone()).unwrap_or_default();
        tasks.iter().find(|(_, alive)| !alive()).map(|(name, _)| *name)
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

/// `/healthz` (ok while every watched task runs: [`Liveness`]) and `/readyz` (ok while [`Readiness`] says so).
pub fn health_router(ready: Readiness, live: Liveness) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let live = live.clone();
                async move {
                    match live.dead() {
                        None => (StatusCode::OK, "ok".to_string()),
                        Some(task) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{task} has stopped")),
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    match ready.why_not() {
                        None => (StatusCode::OK, "ok"),
                        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
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
        let live = Liveness::default();
        let router = || health_router(ready.clone(), live.clone());
        assert_eq!(get(router(), "/healthz").await.0, 200);
        assert_eq!(get(router(), "/readyz").await.0, 503);
        ready.set(true);
        let (code, body) = get(router(), "/readyz").await;
        assert_eq!(code, 503, "started, but admission does not work yet");
        assert!(body.contains("caBundle"), "{body}");
        ready.set_admission(true);
        assert_eq!(get(router(), "/readyz").await.0, 200);
        ready.set(false);
        assert_eq!(get(router(), "/readyz").await.0, 503, "shutting down");
        let alive = Arc::new(AtomicBool::new(true));
        live.watch("the webhook server", {
            let alive = alive.clone();
            move || alive.load(Ordering::Acquire)
        });
        assert_eq!(get(router(), "/healthz").await.0, 200);
        alive.store(false, Ordering::Release);
        let (code, body) = get(router(), "/healthz").await;
        assert_eq!(
            (code, body.contains("the webhook server has stopped")),
            (500, true),
            "{body}"
        );
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
