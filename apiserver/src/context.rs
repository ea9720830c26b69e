//! The request context, below everything that handles a request: the server state, the resolved target
//! of a request, and [`Ctx`] (one request being handled). `server` (routing), `handlers` (the verbs),
//! `watch` and `admission` all build on it, and it depends on none of them.

use crate::config::KubeVersion;
use crate::error::{ApiError, ApiResult};
#[cfg(feature = "testing")]
use crate::faults::{FaultInjector, RequestLog};
use crate::registry::{Registry, ResourceDef};
use crate::store::{Gr, Store};
use crate::webhook_client::WebhookClient;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The shared state of a running server.
pub(crate) struct State {
    pub store: Store,
    pub registry: Registry,
    pub token: String,
    /// Further bearer tokens and the user each one authenticates (see `RunningApiServer::client_as`).
    pub users: std::sync::RwLock<HashMap<String, String>>,
    #[cfg(feature = "testing")]
    pub faults: FaultInjector,
    #[cfg(feature = "testing")]
    pub log: RequestLog,
    /// Calls admission webhooks (resolving `clientConfig.service` through the service map).
    pub webhooks: WebhookClient,
    pub bookmark_interval: Duration,
    pub namespace_termination_delay: Duration,
    pub crd_establish_delay: Duration,
    /// The Kubernetes version the server behaves as.
    pub version: KubeVersion,
    pub addr: SocketAddr,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    pub active_watches: std::sync::atomic::AtomicUsize,
}

/// A resolved resource request.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub def: Arc<ResourceDef>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl Target {
    pub fn gr(&self) -> (String, String) {
        self.def.key()
    }
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
    pub fn status(&self) -> bool {
        self.sub.as_deref() == Some("status")
    }
}

/// A JSON response.
pub(crate) fn ok_json(code: StatusCode, v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Query parameters.
pub(crate) type Query = HashMap<String, String>;

/// One request being handled: its target, query, headers and body, and what it did.
pub(crate) struct Ctx {
    pub st: Arc<State>,
    pub t: Target,
    pub q: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub changed: bool,
    pub warnings: Vec<String>,
}

pub(crate) fn crd_gr() -> Gr {
    ("apiextensions.k8s.io".into(), "customresourcedefinitions".into())
}

pub(crate) fn ns_gr() -> Gr {
    (String::new(), "namespaces".into())
}

impl Ctx {
    pub(crate) fn gr(&self) -> Gr {
        self.t.gr()
    }
    pub(crate) fn name(&self) -> ApiResult<String> {
        self.t
            .name
            .clone()
            .ok_or_else(|| ApiError::method_not_allowed("a resource name is required"))
    }
    pub(crate) fn dry_run(&self) -> bool {
        self.q.get("dryRun").is_some_and(|v| v == "All")
    }
    /// `fieldManager` query parameter, or a name derived from the User-Agent.
    pub(crate) fn manager(&self) -> String {
        if let Some(m) = self.q.get("fieldManager").filter(|m| !m.is_empty()) {
            return m.clone();
        }
        self.headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }
    pub(crate) fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.t.def.group, &self.t.def.plural, name)
    }
    pub(crate) fn api_version(&self) -> String {
        self.t.def.api_version(&self.t.version)
    }
}
