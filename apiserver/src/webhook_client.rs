//! The API server's client for admission webhooks (`admission` decides which to call and what their
//! answers mean; this module only reaches them).

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

/// The URL a webhook is called at, as error messages name it.
pub(crate) fn target_url(wh: &Value) -> String {
    let cc = wh.get("clientConfig").cloned().unwrap_or(json!({}));
    if let Some(u) = cc.get("url").and_then(Value::as_str) {
        return u.to_string();
    }
    let s = cc.get("service").cloned().unwrap_or(json!({}));
    let g = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let port = s.get("port").and_then(Value::as_u64).unwrap_or(443);
    format!("https://{}.{}.svc:{port}{}", g("name"), g("namespace"), g("path"))
}

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;
/// (address, server name, caBundle)
type ConnectionKey = (SocketAddr, String, Vec<u8>);
/// Webhook services: (namespace, name, port) -> address.
pub(crate) type ServiceMap = HashMap<(String, String, u16), SocketAddr>;

/// Calls admission webhooks: resolves `clientConfig.service` through the service map, verifies the
/// server with `caBundle`, and keeps HTTP/2 connections open for reuse as a real API server does (keyed by
/// address, server name and caBundle, so a new CA or a restarted webhook server gets a new connection).
pub(crate) struct WebhookClient {
    services: RwLock<ServiceMap>,
    connections: Mutex<HashMap<ConnectionKey, Sender>>,
}

impl WebhookClient {
    pub(crate) fn new(services: ServiceMap) -> Self {
        WebhookClient {
            services: RwLock::new(services),
            connections: Mutex::default(),
        }
    }

    /// Registers (or changes) where a webhook service resolves to.
    pub(crate) fn set_service_address(&self, ns: &str, name: &str, port: u16, addr: SocketAddr) {
        if let Ok(mut m) = self.services.write() {
            m.insert((ns.to_string(), name.to_string(), port), addr);
        }
    }

    /// A pooled HTTP/2 connection for `key`, if one is open.
    fn pooled(&self, key: &ConnectionKey) -> Option<Sender> {
        let mut pool = self.connections.lock().ok()?;
        match pool.get(key) {
            Some(sender) if !sender.is_closed() => Some(sender.clone()),
            Some(_) => {
                pool.remove(key);
                None
            }
            None => None,
        }
    }

    /// Sends `review` to the webhook `wh` and returns the review it answers with.
    pub(crate) async fn call(&self, wh: &Value, review: &Value) -> Result<Value, String> {
        let cc = wh.get("clientConfig").cloned().unwrap_or(json!({}));
        let url = target_url(wh);
        let fail = |e: String| format!("failed to call webhook: Post {url:?}: {e}");
        let (addr, host, path): (SocketAddr, String, String) = if let Some(u) = cc.get("url").and_then(Value::as_str) {
            let uri: axum::http::Uri = u.parse().map_err(|e| fail(format!("invalid url: {e}")))?;
            if uri.scheme_str() != Some("https") {
                return Err(fail("webhook url must use https".into()));
            }
            let host = uri.host().unwrap_or("").trim_matches(['[', ']']).to_string();
            let port = uri.port_u16().unwrap_or(443);
            let addr = tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|e| fail(e.to_string()))?
                .next()
                .ok_or_else(|| fail(format!("no address for {host}")))?;
            let path = uri
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into());
            (addr, host, path)
        } else if let Some(s) = cc.get("service") {
            let g = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let (ns, name) = (g("namespace"), g("name"));
            let port = s.get("port").and_then(Value::as_u64).unwrap_or(443) as u16;
            let addr = self
                .services
                .read()
                .ok()
                .and_then(|m| m.get(&(ns.clone(), name.clone(), port)).copied())
                .ok_or_else(|| {
                    fail(format!(
                        "service \"{ns}/{name}\" port {port} is not in the embedded server's service map"
                    ))
                })?;
            let path = match g("path") {
                p if p.is_empty() => "/".to_string(),
                p => p,
            };
            (addr, format!("{name}.{ns}.svc"), path)
        } else {
            return Err(fail("clientConfig has neither url nor service".into()));
        };
        let ca = cc
            .get("caBundle")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("clientConfig.caBundle is required by the embedded server".into()))?;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca.trim())
            .map_err(|e| fail(format!("invalid caBundle encoding: {e}")))?;
        let body = Bytes::from(serde_json::to_vec(review).map_err(|e| fail(e.to_string()))?);
        // The review as a request: HTTP/2 takes the absolute URI, HTTP/1.1 the path.
        let request = |h2: bool| {
            axum::http::Request::builder()
                .method("POST")
                .uri(if h2 {
                    format!("https://{host}:{}{path}", addr.port())
                } else {
                    path.clone()
                })
                .header("content-type", "application/json")
                .header("accept", "application/json")
                .header("host", format!("{host}:{}", addr.port()))
                .body(Full::new(body.clone()))
                .map_err(|e| fail(e.to_string()))
        };
        let key = (addr, host.clone(), pem.clone());
        if let Some(mut sender) = self.pooled(&key) {
            let req = request(true)?;
            // A connection that broke since, or that the webhook server told to go away, is dropped; the
            // request then goes over a new one below.
            if let Ok(resp) = sender.send_request(req).await {
                return finish(read(resp).await.map_err(fail)?, &fail);
            }
            if let Ok(mut pool) = self.connections.lock() {
                pool.remove(&key);
            }
        }
        // As Go's HTTP/2 transport does, a request the server did not process (its connection was told to go
        // away before the request was taken, or the stream was refused) is sent again over a new connection:
        // at once the first time, then after 1, 2, 4 ... s, at most 6 times (a terminating webhook server
        // sends a GOAWAY on every connection while its endpoint is being removed).
        let mut retry = 0u32;
        loop {
            match self.fresh(&key, &request).await {
                Ok(answer) => return finish(answer, &fail),
                Err(Failed::Unprocessed(e)) if retry < 6 => {
                    if retry > 0 {
                        tokio::time::sleep(std::time::Duration::from_secs(1 << (retry - 1))).await;
                    }
                    retry += 1;
                    tracing::debug!(%url, retry, error = %e, "webhook call not processed; retrying on a new connection");
                }
                Err(Failed::Unprocessed(e) | Failed::Other(e)) => return Err(fail(e)),
            }
        }
    }

    /// The review sent over a new connection to `key` (pooled when HTTP/2).
    async fn fresh(
        &self,
        key: &ConnectionKey,
        request: &(dyn Fn(bool) -> Result<axum::http::Request<Full<Bytes>>, String> + Sync),
    ) -> Result<(u16, Bytes), Failed> {
        let (addr, host, pem) = key;
        let other = Failed::Other;
        let tls_cfg = crate::tls::client_config_from_pem(pem).map_err(other)?;
        let server_name = ServerName::try_from(host.clone())
            .map_err(|e| Failed::Other(format!("invalid server name {host:?}: {e}")))?;
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| Failed::Other(format!("dial tcp {addr}: {e}")))?;
        // As Go's dialer does by default: without it, a request's headers and body go as two small writes,
        // and the body waits for the ACK the webhook server delays (40 ms on Linux).
        let _ = tcp.set_nodelay(true);
        let tls = tokio_rustls::TlsConnector::from(Arc::new(tls_cfg))
            .connect(server_name, tcp)
            .await
            .map_err(|e| Failed::Other(format!("tls: {e}")))?;
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let req = request(h2).map_err(other)?;
        if h2 {
            let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| Failed::Other(e.to_string()))?;
            // The connection lives on in the pool until the webhook server closes it.
            tokio::spawn(conn);
            if let Ok(mut pool) = self.connections.lock() {
                pool.insert(key.clone(), sender.clone());
            }
            match sender.send_request(req).await {
                Ok(resp) => read(resp).await.map_err(other),
                Err(e) if unprocessed(&e) => Err(Failed::Unprocessed(e.to_string())),
                Err(e) => Err(Failed::Other(e.to_string())),
            }
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| Failed::Other(e.to_string()))?;
            let conn_task = tokio::spawn(conn);
            let r = sender.send_request(req).await;
            let out = match r {
                Ok(resp) => read(resp).await,
                Err(e) => Err(e.to_string()),
            };
            conn_task.abort();
            out.map_err(other)
        }
    }
}

/// Why a webhook call over a new connection failed.
enum Failed {
    /// The server did not process the request (it may be sent again).
    Unprocessed(String),
    Other(String),
}

/// Whether the webhook server did not process the request: its HTTP/2 connection was told to go away (a
/// GOAWAY without an error) before the request's stream was taken, or the stream was refused.
fn unprocessed(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            let reason = h2.reason();
            return (h2.is_go_away() && h2.is_remote() && reason == Some(h2::Reason::NO_ERROR))
                || reason == Some(h2::Reason::REFUSED_STREAM);
        }
        source = cause.source();
    }
    false
}

/// The review in a webhook's answer.
fn finish((code, bytes): (u16, Bytes), fail: &dyn Fn(String) -> String) -> Result<Value, String> {
    if !(200..300).contains(&code) {
        return Err(fail(format!(
            "webhook returned HTTP {code}: {}",
            String::from_utf8_lossy(&bytes)
        )));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("received invalid webhook response: {e}"))
}

async fn read(resp: hyper::Response<hyper::body::Incoming>) -> Result<(u16, Bytes), String> {
    let code = resp.status().as_u16();
    let b = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((code, b))
}
