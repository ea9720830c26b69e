//! A token endpoint on loopback over HTTPS with a CA of its own: what `btp-manager local` points its example
//! Secret at (so that its CR reaches `CredentialsValid=True` without a network), and what the tests ask. It
//! answers `POST /oauth/token` as an OAuth client-credentials endpoint does: a token for the one pair of
//! credentials it accepts, `401 invalid_client` for any other; it can also answer with a status of choice or
//! not at all, and counts the requests it took.

use crate::sync::lock;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How the stand-in answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// As a token endpoint: a token for the accepted credentials, 401 for others.
    Issue,
    /// This status, with an empty JSON object.
    Status(u16),
    /// Never answer (the request stalls).
    Stall,
}

#[derive(Debug)]
struct Shared {
    behaviour: Mutex<Behaviour>,
    accepted: Mutex<(String, String)>,
    requests: AtomicUsize,
}

/// A running stand-in; it stops when dropped.
pub struct StandIn {
    /// `https://127.0.0.1:<port>`: the `tokenurl` to give (the token path is `/oauth/token`).
    pub url: String,
    /// Its CA certificate (PEM): what `CredentialsCheckCABundle` must hold for it to be trusted.
    pub ca_pem: String,
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _task: crate::tasks::AbortOnDrop<()>,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl StandIn {
    /// Listen on a free loopback port, accepting `client_id` with `client_secret`.
    pub async fn start(client_id: &str, client_secret: &str) -> anyhow::Result<Self> {
        let now = SystemTime::now();
        let key = btp_certs::KeyAlgorithm::EcdsaP256;
        let ca = btp_certs::generate_ca(
            &btp_certs::CaSpec {
                common_name: Some("btp-manager stand-in token endpoint CA".into()),
                validity: Duration::from_secs(24 * 3600),
                key,
            },
            now,
        )?;
        let leaf = btp_certs::generate_leaf(
            &ca,
            &btp_certs::LeafSpec {
                common_name: Some("localhost".into()),
                dns_names: vec!["localhost".into()],
                ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
                validity: Duration::from_secs(24 * 3600),
                key,
            },
            now,
        )?;
        let tls = btp_webhooks::tls::server_config(btp_webhooks::tls::SwappableCert::from_pem(
            leaf.cert_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
        )?)?;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            behaviour: Mutex::new(Behaviour::Issue),
            accepted: Mutex::new((client_id.into(), client_secret.into())),
            requests: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/oauth/token", axum::routing::post(token))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = btp_webhooks::server::serve(listener, tls, app, std::future::pending()).await {
                tracing::warn!(error = %e, "the stand-in token endpoint stopped");
            }
        });
        Ok(Self {
            url: format!("https://{addr}"),
            ca_pem: ca.cert_pem,
            addr,
            shared,
            _task: crate::tasks::AbortOnDrop::new(task),
        })
    }

    /// Answer as `behaviour` from now on.
    pub fn set(&self, behaviour: Behaviour) {
        *lock(&self.shared.behaviour) = behaviour;
    }

    /// Accept these credentials from now on (as a rotation in SAP BTP would).
    pub fn accept(&self, client_id: &str, client_secret: &str) {
        *lock(&self.shared.accepted) = (client_id.into(), client_secret.into());
    }

    /// Requests taken so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

async fn token(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let behaviour = lock(&shared.behaviour).clone();
    match behaviour {
        Behaviour::Stall => std::future::pending().await,
        Behaviour::Status(code) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(serde_json::json!({})),
        )
            .into_response(),
        Behaviour::Issue => {
            let form = decode_form(&body);
            let field = |k: &str| form.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
            let (id, secret) = lock(&shared.accepted).clone();
            let valid = field("grant_type") == Some("client_credentials")
                && field("client_id") == Some(id.as_str())
                && field("client_secret") == Some(secret.as_str());
            if valid {
                axum::Json(serde_json::json!({
                    "access_token": "stand-in-token", "token_type": "bearer", "expires_in": 3600
                }))
                .into_response()
            } else {
                (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(serde_json::json!({"error": "invalid_client"})),
                )
                    .into_response()
            }
        }
    }
}

/// `application/x-www-form-urlencoded` pairs.
fn decode_form(body: &[u8]) -> Vec<(String, String)> {
    let decode = |s: &[u8]| {
        let mut out = Vec::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            match s[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < s.len() => {
                    let hex = std::str::from_utf8(&s[i + 1..i + 3]).ok();
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(b) => {
                            out.push(b);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    body.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let mut kv = pair.splitn(2, |b| *b == b'=');
            let k = kv.next().unwrap_or_default();
            let v = kv.next().unwrap_or_default();
            (decode(k), decode(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_what_the_check_encodes() {
        let body = crate::credentials_check::request::form(&[("client_id", "a b&c=d/é"), ("x", "%")]);
        assert_eq!(
            decode_form(body.as_bytes()),
            [
                ("client_id".to_string(), "a b&c=d/é".to_string()),
                ("x".into(), "%".into())
            ]
        );
    }
}
