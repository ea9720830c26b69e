#![allow(dead_code)]

use btp_apiserver::{ApiServer, Config, RunningApiServer};
use std::future::Future;
use std::time::Duration;

pub async fn start() -> RunningApiServer {
    start_with(Config::default()).await
}

pub async fn start_with(cfg: Config) -> RunningApiServer {
    ApiServer::start(cfg).await.expect("server starts")
}

/// Polls `f` until it returns true or the deadline passes; returns whether it became true.
pub async fn wait_until<F, Fut>(deadline: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Raw HTTPS request (HTTP/1.1) against the server; returns (status, headers, body).
pub async fn raw(
    srv: &RunningApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
    token: Option<&str>,
) -> (u16, hyper::HeaderMap, serde_json::Value) {
    raw_alpn(srv, method, path, content_type, body, token, false).await
}

pub async fn raw_alpn(
    srv: &RunningApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
    token: Option<&str>,
    h2: bool,
) -> (u16, hyper::HeaderMap, serde_json::Value) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(srv.ca_pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    cfg.alpn_protocols = if h2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let tcp = tokio::net::TcpStream::connect(srv.addr()).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    if h2 {
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    }
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("{}{}", srv.url(), path));
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let tok = token.map(str::to_string).unwrap_or_else(|| srv.token());
    if !tok.is_empty() {
        req = req.header("authorization", format!("Bearer {tok}"));
    }
    let req = req.body(Full::new(bytes::Bytes::from(body.to_string()))).unwrap();
    let resp = if h2 {
        let (mut s, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        s.send_request(req).await.unwrap()
    } else {
        let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        s.send_request(req).await.unwrap()
    };
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, v)
}
