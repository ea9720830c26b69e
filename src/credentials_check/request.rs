//! The request to the token endpoint (the network part of the check): one `POST` over HTTPS/1.1, bounded by
//! [`REQUEST_BOUND`] from the name lookup to the last byte of the answer, whose body is read (at most
//! [`MAX_BODY`]) only to see whether it holds an access token, then dropped. The server certificate is
//! verified against the system roots and `CredentialsCheckCABundle`. No error text from the network stack
//! reaches a verdict: only the kind of failure ([`Failure`]).

use super::verdict::{self, Failure, Untrusted};
use super::{Target, Verdict, REQUEST_BOUND};
use btp_api::CredentialsReason;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::{Arc, OnceLock};

/// The most of an answer's body that is read.
pub const MAX_BODY: usize = 64 * 1024;

/// The system's trusted roots, read once per process (the files do not change under a running container).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if !found.errors.is_empty() {
            tracing::debug!(
                errors = found.errors.len(),
                "some system root certificates could not be read"
            );
        }
        found.certs
    })
}

/// The TLS configuration of a check: the system roots and the certificates of `ca_bundle` (PEM). A bundle
/// that is not empty but holds no usable certificate is a `CheckFailed` verdict: the user meant to add a CA.
pub fn tls_config(ca_bundle: &str) -> Result<Arc<rustls::ClientConfig>, Verdict> {
    let mut roots = rustls::RootCertStore::empty();
    let _ = roots.add_parsable_certificates(system_roots().iter().cloned());
    if !ca_bundle.trim().is_empty() {
        let bad = || {
            Verdict::new(
                CredentialsReason::CheckFailed,
                "CredentialsCheckCABundle holds no usable PEM certificate",
            )
        };
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
            roots.add(cert.map_err(|_| bad())?).map_err(|_| bad())?;
            added += 1;
        }
        if added == 0 {
            return Err(bad());
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|_| Verdict::new(CredentialsReason::CheckFailed, "No TLS configuration could be built"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Ask `target` for a token, within [`REQUEST_BOUND`]; not at all when the manager is told to go through an
/// HTTPS proxy, which this check does not (it would report the proxy's absence as the endpoint's).
pub async fn check(target: &Target, tls: Arc<rustls::ClientConfig>) -> Verdict {
    if proxied(|name| std::env::var(name).ok()) {
        return Verdict::new(
            CredentialsReason::NotChecked,
            "HTTPS_PROXY is set for the manager, and the check does not go through a proxy",
        );
    }
    check_within(target, tls, REQUEST_BOUND).await
}

/// Whether the environment (`var`) names an HTTPS proxy (`HTTPS_PROXY` or `https_proxy`). Pure.
pub fn proxied(var: impl Fn(&str) -> Option<String>) -> bool {
    ["HTTPS_PROXY", "https_proxy"]
        .into_iter()
        .any(|name| var(name).is_some_and(|v| !v.trim().is_empty()))
}

/// [`check`] with another bound.
pub async fn check_within(target: &Target, tls: Arc<rustls::ClientConfig>, bound: std::time::Duration) -> Verdict {
    let endpoint = match Endpoint::parse(&target.token_url) {
        Some(e) => e,
        None => {
            return Verdict::new(
                CredentialsReason::CheckFailed,
                "tokenurl with tokenurlsuffix is not an https URL the check can call",
            )
        }
    };
    match tokio::time::timeout(bound, ask(&endpoint, target, tls)).await {
        Ok(Ok((status, has_token))) => verdict::from_answer(status, has_token),
        Ok(Err(failure)) => verdict::from_failure(failure, bound),
        Err(_) => verdict::from_failure(Failure::Timeout, bound),
    }
}

/// The parts of the token URL a request needs.
struct Endpoint {
    host: String,
    port: u16,
    authority: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Option<Self> {
        let uri: http::Uri = url.parse().ok()?;
        if uri.scheme_str() != Some("https") {
            return None;
        }
        let authority = uri.authority()?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return None;
        }
        Some(Self {
            port: authority.port_u16().unwrap_or(443),
            authority: authority
                .as_str()
                .rsplit_once('@')
                .map_or(authority.as_str(), |(_, a)| a)
                .to_string(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
            host,
        })
    }
}

/// `application/x-www-form-urlencoded`, as Go's `url.Values.Encode` writes it.
pub fn form(pairs: &[(&str, &str)]) -> String {
    let escape = |s: &str| {
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(char::from(b)),
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The exchange: (status, whether the body holds an access token), or why there was no answer.
async fn ask(endpoint: &Endpoint, target: &Target, tls: Arc<rustls::ClientConfig>) -> Result<(u16, bool), Failure> {
    let addrs: Vec<_> = tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|_| Failure::Dns)?
        .collect();
    if addrs.is_empty() {
        return Err(Failure::Dns);
    }
    let mut tcp = None;
    for addr in addrs {
        if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
            tcp = Some(stream);
            break;
        }
    }
    let tcp = tcp.ok_or(Failure::Connect)?;
    let name = ServerName::try_from(endpoint.host.clone()).map_err(|_| Failure::Handshake)?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| handshake_failure(&e))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| Failure::Http)?;
    // The connection is driven here and dropped with this exchange.
    let _connection = crate::tasks::AbortOnDrop::new(tokio::spawn(connection));
    let body = form(&[
        ("client_id", &target.client_id),
        ("client_secret", &target.client_secret),
        ("grant_type", "client_credentials"),
    ]);
    let request = http::Request::post(endpoint.path.as_str())
        .header(http::header::HOST, endpoint.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "btp-manager credentials check")
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| Failure::Http)?;
    let response = sender.send_request(request).await.map_err(|_| Failure::Http)?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let has_token = match Limited::new(response.into_body(), MAX_BODY).collect().await {
        Ok(body) => verdict::has_access_token(&content_type, &body.to_bytes()),
        // Too long, or cut off: no token to be seen.
        Err(_) => false,
    };
    Ok((status, has_token))
}

/// The kind of a failed TLS handshake.
fn handshake_failure(e: &std::io::Error) -> Failure {
    use rustls::CertificateError as C;
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(cert)) => Failure::Untrusted(match cert {
            C::UnknownIssuer => Untrusted::UnknownIssuer,
            C::Expired | C::NotValidYet | C::ExpiredContext { .. } | C::NotValidYetContext { .. } => Untrusted::Expired,
            C::NotValidForName | C::NotValidForNameContext { .. } => Untrusted::WrongName,
            _ => Untrusted::Other,
        }),
        Some(_) => Failure::Handshake,
        None => match e.kind() {
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof => Failure::Handshake,
            _ => Failure::Connect,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_encoded_as_go_encodes_it() {
        assert_eq!(
            form(&[("client_id", "a b&c=d/é"), ("grant_type", "client_credentials")]),
            "client_id=a+b%26c%3Dd%2F%C3%A9&grant_type=client_credentials"
        );
    }

    #[test]
    fn endpoints_parse_with_their_port_and_path() {
        let e = Endpoint::parse("https://auth.example.test/oauth/token").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("auth.example.test", 443, "/oauth/token")
        );
        let e = Endpoint::parse("https://[::1]:8443/t?x=1").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.path.as_str()), ("::1", 8443, "/t?x=1"));
        assert_eq!(e.authority, "[::1]:8443");
        assert!(Endpoint::parse("http://auth.example.test/oauth/token").is_none());
        assert!(Endpoint::parse("not a url").is_none());
    }

    #[test]
    fn a_proxy_in_the_environment_is_seen() {
        assert!(!proxied(|_| None));
        assert!(!proxied(|_| Some(" ".into())));
        assert!(proxied(|n| (n == "https_proxy").then(|| "http://proxy:3128".into())));
        assert!(proxied(|n| (n == "HTTPS_PROXY").then(|| "http://proxy:3128".into())));
    }

    #[test]
    fn a_bundle_without_certificates_is_refused_and_none_is_fine() {
        assert!(tls_config("").is_ok());
        assert_eq!(
            tls_config("not PEM").unwrap_err().reason,
            CredentialsReason::CheckFailed
        );
    }
}
