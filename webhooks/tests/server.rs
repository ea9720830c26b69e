//! The HTTPS server itself: bad input, TLS, protocols, certificate rotation under load, file reload.

mod common;

use btp_webhooks::client::{tls_config, Connection, Protocol};
use btp_webhooks::tls::{CertDir, SwappableCert};
use bytes::Bytes;
use common::*;
use http::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

async fn post_raw(
    conn: &mut Connection,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<Bytes>,
) -> (u16, Value) {
    let reply = conn
        .send(Method::POST, path, content_type, body.into())
        .await
        .expect("request");
    let json = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status.as_u16(), json)
}

fn assert_rejected(status: u16, body: &Value, code: u16, message_part: &str, uid: &str) {
    assert_eq!(status, code, "{body}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert_eq!(body["response"]["uid"], uid, "{body}");
    let message = body["response"]["status"]["message"].as_str().unwrap_or("");
    assert!(message.contains(message_part), "{message:?} lacks {message_part:?}");
}

#[tokio::test]
async fn bad_input_gets_a_4xx_with_a_clear_message_and_the_uid_when_readable() {
    let server = TestServer::start().await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let mut conn = server.connect(protocol).await;

        let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), "{not json").await;
        assert_rejected(s, &b, 400, "request body is not JSON", "");

        let mut review = btp_review("CREATE", "kyma-system", "btpoperator", "uid-v1beta1");
        review["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), review.to_string()).await;
        assert_rejected(s, &b, 400, "expected apiVersion \"admission.k8s.io/v1\"", "uid-v1beta1");

        let mut review = btp_review("CREATE", "kyma-system", "btpoperator", "uid-kind");
        review["kind"] = json!("ConversionReview");
        let (s, b) = post_raw(&mut conn, "/mutate", Some("application/json"), review.to_string()).await;
        assert_rejected(
            s,
            &b,
            400,
            "got apiVersion \"admission.k8s.io/v1\" and kind \"ConversionReview\"",
            "uid-kind",
        );

        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
        let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), review.to_string()).await;
        assert_rejected(s, &b, 400, "AdmissionReview has no request", "");

        let mut review = btp_review("CREATE", "kyma-system", "btpoperator", "uid-object");
        review["request"]["object"] = json!("a string is not an object");
        let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), review.to_string()).await;
        assert_rejected(s, &b, 400, "AdmissionReview request does not decode", "uid-object");

        let mut review = btp_review("CREATE", "kyma-system", "btpoperator", "uid-op");
        review["request"]["operation"] = json!("EXPLODE");
        let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), review.to_string()).await;
        assert_rejected(s, &b, 400, "does not decode", "uid-op");

        let review = btp_review("CREATE", "kyma-system", "btpoperator", "uid-ct");
        let (s, b) = post_raw(&mut conn, "/validate", Some("text/plain"), review.to_string()).await;
        assert_rejected(s, &b, 415, "content type \"text/plain\" is not supported", "");
        let (s, b) = post_raw(&mut conn, "/validate", None, review.to_string()).await;
        assert_rejected(s, &b, 415, "(none)", "");

        let reply = conn.send(Method::GET, "/validate", None, Bytes::new()).await.unwrap();
        assert_eq!(reply.status, 405);
        let b: Value = serde_json::from_slice(&reply.body).unwrap();
        assert!(b["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("send the AdmissionReview with POST"));

        let big = vec![b' '; 3 * 1024 * 1024 + 1];
        let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), big).await;
        assert_rejected(s, &b, 413, "exceeds the limit of 3145728 bytes", "");
        // HTTP/1.1 cannot reuse a connection whose body was refused unread.
        let mut conn = server.connect(protocol).await;

        let reply = conn
            .send(
                Method::POST,
                "/nope",
                Some("application/json"),
                Bytes::from_static(b"{}"),
            )
            .await
            .unwrap();
        assert_eq!(reply.status, 404);

        // The connection and the server are still healthy.
        let review = btp_review("CREATE", "default", "btpoperator", "uid-after");
        let (s, b) = post_raw(
            &mut conn,
            "/validate",
            Some("application/json; charset=utf-8"),
            review.to_string(),
        )
        .await;
        assert_eq!(s, 200);
        assert_eq!(b["response"]["allowed"], false);
        assert_eq!(b["response"]["uid"], "uid-after");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_body_at_the_limit_is_read_not_refused_for_size() {
    let server = TestServer::start().await;
    let mut conn = server.connect(Protocol::Http1).await;
    // A valid review padded with whitespace up to exactly 3 MiB.
    let mut body = btp_review("CREATE", "kyma-system", "btpoperator", "uid-big")
        .to_string()
        .into_bytes();
    body.resize(3 * 1024 * 1024, b' ');
    let (s, b) = post_raw(&mut conn, "/validate", Some("application/json"), body).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["response"]["allowed"], true);
    server.shutdown().await;
}

#[tokio::test]
async fn tls_needs_the_right_ca_and_offers_both_http_versions() {
    let server = TestServer::start().await;
    let foreign = ca();
    let err = server
        .connect_trusting(foreign.cert_pem.as_bytes(), Protocol::Http2)
        .await
        .err()
        .expect("foreign CA must fail");
    assert!(err.to_string().contains("certificate"), "{err}");

    for protocol in [Protocol::Http1, Protocol::Http2] {
        let mut conn = server.connect(protocol).await;
        let reply = conn.send(Method::GET, "/healthz", None, Bytes::new()).await.unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.version,
            if protocol == Protocol::Http1 {
                http::Version::HTTP_11
            } else {
                http::Version::HTTP_2
            }
        );
    }

    // A TLS 1.2-only client is served (TLS 1.2+; rustls offers nothing older).
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(server.ca.cert_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut tls12 = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls12.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut conn = Connection::open(server.addr, "127.0.0.1", Arc::new(tls12), Protocol::Http1)
        .await
        .expect("TLS 1.2");
    assert_eq!(
        conn.send(Method::GET, "/healthz", None, Bytes::new())
            .await
            .unwrap()
            .status,
        200
    );
    server.shutdown().await;
}

use rustls::pki_types::pem::PemObject as _;

fn der_of(pem: &str) -> Vec<u8> {
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Clients hammer the server over keep-alive connections and keep opening new ones while the serving
/// certificate is rotated twice: first a new leaf from the same CA, then a leaf from a new CA (clients
/// trust old + new CA, as the caBundle does during the overlap). No request may fail, and new
/// connections must get the new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_drops_nothing_and_new_connections_get_the_new_certificate() {
    let server = TestServer::start().await;
    let new_ca = ca();
    let mut bundle = server.ca.cert_pem.clone();
    bundle.push_str(&new_ca.cert_pem);
    let trust = tls_config(bundle.as_bytes(), Protocol::Http2).unwrap();
    let trust_h1 = tls_config(bundle.as_bytes(), Protocol::Http1).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for i in 0..4 {
        let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
        let (tls, protocol) = if i % 2 == 0 {
            (trust.clone(), Protocol::Http2)
        } else {
            (trust_h1.clone(), Protocol::Http1)
        };
        let addr = server.addr;
        workers.push(tokio::spawn(async move {
            let body = btp_review("CREATE", "kyma-system", "btpoperator", "uid-load").to_string();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A fresh connection every 20 requests; keep-alive in between.
                let mut conn = match Connection::open(addr, "127.0.0.1", tls.clone(), protocol).await {
                    Ok(c) => c,
                    Err(e) => {
                        failures.lock().unwrap().push(format!("connect: {e}"));
                        continue;
                    }
                };
                for _ in 0..20 {
                    n += 1;
                    match conn.post_json("/validate", body.clone()).await {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failures.lock().unwrap().push(format!("status {}", r.status)),
                        Err(e) => failures.lock().unwrap().push(format!("request {n}: {e}")),
                    }
                }
            }
        }));
    }

    let served_now = |expected: Vec<u8>, tls: Arc<rustls::ClientConfig>| {
        let addr = server.addr;
        move || {
            let (expected, tls) = (expected.clone(), tls.clone());
            async move {
                match Connection::open(addr, "127.0.0.1", tls, Protocol::Http2).await {
                    Ok(c) => c.peer_certificate == expected,
                    Err(_) => false,
                }
            }
        }
    };

    wait_until(Duration::from_secs(10), "load is flowing", || {
        let ok = ok.clone();
        async move { ok.load(Ordering::Relaxed) > 200 }
    })
    .await;

    // 1. New leaf, same CA.
    let leaf2 = leaf(&server.ca);
    server
        .cert
        .set_pem(leaf2.cert_pem.as_bytes(), leaf2.key_pem.as_bytes())
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "new connections get leaf 2",
        served_now(der_of(&leaf2.cert_pem), trust.clone()),
    )
    .await;
    let after_first = ok.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(10), "load continues after rotation 1", || {
        let ok = ok.clone();
        async move { ok.load(Ordering::Relaxed) > after_first + 200 }
    })
    .await;

    // 2. Leaf from the new CA.
    let leaf3 = leaf(&new_ca);
    server
        .cert
        .set_pem(leaf3.cert_pem.as_bytes(), leaf3.key_pem.as_bytes())
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "new connections get leaf 3",
        served_now(der_of(&leaf3.cert_pem), trust.clone()),
    )
    .await;
    let after_second = ok.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(10), "load continues after rotation 2", || {
        let ok = ok.clone();
        async move { ok.load(Ordering::Relaxed) > after_second + 200 }
    })
    .await;

    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let failures = std::mem::take(&mut *failures.lock().unwrap());
    assert!(
        failures.is_empty(),
        "{} failed requests, first: {:?}",
        failures.len(),
        failures.first()
    );
    // A client that trusts only the old CA cannot talk to the new certificate: the rotation was real.
    assert!(server
        .connect_trusting(server.ca.cert_pem.as_bytes(), Protocol::Http2)
        .await
        .is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn a_bad_certificate_is_refused_and_the_old_one_keeps_serving() {
    let server = TestServer::start().await;
    let before = server.cert.current().expect("a served certificate");
    let other = leaf(&server.ca);
    let unrelated = leaf(&ca());
    assert!(server.cert.set_pem(b"garbage", other.key_pem.as_bytes()).is_err());
    let err = server
        .cert
        .set_pem(other.cert_pem.as_bytes(), unrelated.key_pem.as_bytes())
        .unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    assert!(!err.to_string().contains("PRIVATE KEY"), "key material in error: {err}");
    assert!(Arc::ptr_eq(
        &before,
        &server.cert.current().expect("a served certificate")
    ));
    let mut conn = server.connect(Protocol::Http1).await;
    assert_eq!(
        conn.send(Method::GET, "/healthz", None, Bytes::new())
            .await
            .unwrap()
            .status,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn certificates_from_a_directory_are_reloaded_when_they_change() {
    let dir = std::env::temp_dir().join(format!("btp-webhook-certdir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = ca();
    let first = leaf(&ca);
    std::fs::write(dir.join("tls.crt"), &first.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &first.key_pem).unwrap();
    let certs = CertDir::new(&dir);
    let resolver: Arc<SwappableCert> = certs.load().await.unwrap();
    assert_eq!(
        resolver.current().expect("a served certificate").cert[0].as_ref(),
        der_of(&first.cert_pem).as_slice()
    );
    let watcher = tokio::spawn(certs.clone().watch(resolver.clone(), Duration::from_millis(20)));

    let second = leaf(&ca);
    std::fs::write(dir.join("tls.key"), &second.key_pem).unwrap();
    std::fs::write(dir.join("tls.crt"), &second.cert_pem).unwrap();
    let expected = der_of(&second.cert_pem);
    wait_until(Duration::from_secs(5), "reload of the new pair", || {
        let (resolver, expected) = (resolver.clone(), expected.clone());
        async move { resolver.current().expect("a served certificate").cert[0].as_ref() == expected.as_slice() }
    })
    .await;
    watcher.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn graceful_shutdown_finishes_and_stops_accepting() {
    let server = TestServer::start().await;
    let addr = server.addr;
    let mut conn = server.connect(Protocol::Http2).await;
    assert_eq!(
        conn.send(Method::GET, "/healthz", None, Bytes::new())
            .await
            .unwrap()
            .status,
        200
    );
    let ca_pem = server.ca.cert_pem.clone();
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown drains in time");
    let tls = tls_config(ca_pem.as_bytes(), Protocol::Http1).unwrap();
    assert!(
        Connection::open(addr, "127.0.0.1", tls, Protocol::Http1).await.is_err(),
        "listener closed"
    );
}

async fn healthz(conn: &mut Connection) -> Result<btp_webhooks::client::Reply, btp_webhooks::client::ClientError> {
    conn.send(Method::GET, "/healthz", None, Bytes::new()).await
}

/// The drain of a terminating replica: the server goes on accepting and answering, but every HTTP/2
/// connection, open or opened during the drain, is told to go away (GOAWAY) at once, so that a client's next
/// connection goes to another replica; every HTTP/1.1 response carries `Connection: close`.
#[tokio::test]
async fn a_drain_sends_every_connection_away_at_once_and_keeps_answering() {
    let mut server = TestServer::start().await;
    let mut h2_open = server.connect(Protocol::Http2).await;
    let mut h1_open = server.connect(Protocol::Http1).await;
    assert_eq!(healthz(&mut h2_open).await.unwrap().status, 200);
    let before = healthz(&mut h1_open).await.unwrap();
    assert_eq!(before.status, 200);
    assert!(
        before.headers.get(http::header::CONNECTION).is_none(),
        "kept alive before the drain"
    );

    server.drain();
    // The pooled HTTP/2 connection leaves now, not when the server stops.
    wait_until(
        Duration::from_secs(10),
        "the open HTTP/2 connection told to go away",
        || std::future::ready(h2_open.is_closed()),
    )
    .await;
    // An HTTP/2 connection opened during the drain is answered, then told to go away too.
    let mut h2_new = server.connect(Protocol::Http2).await;
    assert_eq!(
        healthz(&mut h2_new).await.unwrap().status,
        200,
        "answered during the drain"
    );
    wait_until(
        Duration::from_secs(10),
        "the new HTTP/2 connection told to go away",
        || std::future::ready(h2_new.is_closed()),
    )
    .await;
    // HTTP/1.1, open or new: answered, with `Connection: close`, and closed after.
    let mut h1_new = server.connect(Protocol::Http1).await;
    for (which, conn) in [("open", &mut h1_open), ("new", &mut h1_new)] {
        let reply = healthz(conn).await.unwrap();
        assert_eq!(reply.status, 200, "{which}");
        assert_eq!(
            reply.headers.get(http::header::CONNECTION).map(|v| v.as_bytes()),
            Some(&b"close"[..]),
            "{which}"
        );
        wait_until(
            Duration::from_secs(10),
            "the HTTP/1.1 connection closed after its response",
            || std::future::ready(conn.is_closed()),
        )
        .await;
    }
    // A review is still answered: admission works until the drain ends.
    let mut h2_review = server.connect(Protocol::Http2).await;
    let review = btp_review("CREATE", "kyma-system", "btpoperator", "drain-1");
    let reply = h2_review.post_json("/validate", review.to_string()).await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(server.stats.refused(), 0);
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("the shutdown after a drain is prompt");
}

#[tokio::test]
async fn request_durations_are_recorded_by_webhook_and_verdict() {
    use btp_webhooks::handlers::{FixedServiceCounter, WebhookState};
    use btp_webhooks::metrics::WebhookMetrics;
    use btp_webhooks::rules::RulesConfig;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = WebhookMetrics::register(&mut registry);
    let state = WebhookState::new(
        RulesConfig::default(),
        Arc::new(FixedServiceCounter(Ok(Default::default()))),
    )
    .with_metrics(metrics);
    let server = TestServer::start_with(state).await;
    let mut conn = server.connect(Protocol::Http2).await;
    for (path, ns, n) in [
        ("/validate", "kyma-system", 3),
        ("/validate", "default", 2),
        ("/mutate", "kyma-system", 1),
    ] {
        for _ in 0..n {
            let body = btp_review("CREATE", ns, "btpoperator", "uid-m").to_string();
            assert_eq!(conn.post_json(path, body).await.unwrap().status, 200);
        }
    }
    assert_eq!(conn.post_json("/validate", "nope").await.unwrap().status, 400);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let count = |labels: &str| {
        let key = format!("btpmanager_webhook_request_duration_seconds_count{{{labels}}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .map(|v| v.trim().parse::<u64>().unwrap())
    };
    assert_eq!(count("webhook=\"validate\",verdict=\"allowed\""), Some(3), "{text}");
    assert_eq!(count("webhook=\"validate\",verdict=\"denied\""), Some(2), "{text}");
    assert_eq!(count("webhook=\"mutate\",verdict=\"patched\""), Some(1), "{text}");
    assert_eq!(count("webhook=\"validate\",verdict=\"bad_request\""), Some(1), "{text}");
    server.shutdown().await;
}
