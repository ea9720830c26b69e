//! The metrics and health endpoints (`--metrics-bind-address`, `--health-probe-bind-address`).

use crate::ops;
use crate::tasks::stopped;
use anyhow::Context as _;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Where `/metrics` and `/healthz`, `/readyz` are served (port 0: a free port).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probes {
    /// `/metrics`.
    pub metrics: SocketAddr,
    /// `/healthz` and `/readyz`.
    pub health: SocketAddr,
}

/// Serve `/metrics` (from `registry`) and `/healthz`, `/readyz` (from `live`, `ready`) in the background until
/// `stop`; returns the bound addresses (metrics, health).
pub async fn serve(
    at: Probes,
    registry: Registry,
    ready: ops::Readiness,
    live: ops::Liveness,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let registry = Arc::new(Mutex::new(registry));
    let metrics = serve_plain(at.metrics, ops::metrics_router(registry), stopped(stop.clone()))
        .await
        .context("serving metrics")?;
    let health = serve_plain(at.health, ops::health_router(ready, live), stopped(stop.clone()))
        .await
        .context("serving the health endpoints")?;
    Ok((metrics, health))
}

/// Serve a plain-HTTP router in the background until `shutdown`; returns the bound address.
async fn serve_plain(
    addr: SocketAddr,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr().with_context(|| format!("binding {addr}"))?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, addr = %bound, "HTTP server failed");
        }
    });
    Ok(bound)
}
