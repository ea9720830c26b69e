//! A minimal HTTPS client for admission requests: one keep-alive connection, HTTP/1.1 or HTTP/2 chosen
//! by ALPN, server certificate verified against a given CA bundle only. Used by the integration tests and
//! the benchmark, the way the API server calls a webhook.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA bundle does not parse.
    #[error("CA bundle: {0}")]
    CaBundle(String),
    /// TCP or TLS failed (including certificate verification).
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// HTTP failed.
    #[error("http: {0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built.
    #[error("request: {0}")]
    Request(#[from] http::Error),
    /// The server chose another protocol than asked for.
    #[error("ALPN negotiated {0:?}")]
    Alpn(Option<Vec<u8>>),
}

/// HTTP version to negotiate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `http/1.1`.
    Http1,
    /// `h2`.
    Http2,
}

/// A TLS client configuration trusting exactly the certificates in `ca_pem`.
pub fn tls_config(ca_pem: &[u8], protocol: Protocol) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| ClientError::CaBundle(e.to_string()))?;
        roots.add(cert).map_err(|e| ClientError::CaBundle(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ClientError::CaBundle("no certificate in the CA bundle".into()));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::CaBundle(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![match protocol {
        Protocol::Http1 => b"http/1.1".to_vec(),
        Protocol::Http2 => b"h2".to_vec(),
    }];
    Ok(Arc::new(config))
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One open connection.
pub struct Connection {
    sender: Sender,
    authority: String,
    /// DER of the certificate the server presented.
    pub peer_certificate: Vec<u8>,
}

/// A response: status, headers and body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: http::StatusCode,
    /// The body.
    pub body: Bytes,
    /// Negotiated version.
    pub version: http::Version,
    /// The response's headers.
    pub headers: http::HeaderMap,
}

impl Connection {
    /// Connect to `addr`, verifying the server certificate for `server_name`.
    pub async fn open(
        addr: SocketAddr,
        server_name: &str,
        tls: Arc<rustls::ClientConfig>,
        protocol: Protocol,
    ) -> Result<Self, ClientError> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| ClientError::Connect(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(ClientError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(ClientError::Connect)?;
        let (_, session) = stream.get_ref();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let peer_certificate = session
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let io = TokioIo::new(stream);
        let sender = match protocol {
            Protocol::Http1 if alpn.as_deref() == Some(b"http/1.1") => {
                let (sender, conn) = http1::handshake(io).await?;
                tokio::spawn(conn);
                Sender::H1(sender)
            }
            Protocol::Http2 if alpn.as_deref() == Some(b"h2") => {
                let (sender, conn) = http2::handshake(TokioExecutor::new(), io).await?;
                tokio::spawn(conn);
                Sender::H2(sender)
            }
            _ => return Err(ClientError::Alpn(alpn)),
        };
        Ok(Self {
            sender,
            authority: format!("{server_name}:{}", addr.port()),
            peer_certificate,
        })
    }

    /// Send a request and read the whole response.
    pub async fn send(
        &mut self,
        method: http::Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Reply, ClientError> {
        let mut builder = http::Request::builder().method(method);
        builder = match &self.sender {
            Sender::H1(_) => builder.uri(path).header(http::header::HOST, &self.authority),
            Sender::H2(_) => builder.uri(format!("https://{}{path}", self.authority)),
        };
        if let Some(ct) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, ct);
        }
        let request = builder.body(Full::new(body))?;
        let response = match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(request).await?
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(request).await?
            }
        };
        let status = response.status();
        let version = response.version();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Reply {
            status,
            body,
            version,
            headers,
        })
    }

    /// Whether the connection has ended (the server closed it, or told an HTTP/2 client to go away and
    /// then closed it): no request can be sent on it any more.
    pub fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    /// POST a JSON body.
    pub async fn post_json(&mut self, path: &str, body: impl Into<Bytes>) -> Result<Reply, ClientError> {
        self.send(http::Method::POST, path, Some("application/json"), body.into())
            .await
    }
}
