//! Listener (TLS, HTTP/1.1 + HTTP/2), authentication, routing and request logging.

use crate::config::Config;
use crate::context::{ok_json, Ctx, Query, State, Target};
use crate::error::{ApiError, Error};
use crate::handle::RunningApiServer;
use crate::registry::Registry;
use crate::request::RequestRecord;
use crate::store::Store;
use crate::webhook_client::WebhookClient;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Entry point: `ApiServer::start(Config::default()).await`.
pub struct ApiServer;

impl ApiServer {
    /// Generates certificates, binds the listener and starts serving.
    ///
    /// A boxed future, so that the server's code (its handlers and HTTP stack, spawned from this future) is
    /// compiled once, in this crate: an `async fn` would be compiled again into every test, benchmark and
    /// binary that awaits it. Awaiting it is the same.
    pub fn start(config: Config) -> StartFuture {
        Box::pin(start(config))
    }
}

/// What [`ApiServer::start`] returns.
pub type StartFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<RunningApiServer, Error>> + Send>>;

async fn start(config: Config) -> Result<RunningApiServer, Error> {
    let certs = crate::tls::generate(&[])?;
    let tls_cfg = Arc::new(crate::tls::server_config(&certs)?);
    let listener = tokio::net::TcpListener::bind(config.bind).await?;
    let addr = listener.local_addr()?;
    let token = if config.token.is_empty() {
        crate::util::new_token()
    } else {
        config.token.clone()
    };
    let (sd_tx, sd_rx) = tokio::sync::watch::channel(false);
    let state = Arc::new(State {
        // events.k8s.io Events are also core/v1 Events: the store has `events` keep the two in line.
        store: Store::new(config.history).after_write(crate::events::after_store_write),
        registry: Registry::new(),
        token,
        users: std::sync::RwLock::new(HashMap::new()),
        #[cfg(feature = "testing")]
        faults: Default::default(),
        #[cfg(feature = "testing")]
        log: Default::default(),
        webhooks: WebhookClient::new(config.service_map.clone()),
        bookmark_interval: config.bookmark_interval,
        namespace_termination_delay: config.namespace_termination_delay,
        crd_establish_delay: config.crd_establish_delay,
        version: config.version,
        addr,
        shutdown: sd_rx.clone(),
        active_watches: std::sync::atomic::AtomicUsize::new(0),
    });
    for ns in ["default", "kube-system", "kube-public"] {
        crate::handlers::bootstrap_namespace(&state, ns);
    }
    crate::access::bootstrap_cluster_roles(&state);
    // As on a real cluster, the history of what existed before start is compacted: a watch from
    // resourceVersion 1 is too old.
    state.store.compact();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls_cfg);
    let st = state.clone();
    let mut sd = sd_rx;
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = sd.changed() => break,
                acc = listener.accept() => {
                    let Ok((tcp, _)) = acc else { continue };
                    let _ = tcp.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let st = st.clone();
                    let mut sd2 = sd.clone();
                    conns.spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let st = st.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(dispatch(st, req.map(Body::new)).await)
                            }
                        });
                        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = sd2.changed() => {}
                        }
                    });
                    // reap finished connections
                    while conns.try_join_next().is_some() {}
                }
            }
        }
        conns.abort_all();
    });
    Ok(RunningApiServer {
        state,
        addr,
        ca_pem: certs.ca_pem,
        ca_der: certs.ca_der,
        shutdown: sd_tx,
        task: Some(task),
    })
}

enum Route {
    Json(Value),
    Resource(Target, bool /* legacy /watch/ prefix */),
    NotFound,
}

fn route(st: &State, path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["version"] => {
            let (major, minor, git) = st.version.numbers();
            return Route::Json(json!({
                "major": major, "minor": minor, "gitVersion": git,
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc",
                "platform": "linux/amd64",
            }));
        }
        ["healthz"] | ["livez"] | ["readyz"] => return Route::Json(json!("ok")),
        ["api"] => {
            return Route::Json(json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.addr.to_string()}],
            }))
        }
        ["apis"] => return Route::Json(st.registry.api_group_list()),
        ["openapi", "v3"] => return Route::Json(st.registry.openapi_root()),
        ["openapi", "v3", "api", v] => return st.registry.openapi_gv("", v).map_or(Route::NotFound, Route::Json),
        ["openapi", "v3", "apis", g, v] => return st.registry.openapi_gv(g, v).map_or(Route::NotFound, Route::Json),
        ["api", "v1"] => {
            return match st.registry.api_resource_list("", "v1") {
                Some(v) => Route::Json(v),
                None => Route::NotFound,
            }
        }
        ["apis", g] => {
            return match st.registry.api_group(g) {
                Some(v) => Route::Json(v),
                None => Route::NotFound,
            }
        }
        ["apis", g, v] => {
            return match st.registry.api_resource_list(g, v) {
                Some(v) => Route::Json(v),
                None => Route::NotFound,
            }
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return Route::NotFound,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let mk = |plural: &str, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        let def = st.registry.lookup(group, version, plural)?;
        if ns.is_some() && !def.namespaced {
            return None;
        }
        if let Some(s) = sub {
            let status_ok = s == "status" && def.has_status(version);
            let finalize_ok = def.plural == "namespaces" && s == "finalize";
            let scale_ok = s == "scale" && def.has_scale();
            if !status_ok && !finalize_ok && !scale_ok {
                return None;
            }
        }
        Some(Target {
            def,
            version: version.to_string(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        })
    };
    let t = match rest {
        ["namespaces", n, s @ ("status" | "finalize")] if group.is_empty() => mk("namespaces", None, Some(n), Some(s)),
        ["namespaces", ns, r] => mk(r, Some(ns), None, None),
        ["namespaces", ns, r, n] => mk(r, Some(ns), Some(n), None),
        ["namespaces", ns, r, n, s] => mk(r, Some(ns), Some(n), Some(s)),
        [r] => mk(r, None, None, None),
        [r, n] => mk(r, None, Some(n), None),
        [r, n, s] => mk(r, None, Some(n), Some(s)),
        _ => None,
    };
    match t {
        Some(t) => Route::Resource(t, legacy_watch),
        None => Route::NotFound,
    }
}

pub(crate) fn verb_of(method: &Method, t: &Target, watch: bool) -> &'static str {
    verb(method, t.name.is_some(), watch)
}

/// The Kubernetes verb of a request with `method`, for a named object or a collection.
fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method.as_str(), named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

async fn dispatch(st: Arc<State>, req: Request<Body>) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let mut rec = RequestRecord {
        method: method.to_string(),
        verb: "other".into(),
        path: path.clone(),
        query: query.clone(),
        group: String::new(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        user: String::new(),
        user_agent: req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        code: 0,
        changed: false,
    };
    let resp = dispatch_inner(&st, req, &mut rec).await;
    rec.code = resp.status().as_u16();
    #[cfg(feature = "testing")]
    st.log.push(rec);
    resp
}

/// Whether `path` is under a group/version the server serves (`/api/v1/...`, `/apis/<g>/<v>/...`).
fn served_group_version(st: &State, path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", v, ..] => st.registry.api_resource_list("", v).is_some(),
        ["apis", g, v, ..] => st.registry.api_resource_list(g, v).is_some(),
        _ => true,
    }
}

/// Fill `rec` from the path of a request for a resource the server does not serve:
/// `/api/v1/...` or `/apis/<group>/<version>/...`, then `[namespaces/<ns>/]<resource>[/<name>[/<sub>]]`.
fn describe_unknown(method: &Method, path: &str, q: &Query, rec: &mut RequestRecord) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return,
    };
    let rest = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => {
            rec.namespace = ns.to_string();
            rest
        }
        rest => rest,
    };
    let Some((resource, rest)) = rest.split_first() else {
        return;
    };
    rec.group = group.to_string();
    rec.resource = resource.to_string();
    rec.name = rest.first().map(|n| n.to_string()).unwrap_or_default();
    rec.subresource = rest.get(1).map(|n| n.to_string()).unwrap_or_default();
    rec.verb = verb(method, !rec.name.is_empty(), crate::util::query_bool(q, "watch")).into();
}

async fn dispatch_inner(st: &Arc<State>, req: Request<Body>, rec: &mut RequestRecord) -> Response {
    let path = req.uri().path().to_string();
    let open = matches!(path.as_str(), "/healthz" | "/livez" | "/readyz");
    let user = match crate::access::authenticate(st, req.headers()) {
        Ok(Some(user)) => user,
        Ok(None) if open => crate::authz::User::new("system:anonymous"),
        Ok(None) => return ApiError::unauthorized().into_response(),
        Err(e) => return e.into_response(),
    };
    if !open {
        rec.user = user.name.clone();
    }
    let q = crate::util::parse_query(req.uri().query());
    let (t, legacy_watch) = match route(st, &path) {
        Route::Json(v) => {
            rec.verb = "discovery".into();
            if !open {
                let verb = verb(req.method(), true, false);
                if let Err(e) = crate::access::authorize_path(st, &user, verb, &path) {
                    return e.into_response();
                }
            }
            if req.method() != Method::GET {
                return ApiError::method_not_allowed("the server does not allow this method on the requested resource")
                    .into_response();
            }
            return ok_json(StatusCode::OK, &v);
        }
        Route::NotFound => {
            // A real API server authorizes before it finds out that a resource does not exist (say, a CRD
            // not installed yet): record what the request asked for, so RBAC checks of the log see it.
            describe_unknown(req.method(), &path, &q, rec);
            if let Err(e) = crate::access::authorize_unknown(st, &user, rec) {
                return e.into_response();
            }
            // A group/version the server does not serve at all is the mux's plain-text 404, as on a real
            // server; an unknown resource of a served group/version is a NotFound Status.
            if !served_group_version(st, &path) {
                return (
                    StatusCode::NOT_FOUND,
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    "404 page not found\n",
                )
                    .into_response();
            }
            return ApiError::not_found_path().into_response();
        }
        Route::Resource(t, w) => (t, w),
    };
    let watch = legacy_watch || crate::util::query_bool(&q, "watch");
    let verb = verb_of(req.method(), &t, watch);
    // The client's deadline for the request (`?timeout=`, a Go duration), as kube-apiserver's request-deadline
    // filter applies it to every request but a watch: what is not done by then is abandoned (an admission
    // webhook still being called, a write not committed) and answered 504.
    let deadline = match q.get("timeout").filter(|_| !watch) {
        None => None,
        Some(text) => match crate::util::parse_go_duration(text) {
            Some(d) => Some(tokio::time::Instant::now() + d),
            None => {
                return ApiError::bad_request(format!("invalid timeout specified in the request URL: {text:?}"))
                    .into_response()
            }
        },
    };
    match deadline {
        None => serve_resource(st, req, rec, (t, verb, q), user).await,
        Some(deadline) => {
            match tokio::time::timeout_at(deadline, serve_resource(st, req, rec, (t, verb, q), user)).await {
                Ok(response) => response,
                Err(_) => ApiError::new(
                    504,
                    "Timeout",
                    "request did not complete within requested timeout - context deadline exceeded",
                )
                .into_response(),
            }
        }
    }
}

/// A request for a resource the server serves, from the injected faults on.
async fn serve_resource(
    st: &Arc<State>,
    req: Request<Body>,
    rec: &mut RequestRecord,
    (t, verb, q): (Target, &'static str, Query),
    user: crate::authz::User,
) -> Response {
    rec.verb = verb.into();
    rec.group = t.def.group.clone();
    rec.resource = t.def.plural.clone();
    rec.subresource = t.sub.clone().unwrap_or_default();
    rec.namespace = t.namespace.clone().unwrap_or_default();
    rec.name = t.name.clone().unwrap_or_default();
    // Injected latency and failures (test support), before anything is decided or written.
    #[cfg(feature = "testing")]
    if let Some(r) = st.faults.intercept(verb, &t.def.plural, &rec.user).await {
        return r;
    }
    let (parts, body) = req.into_parts();
    let body = match http_body_util::BodyExt::collect(http_body_util::Limited::new(body, 8 * 1024 * 1024)).await {
        Ok(b) => b.to_bytes(),
        Err(_) => return ApiError::new(413, "RequestEntityTooLarge", "request body too large").into_response(),
    };
    if let Err(e) = crate::access::authorize_resource(st, &user, &t, verb, &q, &parts.headers, &body) {
        return e.into_response();
    }
    let mut ctx = Ctx {
        st: st.clone(),
        t,
        q,
        headers: parts.headers,
        body,
        changed: false,
        warnings: vec![],
    };
    let result = crate::handlers::handle(&mut ctx, verb).await;
    rec.changed = ctx.changed;
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    for w in &ctx.warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = header::HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}
